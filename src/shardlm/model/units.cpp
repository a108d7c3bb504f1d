#include "shardlm/model/units.h"

#include <algorithm>
#include <cstring>

#include "shardlm/core/check.h"
#include "shardlm/kernels/attention.h"
#include "shardlm/kernels/crossentropy.h"
#include "shardlm/kernels/encoder.h"
#include "shardlm/kernels/gelu.h"
#include "shardlm/kernels/layernorm.h"

namespace shardlm::model {

using namespace shardlm::kernels;

Recompute parse_recompute(const std::string& name) {
    if (name == "none") return Recompute::None;
    if (name == "full") return Recompute::Full;
    if (name == "selective") return Recompute::Selective;
    fail("unknown --recompute '", name, "'\n---> HINT: use none, full or selective");
}

const char* recompute_name(Recompute r) {
    switch (r) {
    case Recompute::None: return "none";
    case Recompute::Full: return "full";
    case Recompute::Selective: return "selective";
    }
    return "?";
}

// ---- buffers ----------------------------------------------------------------------------------

void Scratch::allocate(const GptConfig& c, int B, int T, int tp, int threads, DType act, Recompute r) {
    const size_t N = size_t(B) * T, C = size_t(c.n_embd), Ct = C / size_t(tp);
    gathered.resize(tp > 1 ? N * C : 0);
    dln.resize(N * C);
    reduced.resize(tp > 1 ? N * C / size_t(tp) : 0);
    dqkv.resize(N * 3 * Ct);
    datty.resize(N * Ct);
    dfch.resize(N * 4 * Ct);
    attn.resize(attention_scratch_floats(T, threads > 0 ? threads : 1));
    ce.resize(tp > 1 ? 3 * N : 0);
    const size_t eb = dtype_bytes(act);
    att.resize(r == Recompute::Selective ? size_t(B) * size_t(c.n_head / tp) * size_t(T) * size_t(T) : 0, eb);
    atty.resize(r == Recompute::Selective ? N * Ct : 0, eb);
    logits.resize(0);
}

size_t Scratch::bytes() const {
    return gathered.bytes() + dln.bytes() + reduced.bytes() + dqkv.bytes() + datty.bytes() + dfch.bytes() +
           attn.bytes() + ce.bytes() + att.bytes() + atty.bytes() + logits.bytes();
}

void BlockActs::allocate(const GptConfig& c, int B, int T, int tp, bool sp, DType act, bool keep_att) {
    const size_t N = size_t(B) * T, Nl = sp ? N / size_t(tp) : N, C = size_t(c.n_embd), Ct = C / size_t(tp);
    const size_t eb = dtype_bytes(act);
    ln1.resize(Nl * C, eb), ln1_mean.resize(Nl), ln1_rstd.resize(Nl);
    qkv.resize(N * 3 * Ct, eb);
    att.resize(keep_att ? size_t(B) * size_t(c.n_head / tp) * size_t(T) * size_t(T) : 0, eb);
    atty.resize(N * Ct, eb);
    resid2.resize(Nl * C, eb);
    ln2.resize(Nl * C, eb), ln2_mean.resize(Nl), ln2_rstd.resize(Nl);
    fch.resize(N * 4 * Ct, eb), fch_gelu.resize(N * 4 * Ct, eb);
}

size_t BlockActs::stats_bytes() const {
    return ln1_mean.bytes() + ln1_rstd.bytes() + ln2_mean.bytes() + ln2_rstd.bytes();
}

size_t BlockActs::bytes() const {
    return ln1.bytes() + qkv.bytes() + att.bytes() + atty.bytes() + resid2.bytes() + ln2.bytes() + fch.bytes() +
           fch_gelu.bytes() + stats_bytes();
}

void HeadActs::allocate(const GptConfig& c, int B, int T, int tp, bool sp, DType act, bool bf16_grad, bool chunked) {
    const size_t N = size_t(B) * T, Nl = sp ? N / size_t(tp) : N, C = size_t(c.n_embd);
    const size_t Vt = size_t(c.padded_vocab(tp) / tp);
    lnf.resize(Nl * C, dtype_bytes(act)), lnf_mean.resize(Nl), lnf_rstd.resize(Nl);
    logits.resize(chunked ? 0 : N * Vt);
    losses.resize(N);
    targets.resize(N);
    dlogits_bf16.resize(bf16_grad ? N * Vt : 0);
}

size_t HeadActs::bytes() const {
    return lnf.bytes() + lnf_mean.bytes() + lnf_rstd.bytes() + logits.bytes() + losses.bytes() + targets.bytes() +
           dlogits_bf16.bytes();
}

// ---- products and the conjugate operators ---------------------------------------------------------

namespace {

// out (N, OC) = in (N, K) @ W (OC, K)^T + b: fp32 activations through kernels::matmul_forward at the
// context's precision (out += with accumulate); stored activations and the 16-bit weight copy
// through the mixed-precision overload (out as out_t).
void linear(const UnitContext& u, void* out, DType out_t, const void* in, const void* W, const float* b, int N, int K,
            int OC, bool accumulate = false) {
    if (!u.mixed()) {
        matmul_forward(static_cast<float*>(out), static_cast<const float*>(in), static_cast<const float*>(W), b, N, K, OC,
                       accumulate, u.precision);
        return;
    }
    SHARDLM_CHECK(!accumulate, "linear: mixed precision never accumulates onto its output");
    matmul_forward(out, out_t, in, W, u.act, b, N, K, OC);
}

void linear_backward(const UnitContext& u, float* dinp, float* dW, float* db, const float* dout, const void* in,
                     const void* W, int N, int K, int OC, bool acc) {
    if (!u.mixed())
        matmul_backward(dinp, dW, db, dout, static_cast<const float*>(in), static_cast<const float*>(W), N, K, OC, acc,
                        u.precision);
    else
        matmul_backward(dinp, dW, db, dout, in, W, u.act, N, K, OC, acc);
}

// The input of a column-parallel linear: x itself (f: identity forward), or under sequence
// parallelism its all-gather into scratch (forward all-gather; backward reduce-scatter). x is of
// type t (an activation, or an fp32 gradient).
const void* gather_input(const UnitContext& u, const void* x_local, int N, DType t) {
    if (!u.sp) return x_local;
    const size_t Nl = size_t(u.rows(N)), C = size_t(u.cfg->n_embd);
    u.tp->all_gather_bytes(x_local, u.scratch->gathered.data(), Nl * C * dtype_bytes(t));
    return u.scratch->gathered.data();
}

// The input gradient of a column-parallel linear, partial over the group in scratch.dln (N, C):
// f's backward all-reduce, or under sequence parallelism a reduce-scatter to this rank's rows.
// Returns where the (Nl, C) result is.
const float* reduce_input_grad(const UnitContext& u, int N) {
    float* d = u.scratch->dln.data();
    const size_t C = size_t(u.cfg->n_embd);
    if (u.tp_size() == 1) return d;
    if (!u.sp) {
        u.tp->all_reduce_sum(d, size_t(N) * C);
        return d;
    }
    u.tp->reduce_scatter_sum(d, u.scratch->reduced.data(), size_t(u.rows(N)) * C);
    return u.scratch->reduced.data();
}

// out (Nl, C) = resid + b + in (N, K) @ W (C, K)^T: a row-parallel linear onto the residual stream.
// g: the partial products are all-reduced (or reduce-scattered to this rank's rows under sequence
// parallelism) and the bias added once, after the reduction. fp32 on one rank keeps the one-process
// order: out = (resid + b) + in @ W^T in one GEMM.
void row_parallel_residual(const UnitContext& u, void* out, const void* in, const void* W, const float* b,
                           const void* resid, int N, int K) {
    const int C = u.cfg->n_embd;
    if (u.tp_size() == 1 && !u.mixed()) {
        if (out != resid) std::memcpy(out, resid, sizeof(float) * size_t(N) * C);
        linear(u, out, DType::F32, in, W, b, N, K, C, true);
        return;
    }
    float* partial = u.scratch->dln.data();
    linear(u, partial, DType::F32, in, W, nullptr, N, K, C);
    const int Nl = u.rows(N);
    if (u.sp) {
        u.tp->reduce_scatter_sum(partial, u.scratch->reduced.data(), size_t(Nl) * C);
        partial = u.scratch->reduced.data();
    } else if (u.tp_size() > 1) {
        u.tp->all_reduce_sum(partial, size_t(N) * C);
    }
    residual_add(out, resid, u.act, b, partial, Nl, C);
}

// d(output) of a row-parallel linear as its GEMMs need it: the full (N, C) gradient (g's backward is
// the identity; under sequence parallelism the conjugate all-gather of this rank's rows).
const float* row_parallel_dout(const UnitContext& u, const float* dres, int N) {
    return static_cast<const float*>(gather_input(u, dres, N, DType::F32));
}

}  // namespace

// ---- block --------------------------------------------------------------------------------------

void block_forward(const UnitContext& u, const BlockWeights& w, BlockActs& a, const void* x, void* y, int B, int T,
                   KvLayer* kv, int pos) {
    const int C = u.cfg->n_embd, tp = u.tp_size(), Ct = C / tp, NHt = u.cfg->n_head / tp, F = 4 * Ct;
    const int N = B * T, Nl = u.rows(N);
    const DType t = u.act;
    layernorm_forward(a.ln1.data(), t, a.ln1_mean.data(), a.ln1_rstd.data(), x, t, w.vec(kLn1W), w.vec(kLn1B), Nl, C,
                      u.cfg->ln_eps);
    linear(u, a.qkv.data(), t, gather_input(u, a.ln1.data(), N, t), w.w[kQkvW], w.vec(kQkvB), N, C, 3 * Ct);
    if (kv) {
        SHARDLM_CHECK(!u.mixed() && tp == 1, "decoding runs in fp32 on one rank");
        attention_forward_cached(a.atty.f32(), a.qkv.f32(), kv->k, kv->v, pos, T, Ct, NHt, kv->scores);
    } else {
        // selective recomputation keeps no probabilities: they go to scratch, recomputed in backward
        void* att = a.att.size() ? a.att.data() : u.scratch->att.data();
        attention_forward(a.atty.data(), att, t, a.qkv.data(), t, B, T, Ct, NHt);
    }
    row_parallel_residual(u, a.resid2.data(), a.atty.data(), w.w[kAttnProjW], w.vec(kAttnProjB), x, N, Ct);
    layernorm_forward(a.ln2.data(), t, a.ln2_mean.data(), a.ln2_rstd.data(), a.resid2.data(), t, w.vec(kLn2W),
                      w.vec(kLn2B), Nl, C, u.cfg->ln_eps);
    linear(u, a.fch.data(), t, gather_input(u, a.ln2.data(), N, t), w.w[kFcW], w.vec(kFcB), N, C, F);
    gelu_forward(a.fch_gelu.data(), a.fch.data(), t, size_t(N) * F);
    row_parallel_residual(u, y, a.fch_gelu.data(), w.w[kFcProjW], w.vec(kFcProjB), a.resid2.data(), N, F);
}

void block_backward(const UnitContext& u, const BlockWeights& w, const BlockGrads& gt, const BlockActs& a,
                    const void* x, float* dres, int B, int T, bool acc) {
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

// ---- embedding ----------------------------------------------------------------------------------

void embedding_forward(const UnitContext& u, const void* wte, const void* wpe, const int* tokens, void* x0, int B,
                       int T) {
    const int C = u.cfg->n_embd, tp = u.tp_size(), N = B * T, Nl = u.rows(N);
    if (tp == 1) {
        encoder_forward(x0, u.act, tokens, wte, wpe, u.wt, B, T, C);
        return;
    }
    // vocabulary-parallel: each rank looks up the tokens in its rows (zeros elsewhere), then g sums
    // them (one non-zero term per row: exact); the position embedding is added after.
    const int Vt = u.cfg->padded_vocab(tp) / tp, v0 = u.tp->rank() * Vt;
    float* sum = u.mixed() ? u.scratch->dln.data() : static_cast<float*>(x0);  // fp32 until the end
    if (!u.sp) {
        kernels::embedding_forward(sum, tokens, wte, u.wt, v0, v0 + Vt, N, C);
        u.tp->all_reduce_sum(sum, size_t(N) * C);
        position_forward(sum, wpe, u.wt, 0, N, T, C);
    } else {
        float* full = u.scratch->dln.data();
        if (u.mixed()) sum = u.scratch->reduced.data();
        kernels::embedding_forward(full, tokens, wte, u.wt, v0, v0 + Vt, N, C);
        u.tp->reduce_scatter_sum(full, sum, size_t(Nl) * C);
        position_forward(sum, wpe, u.wt, u.tp->rank() * Nl, Nl, T, C);
    }
    if (u.mixed()) convert_from_f32(x0, u.act, sum, size_t(Nl) * C);
}

void embedding_backward(const UnitContext& u, float* dwte, float* dwpe, const float* dx0, const int* tokens, int B,
                        int T) {
    const int C = u.cfg->n_embd, tp = u.tp_size(), N = B * T, Nl = u.rows(N);
    if (tp == 1) {
        encoder_backward(dwte, dwpe, dx0, tokens, B, T, C);
        return;
    }
    const int Vt = u.cfg->padded_vocab(tp) / tp, v0 = u.tp->rank() * Vt;
    kernels::embedding_backward(dwte, static_cast<const float*>(gather_input(u, dx0, N, DType::F32)), tokens, v0,
                                v0 + Vt, N, C);
    position_backward(dwpe, dx0, u.sp ? u.tp->rank() * Nl : 0, Nl, T, C);
}

// ---- head -----------------------------------------------------------------------------------------

double head_forward(const UnitContext& u, const float* lnf_w, const float* lnf_b, const void* wte, HeadActs& a,
                    const void* xL, const int* targets, int B, int T, float dloss) {
    const int C = u.cfg->n_embd, tp = u.tp_size(), N = B * T, Nl = u.rows(N);
    const int V = u.cfg->vocab_size, Vt = u.cfg->padded_vocab(tp) / tp, v0 = u.tp->rank() * Vt;
    layernorm_forward(a.lnf.data(), u.act, a.lnf_mean.data(), a.lnf_rstd.data(), xL, u.act, lnf_w, lnf_b, Nl, C,
                      u.cfg->ln_eps);
    unsigned short* d16 = u.bf16_products() ? a.dlogits_bf16.data() : nullptr;
    if (a.logits.size() == 0) {
        // chunked head: the fp32 logits of kHeadRows rows at a time in scratch, and from them the
        // loss and the bf16 gradient of those rows
        SHARDLM_CHECK(targets, "the head keeps no logits with bf16 products: give targets");
        std::memcpy(a.targets.data(), targets, sizeof(int) * size_t(N));
        float* lg = u.scratch->logits.data();
        for (int r0 = 0; r0 < N; r0 += kHeadRows) {
            const int rows = std::min(kHeadRows, N - r0);
            linear(u, lg, DType::F32, at(a.lnf.data(), u.act, size_t(r0) * C), wte, nullptr, rows, C, Vt);
            if (dloss != 0.0f)
                crossentropy_forward_backward(lg, a.losses.data() + r0, targets + r0, rows, V, Vt, dloss,
                                              d16 + size_t(r0) * Vt);
            else
                crossentropy_forward(a.losses.data() + r0, lg, targets + r0, rows, V, Vt);
        }
    } else {
        // logits (fp32) = lnf @ wte^T over this rank's (padded) vocabulary rows; padded rows of wte are zero
        linear(u, a.logits.data(), DType::F32, gather_input(u, a.lnf.data(), N, u.act), wte, nullptr, N, C, Vt);
        if (!targets) return 0.0;
        std::memcpy(a.targets.data(), targets, sizeof(int) * size_t(N));
        if (tp == 1) {
            if (dloss != 0.0f)
                crossentropy_forward_backward(a.logits.data(), a.losses.data(), targets, N, V, Vt, dloss, d16);
            else
                crossentropy_forward(a.losses.data(), a.logits.data(), targets, N, V, Vt);
        } else {
            const int Vreal = std::max(0, std::min(Vt, V - v0));
            float* mx = u.scratch->ce.data();
            float* stats = mx + N;  // [sum of exp | target logit]
            vocab_parallel_max(mx, a.logits.data(), N, Vreal, Vt);
            u.tp->all_reduce_max(mx, size_t(N));
            vocab_parallel_sums(stats, a.logits.data(), targets, mx, N, Vreal, Vt, v0, dloss != 0.0f);
            u.tp->all_reduce_sum(stats, 2 * size_t(N));
            vocab_parallel_loss(a.losses.data(), mx, stats, N);
            if (dloss != 0.0f) vocab_parallel_grad(a.logits.data(), targets, stats, N, Vreal, Vt, v0, dloss, d16);
        }
    }
    double s = 0.0;
    for (int i = 0; i < N; i++) s += a.losses[size_t(i)];
    return s;
}

void head_backward(const UnitContext& u, const float* lnf_w, const void* wte, float* dlnf_w, float* dlnf_b, float* dwte,
                   HeadActs& a, const void* xL, float* dxL, int B, int T, bool accumulate) {
    const int C = u.cfg->n_embd, tp = u.tp_size(), N = B * T, Nl = u.rows(N);
    const int Vt = u.cfg->padded_vocab(tp) / tp;
    float* dln = u.scratch->dln.data();
    const void* lnf = gather_input(u, a.lnf.data(), N, u.act);
    if (u.act == DType::BF16) {  // the classifier wrote the gradient in bf16; lnf and wte are bf16 already
        const auto* d = a.dlogits_bf16.data();
        const auto* x = static_cast<const unsigned short*>(lnf);
        const auto* W = static_cast<const unsigned short*>(wte);
        gemm_bf16(dln, {d, Vt, 1}, {W, C, 1}, N, C, Vt, false);
        gemm_bf16(dwte, {d, 1, Vt}, {x, C, 1}, Vt, C, N, accumulate);
    } else if (u.bf16_products()) {
        matmul_backward_bf16(dln, dwte, a.dlogits_bf16.data(), static_cast<const float*>(lnf),
                             static_cast<const float*>(wte), N, C, Vt, accumulate);
    } else {
        linear_backward(u, dln, dwte, nullptr, a.logits.data(), lnf, wte, N, C, Vt, accumulate);
    }
    std::memset(dxL, 0, sizeof(float) * size_t(Nl) * C);
    layernorm_backward(dxL, dlnf_w, dlnf_b, reduce_input_grad(u, N), xL, u.act, lnf_w, a.lnf_mean.data(),
                       a.lnf_rstd.data(), Nl, C);
}

}  // namespace shardlm::model
