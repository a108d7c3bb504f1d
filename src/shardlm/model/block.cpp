// model/block.cpp: a transformer block's forward and backward (units.h), in lanes or over all threads,
// on one tensor-parallel rank or with Megatron's conjugate operators.
#include "shardlm/model/units.h"

#include <algorithm>
#include <cstring>

#include "shardlm/core/check.h"
#include "shardlm/kernels/attention.h"
#include "shardlm/kernels/gelu.h"
#include "shardlm/kernels/layernorm.h"
#include "shardlm/kernels/matmul.h"
#include "shardlm/model/unit_ops.h"

namespace shardlm::model {

using namespace shardlm::kernels;
using namespace detail;

namespace {

// A block's saved activations from the first row of sequence b0 on (a lane's rows; b0 = 0: all).
struct BlockRows {
    void *ln1, *qkv, *att, *atty, *resid2, *ln2, *fch, *fch_gelu;
    float *ln1_mean, *ln1_rstd, *ln2_mean, *ln2_rstd;
};

BlockRows block_rows(const UnitContext& u, BlockActs& a, int b0, int T) {
    const size_t r = size_t(b0) * size_t(T), C = size_t(u.cfg->n_embd), Ct = C / size_t(u.tp_size());
    const size_t heads = size_t(u.cfg->n_head / u.tp_size());
    const DType t = u.act;
    auto rows = [&](TypedBuffer& b, size_t width) -> void* { return b.size() ? at(b.data(), t, r * width) : nullptr; };
    return {rows(a.ln1, C),
            rows(a.qkv, 3 * Ct),
            a.att.size() ? at(a.att.data(), t, size_t(b0) * heads * size_t(T) * size_t(T)) : nullptr,
            rows(a.atty, Ct),
            rows(a.resid2, C),
            rows(a.ln2, C),
            rows(a.fch, 4 * Ct),
            rows(a.fch_gelu, 4 * Ct),
            a.ln1_mean.data() + r,
            a.ln1_rstd.data() + r,
            a.ln2_mean.data() + r,
            a.ln2_rstd.data() + r};
}

// block_forward on sequences sq of the micro-batch (their rows of every buffer).
void block_forward_rows(const UnitContext& u, const BlockWeights& w, BlockActs& acts, const void* x, void* y, Span sq,
                        int T, KvLayer* kv, int pos) {
    const int C = u.cfg->n_embd, tp = u.tp_size(), Ct = C / tp, NHt = u.cfg->n_head / tp, F = 4 * Ct;
    const DType t = u.act;
    const BlockRows a = block_rows(u, acts, sq.begin, T);
    const size_t off = size_t(sq.begin) * size_t(T) * size_t(C);  // more than one group: tp 1, Nl = N
    x = at(x, t, off);
    y = at(y, t, off);
    float* partial = u.scratch->dln.data() + off;  // a row-parallel output before its reduction
    const int B = sq.count, N = B * T, Nl = u.rows(N);
    layernorm_forward(a.ln1, t, a.ln1_mean, a.ln1_rstd, x, t, w.vec(kLn1W), w.vec(kLn1B), Nl, C, u.cfg->ln_eps);
    linear(u, a.qkv, t, gather_input(u, a.ln1, N, t), w.w[kQkvW], w.vec(kQkvB), N, C, 3 * Ct);
    if (kv) {
        SHARDLM_CHECK(!u.mixed() && tp == 1, "decoding runs in fp32 on one rank");
        attention_forward_cached(static_cast<float*>(a.atty), static_cast<float*>(a.qkv), kv->k, kv->v, pos, T, Ct, NHt,
                                 kv->scores);
    } else {
        // selective recomputation keeps no probabilities: they go to scratch, recomputed in backward
        void* att = a.att ? a.att : at(u.scratch->att.data(), t, size_t(sq.begin) * NHt * size_t(T) * T);
        attention_forward(a.atty, att, t, a.qkv, t, B, T, Ct, NHt);
    }
    row_parallel_residual(u, a.resid2, partial, a.atty, w.w[kAttnProjW], w.vec(kAttnProjB), x, N, Ct);
    layernorm_forward(a.ln2, t, a.ln2_mean, a.ln2_rstd, a.resid2, t, w.vec(kLn2W), w.vec(kLn2B), Nl, C, u.cfg->ln_eps);
    linear(u, a.fch, t, gather_input(u, a.ln2, N, t), w.w[kFcW], w.vec(kFcB), N, C, F);
    gelu_forward(a.fch_gelu, a.fch, t, size_t(N) * F);
    row_parallel_residual(u, y, partial, a.fch_gelu, w.w[kFcProjW], w.vec(kFcProjB), a.resid2, N, F);
}

}  // namespace

void block_forward(const UnitContext& u, const BlockWeights& w, BlockActs& acts, const void* x, void* y, int B, int T,
                   KvLayer* kv, int pos) {
    const Groups groups = sequence_groups(u, B, T);
    Items items(u, kRowPhase, groups.count);
    for (int i; items.next(&i);) block_forward_rows(u, w, acts, x, y, groups(i, B), T, kv, pos);
}

namespace {

// Tensor parallelism (one lane): the conjugate operators' collectives sit between the products.
void block_backward_tp(const UnitContext& u, const BlockWeights& w, const BlockGrads& gt, const BlockActs& a,
                       const void* x, float* dres, int B, int T, bool acc) {
    if (u.recompute == Recompute::Full)
        block_forward(u, w, const_cast<BlockActs&>(a), x, u.scratch->recomputed.data(), B, T);
    const auto& g = gt.g;
    Scratch& s = *u.scratch;
    const int C = u.cfg->n_embd, tp = u.tp_size(), Ct = C / tp, NHt = u.cfg->n_head / tp, F = 4 * Ct;
    const int N = B * T, Nl = u.rows(N);
    const DType t = u.act;
    // Row-parallel biases are added on this rank's rows: under sequence parallelism their gradient
    // comes from those rows only (and is summed over the group with the other replicated ones).
    float* const fcproj_b = u.sp ? nullptr : g[kFcProjB];
    float* const proj_b = u.sp ? nullptr : g[kAttnProjB];
    // MLP: y = resid2 + gelu(ln2(resid2) @ Wfc^T + bfc) @ Wfp^T + bfp
    linear_backward(u, s.dfch.data(), g[kFcProjW], fcproj_b, row_parallel_dout(u, dres, N), a.fch_gelu.data(),
                    w.w[kFcProjW], N, F, C, acc);
    if (u.sp) bias_backward(g[kFcProjB], dres, Nl, C);
    gelu_backward(s.dfch.data(), a.fch.data(), t, s.dfch.data(), size_t(N) * F);
    linear_backward(u, s.dln.data(), g[kFcW], g[kFcB], s.dfch.data(), gather_input(u, a.ln2.data(), N, t), w.w[kFcW], N,
                    C, F, acc);
    layernorm_backward(dres, g[kLn2W], g[kLn2B], reduce_input_grad(u, N), a.resid2.data(), t, w.vec(kLn2W),
                       a.ln2_mean.data(), a.ln2_rstd.data(), Nl, C);
    // attention: resid2 = x + attention(ln1(x)) @ Wp^T + bp
    linear_backward(u, s.datty.data(), g[kAttnProjW], proj_b, row_parallel_dout(u, dres, N), a.atty.data(),
                    w.w[kAttnProjW], N, Ct, C, acc);
    if (u.sp) bias_backward(g[kAttnProjB], dres, Nl, C);
    const void* att = a.att.data();
    if (a.att.size() == 0) {  // selective recomputation: the probabilities again, from the kept q, k, v
        attention_forward(s.atty.data(), s.att.data(), t, a.qkv.data(), t, B, T, Ct, NHt);
        att = s.att.data();
    }
    attention_backward(s.dqkv.data(), s.attn.data(), s.datty.data(), a.qkv.data(), t, att, t, B, T, Ct, NHt);
    linear_backward(u, s.dln.data(), g[kQkvW], g[kQkvB], s.dqkv.data(), gather_input(u, a.ln1.data(), N, t), w.w[kQkvW],
                    N, C, 3 * Ct, acc);
    layernorm_backward(dres, g[kLn1W], g[kLn1B], reduce_input_grad(u, N), x, t, w.vec(kLn1W), a.ln1_mean.data(),
                       a.ln1_rstd.data(), Nl, C);
}

}  // namespace

void block_backward(const UnitContext& u, const BlockWeights& w, const BlockGrads& gt, const BlockActs& acts,
                    const void* x, float* dres, int B, int T, bool acc) {
    if (u.tp_size() > 1) {
        block_backward_tp(u, w, gt, acts, x, dres, B, T, acc);
        return;
    }
    const auto& g = gt.g;
    Scratch& s = *u.scratch;
    const int C = u.cfg->n_embd, NH = u.cfg->n_head, F = 4 * C, N = B * T;
    const DType t = u.act;
    BlockActs& mut = const_cast<BlockActs&>(acts);  // rows are read only
    // 1. row-local, a group of sequences at a time: the input gradients, keeping what the weight
    // gradients need
    const Groups groups = sequence_groups(u, B, T);
    Items row_items(u, kRowPhase, groups.count);
    for (int i; row_items.next(&i);) {
        const Span sq = groups(i, B);
        if (u.recompute == Recompute::Full)  // this group's activations again, from its kept input
            block_forward_rows(u, w, mut, x, s.recomputed.data(), sq, T, nullptr, 0);
        const BlockRows a = block_rows(u, mut, sq.begin, T);
        const size_t r0 = size_t(sq.begin) * size_t(T);
        const int n = sq.count * T;
        auto rows = [&](AlignedBuffer<float>& b, int width) { return b.data() + r0 * size_t(width); };
        float *dr = dres + r0 * C, *dy_fp = rows(s.dy_fcproj, C), *dy_p = rows(s.dy_proj, C), *dfch = rows(s.dfch, F);
        float *datty = rows(s.datty, C), *dqkv = rows(s.dqkv, 3 * C), *dln2 = rows(s.dln2, C), *dln1 = rows(s.dln, C);
        // MLP: y = resid2 + gelu(ln2(resid2) @ Wfc^T + bfc) @ Wfp^T + bfp
        std::memcpy(dy_fp, dr, sizeof(float) * size_t(n) * C);
        linear_backward(u, dfch, nullptr, nullptr, dr, a.fch_gelu, w.w[kFcProjW], n, F, C, acc);
        gelu_backward(dfch, a.fch, t, dfch, size_t(n) * F);
        linear_backward(u, dln2, nullptr, nullptr, dfch, a.ln2, w.w[kFcW], n, C, F, acc);
        layernorm_backward_input(dr, dln2, a.resid2, t, w.vec(kLn2W), a.ln2_mean, a.ln2_rstd, n, C);
        // attention: resid2 = x + attention(ln1(x)) @ Wp^T + bp
        std::memcpy(dy_p, dr, sizeof(float) * size_t(n) * C);
        linear_backward(u, datty, nullptr, nullptr, dr, a.atty, w.w[kAttnProjW], n, C, C, acc);
        const void* att = a.att;
        if (!att) {  // selective recomputation: the probabilities again, from the kept q, k, v
            void* p = at(s.att.data(), t, size_t(sq.begin) * NH * size_t(T) * T);
            attention_forward(at(s.atty.data(), t, r0 * C), p, t, a.qkv, t, sq.count, T, C, NH);
            att = p;
        }
        // each lane its own attention scratch (inside a lane every thread number is 0)
        float* attn = s.attn.data() + size_t(u.lane) * attention_scratch_floats(T, 1);
        attention_backward(dqkv, attn, datty, a.qkv, t, att, t, sq.count, T, C, NH);
        linear_backward(u, dln1, nullptr, nullptr, dqkv, a.ln1, w.w[kQkvW], n, C, 3 * C, acc);
        layernorm_backward_input(dr, dln1, at(x, t, r0 * C), t, w.vec(kLn1W), a.ln1_mean, a.ln1_rstd, n, C);
    }
    lane_barrier(u);
    // 2. over all N rows, a block of output rows at a time: the weight gradients, then LayerNorms'
    const BlockRows all = block_rows(u, mut, 0, T);
    const OutputItems out(u, {F, 3 * C, C, C, C, C});
    Items out_items(u, kOutputPhase, out.count());
    for (int i; out_items.next(&i);) {
        const auto [task, b, e] = out[i];
        switch (task) {
        case 0: matmul_backward_weight(g[kFcW], g[kFcB], s.dfch.data(), all.ln2, t, N, C, F, b, e, acc, u.precision); break;
        case 1:
            matmul_backward_weight(g[kQkvW], g[kQkvB], s.dqkv.data(), all.ln1, t, N, C, 3 * C, b, e, acc, u.precision);
            break;
        case 2:
            matmul_backward_weight(g[kFcProjW], g[kFcProjB], s.dy_fcproj.data(), all.fch_gelu, t, N, F, C, b, e, acc,
                                   u.precision);
            break;
        case 3:
            matmul_backward_weight(g[kAttnProjW], g[kAttnProjB], s.dy_proj.data(), all.atty, t, N, C, C, b, e, acc,
                                   u.precision);
            break;
        case 4:
            layernorm_backward_params(g[kLn2W], g[kLn2B], s.dln2.data(), all.resid2, t, all.ln2_mean, all.ln2_rstd, N, C,
                                      b, e);
            break;
        default:
            layernorm_backward_params(g[kLn1W], g[kLn1B], s.dln.data(), x, t, all.ln1_mean, all.ln1_rstd, N, C, b, e);
        }
    }
}

}  // namespace shardlm::model
