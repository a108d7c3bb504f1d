#include "shardlm/parallel/schedule.h"

#include <algorithm>
#include <array>
#include <cstdio>
#include <map>
#include <tuple>

#include "shardlm/core/check.h"

namespace shardlm::parallel {

const char* op_name(Op op) {
    switch (op) {
    case Op::RecvAct: return "recv_act";
    case Op::Forward: return "forward";
    case Op::SendAct: return "send_act";
    case Op::RecvGrad: return "recv_grad";
    case Op::Backward: return "backward";
    case Op::BackwardInput: return "backward_input";
    case Op::BackwardWeight: return "backward_weight";
    case Op::SendGrad: return "send_grad";
    case Op::ReduceGrads: return "reduce_grads";
    case Op::OptimizerStep: return "optimizer_step";
    }
    return "?";
}

double bubble_fraction_theory(int p, int m, int v) { return double(p - 1) / (double(v) * m + p - 1); }

double bubble_fraction_theory(ScheduleKind kind, int p, int m, int v) {
    switch (kind) {
    case ScheduleKind::ZeroBubbleH1: return double(p - 1) / (3.0 * m + p - 1);
    case ScheduleKind::ZeroBubbleV: return double(p - 1) / (6.0 * m + p - 1);
    default: return bubble_fraction_theory(p, m, v);
    }
}

const char* bubble_theory_formula(ScheduleKind kind) {
    switch (kind) {
    case ScheduleKind::ZeroBubbleH1: return "(p-1)/(3m + p-1)";
    case ScheduleKind::ZeroBubbleV: return "(p-1)/(6m + p-1)";
    default: return "(p-1)/(v m + p-1)";
    }
}

namespace {

// A pass of one chunk on one micro-batch: forward, backward (B and W together), or B or W alone.
enum class Pass { F, BW, B, W };
struct Compute {
    Pass pass;
    int micro, chunk;
};

// Megatron's order of virtual micro-batches: k -> (micro-batch, local chunk).
int virtual_chunk(int k, int p, int v, bool forward) {
    const int c = (k % (p * v)) / p;
    return forward ? c : v - 1 - c;
}
int virtual_micro(int k, int p, int v) { return (k / (p * v)) * p + k % p; }

// Compute order of rank s.
std::vector<Compute> compute_order(ScheduleKind kind, int p, int m, int v, int s, bool forward_only) {
    std::vector<Compute> out;
    const int total = m * v;
    auto F = [&](int k) { out.push_back({Pass::F, virtual_micro(k, p, v), virtual_chunk(k, p, v, true)}); };
    auto B = [&](int k) { out.push_back({Pass::BW, virtual_micro(k, p, v), virtual_chunk(k, p, v, false)}); };
    if (forward_only && kind == ScheduleKind::ZeroBubbleV) {
        // down the V and back up: chunk 1 of micro-batch i runs once its input has come back up,
        // 2 (p - 1 - s) + 1 forwards after chunk 0's, so the stages stay busy
        const int lag = 2 * (p - 1 - s) + 1;
        for (int k = 0; k < m + lag; k++) {
            if (k < m) out.push_back({Pass::F, k, 0});
            if (k >= lag) out.push_back({Pass::F, k - lag, 1});
        }
        return out;
    }
    if (forward_only) {  // each micro-batch through the chunks in order: any m, no backward to interleave
        for (int i = 0; i < m; i++)
            for (int c = 0; c < v; c++) out.push_back({Pass::F, i, c});
        return out;
    }
    int warmup = 0;
    switch (kind) {
    case ScheduleKind::GPipe: warmup = total; break;
    case ScheduleKind::OneFOneB: warmup = std::min(p - s - 1, m); break;
    case ScheduleKind::Interleaved:
        warmup = m == p ? total : std::min(total, (p - s - 1) * 2 + (v - 1) * p);
        break;
    case ScheduleKind::ZeroBubbleH1: {
        // Qi et al.'s ZB-H1: 1F1B's warm-up and order of F and B, but stage s defers the W of its
        // first s micro-batches (W then runs oldest first, one after each B) to its cool-down, where
        // 1F1B leaves it idle: the last stage, idle longest at the end, defers the most; the first
        // none (it runs whole backwards, and keeps no B -> W buffers per slot). A micro-batch's
        // activations live until its W: at most p of them on any stage.
        int f = 0, b = 0, w = 0;
        auto Fw = [&] { out.push_back({Pass::F, f++, 0}); };
        auto Bi = [&] { out.push_back({s == 0 ? Pass::BW : Pass::B, b++, 0}); };
        auto Wt = [&] {
            if (s > 0) out.push_back({Pass::W, w, 0});
            w++;
        };
        for (int k = 0; k < std::min(p - s - 1, m); k++) Fw();
        for (int k = 0; k < s && f < m; k++) Fw(), Bi();
        while (f < m) Fw(), Bi(), Wt();
        while (b < m) Bi(), Wt();
        while (w < m) Wt();
        return out;
    }
    case ScheduleKind::ZeroBubbleV: return {};  // built by v_orders (all ranks at once)
    }
    const int remaining = total - warmup;
    for (int k = 0; k < warmup; k++) F(k);
    for (int k = 0; k < remaining; k++) {
        F(k + warmup);
        B(k);
    }
    for (int k = remaining; k < total; k++) B(k);
    return out;
}

// ZBV (Qi et al. 2023, sec. 6): two chunks per rank in a V, local chunk 0 the way down and chunk 1
// the way back up. Two constructions; make_schedule keeps the one simulate() finds shorter.
//
// (a) A list scheduler over unit times (F = B = W = 1 per chunk, free communication), as the paper's
// own schedules are searched: each rank, when free, runs the ready B of its oldest micro-batch (B is
// on the critical path), else the ready F of its oldest micro-batch (the chunk deeper in the V first)
// while it holds fewer than 2p chunks' activations (1F1B's peak: p micro-batches of a whole stage),
// else the oldest pending W (which frees a slot). It reaches the warm-up bound for m >= p up to p = 4.
std::vector<std::vector<Compute>> v_orders(int p, int m) {
    const int chunks = 2 * p, cap = 2 * p;
    const double never = 1e30;
    // finish times per (model chunk, micro-batch)
    std::vector<std::vector<double>> tf(size_t(chunks), std::vector<double>(size_t(m), never)), tb = tf;
    std::vector<std::vector<Compute>> out(static_cast<size_t>(p));
    std::vector<double> free_at(size_t(p), 0.0);
    std::vector<std::array<int, 2>> nf(size_t(p), {0, 0}), nb(size_t(p), {0, 0}), nw(size_t(p), {0, 0});
    std::vector<int> live(size_t(p), 0);
    std::vector<std::vector<std::pair<int, int>>> wq(static_cast<size_t>(p));  // pending W: (local chunk, micro), oldest first
    int left = 3 * chunks * m;
    for (double t = 0; left > 0; t += 1.0) {
        SHARDLM_CHECK(t < 1e6, "zbv: the list scheduler did not finish (p ", p, ", m ", m, ")");
        for (int r = 0; r < p; r++) {
            if (free_at[size_t(r)] > t) continue;
            int best_c = -1;
            // B: the oldest ready one, ties to the chunk deeper in the V (nearer the loss)
            for (int c : {1, 0}) {
                const int i = nb[size_t(r)][size_t(c)], mc = c == 0 ? r : 2 * p - 1 - r;
                if (i >= m || tf[size_t(mc)][size_t(i)] > t) continue;
                if (mc + 1 < chunks && tb[size_t(mc + 1)][size_t(i)] > t) continue;
                if (best_c < 0 || i < nb[size_t(r)][size_t(best_c)]) best_c = c;
            }
            if (best_c >= 0) {
                const int c = best_c, i = nb[size_t(r)][size_t(c)]++, mc = c == 0 ? r : 2 * p - 1 - r;
                out[size_t(r)].push_back({Pass::B, i, c});
                tb[size_t(mc)][size_t(i)] = t + 1;
                wq[size_t(r)].push_back({c, i});
                free_at[size_t(r)] = t + 1, left--;
                continue;
            }
            if (live[size_t(r)] < cap) {
                for (int c : {1, 0}) {
                    const int i = nf[size_t(r)][size_t(c)], mc = c == 0 ? r : 2 * p - 1 - r;
                    if (i >= m || (mc > 0 && tf[size_t(mc - 1)][size_t(i)] > t)) continue;
                    if (best_c < 0 || i < nf[size_t(r)][size_t(best_c)]) best_c = c;
                }
            }
            if (best_c >= 0) {
                const int c = best_c, i = nf[size_t(r)][size_t(c)]++, mc = c == 0 ? r : 2 * p - 1 - r;
                out[size_t(r)].push_back({Pass::F, i, c});
                tf[size_t(mc)][size_t(i)] = t + 1;
                live[size_t(r)]++;
                free_at[size_t(r)] = t + 1, left--;
                continue;
            }
            if (!wq[size_t(r)].empty()) {
                const auto [c, i] = wq[size_t(r)].front();
                wq[size_t(r)].erase(wq[size_t(r)].begin());
                out[size_t(r)].push_back({Pass::W, i, c});
                nw[size_t(r)][size_t(c)]++;
                live[size_t(r)]--;
                free_at[size_t(r)] = t + 1, left--;
            }
        }
    }
    return out;
}

// (b) The paper's handcrafted pattern (fig. 6), as PyTorch's ScheduleZBVZeroBubble lays it out: rank r
// runs 2 (p - r) - 1 forwards of chunk 0, then r pairs of forwards (chunk 1, chunk 0), then p - r
// times a chunk-1 forward and its backward; in the steady state F0, B0 W0, F1, B1 W1; in the cool-down
// r pairs of B0, B1 with their W deferred, then p - r times B0 and the oldest W0; then the W left. It
// is laid out for max(m, 2p - 1) micro-batches and the passes of the others dropped: it reaches the
// bound for m >= 2p - 1.
std::vector<std::vector<Compute>> v_orders_handcrafted(int p, int m) {
    std::vector<std::vector<Compute>> out(static_cast<size_t>(p));
    const int n = std::max(2 * p - 1, m);
    for (int r = 0; r < p; r++) {
        std::vector<Compute>& o = out[size_t(r)];
        int f[2] = {0, 0}, b[2] = {0, 0}, w[2] = {0, 0};
        auto emit = [&](Pass pass, int c) {
            int& i = pass == Pass::F ? f[c] : pass == Pass::B ? b[c] : w[c];
            if (i < m) o.push_back({pass, i, c});
            i++;
        };
        auto b_and_w = [&](int c) { emit(Pass::B, c), emit(Pass::W, c); };
        for (int k = 0; k < 2 * (p - r) - 1; k++) emit(Pass::F, 0);
        for (int k = 0; k < r; k++) emit(Pass::F, 1), emit(Pass::F, 0);
        for (int k = 0; k < p - r; k++) emit(Pass::F, 1), b_and_w(1);
        while (f[1] < f[0] || f[0] < n) {
            if (f[0] < n) emit(Pass::F, 0);
            b_and_w(0);
            emit(Pass::F, 1);
            b_and_w(1);
        }
        for (int k = 0; k < r; k++) emit(Pass::B, 0), emit(Pass::B, 1);
        for (int k = 0; k < p - r; k++) emit(Pass::B, 0), emit(Pass::W, 0);
        while (w[1] < b[1]) emit(Pass::W, 1);
        while (w[0] < b[0]) emit(Pass::W, 0);
        SHARDLM_CHECK(f[0] == n && b[0] == n && w[0] == n && f[1] == n && b[1] == n && w[1] == n,
                      "zbv: the handcrafted pattern does not close (p ", p, ", m ", m, ")");
    }
    return out;
}

Schedule build(ScheduleKind kind, int p, int m, int v, bool forward_only, bool handcrafted_v = false) {
    SHARDLM_CHECK(p >= 1, "pipeline stages must be >= 1 (got ", p, ")");
    SHARDLM_CHECK(m >= 1, "micro-batches must be >= 1 (got ", m, ")");
    SHARDLM_CHECK(v >= 1, "--virtual-stages must be >= 1 (got ", v, ")");
    if (kind == ScheduleKind::Interleaved && !forward_only) {
        SHARDLM_CHECK(p >= 2, "the interleaved schedule needs --pp >= 2 (got ", p, ")");
        SHARDLM_CHECK(m % p == 0, "the interleaved schedule needs the micro-batches per step (", m,
                      ") to be a multiple of --pp (", p, ")\n---> HINT: change --global-batch or --micro-batch, or use 1f1b");
    } else if (kind == ScheduleKind::ZeroBubbleV) {
        SHARDLM_CHECK(p >= 2, "the zbv schedule needs --pp >= 2 (got ", p, ")");
        SHARDLM_CHECK(v == 2, "the zbv schedule places two model chunks on each rank: --virtual-stages must be 2 (got ",
                      v, ")\n---> HINT: leave --virtual-stages out with --schedule zbv (it implies 2)");
    } else if (kind != ScheduleKind::Interleaved) {
        SHARDLM_CHECK(v == 1, "--virtual-stages ", v, " needs --schedule interleaved");
    }
    Schedule s;
    s.kind = kind;
    if (kind == ScheduleKind::ZeroBubbleV) s.placement = Placement::V;
    s.stages = p;
    s.micro = m;
    s.virtual_stages = v;
    s.forward_only = forward_only;
    s.ranks.resize(size_t(p));
    const int last_chunk = p * v - 1;
    std::vector<std::vector<Compute>> v_order;
    if (kind == ScheduleKind::ZeroBubbleV && !forward_only) v_order = handcrafted_v ? v_orders_handcrafted(p, m) : v_orders(p, m);
    for (int r = 0; r < p; r++) {
        std::vector<Action>& a = s.ranks[size_t(r)];
        const std::vector<Compute> order =
            v_order.empty() ? compute_order(kind, p, m, v, r, forward_only) : v_order[size_t(r)];
        for (const Compute& c : order) {
            const int mc = s.model_chunk(r, c.chunk);
            const int prev = mc > 0 ? s.rank_of(mc - 1) : -1, next = mc < last_chunk ? s.rank_of(mc + 1) : -1;
            switch (c.pass) {
            case Pass::F:
                if (mc > 0) a.push_back({Op::RecvAct, c.micro, c.chunk, prev});
                a.push_back({Op::Forward, c.micro, c.chunk, -1});
                if (mc < last_chunk) a.push_back({Op::SendAct, c.micro, c.chunk, next});
                break;
            case Pass::BW:
            case Pass::B:
                if (mc < last_chunk) a.push_back({Op::RecvGrad, c.micro, c.chunk, next});
                a.push_back({c.pass == Pass::BW ? Op::Backward : Op::BackwardInput, c.micro, c.chunk, -1});
                if (mc > 0) a.push_back({Op::SendGrad, c.micro, c.chunk, prev});
                break;
            case Pass::W: a.push_back({Op::BackwardWeight, c.micro, c.chunk, -1}); break;
            }
        }
        if (!forward_only) {
            a.push_back({Op::ReduceGrads, -1, 0, -1});
            a.push_back({Op::OptimizerStep, -1, 0, -1});
        }
    }
    return s;
}

}  // namespace

Schedule make_schedule(ScheduleKind kind, int p, int m, int v) {
    if (kind == ScheduleKind::ZeroBubbleV && v == 1) v = 2;  // its two chunks per rank are implied
    Schedule s = build(kind, p, m, v, false);
    if (kind == ScheduleKind::ZeroBubbleV) {  // the shorter of the two constructions (the paper's on a tie)
        Schedule h = build(kind, p, m, v, false, true);
        const SimResult a = simulate(s), b = simulate(h);
        SHARDLM_CHECK(a.ok && b.ok, "zbv: a construction does not run: ", a.error, b.error);
        if (b.makespan <= a.makespan) s = std::move(h);
    }
    return s;
}

Schedule make_forward_schedule(int p, int m, int v, Placement placement) {
    if (placement == Placement::V) return build(ScheduleKind::ZeroBubbleV, p, m, 2, true);
    return build(v > 1 ? ScheduleKind::Interleaved : ScheduleKind::GPipe, p, m, v, true);
}

bool Schedule::splits_backward() const {
    for (int r = 0; r < stages; r++)
        if (splits_backward(r)) return true;
    return false;
}

bool Schedule::splits_backward(int rank) const {
    for (const Action& a : ranks[size_t(rank)])
        if (a.op == Op::BackwardInput) return true;
    return false;
}

std::vector<int> Schedule::slots(int rank) const {
    std::vector<int> live(size_t(virtual_stages), 0), most(size_t(virtual_stages), 1);
    for (const Action& a : ranks[size_t(rank)]) {
        if (a.op == Op::Forward) {
            int& n = live[size_t(a.chunk)];
            n++;
            most[size_t(a.chunk)] = std::max(most[size_t(a.chunk)], n);
            if (forward_only) n = 0;  // nothing is kept for a backward
        } else if (a.op == Op::Backward || a.op == Op::BackwardWeight) {
            live[size_t(a.chunk)]--;
        }
    }
    return most;
}

double bubble_fraction(const SimResult& r) {
    if (!r.ok || r.makespan <= 0) return 0.0;
    double idle = 0;
    for (double x : r.idle) idle += x;
    return idle / double(r.idle.size()) / r.makespan;
}

SimResult simulate(const Schedule& s, double t_f, double t_b, double t_w) {
    if (t_w < 0) t_w = t_b / 2;
    SimResult res;
    const int p = s.stages;
    res.busy.assign(size_t(p), 0.0);
    res.idle.assign(size_t(p), 0.0);
    res.max_in_flight.assign(size_t(p), 0);
    res.spans.resize(size_t(p));
    std::vector<size_t> pc(size_t(p), 0);
    std::vector<double> clock(size_t(p), 0.0);
    std::vector<int> live(size_t(p), 0);
    // messages sent and not yet received: (src, dst, is_grad, micro, model chunk of the receiver) -> time
    std::map<std::tuple<int, int, bool, int, int>, double> mail;
    for (;;) {
        bool progressed = false, all_done = true;
        for (int r = 0; r < p; r++) {
            auto& list = s.ranks[size_t(r)];
            while (pc[size_t(r)] < list.size()) {
                const Action& a = list[size_t(pc[size_t(r)])];
                double& t = clock[size_t(r)];
                const int mc = s.model_chunk(r, a.chunk);
                if (a.op == Op::SendAct || a.op == Op::SendGrad) {
                    const bool grad = a.op == Op::SendGrad;
                    const int dst_chunk = grad ? mc - 1 : mc + 1;
                    auto key = std::make_tuple(r, a.peer, grad, a.micro, dst_chunk);
                    if (mail.count(key)) {
                        res.error = "rank " + std::to_string(r) + " sends the same message twice";
                        return res;
                    }
                    mail[key] = t;
                } else if (a.op == Op::RecvAct || a.op == Op::RecvGrad) {
                    const bool grad = a.op == Op::RecvGrad;
                    auto it = mail.find(std::make_tuple(a.peer, r, grad, a.micro, mc));
                    if (it == mail.end()) break;  // blocked
                    t = std::max(t, it->second);
                    mail.erase(it);
                } else if (a.op == Op::Forward || a.op == Op::Backward || a.op == Op::BackwardInput ||
                           a.op == Op::BackwardWeight) {
                    const double d = a.op == Op::Forward          ? t_f
                                     : a.op == Op::Backward       ? t_b
                                     : a.op == Op::BackwardWeight ? t_w
                                                                  : t_b - t_w;
                    res.spans[size_t(r)].push_back({a.op, a.micro, a.chunk, t, t + d});
                    t += d;
                    res.busy[size_t(r)] += d;
                    if (a.op == Op::Forward) live[size_t(r)]++;
                    else if (a.op != Op::BackwardInput) live[size_t(r)]--;  // a slot is free after its W
                    if (s.forward_only) live[size_t(r)] = 1;
                    res.max_in_flight[size_t(r)] = std::max(res.max_in_flight[size_t(r)], live[size_t(r)]);
                }
                pc[size_t(r)]++;
                progressed = true;
            }
            if (pc[size_t(r)] < list.size()) all_done = false;
        }
        if (all_done) break;
        if (!progressed) {
            std::string where;
            for (int r = 0; r < p; r++)
                if (pc[size_t(r)] < s.ranks[size_t(r)].size()) {
                    const Action& a = s.ranks[size_t(r)][pc[size_t(r)]];
                    where += " rank " + std::to_string(r) + " waits in " + op_name(a.op) + " of micro-batch " +
                             std::to_string(a.micro) + ";";
                }
            res.error = "deadlock:" + where;
            return res;
        }
    }
    if (!mail.empty()) {
        res.error = std::to_string(mail.size()) + " message(s) sent but never received";
        return res;
    }
    for (int r = 0; r < p; r++) res.makespan = std::max(res.makespan, clock[size_t(r)]);
    for (int r = 0; r < p; r++) res.idle[size_t(r)] = res.makespan - res.busy[size_t(r)];
    res.ok = true;
    return res;
}

std::string render_chart(const Schedule& s) {
    const SimResult sim = simulate(s);
    SHARDLM_CHECK(sim.ok, "schedule does not run: ", sim.error);
    const int cols = int(sim.makespan + 0.5);
    const bool chunks = s.virtual_stages > 1;
    const int w = chunks ? 5 : 4;  // characters per unit of time
    std::string out;
    char buf[256];
    std::snprintf(buf, sizeof(buf), "%s schedule: %d stages, %d micro-batches%s (forward 1 unit, backward 2%s)\n",
                  schedule_name(s.kind), s.stages, s.micro,
                  chunks ? (", " + std::to_string(s.virtual_stages) + " virtual stages").c_str() : "",
                  s.splits_backward() ? ": B 1 and W 1" : "");
    out += buf;
    for (int r = 0; r < s.stages; r++) {
        std::vector<std::string> cell(size_t(cols), ".");
        for (const auto& sp : sim.spans[size_t(r)]) {
            const char* kind = sp.op == Op::Forward ? "F" : sp.op == Op::BackwardWeight ? "W" : "B";
            std::string lab = kind + std::to_string(sp.micro);
            if (chunks) lab += "." + std::to_string(sp.chunk);
            for (int t = int(sp.t0 + 0.5); t < int(sp.t1 + 0.5); t++) cell[size_t(t)] = lab;
        }
        std::snprintf(buf, sizeof(buf), "stage %-2d|", r);
        out += buf;
        for (const std::string& c : cell) {
            std::snprintf(buf, sizeof(buf), "%-*s", w, c.c_str());
            out += buf;
        }
        out += "|\n";
    }
    double idle = 0;
    for (double x : sim.idle) idle += x;
    idle /= double(s.stages);
    const char* formula = bubble_theory_formula(s.kind);
    std::snprintf(buf, sizeof(buf), "idle per stage %.1f units of %.0f: bubble %.3f of the step (theory %s = %.3f)\n",
                  idle, sim.makespan, idle / sim.makespan, formula,
                  bubble_fraction_theory(s.kind, s.stages, s.micro, s.virtual_stages));
    out += buf;
    return out;
}

}  // namespace shardlm::parallel
