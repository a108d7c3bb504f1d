// Pipeline schedules as data: simulated with forward 1 and backward 2 units per chunk (B 1 and W 1
// when split), free communication, non-blocking sends and blocking receives, every schedule runs to
// the end with every send received (no deadlock is possible); GPipe and 1F1B leave (p - 1) idle
// slots (of forward + backward) per stage, interleaved (p - 1) / v, ZB-H1 a third of 1F1B's, ZBV
// the p - 1 chunk forwards of its warm-up; GPipe holds all m micro-batches, 1F1B at most p - stage,
// ZB-H1 p, ZBV 2p chunks (1F1B's peak); a chunk's W run in micro-batch order (1F1B's sums); the
// activation slots (micro-batch i in slot i % slots, busy until its W) never collide.
#include <gtest/gtest.h>

#include <map>
#include <set>
#include <string>

#include "shardlm/core/check.h"
#include "shardlm/schedule/schedule.h"

namespace {

using namespace shardlm::schedule;

// Every Forward/Backward is preceded by the receive it needs and followed by its send; each send
// matches a receive of the peer with the same micro-batch and the neighbouring model chunk.
void expect_well_formed(const Schedule& s) {
    std::multiset<std::tuple<int, int, bool, int, int>> sends, recvs;  // (src, dst, grad, micro, model chunk)
    for (int r = 0; r < s.stages; r++) {
        std::map<std::pair<int, int>, int> fwd, bwd, bin, wgt;  // (micro, chunk) -> count
        std::vector<int> last_w(size_t(s.virtual_stages), -1);
        for (const Action& a : s.ranks[size_t(r)]) {
            const int mc = s.model_chunk(r, a.chunk);
            switch (a.op) {
            case Op::SendAct: sends.insert({r, a.peer, false, a.micro, mc + 1}); break;
            case Op::SendGrad: sends.insert({r, a.peer, true, a.micro, mc - 1}); break;
            case Op::RecvAct: recvs.insert({a.peer, r, false, a.micro, mc}); break;
            case Op::RecvGrad: recvs.insert({a.peer, r, true, a.micro, mc}); break;
            case Op::Forward: fwd[{a.micro, a.chunk}]++; break;
            case Op::Backward:
                EXPECT_EQ((fwd[{a.micro, a.chunk}]), 1) << "backward before forward";
                bwd[{a.micro, a.chunk}]++;
                break;
            case Op::BackwardInput:
                EXPECT_EQ((fwd[{a.micro, a.chunk}]), 1) << "B before forward";
                bin[{a.micro, a.chunk}]++;
                break;
            case Op::BackwardWeight:
                EXPECT_EQ((bin[{a.micro, a.chunk}]), 1) << "W before B";
                wgt[{a.micro, a.chunk}]++;
                // W in micro-batch order: the gradient sums keep 1F1B's order
                EXPECT_EQ(a.micro, last_w[size_t(a.chunk)] + 1) << "rank " << r << " chunk " << a.chunk;
                last_w[size_t(a.chunk)] = a.micro;
                break;
            default: break;
            }
            if (a.op == Op::SendAct || a.op == Op::RecvAct) {
                EXPECT_EQ(a.peer, s.rank_of(a.op == Op::SendAct ? mc + 1 : mc - 1));
            }
            if (a.op == Op::SendGrad || a.op == Op::RecvGrad) {
                EXPECT_EQ(a.peer, s.rank_of(a.op == Op::SendGrad ? mc - 1 : mc + 1));
            }
        }
        const bool split = s.splits_backward(r);
        for (int m = 0; m < s.micro; m++)
            for (int c = 0; c < s.virtual_stages; c++) {
                SCOPED_TRACE("rank " + std::to_string(r) + " micro " + std::to_string(m) + " chunk " + std::to_string(c));
                EXPECT_EQ((fwd[{m, c}]), 1);
                const int backward = s.forward_only ? 0 : 1;
                EXPECT_EQ((bwd[{m, c}]), split ? 0 : backward);
                EXPECT_EQ((bin[{m, c}]), split ? backward : 0);
                EXPECT_EQ((wgt[{m, c}]), split ? backward : 0);
            }
    }
    EXPECT_EQ(sends, recvs) << "every send has its receive";
}

// Micro-batches whose activations a chunk holds at once use distinct slots (i % slots).
void expect_slots_never_collide(const Schedule& s) {
    for (int r = 0; r < s.stages; r++) {
        const std::vector<int> slots = s.slots(r);
        std::vector<std::set<int>> used(size_t(s.virtual_stages));
        for (const Action& a : s.ranks[size_t(r)]) {
            if (a.op == Op::Forward) {
                const int slot = a.micro % slots[size_t(a.chunk)];
                EXPECT_TRUE(used[size_t(a.chunk)].insert(slot).second)
                    << "rank " << r << " chunk " << a.chunk << " slot " << slot << " taken (micro " << a.micro << ")";
                if (s.forward_only) used[size_t(a.chunk)].clear();
            } else if (a.op == Op::Backward || a.op == Op::BackwardWeight) {  // free once W has run
                used[size_t(a.chunk)].erase(a.micro % slots[size_t(a.chunk)]);
            }
        }
    }
}

TEST(Schedule, GPipeAnd1F1BLeaveP1IdleSlotsPerStage) {
    for (auto kind : {ScheduleKind::GPipe, ScheduleKind::OneFOneB})
        for (int p = 1; p <= 5; p++)
            for (int m = 1; m <= 9; m++) {
                const Schedule s = make_schedule(kind, p, m);
                SCOPED_TRACE(std::string(schedule_name(kind)) + " p=" + std::to_string(p) + " m=" + std::to_string(m));
                expect_well_formed(s);
                expect_slots_never_collide(s);
                const SimResult r = simulate(s, 1.0, 2.0);
                ASSERT_TRUE(r.ok) << r.error;
                EXPECT_DOUBLE_EQ(r.makespan, 3.0 * (m + p - 1));
                for (int st = 0; st < p; st++) {
                    EXPECT_DOUBLE_EQ(r.busy[size_t(st)], 3.0 * m);
                    EXPECT_DOUBLE_EQ(r.idle[size_t(st)], 3.0 * (p - 1)) << "stage " << st;
                    // GPipe holds every micro-batch; 1F1B at most p - stage
                    const int want = kind == ScheduleKind::GPipe ? m : std::min(p - st, m);
                    EXPECT_EQ(r.max_in_flight[size_t(st)], want) << "stage " << st;
                    EXPECT_EQ(s.slots(st)[0], want) << "stage " << st;
                }
            }
}

TEST(Schedule, InterleavedBubbleIsP1OverVM) {
    for (int p = 2; p <= 4; p++)
        for (int v = 2; v <= 3; v++)
            for (int m = p; m <= 4 * p; m += p) {
                const Schedule s = make_schedule(ScheduleKind::Interleaved, p, m, v);
                SCOPED_TRACE("p=" + std::to_string(p) + " v=" + std::to_string(v) + " m=" + std::to_string(m));
                expect_well_formed(s);
                expect_slots_never_collide(s);
                // forward and backward of one chunk: 1/v of a stage's forward 1 and backward 2
                const double tf = 1.0 / v, tb = 2.0 / v;
                const SimResult r = simulate(s, tf, tb);
                ASSERT_TRUE(r.ok) << r.error;
                const double ideal = m * (tf + tb) * v;  // a stage's compute for the step
                for (int st = 0; st < p; st++) {
                    EXPECT_NEAR(r.busy[size_t(st)], ideal, 1e-9);
                    // bubble (p - 1) / (v m) of the ideal time
                    EXPECT_NEAR(r.idle[size_t(st)] / ideal, double(p - 1) / (double(v) * m), 1e-9) << "stage " << st;
                }
                EXPECT_NEAR(r.idle[0] / r.makespan, bubble_fraction_theory(p, m, v), 1e-9);
            }
}

TEST(Schedule, ForwardOnlyRunsAnyMicroBatchCount) {
    for (int p = 1; p <= 4; p++)
        for (int v = 1; v <= 3; v++)
            for (int m = 1; m <= 7; m++) {
                if (v > 1 && p == 1) continue;
                const Schedule s = make_forward_schedule(p, m, v);
                SCOPED_TRACE("p=" + std::to_string(p) + " v=" + std::to_string(v) + " m=" + std::to_string(m));
                expect_well_formed(s);
                expect_slots_never_collide(s);
                const SimResult r = simulate(s);
                ASSERT_TRUE(r.ok) << r.error;
            }
}

TEST(Schedule, AStageThatWaitsForItselfDeadlocks) {
    // the simulator does find deadlocks: receive before the send that feeds it
    Schedule s = make_schedule(ScheduleKind::OneFOneB, 2, 2);
    std::swap(s.ranks[1][0], s.ranks[1][2]);  // stage 1: its first action is no longer a receive
    std::vector<Action>& r0 = s.ranks[0];
    r0.insert(r0.begin(), Action{Op::RecvGrad, 0, 0, 1});  // stage 0 waits for a gradient first
    const SimResult r = simulate(s);
    EXPECT_FALSE(r.ok);
    EXPECT_NE(r.error.find("deadlock"), std::string::npos) << r.error;
}

TEST(Schedule, ChartShowsTheSeedsFigure) {
    const std::string c = render_chart(make_schedule(ScheduleKind::OneFOneB, 4, 8));
    EXPECT_NE(c.find("stage 3 |.   .   .   F0  B0  B0  F1"), std::string::npos) << c;  // starts after p - 1 forwards, then 1F1B
    EXPECT_NE(c.find("stage 0 |F0  F1  F2  F3  "), std::string::npos) << c;  // warm-up: p - 1 forwards, then 1F1B
    EXPECT_NE(c.find("B0  B0"), std::string::npos) << c;
    EXPECT_NE(c.find("bubble 0.273"), std::string::npos) << c;  // 3 / (8 + 3)
    const std::string i = render_chart(make_schedule(ScheduleKind::Interleaved, 2, 4, 2));
    EXPECT_NE(i.find("F0.1"), std::string::npos) << i;
}

TEST(Schedule, InvalidCombinationsAreClearErrors) {
    auto msg = [](auto f) {
        try {
            f();
        } catch (const shardlm::Error& e) {
            return std::string(e.what());
        }
        return std::string();
    };
    EXPECT_NE(msg([] { make_schedule(ScheduleKind::Interleaved, 4, 6, 2); }).find("multiple of --pp"), std::string::npos);
    EXPECT_NE(msg([] { make_schedule(ScheduleKind::OneFOneB, 2, 4, 2); }).find("--schedule interleaved"), std::string::npos);
    EXPECT_NE(msg([] { parse_schedule("zigzag"); }).find("gpipe, 1f1b, interleaved, zb-h1 or zbv"), std::string::npos);
    EXPECT_NE(msg([] { make_schedule(ScheduleKind::ZeroBubbleV, 1, 4); }).find("--pp >= 2"), std::string::npos);
    EXPECT_NE(msg([] { make_schedule(ScheduleKind::ZeroBubbleV, 2, 4, 3); }).find("must be 2"), std::string::npos);
    EXPECT_NE(msg([] { make_schedule(ScheduleKind::ZeroBubbleH1, 2, 4, 2); }).find("--schedule interleaved"),
              std::string::npos);
}

// ZB-H1 (Qi et al. 2023): 1F1B's order with the W of stage s's first s micro-batches moved into its
// cool-down. With F = B = W the idle time per stage is (p - 1) units, a third of 1F1B's 3 (p - 1),
// every stage holds at most p micro-batches (1F1B's first stage), and the first stage defers none.
TEST(Schedule, ZeroBubbleH1LeavesAThirdOf1F1BsBubble) {
    for (int p = 1; p <= 6; p++)
        for (int m = 1; m <= 13; m++) {
            const Schedule s = make_schedule(ScheduleKind::ZeroBubbleH1, p, m);
            SCOPED_TRACE("p=" + std::to_string(p) + " m=" + std::to_string(m));
            EXPECT_EQ(s.splits_backward(), p > 1);
            expect_well_formed(s);
            expect_slots_never_collide(s);
            const SimResult r = simulate(s, 1.0, 2.0);
            ASSERT_TRUE(r.ok) << r.error;
            const SimResult one = simulate(make_schedule(ScheduleKind::OneFOneB, p, m), 1.0, 2.0);
            for (int st = 0; st < p; st++) {
                EXPECT_DOUBLE_EQ(r.busy[size_t(st)], 3.0 * m);
                EXPECT_LE(r.max_in_flight[size_t(st)], std::min(p, m)) << "stage " << st;
                EXPECT_LE(r.idle[size_t(st)], one.idle[size_t(st)]) << "stage " << st;
                if (m >= p) {
                    EXPECT_DOUBLE_EQ(r.idle[size_t(st)], double(p - 1)) << "stage " << st;
                }
            }
            // every m: below m = p the drain's formula (a pp3 m1 step is 7 units, 4 of them idle)
            EXPECT_NEAR(bubble_fraction(r), bubble_fraction_theory(ScheduleKind::ZeroBubbleH1, p, m), 1e-12);
            // the first stage defers nothing: it runs whole backwards
            EXPECT_FALSE(s.splits_backward(0));
        }
}

// ZBV: two chunks per rank in a V (the first rank holds the embedding's chunk and the head's), the
// shorter of a list scheduler's and the paper's handcrafted order: it reaches the lower bound of p - 1
// idle chunk units per rank (the first forward must cross p - 1 ranks before the last starts) for
// m >= 2p - 1, and for m >= p up to p = 4; for m >= p its bubble is below ZB-H1's; it holds at most 2p
// chunks (1F1B's peak memory) on any rank.
TEST(Schedule, ZeroBubbleVReachesItsWarmUpBound) {
    for (int p = 2; p <= 8; p++)
        for (int m = 1; m <= 3 * p; m++) {
            const Schedule s = make_schedule(ScheduleKind::ZeroBubbleV, p, m);
            SCOPED_TRACE("p=" + std::to_string(p) + " m=" + std::to_string(m));
            ASSERT_EQ(s.virtual_stages, 2);
            EXPECT_EQ(s.model_chunk(0, 0), 0);
            EXPECT_EQ(s.model_chunk(0, 1), 2 * p - 1);
            EXPECT_EQ(s.model_chunk(p - 1, 1), p);
            for (int mc = 0; mc < 2 * p; mc++) EXPECT_EQ(s.model_chunk(s.rank_of(mc), mc < p ? 0 : 1), mc);
            expect_well_formed(s);
            expect_slots_never_collide(s);
            const SimResult r = simulate(s, 0.5, 1.0);  // a chunk is half a stage: F = B = W = 0.5
            ASSERT_TRUE(r.ok) << r.error;
            for (int st = 0; st < p; st++) {
                EXPECT_DOUBLE_EQ(r.busy[size_t(st)], 3.0 * m);
                EXPECT_LE(r.max_in_flight[size_t(st)], 2 * p) << "stage " << st;
                if (m >= 2 * p - 1 || (p <= 4 && m >= p)) {
                    EXPECT_DOUBLE_EQ(r.idle[size_t(st)], 0.5 * (p - 1)) << "stage " << st;
                }
            }
            if (m <= p || m >= 2 * p - 1 || p <= 4) {
                EXPECT_NEAR(bubble_fraction(r), bubble_fraction_theory(ScheduleKind::ZeroBubbleV, p, m), 1e-12);
            }
            if (m >= p) {
                const SimResult h1 = simulate(make_schedule(ScheduleKind::ZeroBubbleH1, p, m), 1.0, 2.0);
                EXPECT_LT(bubble_fraction(r), bubble_fraction(h1));
            }
            // evaluation on the same placement
            const Schedule f = make_forward_schedule(p, m, 2, Placement::V);
            EXPECT_EQ(f.placement, Placement::V);
            expect_well_formed(f);
            const SimResult fr = simulate(f);
            ASSERT_TRUE(fr.ok) << fr.error;
        }
}

TEST(Schedule, ZeroBubbleChartsShowBAndW) {
    const std::string h = render_chart(make_schedule(ScheduleKind::ZeroBubbleH1, 4, 8));
    EXPECT_NE(h.find("stage 3 |.   .   .   F0  B0  F1  B1  F2  B2  F3  B3  W0  F4"), std::string::npos) << h;
    EXPECT_NE(h.find("stage 0 |F0  F1  F2  F3  .   .   .   B0  B0  F4"), std::string::npos) << h;
    EXPECT_NE(h.find("bubble 0.111"), std::string::npos) << h;  // 3 / 27: a third of 1F1B's 9 / 33
    const std::string v = render_chart(make_schedule(ScheduleKind::ZeroBubbleV, 2, 4));
    EXPECT_NE(v.find("W0.1"), std::string::npos) << v;
    EXPECT_NE(v.find("bubble 0.040"), std::string::npos) << v;  // 1 / 25
}

// The planner simulates at most steady_micro_batches() (planner/evaluate.cpp): from there on, the
// slowest rank's idle time no longer depends on m, with equal stages and with a slower first or last
// stage (and one fewer micro-batch than that is not yet steady for ZBV).
TEST(Schedule, IdleTimeIsSteadyFromSteadyMicroBatches) {
    auto slowest_idle = [](const SimResult& r) {
        size_t s = 0;
        for (size_t i = 1; i < r.busy.size(); i++)
            if (r.busy[i] > r.busy[s]) s = i;
        return r.idle[s];
    };
    const std::vector<std::pair<PassTimes, PassTimes>> shapes = {
        {{1.0, 2.0}, {1.0, 2.0}}, {{1.0, 2.0}, {1.4, 2.9}}, {{1.3, 2.5}, {1.0, 2.0}}, {{0.7, 1.6}, {2.1, 3.0}}};
    for (const auto& [kind, v] : {std::pair{ScheduleKind::GPipe, 1}, std::pair{ScheduleKind::OneFOneB, 1},
                                  std::pair{ScheduleKind::Interleaved, 2}, std::pair{ScheduleKind::ZeroBubbleH1, 1},
                                  std::pair{ScheduleKind::ZeroBubbleV, 2}})
        for (int p : {2, 3, 4, 6})
            for (const auto& [first, last] : shapes) {
                std::vector<PassTimes> t(size_t(p), first);
                t.back() = last;
                const int steady = steady_micro_batches(kind, p);
                const double at = slowest_idle(simulate(make_schedule(kind, p, steady, v), t));
                for (int k : {2, 3, 5}) {
                    const SimResult r = simulate(make_schedule(kind, p, steady + (k - 1) * p, v), t);
                    ASSERT_TRUE(r.ok) << r.error;
                    EXPECT_NEAR(slowest_idle(r), at, 1e-9 * r.makespan)
                        << schedule_name(kind) << " p " << p << " m " << steady + (k - 1) * p << " first " << first.f << "/" << first.b
                        << " last " << last.f << "/" << last.b;
                }
            }
}

// The planner's replay of a schedule's order gives the simulation's times to the bit, on any times.
TEST(Schedule, SimPlanReplaysTheSimulation) {
    for (const auto& [kind, v] : {std::pair{ScheduleKind::GPipe, 1}, std::pair{ScheduleKind::OneFOneB, 1},
                                  std::pair{ScheduleKind::Interleaved, 2}, std::pair{ScheduleKind::ZeroBubbleH1, 1},
                                  std::pair{ScheduleKind::ZeroBubbleV, 2}})
        for (int p : {1, 2, 3, 5})
            for (int m : {p, 2 * p + (kind == ScheduleKind::Interleaved ? 0 : 1)}) {
                if (kind == ScheduleKind::Interleaved && p == 1) continue;
                if (kind == ScheduleKind::ZeroBubbleV && p == 1) continue;
                const Schedule s = make_schedule(kind, p, m, v);
                const SimPlan plan(s);
                std::vector<PassTimes> t;
                for (int r = 0; r < p; r++) t.push_back({0.5 + 0.37 * r, 1.1 + 0.21 * ((r * 7) % 5), r % 2 ? 0.4 : -1.0});
                const SimResult a = simulate(s, t), b = plan.run(t);
                ASSERT_TRUE(a.ok) << a.error;
                EXPECT_EQ(a.makespan, b.makespan) << schedule_name(kind) << " p " << p << " m " << m;
                EXPECT_EQ(a.busy, b.busy) << schedule_name(kind) << " p " << p << " m " << m;
                EXPECT_EQ(a.idle, b.idle) << schedule_name(kind) << " p " << p << " m " << m;
            }
}

}  // namespace
