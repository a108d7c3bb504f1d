#include "shardlm/model/units.h"

#include "shardlm/cost/shape.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <vector>

#include "shardlm/core/check.h"
#include "shardlm/kernels/attention.h"
#include "shardlm/kernels/encoder.h"
#include "shardlm/kernels/layernorm.h"
#include "shardlm/model/unit_ops.h"

namespace shardlm::model {

using namespace shardlm::kernels;

// ---- buffers ----------------------------------------------------------------------------------

BlockDims block_dims(const GptConfig& c, int tp) {
    BlockDims d;
    d.C = c.n_embd, d.HS = c.head_dim(), d.NHt = c.n_head / tp, d.KVt = c.kv_heads() / tp;
    d.Ct = d.NHt * d.HS, d.Wqkv = (d.NHt + 2 * d.KVt) * d.HS;
    d.F = c.ffn() / tp, d.Ffc = c.mlp == Mlp::SwiGLU ? 2 * d.F : d.F;
    return d;
}

void Scratch::allocate(const GptConfig& c, int B, int T, int tp, int threads, DType act, Recompute r, bool sp,
                       bool fused) {
    const size_t N = size_t(B) * T, C = size_t(c.n_embd), Ct = C / size_t(tp);
    gathered.resize(tp > 1 ? N * C : 0);
    dln.resize(N * C);
    reduced.resize(tp > 1 ? N * C / size_t(tp) : 0);
    datty.resize(N * Ct);
    dh.resize(c.mlp == Mlp::SwiGLU ? N * size_t(block_dims(c, tp).F) : 0);
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
           atty.bytes() + logits.bytes() + recomputed.bytes() + dh.bytes();
}

void BlockKeep::allocate(const GptConfig& c, int B, int T, int tp, bool sp, bool bf16_products) {
    const size_t N = size_t(B) * T, Nl = sp ? N / size_t(tp) : N, C = size_t(c.n_embd);
    const BlockDims d = block_dims(c, tp);
    dy_fcproj.resize(N * C), dy_proj.resize(N * C);
    dfch.resize(N * size_t(d.Ffc)), dqkv.resize(N * size_t(d.Wqkv));
    dln2.resize(Nl * C), dln1.resize(Nl * C);
    size_copies(c, B, T, tp, bf16_products);
}

void BlockKeep::size_copies(const GptConfig& c, int B, int T, int tp, bool bf16_products) {
    const size_t C = size_t(c.n_embd), b = bf16_products && dfch.size() ? size_t(B) * T : 0;
    const BlockDims d = block_dims(c, tp);
    dy_fcproj16.resize(b * C), dy_proj16.resize(b * C);
    dfch16.resize(b * size_t(d.Ffc)), dqkv16.resize(b * size_t(d.Wqkv));
}

size_t BlockKeep::bytes() const {
    return dy_fcproj.bytes() + dy_proj.bytes() + dfch.bytes() + dqkv.bytes() + dln2.bytes() + dln1.bytes() +
           dy_fcproj16.bytes() + dy_proj16.bytes() + dfch16.bytes() + dqkv16.bytes();
}

void HeadKeep::allocate(const GptConfig& c, int B, int T, int tp, bool sp) {
    const size_t N = size_t(B) * T, Nl = sp ? N / size_t(tp) : N;
    dlnf.resize(Nl * size_t(c.n_embd));
}

void BlockActs::allocate(const GptConfig& c, int B, int T, int tp, bool sp, DType act, bool keep_att, bool fused) {
    const size_t N = size_t(B) * T, Nl = sp ? N / size_t(tp) : N, C = size_t(c.n_embd);
    const BlockDims d = block_dims(c, tp);
    const size_t eb = dtype_bytes(act), nm = c.norm == Norm::LayerNorm ? Nl : 0;  // RMSNorm keeps no mean
    ln1.resize(Nl * C, eb), ln1_mean.resize(nm), ln1_rstd.resize(Nl);
    qkv.resize(N * size_t(d.Wqkv), eb);
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
           fch.bytes() + fch_gelu.bytes() + stats_bytes();
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

// ---- products and the conjugate operators (unit_ops.h) -------------------------------------------

namespace detail {

void linear(const UnitContext& u, void* out, DType out_t, const void* in, const void* W, const float* b, int N, int K,
            int OC, bool accumulate) {
    if (!u.mixed()) {
        matmul_forward(static_cast<float*>(out), static_cast<const float*>(in), static_cast<const float*>(W), b, N, K, OC,
                       accumulate, u.matmul());
        return;
    }
    SHARDLM_CHECK(!accumulate, "linear: mixed precision never accumulates onto its output");
    matmul_forward(out, out_t, in, W, u.prec.activation, b, N, K, OC);
}

void linear_backward(const UnitContext& u, float* dinp, float* dW, float* db, const float* dout, const void* in,
                     const void* W, int N, int K, int OC, bool acc, uint16_t* dout16) {
    if (!u.mixed())
        matmul_backward(dinp, dW, db, dout, static_cast<const float*>(in), static_cast<const float*>(W), N, K, OC, acc,
                        u.matmul(), dout16);
    else
        matmul_backward(dinp, dW, db, dout, in, W, u.prec.activation, N, K, OC, acc, dout16);
}

const void* gather_input(const UnitContext& u, const void* x_local, int N, DType t) {
    if (!u.sp) return x_local;
    const size_t Nl = size_t(u.rows(N)), C = size_t(u.cfg->n_embd);
    u.tp->all_gather_bytes(x_local, u.scratch->gathered.data(), Nl * C * dtype_bytes(t));
    return u.scratch->gathered.data();
}

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

void row_parallel_residual(const UnitContext& u, void* out, float* partial, const void* in, const void* W,
                           const float* b, const void* resid, int N, int K) {
    const int C = u.cfg->n_embd;
    if (u.tp_size() == 1 && !u.mixed()) {
        if (out != resid) std::memcpy(out, resid, sizeof(float) * size_t(N) * C);
        linear(u, out, DType::F32, in, W, b, N, K, C, true);
        return;
    }
    linear(u, partial, DType::F32, in, W, nullptr, N, K, C);
    const int Nl = u.rows(N);
    if (u.sp) {
        u.tp->reduce_scatter_sum(partial, u.scratch->reduced.data(), size_t(Nl) * C);
        partial = u.scratch->reduced.data();
    } else if (u.tp_size() > 1) {
        u.tp->all_reduce_sum(partial, size_t(N) * C);
    }
    residual_add(out, resid, u.prec.activation, b, partial, Nl, C);
}

void row_parallel_dout(const UnitContext& u, float* dst, const float* dres, int N) {
    const size_t C = size_t(u.cfg->n_embd);
    if (u.sp)
        u.tp->all_gather_bytes(dres, dst, size_t(u.rows(N)) * C * sizeof(float));
    else
        std::memcpy(dst, dres, sizeof(float) * size_t(N) * C);
}

void norm_forward(const UnitContext& u, void* out, float* mean, float* rstd, const void* x, const float* w,
                  const float* b, int Nl) {
    const DType t = u.prec.activation;
    if (u.cfg->norm == Norm::RMSNorm) rmsnorm_forward(out, t, rstd, x, t, w, Nl, u.cfg->n_embd, u.cfg->ln_eps);
    else layernorm_forward(out, t, mean, rstd, x, t, w, b, Nl, u.cfg->n_embd, u.cfg->ln_eps);
}

void norm_backward_input(const UnitContext& u, float* dx, const float* dout, const void* x, const float* w,
                         const float* mean, const float* rstd, int Nl) {
    const DType t = u.prec.activation;
    if (u.cfg->norm == Norm::RMSNorm) rmsnorm_backward_input(dx, dout, x, t, w, rstd, Nl, u.cfg->n_embd);
    else layernorm_backward_input(dx, dout, x, t, w, mean, rstd, Nl, u.cfg->n_embd);
}

void norm_backward_params(const UnitContext& u, float* dw, float* db, const float* dout, const void* x,
                          const float* mean, const float* rstd, int Nl, int c0, int c1) {
    const DType t = u.prec.activation;
    if (u.cfg->norm == Norm::RMSNorm) rmsnorm_backward_params(dw, dout, x, t, rstd, Nl, u.cfg->n_embd, c0, c1);
    else layernorm_backward_params(dw, db, dout, x, t, mean, rstd, Nl, u.cfg->n_embd, c0, c1);
}

// ---- lanes (unit_ops.h) ----------------------------------------------------------------------------

namespace {

// A setting read once from the environment (for measuring: bench/RESULTS.md), def when unset or odd.
int env_int(const char* name, int def, int lo, int hi) {
    const char* e = std::getenv(name);
    const int v = e ? std::atoi(e) : 0;
    return v >= lo && v <= hi ? v : def;
}

}  // namespace

Groups sequence_groups(int B, int T, int lanes) {
    static const int rows = env_int("SHARDLM_LANE_ROWS", 256, 1, 1 << 20);
    const cost::LaneGroups g = cost::lane_groups(B, T, lanes, rows);  // the planner's rule too
    return {g.size, g.count};
}

OutputItems::OutputItems(const UnitContext& u, const int* sizes, int n_tasks) {
    static const int min_rows = env_int("SHARDLM_LANE_OUT_ROWS", 512, 16, 1 << 20);
    SHARDLM_CHECK(n_tasks <= kMaxTasks, "OutputItems: more than ", kMaxTasks, " tasks");
    for (int k = 0; k < n_tasks; k++) {
        const int n = sizes[k];
        // tensor parallelism (one lane, every product over the threads): whole tasks, so a weight gradient
        // whose input is all-gathered under sequence parallelism gathers it once
        const int blk = u.tp_size() > 1 ? std::max(n, 1) : std::max(min_rows, (n / kOutputBlocks + 15) / 16 * 16);
        size_[tasks_] = n, block_[tasks_] = blk, first_[tasks_] = count_;
        count_ += (n + blk - 1) / blk;
        tasks_++;
    }
}

OutputItem OutputItems::operator[](int i) const {
    int t = tasks_ - 1;
    while (first_[t] > i) t--;
    const int b = (i - first_[t]) * block_[t];
    return {t, b, std::min(size_[t], b + block_[t])};
}

}  // namespace detail

using namespace detail;

int lane_groups(int B, int T, int lanes) { return sequence_groups(B, T, std::max(1, std::min(lanes, B))).count; }

// ---- embedding ----------------------------------------------------------------------------------

void embedding_forward(const UnitContext& u, const void* wte, const void* wpe, const int* tokens, void* x0, int B,
                       int T) {
    const int C = u.cfg->n_embd, tp = u.tp_size(), N = B * T, Nl = u.rows(N);
    if (tp == 1 && wpe) {
        encoder_forward(x0, u.prec.activation, tokens, wte, wpe, u.prec.param, B, T, C);
        return;
    }
    // vocabulary-parallel: each rank looks up the tokens in its rows (zeros elsewhere), then g sums
    // them (one non-zero term per row: exact); the position embedding (if learned) is added after.
    const int Vt = u.cfg->padded_vocab(tp) / tp, v0 = u.tp->rank() * Vt;
    float* sum = u.mixed() ? u.scratch->dln.data() : static_cast<float*>(x0);  // fp32 until the end
    if (!u.sp) {
        kernels::embedding_forward(sum, tokens, wte, u.prec.param, v0, v0 + Vt, N, C);
        if (tp > 1) u.tp->all_reduce_sum(sum, size_t(N) * C);
        if (wpe) position_forward(sum, wpe, u.prec.param, 0, N, T, C);
    } else {
        float* full = u.scratch->dln.data();
        if (u.mixed()) sum = u.scratch->reduced.data();
        kernels::embedding_forward(full, tokens, wte, u.prec.param, v0, v0 + Vt, N, C);
        u.tp->reduce_scatter_sum(full, sum, size_t(Nl) * C);
        if (wpe) position_forward(sum, wpe, u.prec.param, u.tp->rank() * Nl, Nl, T, C);
    }
    if (u.mixed()) convert_from_f32(x0, u.prec.activation, sum, size_t(Nl) * C);
}

void embedding_backward(const UnitContext& u, float* dwte, float* dwpe, const float* dx0, const int* tokens, int B,
                        int T) {
    const int C = u.cfg->n_embd, tp = u.tp_size(), N = B * T, Nl = u.rows(N);
    if (tp == 1 && dwpe) {
        encoder_backward(dwte, dwpe, dx0, tokens, B, T, C);
        return;
    }
    const int Vt = u.cfg->padded_vocab(tp) / tp, v0 = u.tp->rank() * Vt;
    kernels::embedding_backward(dwte, static_cast<const float*>(gather_input(u, dx0, N, DType::F32)), tokens, v0,
                                v0 + Vt, N, C);
    if (dwpe) position_backward(dwpe, dx0, u.sp ? u.tp->rank() * Nl : 0, Nl, T, C);
}

}  // namespace shardlm::model
