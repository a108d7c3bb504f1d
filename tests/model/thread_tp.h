// tests/model/thread_tp.h: a tensor-parallel group whose ranks are threads of one process
// (model::TensorParallel over tests/thread_meeting.h), for in-process tests of tensor and sequence
// parallelism and of the products a tensor-parallel rank issues.
#pragma once
#include <algorithm>
#include <vector>

#include "shardlm/model/tensor_parallel.h"
#include "../thread_meeting.h"

namespace shardlm::test {

// A tensor-parallel group of threads: every collective publishes this rank's operand, meets, combines
// in rank order (the same bits on every rank), and meets again before anyone reuses a buffer.
class ThreadTp final : public model::TensorParallel {
public:
    ThreadTp(Meeting& m, int rank) : m_(m), rank_(rank) {}
    int size() const override { return m_.size; }
    int rank() const override { return rank_; }
    void all_reduce_sum(float* x, size_t n) override {
        const std::vector<float> s = m_.sum(x, 0, n, DType::F32, rank_);
        std::copy(s.begin(), s.end(), x);
    }
    void all_reduce_max(float* x, size_t n) override {
        m_.publish(rank_, x);
        std::vector<float> r(static_cast<const float*>(m_.in[0]), static_cast<const float*>(m_.in[0]) + n);
        for (int q = 1; q < m_.size; q++) {
            const float* p = static_cast<const float*>(m_.in[size_t(q)]);
            for (size_t i = 0; i < n; i++) r[i] = std::max(r[i], p[i]);
        }
        m_.bar.arrive_and_wait();  // every rank has read every operand
        std::copy(r.begin(), r.end(), x);
    }
    void all_gather(const float* in, float* out, size_t n) override { all_gather_bytes(in, out, n * sizeof(float)); }
    void all_gather_bytes(const void* in, void* out, size_t bytes) override { m_.all_gather_bytes(rank_, in, out, bytes); }
    void reduce_scatter_sum(const float* in, float* out, size_t n) override {
        const std::vector<float> s = m_.sum(in, size_t(rank_) * n, n, DType::F32, rank_);
        std::copy(s.begin(), s.end(), out);
    }

private:
    Meeting& m_;
    int rank_;
};

}  // namespace shardlm::test
