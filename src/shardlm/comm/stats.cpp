// comm/stats.cpp: what the collectives cost, counted (CommStats, the per-group table) and in theory
// (the bytes each ring algorithm sends: whole group and per rank). No MPI here.
#include <iomanip>
#include <sstream>

#include "shardlm/comm/group.h"
#include "shardlm/comm/ring.h"
#include "shardlm/core/check.h"

namespace shardlm::comm {

using detail::Blocks;
using detail::mod;

std::string_view op_name(OpKind k) {
    switch (k) {
    case OpKind::AllReduce: return "all_reduce";
    case OpKind::ReduceScatter: return "reduce_scatter";
    case OpKind::AllGather: return "all_gather";
    case OpKind::Broadcast: return "broadcast";
    case OpKind::SendRecv: return "send_recv";
    case OpKind::Barrier: return "barrier";
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

// ---- theory -----------------------------------------------------------------------------------

size_t Group::ring_bytes(OpKind kind, size_t bytes_total, int n) {
    SHARDLM_CHECK(n >= 1, "ring_bytes: group size ", n, " must be >= 1");
    const size_t N = size_t(n);
    switch (kind) {
    case OpKind::AllReduce: return 2 * (N - 1) * bytes_total / N;
    case OpKind::ReduceScatter:
    case OpKind::AllGather:
    case OpKind::Broadcast: return (N - 1) * bytes_total / N;
    case OpKind::SendRecv: return bytes_total;
    case OpKind::Barrier: return 0;
    }
    return 0;
}

size_t Group::ring_bytes_rank(OpKind kind, size_t count, size_t elem_bytes, int n, int rank, int root) {
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
    }
    return 0;
}

std::string Group::stats_table() const {
    std::ostringstream os;
    os << std::left << std::setw(16) << "op" << std::right << std::setw(10) << "calls" << std::setw(16) << "bytes_sent"
       << std::setw(12) << "seconds" << std::setw(12) << "GB/s_sent" << "\n";
    auto line = [&](std::string_view name, const OpStats& o) {
        os << std::left << std::setw(16) << name << std::right << std::setw(10) << o.calls << std::setw(16) << o.bytes_sent
           << std::setw(12) << std::fixed << std::setprecision(6) << o.seconds << std::setw(12) << std::setprecision(3)
           << (o.seconds > 0 ? double(o.bytes_sent) / o.seconds / 1e9 : 0.0) << "\n";
    };
    OpStats total;
    for (int k = 0; k < kNumOpKinds; k++) {
        const OpStats& o = stats().ops[size_t(k)];
        if (o.calls == 0) continue;
        line(op_name(OpKind(k)), o);
        total.calls += o.calls;
        total.bytes_sent += o.bytes_sent;
        total.seconds += o.seconds;
    }
    line("total", total);
    return os.str();
}

}  // namespace shardlm::comm
