// comm/ring.h (internal): the ring algorithms behind Group's collectives, on MPI point-to-point
// messages, run by comm/progress.h on the caller's or the communication thread, each MPI
// call under the MPI mutex (comm/progress.h).
//
// Each algorithm adds the bytes it hands to MPI_Isend to op.bytes_sent; ring_bytes and
// ring_bytes_rank give the same counts in closed form (group.h explains the accounting).
// Messages are cut into segments of segment_bytes() (pipelined: a segment is added while later
// ones are in flight); segmentation never changes the order of the additions, so results are
// bit-identical on every rank and in every run.
//
// The reducing templates are defined in ring.cpp and instantiated there for the element types and
// reductions Group uses: float and double with Sum and Max (all-reduce), float with Sum
// (reduce-scatter).
#pragma once
#include <mpi.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "shardlm/comm/progress.h"
#include "shardlm/core/dtype_simd.h"

namespace shardlm::comm::detail {

constexpr size_t kMaxMsg = size_t(1) << 30;  // MPI counts are int: cut larger messages


// Post one message of `bytes` (cut into pieces of at most kMaxMsg) and append its requests to reqs;
// post_send adds the bytes to `sent`. A zero-byte message is posted only with allow_empty.
void post_send(const void* p, size_t bytes, int dst, int tag, MPI_Comm c, std::vector<MPI_Request>& reqs,
               uint64_t& sent, bool allow_empty = false);
void post_recv(void* p, size_t bytes, int src, int tag, MPI_Comm c, std::vector<MPI_Request>& reqs,
               bool allow_empty = false);

// All-to-all with counts: block j of `in` (send[j] bytes from send_off[j]) goes to rank j, which
// receives it at recv_off[r] of its `out` (recv[r] bytes); rank r's own block is copied. Pairwise:
// step s sends to r + s and receives from r - s.
void pairwise_all_to_all(Op& op, MPI_Comm c, int r, int n, const void* in, const size_t* send, const size_t* send_off,
                         void* out, const size_t* recv, const size_t* recv_off);

struct Sum {
    template <typename T>
    T operator()(T acc, T x) const { return acc + x; }
};
struct Max {
    template <typename T>
    T operator()(T acc, T x) const { return x > acc ? x : acc; }
};
// Sums of 16-bit values (bf16 or fp16 bit patterns): each addition in fp32, rounded to nearest even.
template <DType D>
struct Sum16 {
    unsigned short operator()(unsigned short acc, unsigned short x) const {
        const float s = load1<D>(&acc, 0) + load1<D>(&x, 0);
        return D == DType::BF16 ? f32_to_bf16(s) : f32_to_f16(s);
    }
    // d[i] = a[i] + x[i] for n values, 16 at a time (the same roundings as the scalar form)
    void bulk(unsigned short* d, const unsigned short* a, const unsigned short* x, size_t n) const {
        for (size_t i = 0; i < n; i += 16) {
            const simd::M16 m = simd::mask_below(i, n);
            store16<D>(d, i, m, load16<D>(a, i, m) + load16<D>(x, i, m));
        }
    }
};

// d[i] = f(a[i], x[i]): the functor's bulk form if it has one, else element by element.
template <typename T, typename F>
inline void apply(F f, T* d, const T* a, const T* x, size_t n) {
    if constexpr (requires { f.bulk(d, a, x, n); }) f.bulk(d, a, x, n);
    else
        for (size_t i = 0; i < n; i++) d[i] = f(a[i], x[i]);
}


// In place over `count` elements of data on rank r of n: a ring reduce-scatter (rank r ends with
// block r reduced) followed by a ring all-gather of the reduced blocks.
// Bytes: reduce-scatter + all-gather = 2(N-1)/N * total; with uneven blocks rank r sends
// total - |block r| - |block r+1|.
// Order: block b is accumulated along the ring as ((x[b+1] + x[b+2]) + ...) + x[b] and then copied,
// so every rank gets the same bits.
template <typename T, typename F>
void ring_all_reduce(Op& op, MPI_Comm c, int r, int n, T* data, size_t count, F f);

// in: n blocks of m elements; out (m elements, may alias block r of in) receives block r reduced
// over the ranks. Bytes: rank r sends N-1 blocks = (N-1)/N * total. Order: as in ring_all_reduce.
template <typename T, typename F>
void ring_reduce_scatter(Op& op, MPI_Comm c, int r, int n, const T* in, T* out, size_t m, F f);

// out: n blocks of b bytes; block r of out = in of rank r (in may alias block r of out).
// Bytes: rank r sends N-1 blocks = (N-1)/N * total.
void ring_all_gather(Op& op, MPI_Comm c, int r, int n, const void* in, void* out, size_t b);

// Pipelined chain root -> root+1 -> ... -> root-1: each rank forwards a segment as soon as it has it.
// Bytes: every rank but the last of the chain sends the whole buffer = (N-1)/N * bytes on average.
void chain_broadcast(Op& op, MPI_Comm c, int r, int n, void* data, size_t bytes, int root);

}  // namespace shardlm::comm::detail
