#include "shardlm/planner/evaluate.h"

#include <algorithm>
#include <cstdio>

#include "shardlm/cost/flops.h"
#include "shardlm/planner/stage_model.h"

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

void fill_time(const detail::StageModel& sm, const Policy& p, Estimate& e) {
    // The slowest stage sets the pace of the pipeline; filling and draining it passes one micro-batch
    // through every other stage: (p - 1) x a stage's time when they are balanced, less when the
    // head makes the last stage the slow one. Middle stages hold blocks only, as the first (the
    // embedding lookup is not timed).
    detail::StageModel::MicroBatch slow;
    double all_stages = 0;
    for (int stage : extreme_stages(p)) {
        detail::StageModel::MicroBatch mb = sm.micro_batch_time(stage);
        if (stage == 0 || mb.total() > slow.total()) slow = mb;
        all_stages += (p.pp > 1 && stage == 0 ? p.pp - 1 : 1) * mb.total();
    }
    const double m = double(sm.micro_batches);
    TimeBreakdown& t = e.time;
    t.compute = m * (slow.forward + slow.backward);
    t.tp_comm = m * slow.tp;
    t.cp_comm = m * slow.cp;
    t.pp_bubble = (all_stages - slow.total()) / p.virtual_stages;
    // Zero-bubble schedules (Qi et al. 2023): the backward's weight half W fills 1F1B's bubble. With
    // B = W = half the backward (their FLOPs are equal), ZB-H1 leaves (p - 1)(F + B - W) = (p - 1) F of
    // 1F1B's (p - 1)(F + B + W); ZBV, on chunks of half a stage, (p - 1) F / 2 (its warm-up: reached
    // for m >= 2p - 1; fewer micro-batches leave more, which the schedule simulator shows).
    const double f_share = slow.forward / std::max(1e-30, slow.forward + slow.backward);
    if (p.schedule == cost::Schedule::ZeroBubbleH1) t.pp_bubble *= f_share;
    if (p.schedule == cost::Schedule::ZeroBubbleV) t.pp_bubble = t.pp_bubble * p.virtual_stages * f_share / 2;
    t.pp_comm = sm.pp_comm_s();
    for (int stage : extreme_stages(p)) {
        t.dp_comm = std::max(t.dp_comm, sm.dp_exposed_s(stage, sm.micro_batch_time(stage)));
        t.optimizer = std::max(t.optimizer, sm.optimizer_s(stage));
    }
}

void fill_rates(const cost::ModelShape& m, const Cluster& c, const Job& job, Estimate& e) {
    const Policy& p = e.policy;
    const double tokens = double(job.global_batch) * job.seq, gpus = c.num_gpus;
    e.step_time_s = e.time.total();
    e.tokens_per_s = tokens / e.step_time_s;
    e.tokens_per_s_per_gpu = e.tokens_per_s / gpus;
    e.tflops_per_gpu = cost::model_flops_per_token(m, job.seq) * e.tokens_per_s_per_gpu / 1e12;
    e.hfu_tflops_per_gpu = cost::hardware_flops_per_token(m, job.seq, p.recompute) * e.tokens_per_s_per_gpu / 1e12;
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
    fill_time(sm, e.policy, e);
    fill_rates(m, c, job, e);
    e.feasible = e.reason.empty();
    return e;
}

}  // namespace shardlm::planner
