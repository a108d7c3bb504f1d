// The ZeRO strategies in one process: two data-parallel ranks are two threads whose collectives meet
// in memory (comm::Collectives over tests/thread_meeting.h), each running the same ModelPart on its own
// rows through GradSync (parameter store + strategy), two steps of two micro-batches with AdamW.
// Against one rank running all the rows: the reduced gradients, the updated parameters and the next
// step's losses agree to fp32 rounding (the sums run in another order); stages 0 and 1 agree to the
// bit (both reduce the step's accumulated gradient once), and so do stages 2 and 3 (both reduce each
// micro-batch's); both ranks hold the same parameters after every step. No MPI.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "shardlm/comm/collectives.h"
#include "shardlm/comm/group.h"
#include "shardlm/core/aligned_buffer.h"
#include "shardlm/model/part.h"
#include "shardlm/model/weights.h"
#include "shardlm/optim/optimizer.h"
#include "shardlm/parallel/grad_sync.h"
#include "../thread_meeting.h"

namespace {

using namespace shardlm;

// The data-parallel collectives (comm::Collectives) of one thread-rank. Every call completes before
// it returns (a default Request is complete).
class ThreadCollectives final : public comm::Collectives {
public:
    ThreadCollectives(test::Meeting& m, int rank) : m_(m), rank_(rank) {}
    int rank() const override { return rank_; }
    int size() const override { return m_.size; }
    comm::Request iall_reduce_sum(void* data, size_t n, DType t) override {
        const std::vector<float> s = m_.sum(data, 0, n, t, rank_);
        convert_from_f32(data, t, s.data(), n);
        return {};
    }
    comm::Request ireduce_scatter_sum(const void* in, void* out, size_t n, DType t) override {
        const std::vector<float> s = m_.sum(in, size_t(rank_) * n, n, t, rank_);
        convert_from_f32(out, t, s.data(), n);  // (out may be this rank's block of in: read already)
        return {};
    }
    comm::Request iall_gather_bytes(const void* in, void* out, size_t bytes) override {
        m_.all_gather_bytes(rank_, in, out, bytes);
        return {};
    }

private:
    test::Meeting& m_;
    int rank_;
};

model::GptConfig tiny() {
    return {.name = "zero-test", .n_layer = 2, .n_head = 4, .n_embd = 48, .vocab_size = 211, .n_ctx = 32};
}

constexpr int kB = 2, kT = 8, kMicro = 2, kSteps = 2, kDp = 2;

// Rows of global batch `step`: micro-batch m of rank r (of `dp`) is rank-major row block r * micro + m,
// so one rank with dp * micro micro-batches runs the same rows.
std::vector<int> tokens(int step, int block) {
    std::vector<int> t(size_t(kB * kT) + 1);
    for (size_t i = 0; i < t.size(); i++) t[i] = int((i * 31 + size_t(block) * 17 + size_t(step) * 5 + i * i) % 211);
    return t;
}

struct RankRun {
    std::vector<double> losses;  // per step: this rank's loss sum over its micro-batches
    std::vector<std::vector<float>> grads;  // per step: the reduced gradient where this rank owns it, else 0
    std::vector<std::vector<bool>> owns;
    std::vector<float> params;  // after the last step (gather_params: the whole fp32 part)
};

void run_rank(RankRun& out, comm::Collectives& dp, int zero, const char* precision, int micro) {
    model::ModelPart::Options o;
    ASSERT_TRUE(precision_policy_from_name(precision, &o.precision));
    o.unit_multiple = kDp;  // the same layout (padding) for every run compared
    model::ModelPart part(tiny(), o, kB, kT);
    const model::Layout& L = part.layout();
    parallel::GradSync::Options so;
    so.zero = zero_stage(zero);
    so.bucket_mb = 0.01;
    so.single_stage = true;
    parallel::GradSync data(dp, part, std::move(so));
    parallel::ParamStore& store = data.store();
    for (auto& [range, storage] : store.param_storage()) model::init_gpt2_weights(storage, L, range, 5);
    data.params_loaded();
    optim::OptimConfig oc;
    oc.kind = optim::Kind::AdamW;
    oc.weight_decay = 0.1f;
    optim::Optimizer opt(oc, L, store.owned_ranges());
    parallel::StepHooks& hooks = data.hooks();
    const float dloss = 1.0f / float(kDp * kMicro * kB * kT);  // the mean over the global batch
    for (int step = 0; step < kSteps; step++) {
        double loss = 0;
        for (int m = 0; m < micro; m++) {
            const std::vector<int> t = tokens(step, dp.rank() * micro + m);
            hooks.begin_pass(0, true, m, micro);
            loss += part.forward(0, 0, t.data(), t.data() + 1, kB, kT, dloss, &hooks);
            hooks.end_pass(0, true);
            hooks.begin_pass(0, false, m, micro);
            part.backward(0, 0, &hooks, hooks.backward_accumulates(m));
            hooks.end_pass(0, false);
        }
        data.finish_reductions();
        out.losses.push_back(loss);
        std::vector<float> g(L.total, 0.0f);
        std::vector<bool> owns(L.total, false);
        const std::vector<optim::Range> ranges = store.owned_ranges();
        const std::vector<const float*> grads = store.owned_grads();
        for (size_t i = 0; i < ranges.size(); i++)
            for (size_t j = 0; j < ranges[i].size(); j++) g[ranges[i].begin + j] = grads[i][j], owns[ranges[i].begin + j] = true;
        out.grads.push_back(std::move(g));
        out.owns.push_back(std::move(owns));
        data.step(opt, 1e-3f, 1.0f, step);
    }
    out.params.resize(L.total);
    data.gather_params(out.params.data());
}

std::vector<RankRun> run_dp(int zero, const char* precision) {
    test::Meeting meeting(kDp);
    std::vector<std::unique_ptr<ThreadCollectives>> groups;
    for (int r = 0; r < kDp; r++) groups.push_back(std::make_unique<ThreadCollectives>(meeting, r));
    std::vector<RankRun> runs(kDp);
    test::run_ranks(kDp, [&](int r) { run_rank(runs[size_t(r)], *groups[size_t(r)], zero, precision, kMicro); });
    return runs;
}

RankRun run_one(const char* precision) {
    test::Meeting meeting(1);
    ThreadCollectives self(meeting, 0);
    RankRun one;
    test::run_ranks(1, [&](int) { run_rank(one, self, 0, precision, kDp * kMicro); });
    return one;
}

// a and b agree to tol of the largest |value| of a (elements where `mask` is set, or all)
void expect_close(const std::vector<float>& a, const std::vector<float>& b, float tol, const std::string& what,
                  const std::vector<bool>* mask = nullptr) {
    ASSERT_EQ(a.size(), b.size()) << what;
    float scale = 0, worst = 0;
    for (size_t i = 0; i < a.size(); i++) scale = std::max(scale, std::fabs(a[i]));
    for (size_t i = 0; i < a.size(); i++)
        if (!mask || (*mask)[i]) worst = std::max(worst, std::fabs(a[i] - b[i]));
    EXPECT_LE(worst, tol * scale) << what << " (largest " << scale << ")";
}

void expect_bits(const std::vector<float>& a, const std::vector<float>& b, const std::string& what) {
    ASSERT_EQ(a.size(), b.size()) << what;
    EXPECT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * sizeof(float))) << what;
}

class InProcessZero : public testing::TestWithParam<const char*> {};

TEST_P(InProcessZero, TwoRanksMatchOneRankAndStagesAgree) {
    const char* precision = GetParam();
    const bool mixed = std::string(precision) != "fp32";
    const RankRun one = run_one(precision);
    std::vector<std::vector<RankRun>> stages;
    for (int zero = 0; zero <= 3; zero++) stages.push_back(run_dp(zero, precision));
    for (int zero = 0; zero <= 3; zero++) {
        const std::vector<RankRun>& runs = stages[size_t(zero)];
        const std::string z = "ZeRO-" + std::to_string(zero) + " ";
        for (int step = 0; step < kSteps; step++) {
            const std::string s = z + "step " + std::to_string(step) + " ";
            // the loss: both ranks' sums together are the one rank's (the first step's are the same rows
            // through the same weights; the second's went through the updated weights)
            const double both = runs[0].losses[size_t(step)] + runs[1].losses[size_t(step)];
            EXPECT_NEAR(both, one.losses[size_t(step)], (step == 0 ? 1e-5 : mixed ? 1e-2 : 1e-4) * one.losses[size_t(step)])
                << s << "loss";
            // the reduced gradient, wherever a rank owns it (the first step: the same weights)
            if (step == 0 || !mixed)
                for (int r = 0; r < kDp; r++)
                    expect_close(one.grads[size_t(step)], runs[size_t(r)].grads[size_t(step)], step == 0 ? 1e-5f : 1e-3f,
                                 s + "gradient, rank " + std::to_string(r), &runs[size_t(r)].owns[size_t(step)]);
        }
        expect_bits(runs[0].params, runs[1].params, z + "parameters: rank 0 vs rank 1");
        expect_close(one.params, runs[0].params, mixed ? 1e-2f : 1e-4f, z + "parameters after two steps");
    }
    // the same sums in the same order: stage 0 = stage 1, stage 2 = stage 3, to the bit
    for (const auto& [a, b] : {std::pair{0, 1}, std::pair{2, 3}})
        for (int r = 0; r < kDp; r++) {
            const std::string w = "ZeRO-" + std::to_string(a) + " vs ZeRO-" + std::to_string(b) + ", rank " + std::to_string(r);
            EXPECT_EQ(stages[size_t(a)][size_t(r)].losses, stages[size_t(b)][size_t(r)].losses) << w;
            expect_bits(stages[size_t(a)][size_t(r)].params, stages[size_t(b)][size_t(r)].params, w + " parameters");
        }
}

INSTANTIATE_TEST_SUITE_P(Precisions, InProcessZero, testing::Values("fp32", "bf16"),
                         [](const testing::TestParamInfo<const char*>& i) { return std::string(i.param); });

}  // namespace
