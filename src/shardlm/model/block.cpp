// model/block.cpp: a transformer block's forward and backward (units.h), in lanes or over all threads,
// on one tensor-parallel rank or with Megatron's conjugate operators.
#include "shardlm/model/units.h"

#include <algorithm>
#include <cstring>

#include "shardlm/core/check.h"
#include "shardlm/kernels/attention.h"
#include "shardlm/kernels/flash_attention.h"
#include "shardlm/kernels/gelu.h"
#include "shardlm/kernels/layernorm.h"
#include "shardlm/kernels/gemm/gemm.h"
#include "shardlm/kernels/rope.h"
#include "shardlm/model/qk_norm.h"
#include "shardlm/model/unit_ops.h"

namespace shardlm::model {

using namespace shardlm::kernels;
using namespace detail;

namespace {

// A block's saved activations from the first row of sequence b0 on (a lane's rows; b0 = 0: all).
struct BlockRows {
    void *ln1, *qkv, *att, *atty, *resid2, *ln2, *fch, *fch_gelu;
    float *ln1_mean, *ln1_rstd, *ln2_mean, *ln2_rstd;
    float* lse;  // fused attention's row statistics
    void* qk_pre;  // qk_norm: the q and k columns before their norms, and their scales
    float* qk_rstd;
};

BlockRows block_rows(const UnitContext& u, const BlockDims& d, BlockActs& a, int b0, int T) {
    const size_t r = size_t(b0) * size_t(T), C = size_t(u.cfg->n_embd);
    const DType t = u.prec.activation;
    auto rows = [&](TypedBuffer& b, size_t width) -> void* { return b.size() ? at(b.data(), t, r * width) : nullptr; };
    return {rows(a.ln1, C),
            rows(a.qkv, size_t(d.Wqkv)),
            a.att.size() ? at(a.att.data(), t, size_t(b0) * size_t(d.NHt) * size_t(T) * size_t(T)) : nullptr,
            rows(a.atty, size_t(d.Ct)),
            rows(a.resid2, C),
            rows(a.ln2, C),
            rows(a.fch, size_t(d.Ffc)),
            rows(a.fch_gelu, size_t(d.F)),
            stat_rows(a.ln1_mean, r),
            a.ln1_rstd.data() + r,
            stat_rows(a.ln2_mean, r),
            a.ln2_rstd.data() + r,
            a.lse.size() ? a.lse.data() + size_t(b0) * size_t(d.NHt) * size_t(T) : nullptr,
            rows(a.qk_pre, size_t(d.Ct + d.KVt * d.HS)),
            a.qk_rstd.size() ? a.qk_rstd.data() + 2 * r : nullptr};
}

// Rotary embeddings on the q and k heads of n rows of [q | k | v] (positions pos0 + row % T, or the
// context-parallel slice's); and the inverse rotation of their gradients.
void rope_qk(const UnitContext& u, const BlockDims& d, void* qkv, int n, int T, int pos0) {
    if (u.cfg->position == Position::Rope)
        rope_forward(qkv, u.prec.activation, n, T, pos0, size_t(d.Wqkv), 0, d.NHt + d.KVt, d.HS, u.cfg->rope_theta,
                     u.positions());
}
void rope_qk_backward(const UnitContext& u, const BlockDims& d, float* dqkv, int n, int T) {
    if (u.cfg->position == Position::Rope)
        rope_backward(dqkv, n, T, 0, size_t(d.Wqkv), 0, d.NHt + d.KVt, d.HS, u.cfg->rope_theta, u.positions());
}

// Attention over the whole sequence from this context-parallel rank's rows (model/context_parallel.h), inside
// documents where the rows have starts; b0: the first of the B sequences.
CpAttention cp_attention(const UnitContext& u, const BlockDims& d, int b0, int B, int T) {
    const int* starts = u.doc_start ? u.doc_start + size_t(b0) * size_t(T) : nullptr;
    return {u.cp, u.split, u.cp_comm, &u.scratch->cp, u.prec.activation, B, d.Ct, d.NHt, d.KVt, true, starts};
}

// The MLP's activation: GELU of the first product, or SwiGLU of its [gate | up].
void mlp_act(const UnitContext& u, const BlockDims& d, void* h, const void* fc, int n) {
    if (u.cfg->mlp == Mlp::SwiGLU) swiglu_forward(h, fc, u.prec.activation, n, d.F);
    else gelu_forward(h, fc, u.prec.activation, size_t(n) * d.F);
}

// A mixture-of-experts feed-forward (model/moe.h): its shared experts (if any) as the MLP, the experts' combination
// added onto their partial output, and the sum onto the residual stream.
void moe_ffn_forward(const UnitContext& u, const BlockWeights& w, const BlockDims& d, const BlockRows& a, BlockActs& acts,
                     void* y, float* partial, int N) {
    const DType t = u.prec.activation;
    const void* in = gather_input(u, a.ln2, N, t);
    if (d.F > 0) {
        linear(u, a.fch, t, in, w.w[kFcW], w.vec(kFcB), N, u.cfg->n_embd, d.Ffc);
        mlp_act(u, d, a.fch_gelu, a.fch, N);
        linear(u, partial, DType::F32, a.fch_gelu, w.w[kFcProjW], nullptr, N, d.F, u.cfg->n_embd);
    } else {
        std::fill(partial, partial + size_t(N) * u.cfg->n_embd, 0.0f);
    }
    moe_forward(u, w.experts, acts.moe, u.scratch->moe, in, partial, N);
    reduce_onto_residual(u, y, partial, w.vec(kFcProjB), a.resid2, N);
}

// block_forward on sequences sq of the micro-batch (their rows of every buffer).
void block_forward_rows(const UnitContext& u, const BlockWeights& w, BlockActs& acts, const void* x, void* y, Span sq,
                        int T, KvLayer* kv, int pos) {
    const int C = u.cfg->n_embd, tp = u.tp_size();
    const BlockDims d = block_dims(*u.cfg, tp, w.moe);
    const DType t = u.prec.activation;
    const BlockRows a = block_rows(u, d, acts, sq.begin, T);
    const size_t off = size_t(sq.begin) * size_t(T) * size_t(C);  // more than one group: tp 1, Nl = N
    x = at(x, t, off);
    y = at(y, t, off);
    float* partial = u.scratch->dln.data() + off;  // a row-parallel output before its reduction
    const int B = sq.count, N = B * T, Nl = u.rows(N);
    norm_forward(u, a.ln1, a.ln1_mean, a.ln1_rstd, x, w.vec(kLn1W), w.vec(kLn1B), Nl);
    linear(u, a.qkv, t, gather_input(u, a.ln1, N, t), w.w[kQkvW], w.vec(kQkvB), N, C, d.Wqkv);
    if (u.cfg->qk_norm) qk_norm_forward(u, d, w.vec(kQkNormW), a.qkv, a.qk_pre, a.qk_rstd, N);
    rope_qk(u, d, a.qkv, N, T, kv ? pos : 0);
    if (kv) {
        SHARDLM_CHECK(!u.mixed() && tp == 1, "decoding runs in fp32 on one rank");
        attention_forward_cached(static_cast<float*>(a.atty), static_cast<float*>(a.qkv), kv->k, kv->v, pos, T, d.Ct,
                                 d.NHt, kv->scores, d.KVt);
    } else if (u.attention_by_blocks()) {
        cp_attention_forward(cp_attention(u, d, sq.begin, B, T), a.atty, a.lse, a.qkv);
    } else if (u.fused_attention) {
        flash_attention_forward(a.atty, a.lse, a.qkv, t, B, T, d.Ct, d.NHt, d.KVt);
    } else {
        // selective recomputation keeps no probabilities: they go to scratch, recomputed in backward
        void* att = a.att ? a.att : at(u.scratch->att.data(), t, size_t(sq.begin) * d.NHt * size_t(T) * T);
        attention_forward(a.atty, att, t, a.qkv, t, B, T, d.Ct, d.NHt, d.KVt);
    }
    row_parallel_residual(u, a.resid2, partial, a.atty, w.w[kAttnProjW], w.vec(kAttnProjB), x, N, d.Ct);
    norm_forward(u, a.ln2, a.ln2_mean, a.ln2_rstd, a.resid2, w.vec(kLn2W), w.vec(kLn2B), Nl);
    if (w.moe) return moe_ffn_forward(u, w, d, a, acts, y, partial, N);
    linear(u, a.fch, t, gather_input(u, a.ln2, N, t), w.w[kFcW], w.vec(kFcB), N, C, d.Ffc);
    mlp_act(u, d, a.fch_gelu, a.fch, N);
    row_parallel_residual(u, y, partial, a.fch_gelu, w.w[kFcProjW], w.vec(kFcProjB), a.resid2, N, d.F);
}

}  // namespace

void block_forward(const UnitContext& u, const BlockWeights& w, BlockActs& acts, const void* x, void* y, int B, int T,
                   KvLayer* kv, int pos) {
    const Groups groups = sequence_groups(u, B, T);
    Items items(u, kRowPhase, groups.count);
    for (int i; items.next(&i);) block_forward_rows(u, w, acts, x, y, groups(i, B), T, kv, pos);
}

// ---- backward: B (input gradients) --------------------------------------------------------------

namespace {

// The MLP's input gradient (=, into dln: partial under tensor parallelism) for the n rows from r0, from its
// output gradient dy (all n rows), keeping its first product's output gradient (and the bf16 copies) for W.
void mlp_backward_input(const UnitContext& u, const BlockWeights& w, const BlockDims& d, const BlockRows& a, BlockKeep& k,
                        size_t r0, const float* dy, float* dln, int n) {
    const int C = u.cfg->n_embd, F = d.F;
    const DType t = u.prec.activation;
    auto rows16 = [&](AlignedBuffer<uint16_t>& b, int width) { return b.size() ? b.data() + r0 * size_t(width) : nullptr; };
    float* dfch = k.dfch.data() + r0 * size_t(d.Ffc);
    if (u.cfg->mlp == Mlp::SwiGLU) {
        float* dh = u.scratch->dh.data() + r0 * size_t(F);
        linear_backward(u, dh, nullptr, nullptr, dy, a.fch_gelu, w.w[kFcProjW], n, F, C, false, rows16(k.dy_fcproj16, C));
        swiglu_backward(dfch, dh, a.fch, t, n, F);
    } else {
        linear_backward(u, dfch, nullptr, nullptr, dy, a.fch_gelu, w.w[kFcProjW], n, F, C, false, rows16(k.dy_fcproj16, C));
        gelu_backward(dfch, a.fch, t, dfch, size_t(n) * F);
    }
    linear_backward(u, dln, nullptr, nullptr, dfch, a.ln2, w.w[kFcW], n, C, d.Ffc, false, rows16(k.dfch16, d.Ffc));
}

}  // namespace

void block_backward_input(const UnitContext& u, const BlockWeights& w, const BlockActs& acts, BlockKeep& k,
                          const void* x, float* dres, int B, int T) {
    Scratch& s = *u.scratch;
    const int C = u.cfg->n_embd, tp = u.tp_size();
    const BlockDims d = block_dims(*u.cfg, tp, w.moe);
    const int Ct = d.Ct, NHt = d.NHt;
    const DType t = u.prec.activation;
    BlockActs& mut = const_cast<BlockActs&>(acts);  // rows are read only (but for recomputation)
    // a group of sequences at a time (more than one group: one tensor-parallel rank, Nl = N)
    const Groups groups = sequence_groups(u, B, T);
    Items row_items(u, kRowPhase, groups.count);
    for (int i; row_items.next(&i);) {
        const Span sq = groups(i, B);
        if (u.recompute == Recompute::Full)  // this group's activations again, from its kept input
            block_forward_rows(u, w, mut, x, s.recomputed.data(), sq, T, nullptr, 0);
        const BlockRows a = block_rows(u, d, mut, sq.begin, T);
        const size_t r0 = size_t(sq.begin) * size_t(T);
        const int n = sq.count * T, nl = u.rows(n);
        auto rows = [&](AlignedBuffer<float>& b, int width) { return b.data() + r0 * size_t(width); };
        // the bf16 copy a linear's output gradient is rounded into for the W phase (none without bf16 products)
        auto rows16 = [&](AlignedBuffer<uint16_t>& b, int width) { return b.size() ? b.data() + r0 * size_t(width) : nullptr; };
        float *dr = dres + r0 * C, *dy_fp = rows(k.dy_fcproj, C), *dy_p = rows(k.dy_proj, C);
        float *datty = rows(s.datty, Ct), *dqkv = rows(k.dqkv, d.Wqkv), *dln2 = rows(k.dln2, C), *dln1 = rows(k.dln1, C);
        // A column-parallel linear's input gradient: on one rank straight into the kept LayerNorm
        // gradient; else partial in scratch, then summed over the group (f's backward) and kept.
        auto partial = [&](float* kept) { return tp == 1 ? kept : s.dln.data(); };
        auto reduce_into = [&](float* kept) {
            if (tp > 1) std::memcpy(kept, reduce_input_grad(u, n), sizeof(float) * size_t(nl) * C);
        };
        // MLP: y = resid2 + act(norm2(resid2) @ Wfc^T + bfc) @ Wfp^T + bfp (act: GELU, or SwiGLU of [gate | up]),
        // or a mixture of experts beside its shared experts' MLP (if any)
        row_parallel_dout(u, dy_fp, dr, n);
        if (d.F > 0) mlp_backward_input(u, w, d, a, k, r0, dy_fp, partial(dln2), n);
        else std::fill(partial(dln2), partial(dln2) + size_t(n) * C, 0.0f);
        if (w.moe) moe_backward_input(u, w.experts, acts.moe, k.moe, s.moe, dy_fp, partial(dln2), n);
        reduce_into(dln2);
        if (w.moe) moe_router_input_grad(u, w.experts, k.moe, s.moe, dln2, u.sp ? u.tp->rank() * nl : 0, nl);
        norm_backward_input(u, dr, dln2, a.resid2, w.vec(kLn2W), a.ln2_mean, a.ln2_rstd, nl);
        // attention: resid2 = x + attention(norm1(x)) @ Wp^T + bp
        row_parallel_dout(u, dy_p, dr, n);
        linear_backward(u, datty, nullptr, nullptr, dy_p, a.atty, w.w[kAttnProjW], n, Ct, C, false, rows16(k.dy_proj16, C));
        if (u.attention_by_blocks()) {
            cp_attention_backward(cp_attention(u, d, sq.begin, sq.count, T), dqkv, datty, a.qkv, a.atty, a.lse);
        } else if (u.fused_attention) {  // the tiles' probabilities again, from the kept output and row statistics
            flash_attention_backward(dqkv, datty, a.qkv, a.atty, a.lse, t, sq.count, T, Ct, NHt, d.KVt);
        } else {
            const void* att = a.att;
            if (!att) {  // selective recomputation: the probabilities again, from the kept q, k, v
                void* p = at(s.att.data(), t, size_t(sq.begin) * NHt * size_t(T) * T);
                attention_forward(at(s.atty.data(), t, r0 * Ct), p, t, a.qkv, t, sq.count, T, Ct, NHt, d.KVt);
                att = p;
            }
            // each lane its own attention scratch (inside a lane every thread number is 0)
            float* attn = s.attn.data() + size_t(u.lane) * attention_scratch_floats(T, 1);
            attention_backward(dqkv, attn, datty, a.qkv, t, att, t, sq.count, T, Ct, NHt, d.KVt);
        }
        rope_qk_backward(u, d, dqkv, n, T);
        if (u.cfg->qk_norm)
            qk_norm_backward_input(u, d, w.vec(kQkNormW), a.qk_pre, a.qk_rstd, dqkv, rows(k.dqk, d.Ct + d.KVt * d.HS), n);
        linear_backward(u, partial(dln1), nullptr, nullptr, dqkv, a.ln1, w.w[kQkvW], n, C, d.Wqkv, false,
                        rows16(k.dqkv16, d.Wqkv));
        reduce_into(dln1);
        norm_backward_input(u, dr, dln1, at(x, t, r0 * C), w.vec(kLn1W), a.ln1_mean, a.ln1_rstd, nl);
    }
}

// ---- backward: W (weight gradients) -------------------------------------------------------------

namespace {

struct BlockW {
    const BlockGrads& g;
    const BlockActs& a;
    const BlockKeep& k;
    const void* x;
    int N;
    bool acc;
    BlockDims d;  // the layer's (an MoE layer's MLP: its shared experts')
};

int n_embd(const UnitContext& u, const BlockW&) { return u.cfg->n_embd; }
int mlp_rows(const UnitContext& u, const BlockW& w) { return w.d.F > 0 ? u.cfg->n_embd : 0; }
int expert_rows(const UnitContext& u, int per) { return u.cfg->moe.n_experts / u.ep_size() * per; }

// A column-parallel linear's weight gradient: its input is the LayerNorm's output, all-gathered under
// sequence parallelism (one lane: every task is one item).
// dout16: dout's bf16 copy from the B phase, or null.
void column_parallel_w(const UnitContext& u, float* dw, float* db, const float* dout, const uint16_t* dout16,
                       const TypedBuffer& ln, int N, int OC, int b, int e, bool acc) {
    const void* in = gather_input(u, ln.data(), N, u.prec.activation);
    matmul_backward_weight(dw, db, dout, in, u.prec.activation, N, u.cfg->n_embd, OC, b, e, acc, u.matmul(), dout16);
}

// A row-parallel linear's: all N rows of d(output) were kept; its bias is replicated, and under
// sequence parallelism its gradient comes from this rank's rows only (summed over the group with the
// other replicated parameters' before the data-parallel reduction).
void row_parallel_w(const UnitContext& u, float* dw, float* db, const float* dout, const uint16_t* dout16,
                    const TypedBuffer& in, int N, int K, int b, int e, bool acc) {
    const int C = u.cfg->n_embd;
    matmul_backward_weight(dw, u.sp ? nullptr : db, dout, in.data(), u.prec.activation, N, K, C, b, e, acc, u.matmul(),
                           dout16);
    if (u.sp && db) {
        const int Nl = u.rows(N);
        bias_backward(db + b, dout + size_t(u.tp->rank()) * Nl * C + b, Nl, e - b, C);
    }
}

// In the order the one-process backward has always summed them (the tasks write disjoint gradients); an MoE
// layer's after them.
const uint16_t* kept16(const AlignedBuffer<uint16_t>& b) { return b.size() ? b.data() : nullptr; }

const WeightTask<BlockW> kBlockWeightTasks[] = {
    {"mlp.c_fc", [](const UnitContext&, const BlockW& w) { return w.d.Ffc; },
     [](const UnitContext& u, const BlockW& w, int b, int e) {
         column_parallel_w(u, w.g.g[kFcW], w.g.g[kFcB], w.k.dfch.data(), kept16(w.k.dfch16), w.a.ln2, w.N, w.d.Ffc, b, e,
                           w.acc);
     }},
    {"attn.c_attn", [](const UnitContext&, const BlockW& w) { return w.d.Wqkv; },
     [](const UnitContext& u, const BlockW& w, int b, int e) {
         column_parallel_w(u, w.g.g[kQkvW], w.g.g[kQkvB], w.k.dqkv.data(), kept16(w.k.dqkv16), w.a.ln1, w.N, w.d.Wqkv, b,
                           e, w.acc);
     }},
    {"mlp.c_proj", mlp_rows,
     [](const UnitContext& u, const BlockW& w, int b, int e) {
         row_parallel_w(u, w.g.g[kFcProjW], w.g.g[kFcProjB], w.k.dy_fcproj.data(), kept16(w.k.dy_fcproj16), w.a.fch_gelu,
                        w.N, w.d.F, b, e, w.acc);
     }},
    {"attn.c_proj", n_embd,
     [](const UnitContext& u, const BlockW& w, int b, int e) {
         row_parallel_w(u, w.g.g[kAttnProjW], w.g.g[kAttnProjB], w.k.dy_proj.data(), kept16(w.k.dy_proj16), w.a.atty, w.N,
                        w.d.Ct, b, e, w.acc);
     }},
    {"ln_2", n_embd,
     [](const UnitContext& u, const BlockW& w, int b, int e) {
         norm_backward_params(u, w.g.g[kLn2W], w.g.g[kLn2B], w.k.dln2.data(), w.a.resid2.data(), stat_rows(w.a.ln2_mean, 0),
                              w.a.ln2_rstd.data(), u.rows(w.N), b, e);
     }},
    {"ln_1", n_embd,
     [](const UnitContext& u, const BlockW& w, int b, int e) {
         norm_backward_params(u, w.g.g[kLn1W], w.g.g[kLn1B], w.k.dln1.data(), w.x, stat_rows(w.a.ln1_mean, 0),
                              w.a.ln1_rstd.data(), u.rows(w.N), b, e);
     }},
    {"attn.qk_norm", [](const UnitContext& u, const BlockW& w) { return u.cfg->qk_norm ? w.d.Ct + w.d.KVt * w.d.HS : 0; },
     [](const UnitContext& u, const BlockW& w, int b, int e) {
         qk_norm_backward_params(u, w.d, w.g.g[kQkNormW], w.k.dqk.data(), w.a.qk_pre.data(), w.a.qk_rstd.data(), w.N, b, e);
     }},
    {"experts.w1", [](const UnitContext& u, const BlockW& w) { return w.g.moe ? expert_rows(u, moe_dims(*u.cfg, u.tp_size()).Ffc) : 0; },
     [](const UnitContext& u, const BlockW& w, int b, int e) { moe_fc_grad(u, w.g.experts, w.a.moe, w.k.moe, b, e, w.acc); }},
    {"experts.w2", [](const UnitContext& u, const BlockW& w) { return w.g.moe ? expert_rows(u, u.cfg->n_embd) : 0; },
     [](const UnitContext& u, const BlockW& w, int b, int e) { moe_proj_grad(u, w.g.experts, w.a.moe, w.k.moe, b, e, w.acc); }},
    {"gate", [](const UnitContext& u, const BlockW& w) { return w.g.moe ? u.cfg->moe.n_experts : 0; },
     [](const UnitContext& u, const BlockW& w, int b, int e) {
         // this rank's rows of the normalised input (under sequence parallelism: summed over the group later)
         const int nl = u.rows(w.N);
         moe_router_grad(u, w.g.experts, w.k.moe, w.a.ln2.data(), u.sp ? u.tp->rank() * nl : 0, nl, b, e);
     }},
};

}  // namespace

void block_backward_weight(const UnitContext& u, const BlockGrads& g, const BlockActs& a, const BlockKeep& k,
                           const void* x, int B, int T, bool acc) {
    run_weight_tasks(u, kBlockWeightTasks, BlockW{g, a, k, x, B * T, acc, block_dims(*u.cfg, u.tp_size(), g.moe)});
}

void block_backward(const UnitContext& u, const BlockWeights& w, const BlockGrads& g, const BlockActs& a, BlockKeep& k,
                    const void* x, float* dres, int B, int T, bool acc) {
    block_backward_input(u, w, a, k, x, dres, B, T);
    lane_barrier(u);
    block_backward_weight(u, g, a, k, x, B, T, acc);
}

}  // namespace shardlm::model
