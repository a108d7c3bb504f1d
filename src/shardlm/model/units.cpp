#include "shardlm/model/units.h"

#include <algorithm>
#include <cstring>

#include "shardlm/kernels/attention.h"
#include "shardlm/kernels/crossentropy.h"
#include "shardlm/kernels/encoder.h"
#include "shardlm/kernels/gelu.h"
#include "shardlm/kernels/layernorm.h"

namespace shardlm::model {

using namespace shardlm::kernels;

// ---- buffers ----------------------------------------------------------------------------------

void Scratch::allocate(const GptConfig& c, int B, int T, int tp, int threads) {
    const size_t N = size_t(B) * T, C = size_t(c.n_embd), Ct = C / size_t(tp);
    gathered.resize(tp > 1 ? N * C : 0);
    dln.resize(N * C);
    reduced.resize(tp > 1 ? N * C / size_t(tp) : 0);
    dqkv.resize(N * 3 * Ct);
    datty.resize(N * Ct);
    dfch.resize(N * 4 * Ct);
    attn.resize(attention_scratch_floats(T, threads > 0 ? threads : 1));
    ce.resize(tp > 1 ? 3 * N : 0);
}

size_t Scratch::bytes() const {
    return gathered.bytes() + dln.bytes() + reduced.bytes() + dqkv.bytes() + datty.bytes() + dfch.bytes() +
           attn.bytes() + ce.bytes();
}

void BlockActs::allocate(const GptConfig& c, int B, int T, int tp, bool sp, bool for_decoding) {
    const size_t N = size_t(B) * T, Nl = sp ? N / size_t(tp) : N, C = size_t(c.n_embd), Ct = C / size_t(tp);
    ln1.resize(Nl * C), ln1_mean.resize(Nl), ln1_rstd.resize(Nl);
    qkv.resize(N * 3 * Ct);
    att.resize(for_decoding ? 0 : size_t(B) * size_t(c.n_head / tp) * size_t(T) * size_t(T));
    atty.resize(N * Ct);
    resid2.resize(Nl * C);
    ln2.resize(Nl * C), ln2_mean.resize(Nl), ln2_rstd.resize(Nl);
    fch.resize(N * 4 * Ct), fch_gelu.resize(N * 4 * Ct);
}

size_t BlockActs::bytes() const {
    return ln1.bytes() + ln1_mean.bytes() + ln1_rstd.bytes() + qkv.bytes() + att.bytes() + atty.bytes() +
           resid2.bytes() + ln2.bytes() + ln2_mean.bytes() + ln2_rstd.bytes() + fch.bytes() + fch_gelu.bytes();
}

void HeadActs::allocate(const GptConfig& c, int B, int T, int tp, bool sp, bool bf16) {
    const size_t N = size_t(B) * T, Nl = sp ? N / size_t(tp) : N, C = size_t(c.n_embd);
    const size_t Vt = size_t(c.padded_vocab(tp) / tp);
    lnf.resize(Nl * C), lnf_mean.resize(Nl), lnf_rstd.resize(Nl);
    logits.resize(N * Vt);
    losses.resize(N);
    targets.resize(N);
    dlogits_bf16.resize(bf16 ? N * Vt : 0);
}

size_t HeadActs::bytes() const {
    return lnf.bytes() + lnf_mean.bytes() + lnf_rstd.bytes() + logits.bytes() + losses.bytes() + targets.bytes() +
           dlogits_bf16.bytes();
}

// ---- the conjugate operators --------------------------------------------------------------------

namespace {

// The input of a column-parallel linear: x itself (f: identity forward), or under sequence
// parallelism its all-gather into scratch (forward all-gather; backward reduce-scatter).
const float* gather_input(const UnitContext& u, const float* x_local, int N) {
    if (!u.sp) return x_local;
    const size_t Nl = size_t(u.rows(N)), C = size_t(u.cfg->n_embd);
    u.tp->all_gather(x_local, u.scratch->gathered.data(), Nl * C);
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
// parallelism) and the bias added once, after the reduction. One rank keeps the one-process order:
// out = (resid + b) + in @ W^T in one GEMM.
void row_parallel_residual(const UnitContext& u, float* out, const float* in, const float* W, const float* b,
                           const float* resid, int N, int K) {
    const int C = u.cfg->n_embd;
    if (u.tp_size() == 1) {
        if (out != resid) std::memcpy(out, resid, sizeof(float) * size_t(N) * C);
        matmul_forward(out, in, W, b, N, K, C, true, u.precision);
        return;
    }
    float* partial = u.scratch->dln.data();
    matmul_forward(partial, in, W, nullptr, N, K, C, false, u.precision);
    const int Nl = u.rows(N);
    if (u.sp) {
        u.tp->reduce_scatter_sum(partial, u.scratch->reduced.data(), size_t(Nl) * C);
        partial = u.scratch->reduced.data();
    } else {
        u.tp->all_reduce_sum(partial, size_t(N) * C);
    }
    residual_add(out, resid, b, partial, Nl, C);
}

// d(output) of a row-parallel linear as its GEMMs need it: the full (N, C) gradient (g's backward is
// the identity; under sequence parallelism the conjugate all-gather of this rank's rows).
const float* row_parallel_dout(const UnitContext& u, const float* dres, int N) { return gather_input(u, dres, N); }

}  // namespace

// ---- block --------------------------------------------------------------------------------------

void block_forward(const UnitContext& u, const BlockWeights& wt, BlockActs& a, const float* x, float* y, int B, int T,
                   KvLayer* kv, int pos) {
    const auto& w = wt.w;
    const int C = u.cfg->n_embd, tp = u.tp_size(), Ct = C / tp, NHt = u.cfg->n_head / tp, F = 4 * Ct;
    const int N = B * T, Nl = u.rows(N);
    layernorm_forward(a.ln1.data(), a.ln1_mean.data(), a.ln1_rstd.data(), x, w[kLn1W], w[kLn1B], Nl, C, u.cfg->ln_eps);
    matmul_forward(a.qkv.data(), gather_input(u, a.ln1.data(), N), w[kQkvW], w[kQkvB], N, C, 3 * Ct, false, u.precision);
    if (kv)
        attention_forward_cached(a.atty.data(), a.qkv.data(), kv->k, kv->v, pos, T, Ct, NHt, kv->scores);
    else
        attention_forward(a.atty.data(), a.att.data(), a.qkv.data(), B, T, Ct, NHt);
    row_parallel_residual(u, a.resid2.data(), a.atty.data(), w[kAttnProjW], w[kAttnProjB], x, N, Ct);
    layernorm_forward(a.ln2.data(), a.ln2_mean.data(), a.ln2_rstd.data(), a.resid2.data(), w[kLn2W], w[kLn2B], Nl, C,
                      u.cfg->ln_eps);
    matmul_forward(a.fch.data(), gather_input(u, a.ln2.data(), N), w[kFcW], w[kFcB], N, C, F, false, u.precision);
    gelu_forward(a.fch_gelu.data(), a.fch.data(), size_t(N) * F);
    row_parallel_residual(u, y, a.fch_gelu.data(), w[kFcProjW], w[kFcProjB], a.resid2.data(), N, F);
}

void block_backward(const UnitContext& u, const BlockWeights& wt, const BlockGrads& gt, const BlockActs& a,
                    const float* x, float* dres, int B, int T, bool acc) {
    const auto& w = wt.w;
    const auto& g = gt.g;
    Scratch& s = *u.scratch;
    const int C = u.cfg->n_embd, tp = u.tp_size(), Ct = C / tp, NHt = u.cfg->n_head / tp, F = 4 * Ct;
    const int N = B * T, Nl = u.rows(N);
    // Row-parallel biases are added on this rank's rows: under sequence parallelism their gradient
    // comes from those rows only (and is summed over the group with the other replicated ones).
    float* const fcproj_b = u.sp ? nullptr : g[kFcProjB];
    float* const proj_b = u.sp ? nullptr : g[kAttnProjB];
    // MLP: y = resid2 + gelu(ln2(resid2) @ Wfc^T + bfc) @ Wfp^T + bfp
    matmul_backward(s.dfch.data(), g[kFcProjW], fcproj_b, row_parallel_dout(u, dres, N), a.fch_gelu.data(),
                    w[kFcProjW], N, F, C, acc, u.precision);
    if (u.sp) bias_backward(g[kFcProjB], dres, Nl, C);
    gelu_backward(s.dfch.data(), a.fch.data(), s.dfch.data(), size_t(N) * F);
    matmul_backward(s.dln.data(), g[kFcW], g[kFcB], s.dfch.data(), gather_input(u, a.ln2.data(), N), w[kFcW], N, C, F,
                    acc, u.precision);
    layernorm_backward(dres, g[kLn2W], g[kLn2B], reduce_input_grad(u, N), a.resid2.data(), w[kLn2W], a.ln2_mean.data(),
                       a.ln2_rstd.data(), Nl, C);
    // attention: resid2 = x + attention(ln1(x)) @ Wp^T + bp
    matmul_backward(s.datty.data(), g[kAttnProjW], proj_b, row_parallel_dout(u, dres, N), a.atty.data(), w[kAttnProjW],
                    N, Ct, C, acc, u.precision);
    if (u.sp) bias_backward(g[kAttnProjB], dres, Nl, C);
    attention_backward(s.dqkv.data(), s.attn.data(), s.datty.data(), a.qkv.data(), a.att.data(), B, T, Ct, NHt);
    matmul_backward(s.dln.data(), g[kQkvW], g[kQkvB], s.dqkv.data(), gather_input(u, a.ln1.data(), N), w[kQkvW], N, C,
                    3 * Ct, acc, u.precision);
    layernorm_backward(dres, g[kLn1W], g[kLn1B], reduce_input_grad(u, N), x, w[kLn1W], a.ln1_mean.data(),
                       a.ln1_rstd.data(), Nl, C);
}

// ---- embedding ----------------------------------------------------------------------------------

void embedding_forward(const UnitContext& u, const float* wte, const float* wpe, const int* tokens, float* x0, int B,
                       int T) {
    const int C = u.cfg->n_embd, tp = u.tp_size(), N = B * T, Nl = u.rows(N);
    if (tp == 1) {
        encoder_forward(x0, tokens, wte, wpe, B, T, C);
        return;
    }
    // vocabulary-parallel: each rank looks up the tokens in its rows (zeros elsewhere), then g sums
    // them (one non-zero term per row: exact); the position embedding is added after.
    const int Vt = u.cfg->padded_vocab(tp) / tp, v0 = u.tp->rank() * Vt;
    if (!u.sp) {
        kernels::embedding_forward(x0, tokens, wte, v0, v0 + Vt, N, C);
        u.tp->all_reduce_sum(x0, size_t(N) * C);
        position_forward(x0, wpe, 0, N, T, C);
    } else {
        float* full = u.scratch->dln.data();
        kernels::embedding_forward(full, tokens, wte, v0, v0 + Vt, N, C);
        u.tp->reduce_scatter_sum(full, x0, size_t(Nl) * C);
        position_forward(x0, wpe, u.tp->rank() * Nl, Nl, T, C);
    }
}

void embedding_backward(const UnitContext& u, float* dwte, float* dwpe, const float* dx0, const int* tokens, int B,
                        int T) {
    const int C = u.cfg->n_embd, tp = u.tp_size(), N = B * T, Nl = u.rows(N);
    if (tp == 1) {
        encoder_backward(dwte, dwpe, dx0, tokens, B, T, C);
        return;
    }
    const int Vt = u.cfg->padded_vocab(tp) / tp, v0 = u.tp->rank() * Vt;
    kernels::embedding_backward(dwte, gather_input(u, dx0, N), tokens, v0, v0 + Vt, N, C);
    position_backward(dwpe, dx0, u.sp ? u.tp->rank() * Nl : 0, Nl, T, C);
}

// ---- head -----------------------------------------------------------------------------------------

double head_forward(const UnitContext& u, const float* lnf_w, const float* lnf_b, const float* wte, HeadActs& a,
                    const float* xL, const int* targets, int B, int T, float dloss) {
    const int C = u.cfg->n_embd, tp = u.tp_size(), N = B * T, Nl = u.rows(N);
    const int V = u.cfg->vocab_size, Vt = u.cfg->padded_vocab(tp) / tp, v0 = u.tp->rank() * Vt;
    layernorm_forward(a.lnf.data(), a.lnf_mean.data(), a.lnf_rstd.data(), xL, lnf_w, lnf_b, Nl, C, u.cfg->ln_eps);
    // logits = lnf @ wte^T over this rank's (padded) vocabulary rows; padded rows of wte are zero
    matmul_forward(a.logits.data(), gather_input(u, a.lnf.data(), N), wte, nullptr, N, C, Vt, false, u.precision);
    if (!targets) return 0.0;
    std::memcpy(a.targets.data(), targets, sizeof(int) * size_t(N));
    const bool bf16 = u.precision == MatmulPrecision::bf16;
    if (tp == 1) {
        if (dloss != 0.0f)
            crossentropy_forward_backward(a.logits.data(), a.losses.data(), targets, N, V, Vt, dloss,
                                          bf16 ? a.dlogits_bf16.data() : nullptr);
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
        if (dloss != 0.0f)
            vocab_parallel_grad(a.logits.data(), targets, stats, N, Vreal, Vt, v0, dloss,
                                bf16 ? a.dlogits_bf16.data() : nullptr);
    }
    double s = 0.0;
    for (int i = 0; i < N; i++) s += a.losses[size_t(i)];
    return s;
}

void head_backward(const UnitContext& u, const float* lnf_w, const float* wte, float* dlnf_w, float* dlnf_b, float* dwte,
                   HeadActs& a, const float* xL, float* dxL, int B, int T, bool accumulate) {
    const int C = u.cfg->n_embd, tp = u.tp_size(), N = B * T, Nl = u.rows(N);
    const int Vt = u.cfg->padded_vocab(tp) / tp;
    float* dln = u.scratch->dln.data();
    const float* lnf = gather_input(u, a.lnf.data(), N);
    if (u.precision == MatmulPrecision::bf16)
        matmul_backward_bf16(dln, dwte, a.dlogits_bf16.data(), lnf, wte, N, C, Vt, accumulate);
    else
        matmul_backward(dln, dwte, nullptr, a.logits.data(), lnf, wte, N, C, Vt, accumulate);
    std::memset(dxL, 0, sizeof(float) * size_t(Nl) * C);
    layernorm_backward(dxL, dlnf_w, dlnf_b, reduce_input_grad(u, N), xL, lnf_w, a.lnf_mean.data(), a.lnf_rstd.data(),
                       Nl, C);
}

}  // namespace shardlm::model
