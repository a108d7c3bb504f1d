#include "shardlm/comm/op.h"

#include "shardlm/core/check.h"

namespace shardlm::comm {

std::string_view op_name(OpKind k) {
    switch (k) {
    case OpKind::AllReduce: return "all_reduce";
    case OpKind::ReduceScatter: return "reduce_scatter";
    case OpKind::AllGather: return "all_gather";
    case OpKind::Broadcast: return "broadcast";
    case OpKind::SendRecv: return "send_recv";
    case OpKind::Barrier: return "barrier";
    case OpKind::AllToAll: return "all_to_all";
    }
    return "?";
}

uint64_t CommStats::total_bytes_sent() const {
    uint64_t b = 0;
    for (const auto& o : ops) b += o.bytes_sent;
    return b;
}

double CommStats::total_seconds() const {
    double s = 0;
    for (const auto& o : ops) s += o.seconds;
    return s;
}


using detail::Blocks;
using detail::mod;

// ---- theory -----------------------------------------------------------------------------------

size_t ring_bytes(OpKind kind, size_t bytes_total, int n) {
    SHARDLM_CHECK(n >= 1, "ring_bytes: group size ", n, " must be >= 1");
    const size_t N = size_t(n);
    switch (kind) {
    case OpKind::AllReduce: return 2 * (N - 1) * bytes_total / N;
    case OpKind::ReduceScatter:
    case OpKind::AllGather:
    case OpKind::Broadcast: return (N - 1) * bytes_total / N;
    case OpKind::SendRecv: return bytes_total;
    case OpKind::Barrier: return 0;
    case OpKind::AllToAll: return (N - 1) * bytes_total / N;  // an even exchange: all but one's own block
    }
    return 0;
}

size_t ring_bytes_rank(OpKind kind, size_t count, size_t elem_bytes, int n, int rank, int root) {
    SHARDLM_CHECK(n >= 1 && rank >= 0 && rank < n, "ring_bytes_rank: rank ", rank, " of ", n);
    if (n == 1 && kind != OpKind::SendRecv) return 0;
    const size_t total = count * elem_bytes;
    switch (kind) {
    case OpKind::AllReduce: {
        const Blocks bl(count, n);
        return total - bl.len(rank) * elem_bytes + total - bl.len(mod(rank + 1, n)) * elem_bytes;
    }
    case OpKind::ReduceScatter:
    case OpKind::AllGather: return total - total / size_t(n);  // count must be a multiple of n
    case OpKind::Broadcast: return mod(rank - root, n) < n - 1 ? total : 0;
    case OpKind::SendRecv: return total;
    case OpKind::Barrier: return 0;
    case OpKind::AllToAll: return total - total / size_t(n);
    }
    return 0;
}

}  // namespace shardlm::comm
