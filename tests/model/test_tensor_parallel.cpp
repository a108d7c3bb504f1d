// Tensor (and sequence) parallelism in one process: two ranks are two threads whose collectives
// meet in memory (a fake model::TensorParallel over tests/thread_meeting.h), each running its ModelPart on its shard of the same
// initial weights. Their losses and every gradient element equal the one-rank part's (to fp32
// rounding: the products are cut differently); the split backward (B of both micro-batches, then
// their W) equals the whole backward to the bit, collectives inside W included. No MPI.
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <barrier>
#include <cmath>
#include <cstring>
#include <exception>
#include <string>
#include <thread>
#include <vector>

#include "shardlm/core/aligned_buffer.h"
#include "shardlm/model/part.h"
#include "shardlm/model/pieces.h"
#include "shardlm/model/weights.h"
#include "thread_tp.h"

namespace {

using namespace shardlm;
using test::ThreadTp;

model::GptConfig tiny() {
    model::GptConfig c;
    c.name = "tp-test";
    c.n_layer = 2;
    c.n_head = 4;
    c.n_embd = 48;
    c.vocab_size = 211;  // padded to 256 rows over 2 ranks: vocabulary padding on the last rank
    c.n_ctx = 32;
    return c;
}

constexpr int kB = 2, kT = 8;

struct RankRun {
    std::vector<double> losses;           // per micro-batch
    AlignedBuffer<float> grads;           // the rank's flat gradient buffer
    std::unique_ptr<model::ModelPart> part;
};

// Two micro-batches (the second accumulates) through one rank's part; split: both forwards, both B,
// then both W.
void run_rank(RankRun& r, model::TensorParallel* tp, bool sp, bool split) {
    omp_set_num_threads(1);
    model::ModelPart::Options o;
    o.tp = tp;
    o.sequence_parallel = sp;
    o.defer_weight_grads = split;
    o.slots = {split ? 2 : 1};
    r.part = std::make_unique<model::ModelPart>(tiny(), o, kB, kT);
    const model::Layout& L = r.part->layout();
    AlignedBuffer<float> params(L.total);
    r.grads.resize(L.total);
    model::init_gpt2_weights(params.data(), L, model::FlatRange{0, L.total}, 11);
    r.part->bind(params.data(), r.grads.data());
    std::vector<std::vector<int>> tokens(2, std::vector<int>(size_t(kB * kT) + 1));
    for (int m = 0; m < 2; m++)
        for (size_t i = 0; i < tokens[size_t(m)].size(); i++) tokens[size_t(m)][i] = int((i * 29 + size_t(m) * 7 + i * i) % 211);
    for (int m = 0; m < 2; m++) {
        const int* in = tokens[size_t(m)].data();
        r.losses.push_back(r.part->forward(0, split ? m : 0, in, in + 1, kB, kT, 1.0f / (kB * kT)));
        if (!split) r.part->backward(0, 0, nullptr, m > 0);
    }
    if (split) {
        r.part->backward_input(0, 0);
        r.part->backward_input(0, 1);
        r.part->backward_weight(0, 0, nullptr, false);
        r.part->backward_weight(0, 1, nullptr, true);
    }
}

// tp ranks as threads; rethrows the first failure.
std::vector<RankRun> run_tp(int tp, bool sp, bool split) {
    test::Meeting meeting(tp);
    std::vector<ThreadTp> groups;
    for (int r = 0; r < tp; r++) groups.emplace_back(meeting, r);
    std::vector<RankRun> runs(static_cast<size_t>(tp));
    test::run_ranks(tp, [&](int r) { run_rank(runs[size_t(r)], &groups[size_t(r)], sp, split); });
    return runs;
}

// Every gradient element a rank holds against the one-rank gradient of the same HF element (to `tol`
// of the tensor's largest); replicated tensors under sequence parallelism hold partial sums: summed
// over the ranks first (what GradSync's pre_reduce does).
void expect_same_grads(const RankRun& one, const std::vector<RankRun>& ranks, bool sp, float tol) {
    const model::Layout& L1 = one.part->layout();
    for (size_t r = 0; r < ranks.size(); r++) {
        const model::Layout& L = ranks[r].part->layout();
        for (const model::Piece& pc : model::pieces_of(L, {model::FlatRange{0, L.total}})) {
            const model::ParamSpec* ref = L1.find(pc.param->name);
            ASSERT_NE(ref, nullptr) << pc.param->name;
            const model::Piece whole = model::pieces_of(*ref, 0, ref->numel).front();
            float scale = 0, worst = 0;
            for (int64_t i = whole.box.lo[0]; i < whole.box.hi[0]; i++)
                for (int64_t j = whole.box.lo[1]; j < whole.box.hi[1]; j++)
                    scale = std::max(scale, std::fabs(one.grads[size_t(whole.at(i, j))]));
            for (int64_t i = pc.box.lo[0]; i < pc.box.hi[0]; i++)
                for (int64_t j = pc.box.lo[1]; j < pc.box.hi[1]; j++) {
                    float g = ranks[r].grads[size_t(pc.at(i, j))];
                    if (sp && pc.param->replicated())
                        for (size_t q = 0; q < ranks.size(); q++)
                            if (q != r) g += ranks[q].grads[size_t(ranks[q].part->layout().find(pc.param->name)->offset +
                                                                   (size_t(pc.at(i, j)) - pc.param->offset))];
                    worst = std::max(worst, std::fabs(g - one.grads[size_t(whole.at(i, j))]));
                }
            EXPECT_LE(worst, tol * scale) << "rank " << r << " " << pc.param->name << " " << pc.box.str();
        }
    }
}

TEST(InProcessTensorParallel, TwoRanksEqualOneRank) {
    for (bool sp : {false, true}) {
        SCOPED_TRACE(sp ? "tp2 + sequence parallelism" : "tp2");
        RankRun one;
        run_rank(one, nullptr, false, false);
        const std::vector<RankRun> ranks = run_tp(2, sp, false);
        for (const RankRun& r : ranks)
            for (size_t m = 0; m < one.losses.size(); m++)
                EXPECT_NEAR(r.losses[m], one.losses[m], 1e-5 * std::fabs(one.losses[m])) << "micro-batch " << m;
        expect_same_grads(one, ranks, sp, 1e-5f);
    }
}

TEST(InProcessTensorParallel, SplitBackwardEqualsWholeBackwardToTheBit) {
    for (bool sp : {false, true}) {
        SCOPED_TRACE(sp ? "tp2 + sequence parallelism" : "tp2");
        const std::vector<RankRun> whole = run_tp(2, sp, false), split = run_tp(2, sp, true);
        for (size_t r = 0; r < whole.size(); r++) {
            EXPECT_EQ(whole[r].losses, split[r].losses);
            ASSERT_EQ(whole[r].grads.size(), split[r].grads.size());
            EXPECT_EQ(0, std::memcmp(whole[r].grads.data(), split[r].grads.data(), whole[r].grads.bytes())) << "rank " << r;
        }
    }
}

}  // namespace
