#include "shardlm/schedule/schedule.h"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <map>
#include <unordered_map>
#include <tuple>

#include "shardlm/core/check.h"
#include "shardlm/schedule/schedule_orders.h"

namespace shardlm::schedule {

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
    case Op::Unshard: return "unshard";
    case Op::Reshard: return "reshard";
    }
    return "?";
}

double bubble_fraction_theory(int p, int m, int v) { return double(p - 1) / (double(v) * m + p - 1); }

double bubble_fraction_theory(ScheduleKind kind, int p, int m, int v) {
    switch (kind) {
    case ScheduleKind::ZeroBubbleH1: return 1.0 - 3.0 * m / std::max(3.0 * m + p - 1, 2.0 * m + 2.0 * p - 1);
    case ScheduleKind::ZeroBubbleV:
        return 1.0 - 6.0 * m / std::max({6.0 * m + p - 1, 4.0 * m + 3.0 * p - 1, 2.0 * m + 4.0 * p - 1});
    default: return bubble_fraction_theory(p, m, v);
    }
}

const char* bubble_theory_formula(ScheduleKind kind) {
    switch (kind) {
    case ScheduleKind::ZeroBubbleH1: return "1 - 3m/max(3m + p-1, 2m + 2p-1)";
    case ScheduleKind::ZeroBubbleV: return "1 - 6m/max(6m + p-1, 4m + 3p-1, 2m + 4p-1)";
    default: return "(p-1)/(v m + p-1)";
    }
}

namespace {

using namespace detail;

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

void add_unshard_actions(Schedule& s) {
    auto compute = [](Op op) {
        return op == Op::Forward || op == Op::Backward || op == Op::BackwardInput || op == Op::BackwardWeight;
    };
    for (std::vector<Action>& list : s.ranks) {
        std::vector<size_t> first(size_t(s.virtual_stages), SIZE_MAX), last(size_t(s.virtual_stages), 0);
        for (size_t i = 0; i < list.size(); i++)
            if (compute(list[i].op)) {
                const size_t c = size_t(list[i].chunk);
                first[c] = std::min(first[c], i);
                last[c] = i;
            }
        std::vector<Action> out;
        for (size_t i = 0; i < list.size(); i++) {
            for (int c = 0; c < s.virtual_stages; c++)
                if (first[size_t(c)] == i) out.push_back({Op::Unshard, -1, c, -1});
            out.push_back(list[i]);
            for (int c = 0; c < s.virtual_stages; c++)
                if (first[size_t(c)] != SIZE_MAX && last[size_t(c)] == i) out.push_back({Op::Reshard, -1, c, -1});
        }
        list = std::move(out);
    }
}

SimResult simulate(const Schedule& s, double t_f, double t_b, double t_w) {
    return simulate(s, std::vector<PassTimes>(size_t(s.stages), PassTimes{t_f, t_b, t_w}));
}

namespace {

// simulate()'s state: each rank's next action and clock, the passes in flight, the messages in the air.
struct ScheduleSimulation {
    const Schedule& s;
    const std::vector<PassTimes>& per_rank;
    SimResult res;
    std::vector<size_t> pc;
    std::vector<double> clock;
    std::vector<int> live;
    // messages sent and not yet received: (src, dst, is_grad, micro, model chunk of the receiver) -> time
    std::unordered_map<uint64_t, double> mail;
    uint64_t P, M, C;

    ScheduleSimulation(const Schedule& sched, const std::vector<PassTimes>& times)
        : s(sched), per_rank(times), pc(size_t(sched.stages), 0), clock(size_t(sched.stages), 0.0),
          live(size_t(sched.stages), 0), P(uint64_t(sched.stages)), M(uint64_t(sched.micro) + 1),
          C(uint64_t(sched.num_model_chunks()) + 2) {
        const size_t p = size_t(sched.stages);
        res.busy.assign(p, 0.0);
        res.idle.assign(p, 0.0);
        res.max_in_flight.assign(p, 0);
        res.spans.resize(p);
    }
    uint64_t mail_key(int src, int dst, bool grad, int micro, int chunk) const {
        return (((uint64_t(src) * P + uint64_t(dst)) * 2 + grad) * M + uint64_t(micro)) * C + uint64_t(chunk + 1);
    }
    // Rank r's actions until it blocks on a receive or ends; false on an error (res.error).
    bool advance(int r, bool& progressed) {
        const auto& list = s.ranks[size_t(r)];
        while (pc[size_t(r)] < list.size()) {
            const Action& a = list[size_t(pc[size_t(r)])];
            double& t = clock[size_t(r)];
            const int mc = s.model_chunk(r, a.chunk);
            if (a.op == Op::SendAct || a.op == Op::SendGrad) {
                const bool grad = a.op == Op::SendGrad;
                const uint64_t key = mail_key(r, a.peer, grad, a.micro, grad ? mc - 1 : mc + 1);
                if (mail.count(key)) {
                    res.error = "rank " + std::to_string(r) + " sends the same message twice";
                    return false;
                }
                mail[key] = t;
            } else if (a.op == Op::RecvAct || a.op == Op::RecvGrad) {
                auto it = mail.find(mail_key(a.peer, r, a.op == Op::RecvGrad, a.micro, mc));
                if (it == mail.end()) break;  // blocked
                t = std::max(t, it->second);
                mail.erase(it);
            } else if (a.op == Op::Forward || a.op == Op::Backward || a.op == Op::BackwardInput ||
                       a.op == Op::BackwardWeight) {
                pass(r, a);
            }
            pc[size_t(r)]++;
            progressed = true;
        }
        return true;
    }
    void pass(int r, const Action& a) {
        double& t = clock[size_t(r)];
        const PassTimes& pt = per_rank[size_t(r)];
        const double t_w = pt.w < 0 ? pt.b / 2 : pt.w;
        const double d = a.op == Op::Forward          ? pt.f
                         : a.op == Op::Backward       ? pt.b
                         : a.op == Op::BackwardWeight ? t_w
                                                      : pt.b - t_w;
        res.spans[size_t(r)].push_back({a.op, a.micro, a.chunk, t, t + d});
        t += d;
        res.busy[size_t(r)] += d;
        if (a.op == Op::Forward) live[size_t(r)]++;
        else if (a.op != Op::BackwardInput) live[size_t(r)]--;  // a slot is free after its W
        if (s.forward_only) live[size_t(r)] = 1;
        res.max_in_flight[size_t(r)] = std::max(res.max_in_flight[size_t(r)], live[size_t(r)]);
    }
    bool done(int r) const { return pc[size_t(r)] >= s.ranks[size_t(r)].size(); }
    std::string deadlock() const {
        std::string where;
        for (int r = 0; r < s.stages; r++)
            if (!done(r)) {
                const Action& a = s.ranks[size_t(r)][pc[size_t(r)]];
                where += " rank " + std::to_string(r) + " waits in " + op_name(a.op) + " of micro-batch " +
                         std::to_string(a.micro) + ";";
            }
        return "deadlock:" + where;
    }
};

}  // namespace

SimResult simulate(const Schedule& s, const std::vector<PassTimes>& per_rank) {
    const int p = s.stages;
    SHARDLM_CHECK(per_rank.size() == size_t(p), "simulate: ", per_rank.size(), " ranks' times for ", p, " stages");
    ScheduleSimulation sim(s, per_rank);
    SimResult& res = sim.res;
    for (;;) {
        bool progressed = false, all_done = true;
        for (int r = 0; r < p; r++) {
            if (!sim.advance(r, progressed)) return res;
            all_done = all_done && sim.done(r);
        }
        if (all_done) break;
        if (!progressed) {
            res.error = sim.deadlock();
            return res;
        }
    }
    if (!sim.mail.empty()) {
        res.error = std::to_string(sim.mail.size()) + " message(s) sent but never received";
        return res;
    }
    for (int r = 0; r < p; r++) res.makespan = std::max(res.makespan, sim.clock[size_t(r)]);
    for (int r = 0; r < p; r++) res.idle[size_t(r)] = res.makespan - res.busy[size_t(r)];
    res.ok = true;
    return res;
}

SimPlan::SimPlan(const Schedule& s) : stages_(s.stages) {
    const int p = s.stages;
    std::vector<size_t> pc(size_t(p), 0);
    std::map<std::tuple<int, int, bool, int, int>, int> posted;  // message -> its index, until received
    for (;;) {
        bool progressed = false, all_done = true;
        for (int r = 0; r < p; r++) {
            const auto& list = s.ranks[size_t(r)];
            while (pc[size_t(r)] < list.size()) {
                const Action& a = list[pc[size_t(r)]];
                const int mc = s.model_chunk(r, a.chunk);
                int message = -1;
                if (a.op == Op::SendAct || a.op == Op::SendGrad) {
                    const bool grad = a.op == Op::SendGrad;
                    message = messages_++;
                    posted[std::make_tuple(r, a.peer, grad, a.micro, grad ? mc - 1 : mc + 1)] = message;
                } else if (a.op == Op::RecvAct || a.op == Op::RecvGrad) {
                    auto it = posted.find(std::make_tuple(a.peer, r, a.op == Op::RecvGrad, a.micro, mc));
                    if (it == posted.end()) break;  // its send comes later in this order
                    message = it->second;
                    posted.erase(it);
                }
                steps_.push_back({r, a.op, message});
                pc[size_t(r)]++;
                progressed = true;
            }
            if (pc[size_t(r)] < list.size()) all_done = false;
        }
        if (all_done) break;
        SHARDLM_CHECK(progressed, "SimPlan: the ", schedule_name(s.kind), " schedule deadlocks");
    }
    SHARDLM_CHECK(posted.empty(), "SimPlan: ", posted.size(), " message(s) sent but never received");
}

SimResult SimPlan::run(const std::vector<PassTimes>& per_rank) const {
    SHARDLM_CHECK(per_rank.size() == size_t(stages_), "SimPlan: ", per_rank.size(), " ranks' times for ", stages_,
                  " stages");
    SimResult res;
    const size_t p = size_t(stages_);
    res.busy.assign(p, 0.0);
    res.idle.assign(p, 0.0);
    std::vector<double> clock(p, 0.0), sent(size_t(messages_), 0.0);
    for (const Step& st : steps_) {
        double& t = clock[size_t(st.rank)];
        const PassTimes& pt = per_rank[size_t(st.rank)];
        const double t_w = pt.w < 0 ? pt.b / 2 : pt.w;
        switch (st.op) {
        case Op::SendAct:
        case Op::SendGrad: sent[size_t(st.message)] = t; break;
        case Op::RecvAct:
        case Op::RecvGrad: t = std::max(t, sent[size_t(st.message)]); break;
        case Op::Forward: t += pt.f, res.busy[size_t(st.rank)] += pt.f; break;
        case Op::Backward: t += pt.b, res.busy[size_t(st.rank)] += pt.b; break;
        case Op::BackwardWeight: t += t_w, res.busy[size_t(st.rank)] += t_w; break;
        case Op::BackwardInput: t += pt.b - t_w, res.busy[size_t(st.rank)] += pt.b - t_w; break;
        default: break;
        }
    }
    for (size_t r = 0; r < p; r++) res.makespan = std::max(res.makespan, clock[r]);
    for (size_t r = 0; r < p; r++) res.idle[r] = res.makespan - res.busy[r];
    res.ok = true;
    return res;
}

int steady_micro_batches(ScheduleKind kind, int p) {
    return kind == ScheduleKind::ZeroBubbleV || kind == ScheduleKind::Interleaved ? 2 * p : p;
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
            std::string lab(kind);  // (not kind + string: GCC 12 warns falsely, -Wrestrict)
            lab += std::to_string(sp.micro);
            if (chunks) lab += '.' + std::to_string(sp.chunk);
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
    const double bubble = bubble_fraction(sim);
    const char* formula = bubble_theory_formula(s.kind);
    std::snprintf(buf, sizeof(buf), "idle per stage %.1f units of %.0f: bubble %.3f of the step (theory %s = %.3f)\n",
                  bubble * sim.makespan, sim.makespan, bubble, formula,
                  bubble_fraction_theory(s.kind, s.stages, s.micro, s.virtual_stages));
    out += buf;
    return out;
}

}  // namespace shardlm::schedule
