// comm/stats.cpp: a group's counters as a table (the theory beside them: comm/op.h's ring_bytes).
#include <iomanip>
#include <sstream>

#include "shardlm/comm/group.h"
#include "shardlm/core/check.h"

namespace shardlm::comm {

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
