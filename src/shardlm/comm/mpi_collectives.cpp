// comm/mpi_collectives.cpp: the collectives of comm/mpi_collectives.h on the MPI library's own
// non-blocking collectives, waited on by comm/progress.h.
#include "shardlm/comm/mpi_collectives.h"

#include <climits>
#include <cstring>
#include <mutex>

#include "shardlm/comm/settings.h"
#include "shardlm/core/check.h"
#include "shardlm/comm/mpi_call.h"

namespace shardlm::comm::detail {

namespace {

using u16 = unsigned short;

// 16-bit sums as the ring does them: each addition in fp32, rounded to nearest even
template <DType D>
void sum16(void* in, void* inout, int* len, MPI_Datatype*) {
    Sum16<D> f;
    f.bulk(static_cast<u16*>(inout), static_cast<const u16*>(inout), static_cast<const u16*>(in), size_t(*len));
}

template <typename T>
MPI_Datatype mpi_type() {
    if constexpr (std::is_same_v<T, float>) return MPI_FLOAT;
    else if constexpr (std::is_same_v<T, double>) return MPI_DOUBLE;
    else return MPI_UINT16_T;
}

template <typename F>
MPI_Op mpi_op() {
    if constexpr (std::is_same_v<F, Sum>) return MPI_SUM;
    else if constexpr (std::is_same_v<F, Max>) return MPI_MAX;
    else {
        // created once, under the MPI mutex (comm/progress.h) (the caller holds it)
        static MPI_Op op = MPI_OP_NULL;
        if (op == MPI_OP_NULL) {
            constexpr DType D = std::is_same_v<F, Sum16<DType::BF16>> ? DType::BF16 : DType::F16;
            SHARDLM_MPI_CHECK(MPI_Op_create(&sum16<D>, 1, &op));
        }
        return op;
    }
}

// Elements a single call may take (MPI counts are int).
template <typename T>
size_t max_count() {
    return std::min<size_t>(kMaxMsg / sizeof(T), size_t(INT_MAX));
}

void wait_one(MPI_Request& req) { progress().wait_requests(&req, 1); }

}  // namespace

template <typename T, typename F>
void mpi_all_reduce(Op& op, MPI_Comm c, int r, int n, T* data, size_t count, F) {
    for (size_t off = 0; off < count; off += max_count<T>()) {
        const size_t k = std::min(max_count<T>(), count - off);
        MPI_Request req;
        {
            MpiLock lock;
            SHARDLM_MPI_CHECK(MPI_Iallreduce(MPI_IN_PLACE, data + off, int(k), mpi_type<T>(), mpi_op<F>(), c, &req));
        }
        wait_one(req);
    }
    op.bytes_sent += ring_bytes_rank(OpKind::AllReduce, count, sizeof(T), n, r);
}

template <typename T, typename F>
void mpi_reduce_scatter(Op& op, MPI_Comm c, int r, int n, const T* in, T* out, size_t m, F) {
    if (m == 0) return;
    SHARDLM_CHECK(m <= max_count<T>(), "reduce_scatter (--collectives mpi): ", m,
                  " elements per rank exceed one MPI call's count");
    // MPI_Ireduce_scatter_block may not take out inside in: a separate buffer then
    const bool aliased = out >= in && out < in + size_t(n) * m;
    T* dst = aliased ? static_cast<T*>(progress().scratch(m * sizeof(T), 1)) : out;
    MPI_Request req;
    {
        MpiLock lock;
        SHARDLM_MPI_CHECK(MPI_Ireduce_scatter_block(in, dst, int(m), mpi_type<T>(), mpi_op<F>(), c, &req));
    }
    wait_one(req);
    if (aliased) std::memcpy(out, dst, m * sizeof(T));
    op.bytes_sent += ring_bytes_rank(OpKind::ReduceScatter, size_t(n) * m, sizeof(T), n, r);
}

void mpi_all_gather(Op& op, MPI_Comm c, int r, int n, const void* in, void* out, size_t b) {
    if (b == 0) return;
    SHARDLM_CHECK(b <= kMaxMsg, "all_gather (--collectives mpi): ", b, " bytes per rank exceed one MPI call's count");
    auto* o = static_cast<unsigned char*>(out);
    const bool in_place = in == o + size_t(r) * b;
    MPI_Request req;
    {
        MpiLock lock;
        SHARDLM_MPI_CHECK(MPI_Iallgather(in_place ? MPI_IN_PLACE : in, int(b), MPI_BYTE, out, int(b), MPI_BYTE, c, &req));
    }
    wait_one(req);
    op.bytes_sent += ring_bytes_rank(OpKind::AllGather, size_t(n) * b, 1, n, r);
}

void mpi_broadcast(Op& op, MPI_Comm c, int r, int n, void* data, size_t bytes, int root) {
    auto* d = static_cast<unsigned char*>(data);
    for (size_t off = 0; off < bytes; off += kMaxMsg) {
        const size_t k = std::min(kMaxMsg, bytes - off);
        MPI_Request req;
        {
            MpiLock lock;
            SHARDLM_MPI_CHECK(MPI_Ibcast(d + off, int(k), MPI_BYTE, root, c, &req));
        }
        wait_one(req);
    }
    op.bytes_sent += ring_bytes_rank(OpKind::Broadcast, bytes, 1, n, r, root);
}

template void mpi_all_reduce<float, Sum>(Op&, MPI_Comm, int, int, float*, size_t, Sum);
template void mpi_all_reduce<double, Sum>(Op&, MPI_Comm, int, int, double*, size_t, Sum);
template void mpi_all_reduce<float, Max>(Op&, MPI_Comm, int, int, float*, size_t, Max);
template void mpi_all_reduce<double, Max>(Op&, MPI_Comm, int, int, double*, size_t, Max);
template void mpi_reduce_scatter<float, Sum>(Op&, MPI_Comm, int, int, const float*, float*, size_t, Sum);
template void mpi_all_reduce<u16, Sum16<DType::BF16>>(Op&, MPI_Comm, int, int, u16*, size_t, Sum16<DType::BF16>);
template void mpi_all_reduce<u16, Sum16<DType::F16>>(Op&, MPI_Comm, int, int, u16*, size_t, Sum16<DType::F16>);
template void mpi_reduce_scatter<u16, Sum16<DType::BF16>>(Op&, MPI_Comm, int, int, const u16*, u16*, size_t,
                                                          Sum16<DType::BF16>);
template void mpi_reduce_scatter<u16, Sum16<DType::F16>>(Op&, MPI_Comm, int, int, const u16*, u16*, size_t,
                                                         Sum16<DType::F16>);

}  // namespace shardlm::comm::detail
