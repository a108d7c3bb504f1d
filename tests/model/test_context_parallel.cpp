// Context parallelism in one process (model/context_parallel.h): cp ranks are threads whose messages
// meet in memory (tests/model/thread_cp.h). The zigzag split; ring and all-gather attention from each
// rank's slice against the whole sequence on one rank (output, log-sum-exp, dQ, dK, dV; causal and not;
// grouped-query heads), with the messages each rank sends counted against the formula; and a model
// part (GPT-2's learned positions, LLaMA's rotary ones with GQA) on cp ranks against one rank on the
// whole batch: losses and every gradient, summed over the ranks, to fp32 rounding. No MPI.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <string>
#include <tuple>
#include <vector>

#include "shardlm/core/aligned_buffer.h"
#include "shardlm/core/check.h"
#include "shardlm/kernels/flash_attention.h"
#include "shardlm/model/context_parallel.h"
#include "shardlm/model/part.h"
#include "shardlm/model/weights.h"
#include "../kernels/kernel_test_util.h"
#include "thread_cp.h"

namespace {

using namespace shardlm;
using model::CpComm;
using model::SequenceSplit;
using test::rel_diff;
using test::Vec;

TEST(SequenceSplit, ZigzagKeepsChunksRAnd2cpMinus1MinusR) {
    const SequenceSplit s(16, 4);  // 8 chunks of 2
    EXPECT_EQ(s.local(), 4);
    const std::vector<std::vector<int>> want = {{0, 1, 14, 15}, {2, 3, 12, 13}, {4, 5, 10, 11}, {6, 7, 8, 9}};
    for (int r = 0; r < 4; r++) EXPECT_EQ(std::vector<int>(s.positions(r), s.positions(r) + 4), want[size_t(r)]);
    const SequenceSplit one(5, 1);
    EXPECT_EQ(std::vector<int>(one.positions(0), one.positions(0) + 5), (std::vector<int>{0, 1, 2, 3, 4}));
}

TEST(SequenceSplit, RefusesASequenceNotAMultipleOf2cp) {
    try {
        SequenceSplit(100, 3);
        FAIL() << "no error";
    } catch (const Error& e) {
        const std::string m = e.what();
        EXPECT_NE(m.find("--seq 100"), std::string::npos) << m;
        EXPECT_NE(m.find("2 x --cp = 6"), std::string::npos) << m;
        EXPECT_NE(m.find("--seq 96 or 102"), std::string::npos) << m;
    }
}

// ---- attention ---------------------------------------------------------------------------------------

struct Shape {
    int B, T, NH, NKV, HS;
    int C() const { return NH * HS; }
    int W() const { return C() + 2 * NKV * HS; }
};

// rows `pos` of each sequence of x (B, T, width), and back
Vec gather_rows(const Vec& x, int B, int T, int width, const int* pos, int L) {
    Vec y(size_t(B) * L * width);
    for (int b = 0; b < B; b++)
        for (int i = 0; i < L; i++)
            std::copy_n(x.begin() + (ptrdiff_t(b) * T + pos[i]) * width, width, y.begin() + (ptrdiff_t(b) * L + i) * width);
    return y;
}
void scatter_rows(Vec& x, const Vec& y, int B, int T, int width, const int* pos, int L) {
    for (int b = 0; b < B; b++)
        for (int i = 0; i < L; i++)
            std::copy_n(y.begin() + (ptrdiff_t(b) * L + i) * width, width, x.begin() + (ptrdiff_t(b) * T + pos[i]) * width);
}

struct Whole {
    Vec out, lse, dqkv;
    std::vector<std::map<int, int>> forward_sends;
    std::vector<int> forward_gathers;
    std::vector<size_t> forward_bytes, bytes;
    std::vector<int> sends, gathers, reduce_scatters;
};

// cp ranks as threads, each with its zigzag rows of qkv and dout; the results put back in sequence order
Whole run_cp(const Shape& s, int cp, CpComm mode, bool causal, const Vec& qkv, const Vec& dout) {
    const SequenceSplit split(s.T, cp);
    const int L = split.local();
    test::CpPost post(cp);
    std::vector<test::ThreadCp> groups;
    for (int r = 0; r < cp; r++) groups.emplace_back(post, r);
    Whole w;
    w.out.resize(size_t(s.B) * s.T * s.C()), w.lse.resize(size_t(s.B) * s.NH * s.T), w.dqkv.resize(qkv.size());
    const size_t n = size_t(cp);
    std::vector<Vec> out(n), lse(n), dqkv(n);
    w.forward_sends.resize(size_t(cp)), w.forward_gathers.resize(size_t(cp)), w.forward_bytes.resize(size_t(cp));
    test::run_ranks(cp, [&](int r) {
        const int* pos = split.positions(r);
        const Vec q = gather_rows(qkv, s.B, s.T, s.W(), pos, L), g = gather_rows(dout, s.B, s.T, s.C(), pos, L);
        model::CpBuffers buf;
        buf.allocate(mode, cp, s.B, L, s.NH, s.HS, s.NKV * s.HS, DType::F32);
        const model::CpAttention a{&groups[size_t(r)], &split, mode, &buf, DType::F32, s.B, s.C(), s.NH, s.NKV, causal};
        Vec& o = out[size_t(r)];
        o.resize(size_t(s.B) * L * s.C()), lse[size_t(r)].resize(size_t(s.B) * s.NH * L), dqkv[size_t(r)].resize(q.size());
        model::cp_attention_forward(a, o.data(), lse[size_t(r)].data(), q.data());
        w.forward_sends[size_t(r)] = groups[size_t(r)].sends;
        w.forward_gathers[size_t(r)] = groups[size_t(r)].gathers;
        w.forward_bytes[size_t(r)] = groups[size_t(r)].bytes_sent;
        model::cp_attention_backward(a, dqkv[size_t(r)].data(), g.data(), q.data(), o.data(), lse[size_t(r)].data());
    });
    for (int r = 0; r < cp; r++) {
        const int* pos = split.positions(r);
        scatter_rows(w.out, out[size_t(r)], s.B, s.T, s.C(), pos, L);
        scatter_rows(w.dqkv, dqkv[size_t(r)], s.B, s.T, s.W(), pos, L);
        for (int bh = 0; bh < s.B * s.NH; bh++)
            for (int i = 0; i < L; i++) w.lse[size_t(bh) * s.T + size_t(pos[i])] = lse[size_t(r)][size_t(bh) * L + size_t(i)];
        int sends = 0;
        for (auto [tag, n] : groups[size_t(r)].sends) sends += n;
        w.sends.push_back(sends);
        w.gathers.push_back(groups[size_t(r)].gathers);
        w.reduce_scatters.push_back(groups[size_t(r)].reduce_scatters);
        w.bytes.push_back(groups[size_t(r)].bytes_sent);
    }
    return w;
}

class CpAttentionTest : public ::testing::TestWithParam<std::tuple<int, CpComm, bool>> {};  // cp, mode, causal

TEST_P(CpAttentionTest, SlicesOnRanksEqualTheWholeSequenceOnOne) {
    const auto [cp, mode, causal] = GetParam();
    for (const Shape& s : {Shape{2, 48, 4, 2, 16}, Shape{1, 264, 2, 1, 16}}) {
        SCOPED_TRACE("T " + std::to_string(s.T));
        const Vec qkv = test::randn(size_t(s.B) * s.T * s.W(), 7 + s.T, 1.0f);
        const Vec dout = test::randn(size_t(s.B) * s.T * s.C(), 9 + s.T, 1.0f);
        Whole one;
        if (causal) {  // the fused kernel over the whole sequence
            one.out.resize(dout.size()), one.lse.resize(size_t(s.B) * s.NH * s.T), one.dqkv.resize(qkv.size());
            kernels::flash_attention_forward(one.out.data(), one.lse.data(), qkv.data(), DType::F32, s.B, s.T, s.C(), s.NH,
                                             s.NKV);
            kernels::flash_attention_backward(one.dqkv.data(), dout.data(), qkv.data(), one.out.data(), one.lse.data(),
                                              DType::F32, s.B, s.T, s.C(), s.NH, s.NKV);
        } else {  // one rank: every key in one block
            one = run_cp(s, 1, mode, false, qkv, dout);
        }
        const Whole w = run_cp(s, cp, mode, causal, qkv, dout);
        EXPECT_LT(rel_diff(w.out, one.out), 2e-6f);
        EXPECT_LT(rel_diff(w.lse, one.lse), 2e-6f);
        // dQ, dK and dV apart: each to the largest of its own
        const int C = s.C(), KVC = s.NKV * s.HS;
        for (auto [name, c0, c1] : {std::tuple{"dQ", 0, C}, std::tuple{"dK", C, C + KVC}, std::tuple{"dV", C + KVC, C + 2 * KVC}}) {
            Vec a, b;
            for (size_t row = 0; row < size_t(s.B) * s.T; row++)
                for (int j = c0; j < c1; j++) a.push_back(w.dqkv[row * s.W() + j]), b.push_back(one.dqkv[row * s.W() + j]);
            EXPECT_LT(rel_diff(a, b), 1e-5f) << name;
        }
        // what each rank sent: the keys and values cp - 1 times forward; backward cp - 1 times again and
        // the dK/dV cp times (ring: the last message takes it home), or a gather and a reduce-scatter
        const size_t block = size_t(s.B) * (s.T / cp) * 2 * KVC;
        const model::CpBytes f = model::cp_attention_bytes(mode, cp, block, DType::F32);
        for (int r = 0; r < cp; r++) {
            int fsends = 0;
            for (auto [tag, n] : w.forward_sends[size_t(r)]) fsends += n;
            if (mode == CpComm::Ring) {
                EXPECT_EQ(fsends, cp - 1) << "rank " << r;
                EXPECT_EQ(w.sends[size_t(r)], (cp - 1) + (cp - 1) + cp) << "rank " << r;
                EXPECT_EQ(w.forward_sends[size_t(r)].size(), 1u) << "one kind of message forward";
            } else {
                EXPECT_EQ(fsends + w.sends[size_t(r)], 0);
                EXPECT_EQ(w.forward_gathers[size_t(r)], 1);
                EXPECT_EQ(w.gathers[size_t(r)], 2);
                EXPECT_EQ(w.reduce_scatters[size_t(r)], 1);
            }
            EXPECT_EQ(w.forward_bytes[size_t(r)], f.kv_forward) << "rank " << r;
            EXPECT_EQ(w.bytes[size_t(r)], f.kv_forward + f.kv_backward + f.dkv_backward) << "rank " << r;
        }
    }
}

INSTANTIATE_TEST_SUITE_P(All, CpAttentionTest,
                         ::testing::Combine(::testing::Values(2, 3, 4), ::testing::Values(CpComm::Ring, CpComm::AllGather),
                                            ::testing::Bool()));

// ---- a model part ------------------------------------------------------------------------------------

model::GptConfig gpt2_tiny() {
    model::GptConfig c;
    c.name = "cp-gpt2";
    c.n_layer = 2, c.n_head = 4, c.n_embd = 32, c.vocab_size = 97, c.n_ctx = 48;
    return c;
}
model::GptConfig llama_tiny() {
    model::GptConfig c = model::find_preset("llama-tiny");
    c.name = "cp-llama";
    c.n_layer = 2, c.n_head = 4, c.n_kv_head = 2, c.n_embd = 32, c.vocab_size = 97, c.n_ctx = 48;
    c.ffn_hidden = 64;
    return c;
}

constexpr int kB = 2, kT = 24;

struct PartRun {
    std::vector<double> losses;  // per micro-batch
    AlignedBuffer<float> grads;
    size_t total = 0;
    model::Layout layout;
};

// Two micro-batches (the second accumulates) of this rank's rows of every sequence.
void run_part(PartRun& run, const model::GptConfig& cfg, model::ContextParallel* cp, CpComm mode, model::Recompute rc) {
    omp_set_num_threads(1);
    const int n = cp ? cp->size() : 1, L = kT / n;
    model::ModelPart::Options o;
    o.cp = cp;
    o.cp_comm = mode;
    o.recompute = rc;
    o.fused_attention = true;
    model::ModelPart part(cfg, o, kB, L);
    const model::Layout& lay = part.layout();
    AlignedBuffer<float> params(lay.total);
    run.grads.resize(lay.total);
    run.total = lay.total;
    run.layout = lay;
    model::init_gpt2_weights(params.data(), lay, model::FlatRange{0, lay.total}, 5);
    part.bind(params.data(), run.grads.data());
    const SequenceSplit split(kT, n);
    const int* pos = split.positions(cp ? cp->rank() : 0);
    for (int m = 0; m < 2; m++) {
        std::vector<int> in(size_t(kB) * L), tg(in.size());
        for (int b = 0; b < kB; b++)
            for (int i = 0; i < L; i++) {
                const int t = pos[i], k = (b * kT + t) * 13 + m * 31;
                in[size_t(b * L + i)] = (k * k + 3) % cfg.vocab_size;
                tg[size_t(b * L + i)] = (k * 7 + t) % cfg.vocab_size;
            }
        run.losses.push_back(part.forward(0, 0, in.data(), tg.data(), kB, L, 1.0f / (kB * kT)));
        part.backward(0, 0, nullptr, m > 0);
    }
}

class CpPartTest : public ::testing::TestWithParam<std::tuple<int, CpComm, bool, model::Recompute>> {};  // cp, mode, llama

TEST_P(CpPartTest, RanksOfASequenceEqualOneRankOnTheWholeBatch) {
    const auto [cp, mode, llama, rc] = GetParam();
    const model::GptConfig cfg = llama ? llama_tiny() : gpt2_tiny();
    PartRun one;
    run_part(one, cfg, nullptr, mode, model::Recompute::None);
    test::CpPost post(cp);
    std::vector<test::ThreadCp> groups;
    for (int r = 0; r < cp; r++) groups.emplace_back(post, r);
    std::vector<PartRun> ranks(static_cast<size_t>(cp));
    const CpComm m = mode;  // (clang 14 captures no structured binding)
    const model::Recompute recompute = rc;
    test::run_ranks(cp, [&](int r) { run_part(ranks[size_t(r)], cfg, &groups[size_t(r)], m, recompute); });
    for (size_t m = 0; m < one.losses.size(); m++) {
        double sum = 0;
        for (const PartRun& r : ranks) sum += r.losses[m];
        EXPECT_NEAR(sum, one.losses[m], 1e-5 * std::fabs(one.losses[m])) << "micro-batch " << m;
    }
    // every gradient: the ranks' partial sums (each its own tokens) summed, as the dp x cp reduction does
    ASSERT_EQ(ranks[0].total, one.total);
    for (const model::ParamSpec& p : one.layout.params) {
        Vec sum(p.numel, 0.0f), ref(one.grads.data() + p.offset, one.grads.data() + p.offset + p.numel);
        for (const PartRun& r : ranks)
            for (size_t i = 0; i < p.numel; i++) sum[i] += r.grads[p.offset + i];
        EXPECT_LT(rel_diff(sum, ref), 1e-5f) << p.name;
    }
}

INSTANTIATE_TEST_SUITE_P(All, CpPartTest,
                         ::testing::Values(std::tuple{2, CpComm::Ring, false, model::Recompute::None},
                                           std::tuple{3, CpComm::Ring, true, model::Recompute::None},
                                           std::tuple{4, CpComm::Ring, false, model::Recompute::Full},
                                           std::tuple{2, CpComm::AllGather, true, model::Recompute::Full},
                                           std::tuple{3, CpComm::AllGather, false, model::Recompute::Selective}));

}  // namespace
