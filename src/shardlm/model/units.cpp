#include "shardlm/model/units.h"

#include <algorithm>
#include <cstring>

#include "shardlm/core/check.h"
#include "shardlm/cost/shape.h"
#include "shardlm/kernels/attention.h"
#include "shardlm/kernels/gemm/gemm.h"


namespace shardlm::model {

using namespace shardlm::kernels;

// ---- buffers ----------------------------------------------------------------------------------

namespace {

// The dims of the layers a buffer serves: a dense layer's MLP, an MoE layer's shared experts, or the wider.
BlockDims serving_dims(const GptConfig& c, int tp, bool dense, bool moe) {
    BlockDims d = block_dims(c, tp, moe && !dense);
    if (dense && moe && c.has_moe()) {
        const BlockDims s = block_dims(c, tp, true);
        d.F = std::max(d.F, s.F), d.Ffc = std::max(d.Ffc, s.Ffc);
    }
    return d;
}

}  // namespace

BlockDims block_dims(const GptConfig& c, int tp, bool moe) {
    BlockDims d;
    d.C = c.n_embd, d.HS = c.head_dim(), d.NHt = c.n_head / tp, d.KVt = c.kv_heads() / tp;
    d.Ct = d.NHt * d.HS, d.Wqkv = (d.NHt + 2 * d.KVt) * d.HS;
    d.F = (moe ? c.moe.n_shared * c.expert_ffn() : c.ffn()) / tp, d.Ffc = c.mlp == Mlp::SwiGLU ? 2 * d.F : d.F;
    return d;
}

void Scratch::allocate(const GptConfig& c, int B, int T, int tp, int threads, DType act, Recompute r, bool sp,
                       bool fused, int ep) {
    const size_t N = size_t(B) * T, C = size_t(c.n_embd), Ct = C / size_t(tp);
    gathered.resize(tp > 1 ? N * C : 0);
    dln.resize(N * C);
    reduced.resize(tp > 1 ? N * C / size_t(tp) : 0);
    datty.resize(N * Ct);
    const int F = std::max(block_dims(c, tp).F, c.has_moe() ? block_dims(c, tp, true).F : 0);
    dh.resize(c.mlp == Mlp::SwiGLU ? N * size_t(F) : 0);
    if (c.has_moe()) moe.allocate(c, B, T, tp, ep);
    attn.resize(fused ? 0 : attention_scratch_floats(T, threads > 0 ? threads : 1));
    ce.resize(tp > 1 ? 3 * N : 0);
    const size_t eb = dtype_bytes(act);
    const bool recompute_att = r == Recompute::Selective && !fused;  // fused attention keeps its row statistics
    att.resize(recompute_att ? size_t(B) * size_t(c.n_head / tp) * size_t(T) * size_t(T) : 0, eb);
    atty.resize(recompute_att ? N * Ct : 0, eb);
    recomputed.resize(r == Recompute::Full ? (sp && tp > 1 ? N / size_t(tp) : N) * C : 0, eb);  // (Nl, C)
    logits.resize(0);
}

size_t Scratch::bytes() const {
    return gathered.bytes() + dln.bytes() + reduced.bytes() + datty.bytes() + attn.bytes() + ce.bytes() + att.bytes() +
           atty.bytes() + logits.bytes() + recomputed.bytes() + dh.bytes() + cp.bytes() + moe.bytes();
}

void BlockKeep::allocate(const GptConfig& c, int B, int T, int tp, bool sp, bool bf16_products, bool with_moe, int ep) {
    const size_t N = size_t(B) * T, Nl = sp ? N / size_t(tp) : N, C = size_t(c.n_embd);
    const BlockDims d = serving_dims(c, tp, true, with_moe);
    if (with_moe) moe.allocate(c, B, T, tp, ep);
    dy_fcproj.resize(N * C), dy_proj.resize(N * C);
    dfch.resize(N * size_t(d.Ffc)), dqkv.resize(N * size_t(d.Wqkv));
    dln2.resize(Nl * C), dln1.resize(Nl * C);
    dqk.resize(c.qk_norm ? N * size_t(d.Ct + d.KVt * d.HS) : 0);
    size_copies(c, B, T, tp, bf16_products);
}

void BlockKeep::size_copies(const GptConfig& c, int B, int T, int tp, bool bf16_products) {
    const size_t C = size_t(c.n_embd), b = bf16_products && dqkv.size() ? size_t(B) * T : 0;
    const BlockDims d = serving_dims(c, tp, true, moe.dz.size() > 0);
    dy_fcproj16.resize(b * C), dy_proj16.resize(b * C);
    dfch16.resize(b * size_t(d.Ffc)), dqkv16.resize(b * size_t(d.Wqkv));
}

size_t BlockKeep::bytes() const {
    return dy_fcproj.bytes() + dy_proj.bytes() + dfch.bytes() + dqkv.bytes() + dln2.bytes() + dln1.bytes() +
           dy_fcproj16.bytes() + dy_proj16.bytes() + dfch16.bytes() + dqkv16.bytes() + dqk.bytes() + moe.bytes();
}

void HeadKeep::allocate(const GptConfig& c, int B, int T, int tp, bool sp) {
    const size_t N = size_t(B) * T, Nl = sp ? N / size_t(tp) : N;
    dlnf.resize(Nl * size_t(c.n_embd));
}

void BlockActs::allocate(const GptConfig& c, int B, int T, int tp, bool sp, DType act, bool keep_att, bool fused,
                         bool with_moe, bool dense, int ep) {
    const size_t N = size_t(B) * T, Nl = sp ? N / size_t(tp) : N, C = size_t(c.n_embd);
    const BlockDims d = serving_dims(c, tp, dense, with_moe);
    if (with_moe) moe.allocate(c, B, T, tp, act, ep);
    const size_t eb = dtype_bytes(act), nm = c.norm == Norm::LayerNorm ? Nl : 0;  // RMSNorm keeps no mean
    ln1.resize(Nl * C, eb), ln1_mean.resize(nm), ln1_rstd.resize(Nl);
    qkv.resize(N * size_t(d.Wqkv), eb);
    qk_pre.resize(c.qk_norm ? N * size_t(d.Ct + d.KVt * d.HS) : 0, eb), qk_rstd.resize(c.qk_norm ? 2 * N : 0);
    att.resize(keep_att && !fused ? size_t(B) * size_t(d.NHt) * size_t(T) * size_t(T) : 0, eb);
    lse.resize(fused ? size_t(B) * size_t(d.NHt) * size_t(T) : 0);
    atty.resize(N * size_t(d.Ct), eb);
    resid2.resize(Nl * C, eb);
    ln2.resize(Nl * C, eb), ln2_mean.resize(nm), ln2_rstd.resize(Nl);
    fch.resize(N * size_t(d.Ffc), eb), fch_gelu.resize(N * size_t(d.F), eb);
}

size_t BlockActs::stats_bytes() const {
    return ln1_mean.bytes() + ln1_rstd.bytes() + ln2_mean.bytes() + ln2_rstd.bytes();
}

size_t BlockActs::bytes() const {
    return ln1.bytes() + qkv.bytes() + att.bytes() + lse.bytes() + atty.bytes() + resid2.bytes() + ln2.bytes() +
           fch.bytes() + fch_gelu.bytes() + stats_bytes() + qk_pre.bytes() + qk_rstd.bytes() + moe.bytes();
}

void HeadActs::allocate(const GptConfig& c, int B, int T, int tp, bool sp, DType act, bool bf16_grad, bool chunked) {
    const size_t N = size_t(B) * T, Nl = sp ? N / size_t(tp) : N, C = size_t(c.n_embd);
    const size_t Vt = size_t(c.padded_vocab(tp) / tp);
    lnf.resize(Nl * C, dtype_bytes(act)), lnf_mean.resize(c.norm == Norm::LayerNorm ? Nl : 0), lnf_rstd.resize(Nl);
    logits.resize(chunked ? 0 : N * Vt);
    losses.resize(N);
    targets.resize(N);
    dlogits_bf16.resize(bf16_grad ? N * Vt : 0);
}

size_t HeadActs::bytes() const {
    return lnf.bytes() + lnf_mean.bytes() + lnf_rstd.bytes() + logits.bytes() + losses.bytes() + targets.bytes() +
           dlogits_bf16.bytes();
}

}  // namespace shardlm::model
