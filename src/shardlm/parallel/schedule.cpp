#include "shardlm/parallel/schedule.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <tuple>

#include "shardlm/core/check.h"

namespace shardlm::parallel {

ScheduleKind parse_schedule(const std::string& name) {
    if (name == "gpipe") return ScheduleKind::GPipe;
    if (name == "1f1b") return ScheduleKind::OneFOneB;
    if (name == "interleaved") return ScheduleKind::Interleaved;
    fail("unknown pipeline schedule '", name, "'\n---> HINT: use gpipe, 1f1b or interleaved");
}

const char* schedule_name(ScheduleKind k) {
    switch (k) {
    case ScheduleKind::GPipe: return "gpipe";
    case ScheduleKind::OneFOneB: return "1f1b";
    case ScheduleKind::Interleaved: return "interleaved";
    }
    return "?";
}

const char* op_name(Op op) {
    switch (op) {
    case Op::RecvAct: return "recv_act";
    case Op::Forward: return "forward";
    case Op::SendAct: return "send_act";
    case Op::RecvGrad: return "recv_grad";
    case Op::Backward: return "backward";
    case Op::SendGrad: return "send_grad";
    case Op::ReduceGrads: return "reduce_grads";
    case Op::OptimizerStep: return "optimizer_step";
    }
    return "?";
}

double bubble_fraction_theory(int p, int m, int v) { return double(p - 1) / (double(v) * m + p - 1); }

namespace {

struct Compute {
    bool forward;
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
    auto F = [&](int k) { out.push_back({true, virtual_micro(k, p, v), virtual_chunk(k, p, v, true)}); };
    auto B = [&](int k) { out.push_back({false, virtual_micro(k, p, v), virtual_chunk(k, p, v, false)}); };
    if (forward_only) {  // each micro-batch through the chunks in order: any m, no backward to interleave
        for (int i = 0; i < m; i++)
            for (int c = 0; c < v; c++) out.push_back({true, i, c});
        return out;
    }
    int warmup;
    switch (kind) {
    case ScheduleKind::GPipe: warmup = total; break;
    case ScheduleKind::OneFOneB: warmup = std::min(p - s - 1, m); break;
    case ScheduleKind::Interleaved:
        warmup = m == p ? total : std::min(total, (p - s - 1) * 2 + (v - 1) * p);
        break;
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

Schedule build(ScheduleKind kind, int p, int m, int v, bool forward_only) {
    SHARDLM_CHECK(p >= 1, "pipeline stages must be >= 1 (got ", p, ")");
    SHARDLM_CHECK(m >= 1, "micro-batches must be >= 1 (got ", m, ")");
    SHARDLM_CHECK(v >= 1, "--virtual-stages must be >= 1 (got ", v, ")");
    if (kind == ScheduleKind::Interleaved && !forward_only) {
        SHARDLM_CHECK(p >= 2, "the interleaved schedule needs --pp >= 2 (got ", p, ")");
        SHARDLM_CHECK(m % p == 0, "the interleaved schedule needs the micro-batches per step (", m,
                      ") to be a multiple of --pp (", p, ")\n---> HINT: change --global-batch or --micro-batch, or use 1f1b");
    } else if (kind != ScheduleKind::Interleaved) {
        SHARDLM_CHECK(v == 1, "--virtual-stages ", v, " needs --schedule interleaved");
    }
    Schedule s;
    s.kind = kind;
    s.stages = p;
    s.micro = m;
    s.virtual_stages = v;
    s.forward_only = forward_only;
    s.ranks.resize(size_t(p));
    const int last_chunk = p * v - 1;
    for (int r = 0; r < p; r++) {
        std::vector<Action>& a = s.ranks[size_t(r)];
        for (const Compute& c : compute_order(kind, p, m, v, r, forward_only)) {
            const int mc = s.model_chunk(r, c.chunk);
            const int prev = (r - 1 + p) % p, next = (r + 1) % p;
            if (c.forward) {
                if (mc > 0) a.push_back({Op::RecvAct, c.micro, c.chunk, prev});
                a.push_back({Op::Forward, c.micro, c.chunk, -1});
                if (mc < last_chunk) a.push_back({Op::SendAct, c.micro, c.chunk, next});
            } else {
                if (mc < last_chunk) a.push_back({Op::RecvGrad, c.micro, c.chunk, next});
                a.push_back({Op::Backward, c.micro, c.chunk, -1});
                if (mc > 0) a.push_back({Op::SendGrad, c.micro, c.chunk, prev});
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

Schedule make_schedule(ScheduleKind kind, int p, int m, int v) { return build(kind, p, m, v, false); }

Schedule make_forward_schedule(int p, int m, int v) {
    return build(v > 1 ? ScheduleKind::Interleaved : ScheduleKind::GPipe, p, m, v, true);
}

std::vector<int> Schedule::slots(int rank) const {
    std::vector<int> live(size_t(virtual_stages), 0), most(size_t(virtual_stages), 1);
    for (const Action& a : ranks[size_t(rank)]) {
        if (a.op == Op::Forward) {
            int& n = live[size_t(a.chunk)];
            n++;
            most[size_t(a.chunk)] = std::max(most[size_t(a.chunk)], n);
            if (forward_only) n = 0;  // nothing is kept for a backward
        } else if (a.op == Op::Backward) {
            live[size_t(a.chunk)]--;
        }
    }
    return most;
}

SimResult simulate(const Schedule& s, double t_f, double t_b) {
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
                } else if (a.op == Op::Forward || a.op == Op::Backward) {
                    const double d = a.op == Op::Forward ? t_f : t_b;
                    res.spans[size_t(r)].push_back({a.op, a.micro, a.chunk, t, t + d});
                    t += d;
                    res.busy[size_t(r)] += d;
                    live[size_t(r)] += a.op == Op::Forward ? 1 : -1;
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
    std::snprintf(buf, sizeof(buf), "%s schedule: %d stages, %d micro-batches%s (forward 1 unit, backward 2)\n",
                  schedule_name(s.kind), s.stages, s.micro,
                  chunks ? (", " + std::to_string(s.virtual_stages) + " virtual stages").c_str() : "");
    out += buf;
    for (int r = 0; r < s.stages; r++) {
        std::vector<std::string> cell(size_t(cols), ".");
        for (const auto& sp : sim.spans[size_t(r)]) {
            std::string lab = std::string(sp.op == Op::Forward ? "F" : "B") + std::to_string(sp.micro);
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
    std::snprintf(buf, sizeof(buf),
                  "idle per stage %.1f units of %.0f: bubble %.3f of the step (theory (p-1)/(v m + p-1) = %.3f)\n",
                  idle, sim.makespan, idle / sim.makespan,
                  bubble_fraction_theory(s.stages, s.micro, s.virtual_stages));
    out += buf;
    return out;
}

}  // namespace shardlm::parallel
