#include "shardlm/planner/search.h"

#include <algorithm>
#include <chrono>

#include "shardlm/planner/explain.h"

namespace shardlm::planner {

namespace {

std::vector<int> divisors(int64_t n, int64_t max) {
    std::vector<int> d;
    for (int64_t i = 1; i <= std::min(n, max); i++)
        if (n % i == 0) d.push_back(int(i));
    return d;
}

template <typename T>
std::vector<T> or_default(const std::vector<T>& given, std::vector<T> all) {
    return given.empty() ? all : given;
}

std::vector<int> tp_candidates(const cost::ModelShape& m, const Cluster& c) {
    std::vector<int> out;
    for (int t : divisors(c.num_gpus, m.heads))
        if (m.kv_heads % t == 0 && m.ffn_hidden % t == 0) out.push_back(t);
    return out;
}

// Context parallelism pays off only for long sequences: offered from 16k tokens on.
std::vector<int> cp_candidates(const Job& job, int64_t gpus_left) {
    std::vector<int> out{1};
    if (job.seq < 16384) return out;
    for (int cp = 2; cp <= 16 && gpus_left % cp == 0 && job.seq % cp == 0; cp *= 2) out.push_back(cp);
    return out;
}

// Expert parallelism: the divisors of dp that divide the experts (a mixture of experts only).
std::vector<int> ep_candidates(const cost::ModelShape& m, int dp) {
    std::vector<int> out{1};
    if (!m.moe()) return out;
    for (int ep = 2; ep <= dp; ep++)
        if (dp % ep == 0 && m.experts % ep == 0) out.push_back(ep);
    return out;
}

std::vector<int> pp_candidates(const cost::ModelShape& m, int64_t gpus_left) {
    std::vector<int> out;
    for (int p : divisors(gpus_left, m.layers))
        if (m.layers % p == 0) out.push_back(p);
    return out;
}

bool better(const Estimate& a, const Estimate& b) {
    if (a.tokens_per_s != b.tokens_per_s) return a.tokens_per_s > b.tokens_per_s;
    return a.memory.total() < b.memory.total();
}

struct Searcher {
    const cost::ModelShape& m;
    const Cluster& c;
    const Job& job;
    const SearchSpace& space;
    std::vector<Estimate> feasible;
    std::vector<Estimate> leanest;  // per (tp, cp, pp): the consistent policy needing the least memory
    int64_t evaluated = 0;

    void note_leanest(const Estimate& e) {
        for (Estimate& l : leanest)
            if (l.policy.tp == e.policy.tp && l.policy.cp == e.policy.cp && l.policy.pp == e.policy.pp &&
                l.policy.ep == e.policy.ep) {
                if (e.memory.total() < l.memory.total()) l = e;
                return;
            }
        leanest.push_back(e);
    }

    // Micro-batches from small to large; stop at the first that does not fit.
    void micro_batch_series(Policy p) {
        const int64_t per_replica = job.global_batch / p.dp;
        std::vector<int64_t> all;
        for (int b : divisors(per_replica, space.max_micro_batch)) all.push_back(b);
        for (int64_t b : or_default(space.micro_batch, all)) {
            p.micro_batch = b;
            Estimate e = evaluate(m, c, job, p);
            if (!e.consistent) continue;
            evaluated++;
            note_leanest(e);
            if (!e.feasible) break;
            feasible.push_back(std::move(e));
        }
    }

    void policies_of_grid(Policy p) {
        const std::vector<cost::CpComm> both{cost::CpComm::AllGather, cost::CpComm::Ring};
        for (cost::CpComm cc : p.cp > 1 ? or_default(space.cp_comm, both) : std::vector<cost::CpComm>{cost::CpComm::AllGather}) {
            p.cp_comm = cc;
            policies_of_grid_cp(p);
        }
    }

    void policies_of_grid_cp(Policy p) {
        // layers that divide evenly: the divisors of a stage's layers; otherwise (explicit pp) any v with
        // a layer per chunk (the fullest chunk paces: stage_model.h)
        std::vector<int> vs{1};
        if (p.pp > 1 && m.layers % p.pp == 0) vs = divisors(m.layers / p.pp, space.max_virtual_stages);
        else if (p.pp > 1)
            for (int v = 2; v <= space.max_virtual_stages && p.pp * v <= m.layers; v++) vs.push_back(v);
        const std::vector<bool> sps = p.tp > 1 ? std::vector<bool>{false, true} : std::vector<bool>{false};
        // with one data-parallel rank there is nothing to shard: stages 1-3 equal stage 0
        const std::vector<int> zero_stages = p.dp * p.cp > 1 ? std::vector<int>{0, 1, 2, 3} : std::vector<int>{0};
        for (cost::Schedule sched : or_default(space.schedule, {cost::Schedule::OneFOneB}))
            for (int v : or_default(space.virtual_stages, vs)) {
                // the zero-bubble schedules fix the chunks per stage: ZB-H1 one, ZBV two
                if (sched == cost::Schedule::ZeroBubbleH1 && v != 1) continue;
                if (sched == cost::Schedule::ZeroBubbleV && v != 2) continue;
                for (int zero : or_default(space.zero_stage, zero_stages))
                    for (cost::Recompute r : or_default(space.recompute, {cost::Recompute::None,
                                                                          cost::Recompute::Selective,
                                                                          cost::Recompute::Full}))
                        for (bool sp : or_default(space.sequence_parallel, sps)) {
                            const bool zb = sched == cost::Schedule::ZeroBubbleH1 || sched == cost::Schedule::ZeroBubbleV;
                            if (zb && r == cost::Recompute::Full) continue;  // refused: W needs the activations
                            p.schedule = sched, p.virtual_stages = v, p.zero_stage = zero, p.recompute = r;
                            p.sequence_parallel = sp;
                            p = with_defaults(c, p, {.framework = !space.framework, .attention = !space.attention,
                                                     .grad_accum_fp32 = !space.grad_accum_fp32});
                            micro_batch_series(p);
                        }
            }
    }

    void run() {
        Policy p;
        p.precision = space.precision;
        p.framework = space.framework.value_or(Framework::Megatron);
        p.attention = space.attention.value_or(cost::Attention::Flash);
        p.grad_accum_fp32 = space.grad_accum_fp32.value_or(false);
        p.compile = space.compile;
        const int64_t n = c.num_gpus;
        for (int tp : or_default(space.tp, tp_candidates(m, c))) {
            if (n % tp) continue;
            for (int cp : or_default(space.cp, cp_candidates(job, n / tp))) {
                if ((n / tp) % cp) continue;
                for (int pp : or_default(space.pp, pp_candidates(m, n / tp / cp))) {
                    if ((n / tp / cp) % pp) continue;
                    p.tp = tp, p.cp = cp, p.pp = pp, p.dp = int(n / tp / cp / pp);
                    if (job.global_batch % p.dp) continue;
                    for (int ep : or_default(space.ep, ep_candidates(m, p.dp))) {
                        if (p.dp % ep) continue;
                        p.ep = ep;
                        policies_of_grid(p);
                    }
                }
            }
        }
    }
};

}  // namespace

SearchResult search(const cost::ModelShape& m, const Cluster& c, const Job& job, const SearchSpace& space, int top_k) {
    const auto t0 = std::chrono::steady_clock::now();
    Searcher s{m, c, job, space, {}, {}, 0};
    s.run();
    std::sort(s.feasible.begin(), s.feasible.end(), better);
    SearchResult r;
    r.evaluated = s.evaluated;
    r.feasible = int64_t(s.feasible.size());
    r.explanation = explain_best(s.feasible, s.leanest, c);
    for (const Estimate& e : s.leanest)
        if (!r.leanest.consistent || e.memory.total() < r.leanest.memory.total()) r.leanest = e;
    const size_t k = std::min(s.feasible.size(), size_t(std::max(top_k, 0)));
    r.top.assign(s.feasible.begin(), s.feasible.begin() + long(k));
    r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return r;
}

Estimate evaluate_request(const cost::ModelShape& m, const Cluster& c, const Job& job, const PolicyRequest& r) {
    const Policy p = with_defaults(c, r.policy, r.open);
    const Estimate plain = evaluate(m, c, job, p);
    if (!r.open.any_searched() || !plain.consistent) return plain;
    SearchSpace space;
    space.tp = {p.tp}, space.pp = {p.pp}, space.cp = {p.cp}, space.ep = {p.ep}, space.zero_stage = {p.zero_stage};
    space.cp_comm = {p.cp_comm}, space.schedule = {p.schedule};
    space.precision = p.precision, space.attention = p.attention;
    space.framework = p.framework, space.grad_accum_fp32 = p.grad_accum_fp32, space.compile = p.compile;
    if (!r.open.micro_batch) space.micro_batch = {p.micro_batch};
    if (!r.open.virtual_stages) space.virtual_stages = {p.virtual_stages};
    if (!r.open.recompute) space.recompute = {p.recompute};
    if (!r.open.sequence_parallel) space.sequence_parallel = {p.sequence_parallel};
    space.max_micro_batch = std::max<int64_t>(space.max_micro_batch, job.global_batch);
    const SearchResult found = search(m, c, job, space, 1);
    if (!found.top.empty()) return found.top.front();
    return found.leanest.consistent ? found.leanest : plain;
}

}  // namespace shardlm::planner
