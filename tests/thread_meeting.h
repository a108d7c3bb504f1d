// tests/thread_meeting.h: ranks as threads of one process whose collectives meet in memory, for
// in-process tests of tensor parallelism (tests/model) and of the ZeRO strategies (tests/parallel).
//
// Every collective publishes this rank's operand, meets, combines in rank order (the same bits on
// every rank), and meets again before anyone writes a buffer another rank may still read. The sums'
// order is rank order, not comm::Group's ring order: compare in-process ranks with each other and
// with one rank to a tolerance, or with themselves to the bit.
#pragma once
#include <omp.h>

#include <barrier>
#include <cstring>
#include <exception>
#include <functional>
#include <thread>
#include <vector>

#include "shardlm/core/dtype.h"

namespace shardlm::test {

struct Meeting {
    explicit Meeting(int n) : size(n), bar(n), in(size_t(n)) {}
    int size;
    std::barrier<> bar;
    std::vector<const void*> in;

    void publish(int rank, const void* p) {
        in[size_t(rank)] = p;
        bar.arrive_and_wait();
    }
    // out (size * bytes): block q = rank q's in; `in` may be this rank's block of out
    void all_gather_bytes(int rank, const void* mine, void* out, size_t bytes) {
        publish(rank, mine);
        for (int q = 0; q < size; q++)
            std::memmove(static_cast<char*>(out) + size_t(q) * bytes, in[size_t(q)], bytes);
        bar.arrive_and_wait();
    }
    // elements [first, first + n) of every rank's operand (of type t) summed in fp32, rank by rank
    std::vector<float> sum(const void* mine, size_t first, size_t n, DType t, int rank) {
        publish(rank, mine);
        std::vector<float> acc(n, 0.0f), x(n);
        for (int q = 0; q < size; q++) {
            convert_to_f32(x.data(), static_cast<const char*>(in[size_t(q)]) + first * dtype_bytes(t), t, n);
            for (size_t i = 0; i < n; i++) acc[i] = q == 0 ? x[i] : acc[i] + x[i];
        }
        bar.arrive_and_wait();  // every rank has read every operand
        return acc;
    }
};

// Runs fn(rank) on n threads (one OpenMP thread each); rethrows the first failure.
inline void run_ranks(int n, const std::function<void(int rank)>& fn) {
    std::vector<std::exception_ptr> errors(static_cast<size_t>(n));
    std::vector<std::thread> threads;
    for (int r = 0; r < n; r++)
        threads.emplace_back([&, r] {
            omp_set_num_threads(1);
            try {
                fn(r);
            } catch (...) {
                errors[size_t(r)] = std::current_exception();
            }
        });
    for (auto& t : threads) t.join();
    for (auto& e : errors)
        if (e) std::rethrow_exception(e);
}

}  // namespace shardlm::test
