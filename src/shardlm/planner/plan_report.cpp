#include "shardlm/planner/plan_report.h"

#include <cstdarg>
#include <cstdio>

#include "shardlm/core/check.h"

namespace shardlm::planner {

namespace {

std::string printf_string(const char* f, ...) {
    char buf[512];
    va_list ap;
    va_start(ap, f);
    std::vsnprintf(buf, sizeof(buf), f, ap);
    va_end(ap);
    return buf;
}

std::string human_count(double n) {
    if (n >= 1e9) return printf_string("%.1fB", n / 1e9);
    if (n >= 1e6) return printf_string("%.0fM", n / 1e6);
    return printf_string("%.0f", n);
}

std::string policy_row(int rank, const Estimate& e) {
    const Policy& p = e.policy;
    return printf_string("%3d %4d %4d %5d %3d %3d %4lld %4d %-9s %-3s %-18s | %8.3f %10.0f %8.1f %5.1f %%", rank, p.tp,
                         p.pp, p.dp, p.cp, p.virtual_stages, (long long)p.micro_batch, p.zero_stage,
                         cost::recompute_name(p.recompute).c_str(), p.sequence_parallel ? "on" : "off",
                         framework_name(p.framework).c_str(), e.step_time_s, e.tokens_per_s, e.tflops_per_gpu, 100 * e.mfu);
}

std::string breakdown_row(int rank, const Estimate& e) {
    const MemoryBreakdown& m = e.memory;
    const TimeBreakdown& t = e.time;
    return printf_string("%3d %7.1f %6.1f %6.1f %6.1f %6.1f %6.1f | %8.3f %6.3f %6.3f %6.3f %6.3f %6.3f %6.3f %6.3f", rank,
                         m.params / 1e9, m.grads / 1e9, m.optimizer / 1e9, m.activations / 1e9, m.buffers / 1e9,
                         m.total() / 1e9, t.compute, t.tp_comm, t.cp_comm, t.ep_comm, t.pp_bubble, t.pp_comm, t.dp_comm,
                         t.optimizer);
}

}  // namespace

std::string describe_problem(const cost::ModelShape& m, const Cluster& c, const Job& job, Precision precision) {
    std::string out = cat("model ", m.name, ": ", cost::arch_name(m.arch), ", ", m.layers, " layers x ", m.hidden,
                          ", ", m.heads, " heads");
    if (m.kv_heads != m.heads) out += cat(" (", m.kv_heads, " KV)");
    out += cat(", ffn ", m.ffn_hidden, ", vocab ", m.vocab, ", ", human_count(double(cost::total_params(m))),
               " parameters; global batch ", job.global_batch, " x ", job.seq, " tokens, ", precision_name(precision),
               " (optimiser state ", job.optimizer_state, " bytes per parameter",
               job.hessian_interval > 0 ? cat("; a Hessian forward and backward every ", job.hessian_interval, " steps")
                                        : std::string(),
               ")\n");
    out += cat("cluster: ", c.num_gpus, " x ", c.gpu.name, " (", c.nodes(), c.nodes() == 1 ? " node x " : " nodes x ",
               c.gpus_per_node, "; ",
               c.gpu.peak_tflops, " TFLOP/s 16-bit, ", c.gpu.memory_gb, " GB, NVLink ", c.gpu.intra_node_GBps,
               " GB/s, network ", c.gpu.inter_node_GBps, " GB/s per GPU)\n");
    return out;
}

std::string format_table(const std::vector<Estimate>& rows, const Cluster& c) {
    std::string out =
        "  #   tp   pp    dp  cp   v   mb zero recompute sp  framework          |   step s   tokens/s  TFLOP/s   MFU\n";
    for (size_t i = 0; i < rows.size(); i++) out += policy_row(int(i + 1), rows[i]) + "\n";
    out += cat("\n    memory per GPU, GB (fullest stage; GPU has ", c.gpu.memory_gb,
               ")          | step time, s (exposed)\n");
    out += "  #  params  grads  optim  activ   bufs  total |  compute     tp     cp     ep bubble     pp     dp  optim\n";
    for (size_t i = 0; i < rows.size(); i++) out += breakdown_row(int(i + 1), rows[i]) + "\n";
    return out;
}

std::string format_estimate(const Estimate& e, const Cluster& c) {
    std::string out = cat("policy: ", describe(e.policy), "\n");
    if (!e.consistent) return out + "not feasible: " + e.reason + "\n";
    out += format_table({e}, c);
    out += e.feasible ? std::string("feasible\n") : "not feasible: " + e.reason + "\n";
    return out;
}

}  // namespace shardlm::planner
