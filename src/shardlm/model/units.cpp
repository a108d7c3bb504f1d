#include "shardlm/model/units.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <vector>

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

void Scratch::allocate(const GptConfig& c, int B, int T, int tp, int threads, DType act, Recompute r, bool sp) {
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
    recomputed.resize(r == Recompute::Full ? (sp && tp > 1 ? N / size_t(tp) : N) * C : 0, eb);  // (Nl, C)
    logits.resize(0);
    const size_t one_rank = tp == 1 ? N * C : 0;
    dy_fcproj.resize(one_rank), dy_proj.resize(one_rank), dln2.resize(one_rank);
}

size_t Scratch::bytes() const {
    return gathered.bytes() + dln.bytes() + reduced.bytes() + dqkv.bytes() + datty.bytes() + dfch.bytes() +
           attn.bytes() + ce.bytes() + att.bytes() + atty.bytes() + logits.bytes() + dy_fcproj.bytes() +
           dy_proj.bytes() + dln2.bytes() + recomputed.bytes();
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
// g: the partial products (in `partial`, (N, C) fp32) are all-reduced (or reduce-scattered to this
// rank's rows under sequence parallelism) and the bias added once, after the reduction. fp32 on one
// rank keeps the one-process order: out = (resid + b) + in @ W^T in one GEMM.
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
    residual_add(out, resid, u.act, b, partial, Nl, C);
}

// d(output) of a row-parallel linear as its GEMMs need it: the full (N, C) gradient (g's backward is
// the identity; under sequence parallelism the conjugate all-gather of this rank's rows).
const float* row_parallel_dout(const UnitContext& u, const float* dres, int N) {
    return static_cast<const float*>(gather_input(u, dres, N, DType::F32));
}

// ---- lanes ---------------------------------------------------------------------------------------

struct Span {
    int begin, count;
};

// A setting read once from the environment (for measuring: bench/RESULTS.md), def when unset or odd.
int env_int(const char* name, int def, int lo, int hi) {
    const char* e = std::getenv(name);
    const int v = e ? std::atoi(e) : 0;
    return v >= lo && v <= hi ? v : def;
}

enum Phase { kRowPhase = 0, kOutputPhase = 1 };

// The items of one phase of a unit: with one lane all of them, in order; with more, each lane takes
// the next one left until none is (LaneWork).
class Items {
public:
    Items(const UnitContext& u, Phase phase, int count) : u_(u), phase_(phase), count_(count) {}
    bool next(int* i) {
        *i = u_.lanes > 1 ? u_.work->next[phase_].fetch_add(1, std::memory_order_relaxed) : local_++;
        return *i < count_;
    }

private:
    const UnitContext& u_;
    Phase phase_;
    int count_, local_ = 0;
};

// The row phase's items: groups of sequences of a B x T micro-batch. One lane: all B at once. More:
// groups of about 256 rows (SHARDLM_LANE_ROWS), at least one per lane; fewer rows would cost more in
// packing each GEMM's weights than the finer balance gains.
struct Groups {
    int size, count;
    Span operator()(int i, int B) const { return {i * size, std::min(size, B - i * size)}; }
};

Groups sequence_groups(int B, int T, int lanes) {
    if (lanes == 1) return {B, 1};
    static const int rows = env_int("SHARDLM_LANE_ROWS", 256, 1, 1 << 20);
    const int g = std::clamp((rows + T - 1) / T, 1, (B + lanes - 1) / lanes);
    return {g, (B + g - 1) / g};
}

Groups sequence_groups(const UnitContext& u, int B, int T) { return sequence_groups(B, T, u.lanes); }

// The output phase's items: tasks (weight gradients, LayerNorm parameter gradients) over n output
// rows or columns each, in blocks of max(256, n / (8 lanes)) (multiples of 16); one lane: whole tasks.
struct OutputItem {
    int task, begin, end;
};

std::vector<OutputItem> output_items(const UnitContext& u, std::initializer_list<int> sizes) {
    static const int min_rows = env_int("SHARDLM_LANE_OUT_ROWS", 256, 16, 1 << 20);
    std::vector<OutputItem> items;
    int task = 0;
    for (const int n : sizes) {
        int blk = n;
        if (u.lanes > 1) blk = std::max(min_rows, (n / (8 * u.lanes) + 15) / 16 * 16);
        for (int b = 0; b < n; b += blk) items.push_back({task, b, std::min(n, b + blk)});
        task++;
    }
    return items;
}

// Every lane has finished the row phase (a no-op with one lane).
void lane_barrier(const UnitContext& u) {
    if (u.lanes > 1) {
#pragma omp barrier
    }
}

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

}  // namespace

int lane_groups(int B, int T, int lanes) { return sequence_groups(B, T, std::max(1, std::min(lanes, B))).count; }

// ---- block --------------------------------------------------------------------------------------

namespace {

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
    const std::vector<OutputItem> out = output_items(u, {F, 3 * C, C, C, C, C});
    Items out_items(u, kOutputPhase, int(out.size()));
    for (int i; out_items.next(&i);) {
        const auto [task, b, e] = out[size_t(i)];
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

void head_forward(const UnitContext& u, const float* lnf_w, const float* lnf_b, const void* wte, HeadActs& a,
                  const void* xL, const int* targets, int B, int T, float dloss) {
    const int C = u.cfg->n_embd, tp = u.tp_size(), N = B * T;
    const int V = u.cfg->vocab_size, Vt = u.cfg->padded_vocab(tp) / tp, v0 = u.tp->rank() * Vt;
    unsigned short* d16 = u.bf16_products() ? a.dlogits_bf16.data() : nullptr;
    SHARDLM_CHECK(targets || a.logits.size(), "the head keeps no logits with bf16 products: give targets");
    // a group of sequences at a time: rows [r0, r0 + n) (more than one group: one tensor-parallel rank)
    const Groups groups = sequence_groups(u, B, T);
    Items items(u, kRowPhase, groups.count);
    for (int i; items.next(&i);) {
        const Span sq = groups(i, B);
        const size_t r0 = size_t(sq.begin) * size_t(T);
        const int n = sq.count * T;
        void* lnf = at(a.lnf.data(), u.act, r0 * C);
        layernorm_forward(lnf, u.act, a.lnf_mean.data() + r0, a.lnf_rstd.data() + r0, at(xL, u.act, r0 * C), u.act,
                          lnf_w, lnf_b, u.rows(n), C, u.cfg->ln_eps);
        if (targets) std::memcpy(a.targets.data() + r0, targets + r0, sizeof(int) * size_t(n));
        if (a.logits.size() == 0) {
            // chunked head: the fp32 logits of kHeadRows rows at a time in scratch (the lane's own),
            // and from them the loss and the bf16 gradient of those rows
            float* lg = u.scratch->logits.data() + size_t(u.lane) * kHeadRows * size_t(Vt);
            for (size_t r = r0; r < r0 + size_t(n); r += kHeadRows) {
                const int rows = int(std::min(size_t(kHeadRows), r0 + size_t(n) - r));
                linear(u, lg, DType::F32, at(a.lnf.data(), u.act, r * C), wte, nullptr, rows, C, Vt);
                if (dloss != 0.0f)
                    crossentropy_forward_backward(lg, a.losses.data() + r, targets + r, rows, V, Vt, dloss, d16 + r * Vt);
                else
                    crossentropy_forward(a.losses.data() + r, lg, targets + r, rows, V, Vt);
            }
            continue;
        }
        // logits (fp32) = lnf @ wte^T over this rank's (padded) vocabulary rows; padded rows of wte are zero
        float* logits = a.logits.data() + r0 * Vt;
        linear(u, logits, DType::F32, gather_input(u, lnf, n, u.act), wte, nullptr, n, C, Vt);
        if (!targets || tp > 1) continue;
        if (dloss != 0.0f)
            crossentropy_forward_backward(logits, a.losses.data() + r0, targets + r0, n, V, Vt, dloss,
                                          d16 ? d16 + r0 * Vt : nullptr);
        else
            crossentropy_forward(a.losses.data() + r0, logits, targets + r0, n, V, Vt);
    }
    if (!targets || tp == 1 || a.logits.size() == 0) return;
    // vocabulary-parallel cross-entropy (one lane, all N rows)
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

double head_loss_sum(const HeadActs& a, int N) {
    double s = 0.0;
    for (int i = 0; i < N; i++) s += a.losses[size_t(i)];
    return s;
}

void head_backward(const UnitContext& u, const float* lnf_w, const void* wte, float* dlnf_w, float* dlnf_b, float* dwte,
                   HeadActs& a, const void* xL, float* dxL, int B, int T, bool accumulate) {
    const int C = u.cfg->n_embd, tp = u.tp_size(), N = B * T, Nl = u.rows(N);
    const int Vt = u.cfg->padded_vocab(tp) / tp;
    float* dln = u.scratch->dln.data();
    const void* lnf = gather_input(u, a.lnf.data(), N, u.act);  // every row
    const unsigned short* d16 = a.dlogits_bf16.data();          // the classifier's bf16 gradient
    // 1. row-local, a group of sequences at a time: d(lnf) (partial over the tensor-parallel group)
    const Groups groups = sequence_groups(u, B, T);
    Items row_items(u, kRowPhase, groups.count);
    std::vector<Span> mine;  // this lane's groups, for d(xL) once d(lnf) is summed over the group
    for (int i; row_items.next(&i);) {
        const Span sq = groups(i, B);
        const size_t r0 = size_t(sq.begin) * size_t(T);
        const int n = sq.count * T;
        if (u.act == DType::BF16)  // lnf and wte are bf16 already
            gemm_bf16(dln + r0 * C, {d16 + r0 * Vt, Vt, 1}, {static_cast<const unsigned short*>(wte), C, 1}, n, C, Vt,
                      false);
        else if (u.bf16_products())
            matmul_backward_bf16(dln + r0 * C, nullptr, d16 + r0 * Vt, nullptr, static_cast<const float*>(wte), n, C, Vt,
                                 accumulate);
        else
            linear_backward(u, dln + r0 * C, nullptr, nullptr, a.logits.data() + r0 * Vt, nullptr, wte, n, C, Vt,
                            accumulate);
        mine.push_back(sq);
    }
    const float* dl = reduce_input_grad(u, N);  // the group's sum (one rank: dln itself)
    for (const Span sq : mine) {
        const size_t r0 = size_t(sq.begin) * size_t(T);
        const int nl = u.rows(sq.count * T);
        std::memset(dxL + r0 * C, 0, sizeof(float) * size_t(nl) * C);
        layernorm_backward_input(dxL + r0 * C, dl + r0 * C, at(xL, u.act, r0 * C), u.act, lnf_w, a.lnf_mean.data() + r0,
                                 a.lnf_rstd.data() + r0, nl, C);
    }
    lane_barrier(u);
    // 2. over all rows, a block of output rows at a time: d(wte)'s vocabulary rows, d(ln_f)'s columns
    const std::vector<OutputItem> out = output_items(u, {Vt, C});
    Items out_items(u, kOutputPhase, int(out.size()));
    const unsigned short* x16 = nullptr;  // lnf as the bf16 products read it
    if (u.act == DType::BF16) x16 = static_cast<const unsigned short*>(lnf);
    for (int i; out_items.next(&i);) {
        const auto [task, b, e] = out[size_t(i)];
        if (task == 1) {
            layernorm_backward_params(dlnf_w, dlnf_b, dl, xL, u.act, a.lnf_mean.data(), a.lnf_rstd.data(), Nl, C, b, e);
        } else if (u.bf16_products()) {
            if (!x16) x16 = to_bf16_scratch(2, static_cast<const float*>(lnf), size_t(N) * C);  // once per lane
            gemm_bf16(dwte + size_t(b) * C, {d16 + b, 1, Vt}, {x16, C, 1}, e - b, C, N, accumulate);
        } else {
            matmul_backward_weight(dwte, nullptr, a.logits.data(), lnf, u.act, N, C, Vt, b, e, accumulate, u.precision);
        }
    }
}

}  // namespace shardlm::model
