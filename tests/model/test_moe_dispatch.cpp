// The tokens' way to their experts and back (model/moe_dispatch.h), on its own: ep ranks as threads of
// one process (every rank's all-to-all meets in memory). Each rank's tokens choose experts at random, some
// choices dropped; the dispatched rows must be each expert's tokens in order, the expert side must hold
// every rank's rows for its experts (expert by expert, rank by rank), an identity expert's rows must come
// back to their senders bit for bit, and the combination must add each token's kept choices in order.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "shardlm/core/aligned_buffer.h"
#include "shardlm/core/dtype.h"
#include "shardlm/model/moe_dispatch.h"
#include "../thread_meeting.h"

namespace {

using namespace shardlm;
using shardlm::model::MoeActs;
using shardlm::model::MoeDims;
using shardlm::model::MoeScratch;

// model::ExpertParallel over a Meeting: each rank publishes its send blocks; each reads its block of every rank's.
class ThreadEp final : public model::ExpertParallel {
public:
    struct Post {
        const char* in;
        const size_t *send, *send_off;
    };
    ThreadEp(test::Meeting& m, std::vector<Post>& posts, int rank) : m_(m), posts_(posts), rank_(rank) {}
    int size() const override { return m_.size; }
    int rank() const override { return rank_; }
    void all_gather_bytes(const void* in, void* out, size_t bytes) override { m_.all_gather_bytes(rank_, in, out, bytes); }
    void all_to_all_bytes(const void* in, const size_t* send, const size_t* send_off, void* out, const size_t* recv,
                          const size_t* recv_off) override {
        posts_[size_t(rank_)] = {static_cast<const char*>(in), send, send_off};
        m_.publish(rank_, nullptr);
        for (int q = 0; q < size(); q++) {
            const Post& p = posts_[size_t(q)];
            EXPECT_EQ(p.send[rank_], recv[q]) << "rank " << q << " sends another count than rank " << rank_ << " expects";
            std::memcpy(static_cast<char*>(out) + recv_off[q], p.in + p.send_off[rank_], recv[q]);
        }
        m_.bar.arrive_and_wait();  // every rank has read every block
    }

private:
    test::Meeting& m_;
    std::vector<Post>& posts_;
    int rank_;
};

constexpr int kE = 8, kK = 2, kN = 13, kC = 5;

// Rank r's choices (distinct experts per token, about one in five dropped: slot -1) and gates.
void choose(int rank, MoeActs& a) {
    std::mt19937 rng(unsigned(100 + rank));
    for (int i = 0; i < kN; i++) {
        std::vector<int> experts{0, 1, 2, 3, 4, 5, 6, 7};
        std::shuffle(experts.begin(), experts.end(), rng);
        for (int k = 0; k < kK; k++) {
            const size_t j = size_t(i) * kK + k;
            a.choice[j] = experts[size_t(k)];
            a.slot[j] = rng() % 5 == 0 ? -1 : 0;
            a.gate[j] = a.slot[j] < 0 ? 0.0f : 0.25f + 0.5f * float(k);
        }
    }
}

// x[i][c]: a value that names its rank, token and column, exact in bf16 (6 significant bits, times 2^c)
float value(int rank, int i, int c) { return std::ldexp(float(rank * 16 + i + 1), c); }

// The rows the expert side must hold: for each local expert, every rank's tokens that chose it and were kept.
std::vector<std::pair<int, int>> expected_rows(int ep, int me) {
    const int El = kE / ep;
    std::vector<std::vector<std::pair<int, int>>> by_expert(static_cast<size_t>(El));
    for (int q = 0; q < ep; q++) {
        MoeActs a;
        a.choice.resize(kN * kK), a.slot.resize(kN * kK), a.gate.resize(kN * kK);
        choose(q, a);
        for (int e = 0; e < El; e++)
            for (int i = 0; i < kN; i++)
                for (int k = 0; k < kK; k++) {
                    const size_t j = size_t(i) * kK + k;
                    if (a.slot[j] >= 0 && a.choice[j] == me * El + e) by_expert[size_t(e)].push_back({q, i});
                }
    }
    std::vector<std::pair<int, int>> rows;
    for (auto& v : by_expert) rows.insert(rows.end(), v.begin(), v.end());
    return rows;
}

void round_trip(int ep, DType act) {
    model::GptConfig c;
    c.n_layer = 1, c.n_head = 1, c.n_embd = kC, c.moe.n_experts = kE, c.moe.top_k = kK, c.moe.ffn = 4;
    test::Meeting meeting(ep);
    std::vector<ThreadEp::Post> posts(static_cast<size_t>(ep));
    test::run_ranks(ep, [&](int rank) {
        ThreadEp group(meeting, posts, rank);
        const MoeDims d = model::moe_dims(c, 1, ep);
        MoeActs a;
        MoeScratch s;
        a.allocate(c, 1, kN, 1, act, ep);
        s.allocate(c, 1, kN, 1, ep);
        choose(rank, a);
        std::vector<float> x32(size_t(kN) * kC);
        for (int i = 0; i < kN; i++)
            for (int c2 = 0; c2 < kC; c2++) x32[size_t(i) * kC + c2] = value(rank, i, c2);
        TypedBuffer x;
        x.resize(x32.size(), dtype_bytes(act));
        convert_from_f32(x.data(), act, x32.data(), x32.size());
        const size_t row = size_t(kC) * dtype_bytes(act), f32_row = size_t(kC) * sizeof(float);

        model::dispatch_rows(d, a, s, x.data(), row, kN);
        // the dispatched rows: expert by expert, each expert's kept tokens in order
        std::vector<float> xe(size_t(kN) * kK * kC);
        convert_to_f32(xe.data(), a.xe.data(), act, xe.size());
        int r = 0;
        for (int e = 0; e < kE; e++) {
            ASSERT_EQ(a.offsets[size_t(e)], r) << "expert " << e;
            for (int i = 0; i < kN; i++)
                for (int k = 0; k < kK; k++) {
                    const size_t j = size_t(i) * kK + k;
                    if (a.slot[j] < 0 || a.choice[j] != e) continue;
                    ASSERT_EQ(a.slot[j], r) << "token " << i << " choice " << k;
                    for (int c2 = 0; c2 < kC; c2++) ASSERT_EQ(xe[size_t(r) * kC + c2], value(rank, i, c2));
                    r++;
                }
        }

        // the expert side, and an identity expert's rows (widened to fp32) back to their senders
        std::vector<float> y(size_t(kN) * kK * kC * size_t(ep), -1.0f);
        float* ye = a.ye.data();
        if (ep > 1) {
            model::plan_exchange(group, d, a, s);
            model::send_to_experts(group, d, a, s, a.xe.data(), a.xl.data(), row);
            const std::vector<std::pair<int, int>> want = expected_rows(ep, rank);
            ASSERT_EQ(a.received, int(want.size()));
            convert_to_f32(y.data(), a.xl.data(), act, size_t(a.received) * kC);
            for (size_t q = 0; q < want.size(); q++)
                for (int c2 = 0; c2 < kC; c2++)
                    ASSERT_EQ(y[q * kC + size_t(c2)], value(want[q].first, want[q].second, c2)) << "expert-side row " << q;
            std::memcpy(a.yl.data(), y.data(), size_t(a.received) * f32_row);
            model::return_from_experts(group, d, a, s, a.yl.data(), ye, f32_row);
            EXPECT_EQ(s.count_gathers, 1u);
        } else {
            convert_to_f32(ye, a.xe.data(), act, size_t(a.offsets[size_t(kE)]) * kC);
        }
        for (int q = 0; q < a.offsets[size_t(kE)] * kC; q++) ASSERT_EQ(ye[q], xe[size_t(q)]) << "row element " << q;

        // the combination: each token's kept choices, gate-weighted, in the order of its choices
        std::vector<float> out(size_t(kN) * kC, 1.0f), in_order(out);
        model::combine_rows(a, ye, a.gate.data(), out.data(), kN, kK, kC);
        for (int i = 0; i < kN; i++)
            for (int k = 0; k < kK; k++)
                if (a.slot[size_t(i) * kK + k] >= 0)
                    for (int c2 = 0; c2 < kC; c2++)
                        in_order[size_t(i) * kC + c2] += a.gate[size_t(i) * kK + k] * value(rank, i, c2);
        EXPECT_EQ(out, in_order);
    });
}

TEST(MoeDispatch, RowsReachTheirExpertsAndComeBackUnchanged) {
    for (int ep : {1, 2, 4})
        for (DType act : {DType::F32, DType::BF16}) {
            SCOPED_TRACE("ep " + std::to_string(ep) + ", " + std::string(dtype_name(act)) + " rows");
            round_trip(ep, act);
        }
}

}  // namespace
