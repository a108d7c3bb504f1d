#include "shardlm/planner/evaluate.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <memory>
#include <mutex>
#include <tuple>

#include "shardlm/core/check.h"
#include "shardlm/cost/flops.h"
#include "shardlm/planner/stage_model.h"
#include "shardlm/schedule/schedule.h"

namespace shardlm::planner {

namespace {

// The stages that can be extreme: the first (embedding, most micro-batches in flight) and the last
// (head, logits); middle stages hold and do less than both.
std::vector<int> extreme_stages(const Policy& p) { return p.pp == 1 ? std::vector<int>{0} : std::vector<int>{0, p.pp - 1}; }

void fill_memory(const detail::StageModel& sm, const Cluster& c, Estimate& e) {
    for (int stage : extreme_stages(e.policy)) {
        MemoryBreakdown mem = sm.memory(stage);
        if (stage == 0 || mem.total() > e.memory.total()) e.memory = mem, e.fullest_stage = stage;
    }
    const double have = c.gpu.memory_gb * 1e9;
    if (e.memory.total() > have) {
        const MemoryBreakdown& m = e.memory;
        char buf[320];
        std::snprintf(buf, sizeof(buf),
                      "needs %.1f GB per GPU (stage %d: params %.1f, grads %.1f, optimizer %.1f, activations %.1f, "
                      "buffers %.1f), the %s has %g GB",
                      m.total() / 1e9, e.fullest_stage, m.params / 1e9, m.grads / 1e9, m.optimizer / 1e9,
                      m.activations / 1e9, m.buffers / 1e9, c.gpu.name.c_str(), c.gpu.memory_gb);
        e.reason = buf;
    }
}

using MicroBatch = detail::StageModel::MicroBatch;

// Schedules are built and ordered once per (kind, p, m, v): a search evaluates many policies on few
// shapes, and replays the order with each policy's times (schedule::SimPlan).
const schedule::SimPlan& plan_of(cost::Schedule kind, int p, int m, int v) {
    static std::mutex mu;
    static std::map<std::tuple<cost::Schedule, int, int, int>, std::unique_ptr<schedule::SimPlan>> built;
    std::lock_guard<std::mutex> lock(mu);
    auto& s = built[{kind, p, m, v}];
    if (!s) s = std::make_unique<schedule::SimPlan>(schedule::make_schedule(kind, p, m, v));
    return *s;
}

// The pipeline bubble: the slowest rank's idle time when the policy's schedule runs in the schedule
// simulator (schedule/schedule.h, the schedules the engine runs) on every rank's pass times: the
// first p - 1 ranks take the first stage's (middle stages hold blocks only, as the first), the last
// rank the head's, a chunk 1/v of it. A pass splits into forward and backward as their compute
// does, and W (apart, in the zero-bubble schedules) is half the backward: B and W have the same
// FLOPs. A rank's idle time stops changing once the schedule reaches its steady state
// (schedule::steady_micro_batches: p micro-batches, 2p for interleaving and ZBV; tested), so no more are simulated.
double pipeline_bubble_s(const Policy& p, int64_t m, const MicroBatch& first, const MicroBatch& last) {
    if (p.pp == 1) return 0;
    const int v = p.virtual_stages;
    const cost::Schedule kind =
        p.schedule == cost::Schedule::OneFOneB && v > 1 ? cost::Schedule::Interleaved : p.schedule;
    const int64_t sim_m = std::min<int64_t>(m, schedule::steady_micro_batches(kind, p.pp));
    if (kind == cost::Schedule::Interleaved && sim_m % p.pp != 0) {
        // Megatron's interleaving needs m a multiple of p (the engine refuses others): the closed form
        const MicroBatch& slow = last.total() > first.total() ? last : first;
        return ((p.pp - 1) * first.total() + last.total() - slow.total()) / v;
    }
    auto times = [&](const MicroBatch& mb) {
        const double chunk = mb.total() / v, fs = mb.forward / std::max(1e-30, mb.forward + mb.backward);
        return schedule::PassTimes{chunk * fs, chunk * (1 - fs), -1.0};
    };
    std::vector<schedule::PassTimes> per_rank(size_t(p.pp), times(first));
    per_rank.back() = times(last);
    const schedule::SimResult r = plan_of(kind, p.pp, int(sim_m), v).run(per_rank);
    size_t slowest = 0;
    for (size_t i = 1; i < r.busy.size(); i++)
        if (r.busy[i] > r.busy[slowest]) slowest = i;
    return r.idle[slowest];
}

void fill_time(const detail::StageModel& sm, const Policy& p, const Job& job, Estimate& e) {
    // The slowest stage sets the pace of the pipeline; the bubble is its idle time (balanced stages:
    // (p - 1) x a stage's time / v for 1F1B, GPipe and interleaving; ZB-H1 (p - 1) F, ZBV half that
    // once m >= 2p - 1, Qi et al. 2023; less when the head makes the last stage the slow one).
    const MicroBatch first = sm.micro_batch_time(0), last = sm.micro_batch_time(p.pp - 1);
    const MicroBatch& slow = last.total() > first.total() ? last : first;
    const double m = double(sm.micro_batches);
    TimeBreakdown& t = e.time;
    t.compute = m * (slow.forward + slow.backward);
    t.tp_comm = m * slow.tp;
    t.cp_comm = m * slow.cp;
    t.ep_comm = m * slow.ep;
    t.pp_bubble = pipeline_bubble_s(p, sm.micro_batches, first, last);
    t.pp_comm = sm.pp_comm_s();
    for (int stage : extreme_stages(p)) {
        t.dp_comm = std::max(t.dp_comm, sm.dp_exposed_s(stage, sm.micro_batch_time(stage)));
        t.optimizer = std::max(t.optimizer, sm.optimizer_s(stage));
    }
    // Sophia: one more forward and backward of the step's batch every hessian_interval steps, with its
    // communication and bubble (not the optimiser step): on average 1/k of a step's passes
    if (job.hessian_interval > 0) {
        const double f = 1.0 + 1.0 / job.hessian_interval;
        for (double* x : {&t.compute, &t.tp_comm, &t.cp_comm, &t.ep_comm, &t.pp_bubble, &t.pp_comm, &t.dp_comm}) *x *= f;
    }
}

void fill_rates(const cost::ModelShape& m, const Cluster& c, const Job& job, Estimate& e) {
    const Policy& p = e.policy;
    const double tokens = double(job.global_batch) * job.seq, gpus = c.num_gpus;
    e.step_time_s = e.time.total();
    e.tokens_per_s = tokens / e.step_time_s;
    e.tokens_per_s_per_gpu = e.tokens_per_s / gpus;
    e.tflops_per_gpu = cost::model_flops_per_token(m, job.seq) * e.tokens_per_s_per_gpu / 1e12;
    e.hfu_tflops_per_gpu = cost::hardware_flops_per_token(m, job.seq, p.recompute, p.attention) * e.tokens_per_s_per_gpu / 1e12 *
                           (job.hessian_interval > 0 ? 1.0 + 1.0 / job.hessian_interval : 1.0);
    e.mfu = e.tflops_per_gpu * 1e12 / peak_flops(c, p.precision);
}

}  // namespace

Estimate evaluate(const cost::ModelShape& m, const Cluster& c, const Job& job, Policy p) {
    Estimate e;
    e.reason = check_shape(m);
    if (e.reason.empty()) e.reason = check_cluster(c);
    if (e.reason.empty()) e.reason = resolve_policy(m, c, job, p);
    e.policy = p;
    if (!e.reason.empty()) return e;
    e.consistent = true;
    if (p.tp == 1) e.policy.sequence_parallel = false;  // nothing to split: sequence parallelism is a no-op
    const detail::StageModel sm(m, c, job, e.policy);
    e.micro_batches = sm.micro_batches;
    e.tp_in_node = fits_in_node(c, p.tp);
    e.dp_in_node = fits_in_node(c, p.tp * p.cp * p.dp);
    e.pp_in_node = fits_in_node(c, p.tp * p.cp * p.dp * p.pp);
    fill_memory(sm, c, e);
    fill_time(sm, e.policy, job, e);
    fill_rates(m, c, job, e);
    e.feasible = e.reason.empty();
    return e;
}

Terms explain_terms(const cost::ModelShape& m, const Cluster& c, const Job& job, const Estimate& e) {
    Terms out;
    if (!e.consistent) return out;
    const Policy& p = e.policy;
    const detail::StageModel sm(m, c, job, p);
    const MicroBatch first = sm.micro_batch_time(0), last = sm.micro_batch_time(p.pp - 1);
    const int pace = last.total() > first.total() ? p.pp - 1 : 0;  // as fill_time
    const MicroBatch& slow = pace == 0 ? first : last;
    // Sophia's Hessian pass repeats the passes and their transfers (fill_time)
    const double again = job.hessian_interval > 0 ? 1.0 + 1.0 / job.hessian_interval : 1.0;
    const double per_step = double(sm.micro_batches) * again;
    for (const auto& w : sm.compute_work(pace)) {
        Term t{w.what, per_step * (w.forward + w.backward), "", w.efficiency};
        if (w.M > 0) t.shape = cat(int64_t(w.M), " x ", int64_t(w.N), " x ", int64_t(w.K));
        out.compute.push_back(t);
    }
    auto comm = [&](std::string what, double s) {
        if (s <= 0) return;
        Term t;
        t.what = std::move(what), t.seconds = s;
        out.communication.push_back(t);
    };
    const char* tp_what = p.sequence_parallel ? "TP all-gathers and reduce-scatters (sequence parallel)" : "TP all-reduces";
    comm(p.framework == Framework::MegatronCore ? cat(tp_what, ", beyond the GEMMs they overlap") : tp_what,
         per_step * slow.tp);
    comm(p.cp_comm == cost::CpComm::Ring ? "CP ring: key and value blocks passed on"
                                         : "CP: keys and values all-gathered, their gradients reduce-scattered",
         per_step * slow.cp);
    comm("EP all-to-alls: dispatch and combine", per_step * slow.ep);
    detail::StageModel::DpExposed dp;
    for (int stage : extreme_stages(p)) {
        const detail::StageModel::DpExposed x = sm.dp_exposed(stage, sm.micro_batch_time(stage));
        if (x.total() > dp.total()) dp = x;
    }
    comm("DP all-reduce of the gradients", again * dp.all_reduce);
    comm(cat("ZeRO-", p.zero_stage, " reduce-scatter of the gradients"), again * dp.reduce_scatter);
    comm(cat("ZeRO-", p.zero_stage, " all-gather of the parameters"), again * dp.all_gather);
    comm("pipeline send/recv of activations and their gradients", again * sm.pp_comm_s());
    out.pipeline_bubble_s = e.time.pp_bubble;
    out.optimizer_s = e.time.optimizer;
    auto larger = [](const Term& a, const Term& b) { return a.seconds > b.seconds; };
    std::stable_sort(out.compute.begin(), out.compute.end(), larger);
    std::stable_sort(out.communication.begin(), out.communication.end(), larger);
    return out;
}

}  // namespace shardlm::planner
