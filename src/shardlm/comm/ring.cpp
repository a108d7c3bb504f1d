// comm/ring.cpp: the ring algorithms of comm/ring.h (all-reduce, reduce-scatter, all-gather and the
// pipelined chain broadcast) and the point-to-point helpers they post their messages with.
#include "shardlm/comm/ring.h"

#include <cstring>

#include "shardlm/comm/mpi_call.h"
#include "shardlm/comm/settings.h"

namespace shardlm::comm::detail {

namespace {

constexpr int kTagReduceScatter = 1, kTagAllGather = 2, kTagBroadcast = 3, kTagAllToAll = 4;

void wait_all(std::vector<MPI_Request>& reqs) {
    progress().wait_requests(reqs.data(), int(reqs.size()));
    reqs.clear();
}

// Elements per pipeline segment.
template <typename T>
size_t seg_elems() {
    return std::max<size_t>(1, std::min(segment_bytes(), kMaxMsg) / sizeof(T));
}

// One ring step with reduction: receive `rl` elements from prev while sending `sl` elements at src
// to next, both cut into segments; as each segment arrives, dst[i] = f(received[i], local[i]).
// Segments are received into a small ring of kSlots buffers that stays in cache (the data is
// added right after it lands, and the slot is reused) instead of a block-sized buffer that would
// round-trip through DRAM.
constexpr size_t kSlots = 4;

template <typename T>
T* slot_scratch() {
    return static_cast<T*>(progress().scratch(kSlots * seg_elems<T>() * sizeof(T), 0));
}

template <typename T, typename F>
void reduce_step(MPI_Comm c, int prev, int next, const T* src, size_t sl, size_t rl, const T* local, T* dst,
                 uint64_t& sent, F f) {
    const size_t seg = seg_elems<T>();
    const size_t nseg = (rl + seg - 1) / seg;
    T* slots = slot_scratch<T>();
    std::vector<MPI_Request> recvs, sends;
    recvs.reserve(nseg);
    auto post = [&](size_t k) {
        post_recv(slots + (k % kSlots) * seg, std::min(seg, rl - k * seg) * sizeof(T), prev, kTagReduceScatter, c,
                  recvs);
    };
    for (size_t k = 0; k < std::min(nseg, kSlots); k++) post(k);
    for (size_t o = 0; o < sl; o += seg)
        post_send(src + o, std::min(seg, sl - o) * sizeof(T), next, kTagReduceScatter, c, sends, sent);
    for (size_t k = 0; k < nseg; k++) {
        progress().wait_requests(&recvs[k], 1);
        const size_t o = k * seg, len = std::min(seg, rl - o);
        apply(f, dst + o, slots + (k % kSlots) * seg, local + o, len);
        if (k + kSlots < nseg) post(k + kSlots);
    }
    wait_all(sends);
}

}  // namespace

void post_send(const void* p, size_t bytes, int dst, int tag, MPI_Comm c, std::vector<MPI_Request>& reqs,
               uint64_t& sent, bool allow_empty) {
    const auto* b = static_cast<const unsigned char*>(p);
    if (bytes == 0 && !allow_empty) return;
    size_t off = 0;
    do {
        size_t k = std::min(kMaxMsg, bytes - off);
        reqs.emplace_back();
        {
            MpiLock lock;
            SHARDLM_MPI_CHECK(MPI_Isend(b + off, int(k), MPI_BYTE, dst, tag, c, &reqs.back()));
        }
        sent += k;
        off += k;
    } while (off < bytes);
}

void post_recv(void* p, size_t bytes, int src, int tag, MPI_Comm c, std::vector<MPI_Request>& reqs,
               bool allow_empty) {
    auto* b = static_cast<unsigned char*>(p);
    if (bytes == 0 && !allow_empty) return;
    size_t off = 0;
    do {
        size_t k = std::min(kMaxMsg, bytes - off);
        reqs.emplace_back();
        {
            MpiLock lock;
            SHARDLM_MPI_CHECK(MPI_Irecv(b + off, int(k), MPI_BYTE, src, tag, c, &reqs.back()));
        }
        off += k;
    } while (off < bytes);
}

template <typename T, typename F>
void ring_all_reduce(Op& op, MPI_Comm c, int r, int n, T* data, size_t count, F f) {
    const Blocks bl(count, n);
    const int next = mod(r + 1, n), prev = mod(r - 1, n);
    for (int s = 0; s < n - 1; s++) {  // reduce-scatter: rank r ends with block r reduced
        const int sb = mod(r - s - 1, n), rb = mod(r - s - 2, n);
        reduce_step(c, prev, next, data + bl.off(sb), bl.len(sb), bl.len(rb), data + bl.off(rb), data + bl.off(rb),
                    op.bytes_sent, f);
    }
    std::vector<MPI_Request> reqs;
    for (int s = 0; s < n - 1; s++) {  // all-gather of the reduced blocks
        const int sb = mod(r - s, n), rb = mod(r - s - 1, n);
        post_recv(data + bl.off(rb), bl.len(rb) * sizeof(T), prev, kTagAllGather, c, reqs);
        post_send(data + bl.off(sb), bl.len(sb) * sizeof(T), next, kTagAllGather, c, reqs, op.bytes_sent);
        wait_all(reqs);
    }
}

template <typename T, typename F>
void ring_reduce_scatter(Op& op, MPI_Comm c, int r, int n, const T* in, T* out, size_t m, F f) {
    if (m == 0) return;
    const int next = mod(r + 1, n), prev = mod(r - 1, n);
    // Partial sums travel through two block-sized buffers (sent at step s+1 while step s+2 fills
    // the other); with 2 ranks there is a single step straight into out.
    T* acc[2] = {n > 2 ? static_cast<T*>(progress().scratch(m * sizeof(T), 1)) : nullptr,
                 n > 3 ? static_cast<T*>(progress().scratch(m * sizeof(T), 2)) : nullptr};
    const T* send_ptr = in + size_t(mod(r - 1, n)) * m;
    for (int s = 0; s < n - 1; s++) {
        const int rb = mod(r - s - 2, n);
        T* dst = s == n - 2 ? out : acc[s % 2];  // the last step lands block r in out
        reduce_step(c, prev, next, send_ptr, m, m, in + size_t(rb) * m, dst, op.bytes_sent, f);
        send_ptr = dst;
    }
}

void ring_all_gather(Op& op, MPI_Comm c, int r, int n, const void* in, void* out, size_t b) {
    if (b == 0) return;
    auto* o = static_cast<unsigned char*>(out);
    const int next = mod(r + 1, n), prev = mod(r - 1, n);
    std::vector<MPI_Request> reqs;
    for (int s = 0; s < n - 1; s++) {
        const int sb = mod(r - s, n), rb = mod(r - s - 1, n);
        post_recv(o + size_t(rb) * b, b, prev, kTagAllGather, c, reqs);
        // Step 0 sends our own block straight from `in`, and copies it into place while the peer
        // pulls it (the copy then costs no time: 6.6 -> 9.7 GB/s bus bandwidth at 1 MiB, 2 ranks).
        post_send(s == 0 ? in : o + size_t(sb) * b, b, next, kTagAllGather, c, reqs, op.bytes_sent);
        if (s == 0 && in != o + size_t(r) * b) std::memmove(o + size_t(r) * b, in, b);
        wait_all(reqs);
    }
}

void pairwise_all_to_all(Op& op, MPI_Comm c, int r, int n, const void* in, const size_t* send, const size_t* send_off,
                         void* out, const size_t* recv, const size_t* recv_off) {
    const auto* i = static_cast<const unsigned char*>(in);
    auto* o = static_cast<unsigned char*>(out);
    if (send[r]) std::memmove(o + recv_off[r], i + send_off[r], send[r]);
    std::vector<MPI_Request> reqs;
    for (int s = 1; s < n; s++) {
        const int to = mod(r + s, n), from = mod(r - s, n);
        post_recv(o + recv_off[from], recv[from], from, kTagAllToAll, c, reqs);
        post_send(i + send_off[to], send[to], to, kTagAllToAll, c, reqs, op.bytes_sent);
        wait_all(reqs);
    }
}

void chain_broadcast(Op& op, MPI_Comm c, int r, int n, void* data, size_t bytes, int root) {
    if (bytes == 0) return;
    auto* d = static_cast<unsigned char*>(data);
    const int pos = mod(r - root, n), next = mod(r + 1, n), prev = mod(r - 1, n);
    const size_t seg = std::min(segment_bytes(), kMaxMsg);
    std::vector<MPI_Request> recvs, sends;
    if (pos == 0) {
        for (size_t o = 0; o < bytes; o += seg)
            post_send(d + o, std::min(seg, bytes - o), next, kTagBroadcast, c, sends, op.bytes_sent);
        wait_all(sends);
        return;
    }
    for (size_t o = 0; o < bytes; o += seg) post_recv(d + o, std::min(seg, bytes - o), prev, kTagBroadcast, c, recvs);
    size_t k = 0;
    for (size_t o = 0; o < bytes; o += seg, k++) {
        progress().wait_requests(&recvs[k], 1);
        if (pos < n - 1) post_send(d + o, std::min(seg, bytes - o), next, kTagBroadcast, c, sends, op.bytes_sent);
    }
    wait_all(sends);
}

// The instantiations Group uses (the templates are not in the header).
template void ring_all_reduce<float, Sum>(Op&, MPI_Comm, int, int, float*, size_t, Sum);
template void ring_all_reduce<double, Sum>(Op&, MPI_Comm, int, int, double*, size_t, Sum);
template void ring_all_reduce<float, Max>(Op&, MPI_Comm, int, int, float*, size_t, Max);
template void ring_all_reduce<double, Max>(Op&, MPI_Comm, int, int, double*, size_t, Max);
template void ring_reduce_scatter<float, Sum>(Op&, MPI_Comm, int, int, const float*, float*, size_t, Sum);
using u16 = unsigned short;
template void ring_all_reduce<u16, Sum16<DType::BF16>>(Op&, MPI_Comm, int, int, u16*, size_t, Sum16<DType::BF16>);
template void ring_all_reduce<u16, Sum16<DType::F16>>(Op&, MPI_Comm, int, int, u16*, size_t, Sum16<DType::F16>);
template void ring_reduce_scatter<u16, Sum16<DType::BF16>>(Op&, MPI_Comm, int, int, const u16*, u16*, size_t,
                                                          Sum16<DType::BF16>);
template void ring_reduce_scatter<u16, Sum16<DType::F16>>(Op&, MPI_Comm, int, int, const u16*, u16*, size_t,
                                                         Sum16<DType::F16>);

}  // namespace shardlm::comm::detail
