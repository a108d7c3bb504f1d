// model/moe.cpp: the mixture-of-experts feed-forward (model/moe.h): the experts, their backward and their
// weight gradients, around the router (model/router.cpp) and the tokens' dispatch, exchange between
// expert-parallel ranks and combination (model/moe_dispatch.cpp).
#include "shardlm/model/moe.h"

#include <algorithm>
#include <cstring>

#include "shardlm/core/check.h"
#include "shardlm/kernels/gelu.h"
#include "shardlm/kernels/gemm/gemm.h"
#include "shardlm/kernels/gemm/tuner.h"
#include "shardlm/model/moe_dispatch.h"
#include "shardlm/model/router.h"
#include "shardlm/model/unit_ops.h"

namespace shardlm::model {

using namespace shardlm::kernels;
using namespace detail;

MoeDims moe_dims(const GptConfig& c, int tp, int ep) {
    MoeDims d;
    d.E = c.moe.n_experts, d.K = c.moe.top_k;
    d.F = c.expert_ffn() / tp, d.Ffc = c.mlp == Mlp::SwiGLU ? 2 * d.F : d.F;
    d.ep = ep, d.El = d.E / ep;
    return d;
}

namespace {
MoeDims dims(const UnitContext& u) { return moe_dims(*u.cfg, u.tp_size(), u.ep ? u.ep->size() : 1); }
}  // namespace

void MoeActs::allocate(const GptConfig& c, int B, int T, int tp, DType act, int ep) {
    const MoeDims d = moe_dims(c, tp, ep);
    const size_t N = size_t(B) * T, NK = N * size_t(d.K), R = NK * size_t(ep), C = size_t(c.n_embd);
    const size_t eb = dtype_bytes(act), side = ep > 1 ? R : 0;
    logits.resize(N * size_t(d.E)), probs.resize(N * size_t(d.E)), lse.resize(N);
    choice.resize(NK), gate.resize(NK), slot.resize(NK), offsets.resize(size_t(d.E) + 1);
    xe.resize(NK * C, eb), ye.resize(NK * C);
    xl.resize(side * C, eb), hl.resize(R * size_t(d.Ffc), eb), al.resize(R * size_t(d.F), eb), yl.resize(side * C);
    loffsets.resize(size_t(d.El) + 1), from.resize(size_t(ep) * size_t(d.El)), place.resize(side);
    load.assign(size_t(d.E), 0.0);
}

size_t MoeActs::bytes() const {
    return logits.bytes() + probs.bytes() + lse.bytes() + choice.bytes() + gate.bytes() + slot.bytes() +
           offsets.bytes() + xe.bytes() + ye.bytes() + xl.bytes() + hl.bytes() + al.bytes() + yl.bytes() +
           loffsets.bytes() + from.bytes() + place.bytes();
}

void MoeKeep::allocate(const GptConfig& c, int B, int T, int tp, int ep) {
    const MoeDims d = moe_dims(c, tp, ep);
    const size_t N = size_t(B) * T, NK = N * size_t(d.K), R = NK * size_t(ep), C = size_t(c.n_embd);
    dye.resize(NK * C), dyl.resize(ep > 1 ? R * C : 0), dhl.resize(R * size_t(d.Ffc)), dz.resize(N * size_t(d.E));
}

void MoeScratch::allocate(const GptConfig& c, int B, int T, int tp, int ep) {
    const MoeDims d = moe_dims(c, tp, ep);
    const size_t N = size_t(B) * T, NK = N * size_t(d.K), R = NK * size_t(ep), C = size_t(c.n_embd);
    router.resize(size_t(d.E) * C), dx.resize(NK * C), dxl.resize(ep > 1 ? R * C : 0), dae.resize(R * size_t(d.F));
    dgate.resize(NK), fill.resize(size_t(d.E)), staging.resize(ep > 1 ? R * C * sizeof(float) : 0);
}

MoeStats::MoeStats(const GptConfig& c) : E_(c.moe.n_experts), L_(c.n_layer) {
    sums_.assign(c.has_moe() ? size_t(L_) * size_t(E_ + kExtra) : 0, 0.0);
}

void MoeStats::reset() { std::fill(sums_.begin(), sums_.end(), 0.0); }

void MoeStats::add(int layer, const MoeActs& a) {
    double* s = sums_.data() + size_t(layer) * size_t(E_ + kExtra);
    for (int e = 0; e < E_; e++) s[e] += a.load[size_t(e)];
    s[E_] += a.dropped, s[E_ + 1] += a.balance, s[E_ + 2] += a.zsq, s[E_ + 3] += 1;
}

namespace {

// ---- the experts ---------------------------------------------------------------------------------------

// Local expert e's rows [r0, r0 + n) of the expert side's buffers.
struct ExpertRows {
    int r0, n;
};
const int* local_offsets(const MoeActs& a) { return a.xl.size() ? a.loffsets.data() : a.offsets.data(); }
ExpertRows expert_rows(const MoeActs& a, int e) {
    const int* o = local_offsets(a);
    return {o[e], o[e + 1] - o[e]};
}

void experts_forward(const UnitContext& u, const MoeDims& d, const MoeWeights& w, MoeActs& a, float* y) {
    const int C = u.cfg->n_embd;
    const DType t = u.prec.activation, wt = u.prec.param;
    const void* x = a.local_x();
    RaggedGemmScope ragged;
    for (int e = 0; e < d.El; e++) {
        const auto [r0, n] = expert_rows(a, e);
        if (n == 0) continue;
        void* he = at(a.hl.data(), t, size_t(r0) * d.Ffc);
        void* ae = at(a.al.data(), t, size_t(r0) * d.F);
        linear(u, he, t, at(x, t, size_t(r0) * C), at(w.fc, wt, size_t(e) * w.stride), nullptr, n, C, d.Ffc);
        if (u.cfg->mlp == Mlp::SwiGLU) swiglu_forward(ae, he, t, n, d.F);
        else gelu_forward(ae, he, t, size_t(n) * d.F);
        linear(u, y + size_t(r0) * C, DType::F32, ae, at(w.proj, wt, size_t(e) * w.stride), nullptr, n, d.F, C);
    }
}

// From the experts' output gradients dy (expert side): dx (expert side) and the first products' gradients
// (kept for W).
void experts_backward(const UnitContext& u, const MoeDims& d, const MoeWeights& w, const MoeActs& a, MoeKeep& k,
                      MoeScratch& s, const float* dy, float* dx) {
    const int C = u.cfg->n_embd;
    const DType t = u.prec.activation, wt = u.prec.param;
    RaggedGemmScope ragged;
    for (int e = 0; e < d.El; e++) {
        const auto [r0, n] = expert_rows(a, e);
        if (n == 0) continue;
        float* dae = s.dae.data() + size_t(r0) * d.F;
        float* dhe = k.dhl.data() + size_t(r0) * d.Ffc;
        const void* he = at(a.hl.data(), t, size_t(r0) * d.Ffc);
        linear_backward(u, dae, nullptr, nullptr, dy + size_t(r0) * C, at(a.al.data(), t, size_t(r0) * d.F),
                        at(w.proj, wt, size_t(e) * w.stride), n, d.F, C, false);
        if (u.cfg->mlp == Mlp::SwiGLU) swiglu_backward(dhe, dae, he, t, n, d.F);
        else gelu_backward(dhe, he, t, dae, size_t(n) * d.F);
        linear_backward(u, dx + size_t(r0) * C, nullptr, nullptr, dhe, at(a.local_x(), t, size_t(r0) * C),
                        at(w.fc, wt, size_t(e) * w.stride), n, C, d.Ffc, false);
    }
}

}  // namespace

void moe_forward(const UnitContext& u, const MoeWeights& w, MoeActs& a, MoeScratch& s, const void* x, float* out, int N) {
    const MoeDims d = dims(u);
    const int C = u.cfg->n_embd;
    route(u, d, a, router_f32(u, w, s), w.bias, x, N);
    count_and_drop(u, d, a, N);
    const size_t act_row = size_t(C) * dtype_bytes(u.prec.activation), f32_row = size_t(C) * sizeof(float);
    dispatch_rows(d, a, s, x, act_row, N);
    if (d.ep > 1) {
        plan_exchange(*u.ep, d, a, s);
        send_to_experts(*u.ep, d, a, s, a.xe.data(), a.xl.data(), act_row);
        experts_forward(u, d, w, a, a.yl.data());
        return_from_experts(*u.ep, d, a, s, a.yl.data(), a.ye.data(), f32_row);
    } else {
        a.received = a.offsets[size_t(d.E)];
        experts_forward(u, d, w, a, a.ye.data());
    }
    combine_rows(a, a.ye.data(), a.gate.data(), out, N, d.K, C);
}

void moe_backward_input(const UnitContext& u, const MoeWeights& w, const MoeActs& a, MoeKeep& k, MoeScratch& s,
                        const float* dout, float* dx, int N) {
    const MoeDims d = dims(u);
    const int C = u.cfg->n_embd, K = d.K;
    // the combination: each choice's output gradient and its gate weight's (a sum over the group)
#pragma omp parallel for schedule(static)
    for (int j = 0; j < N * K; j++) {
        const int r = a.slot[size_t(j)];
        if (r < 0) {
            s.dgate[size_t(j)] = 0;
            continue;
        }
        float* dy = k.dye.data() + size_t(r) * C;
        const float* g = dout + size_t(j / K) * C, *y = a.ye.data() + size_t(r) * C;
        const float gj = a.gate[size_t(j)];
        float dot = 0;
        for (int c = 0; c < C; c++) dot += g[c] * y[c], dy[c] = gj * g[c];
        s.dgate[size_t(j)] = dot;
    }
    if (u.tp_size() > 1) u.tp->all_reduce_sum(s.dgate.data(), size_t(N) * K);
    router_backward(u, d, w, a, s.dgate.data(), k.dz.data(), N);
    // the experts, each over its rows (on the experts' ranks)
    const size_t f32_row = size_t(C) * sizeof(float);
    if (d.ep > 1) {
        send_to_experts(*u.ep, d, a, s, k.dye.data(), k.dyl.data(), f32_row);
        experts_backward(u, d, w, a, k, s, k.dyl.data(), s.dxl.data());
        return_from_experts(*u.ep, d, a, s, s.dxl.data(), s.dx.data(), f32_row);
    } else {
        experts_backward(u, d, w, a, k, s, k.dye.data(), s.dx.data());
    }
    combine_rows(a, s.dx.data(), nullptr, dx, N, K, C);  // back to the tokens, in the order of their choices
}

void moe_router_input_grad(const UnitContext& u, const MoeWeights& w, const MoeKeep& k, MoeScratch& s, float* dx, int r0,
                           int n) {
    const int C = u.cfg->n_embd, E = u.cfg->moe.n_experts;
    const float* wr = router_f32(u, w, s);
#pragma omp parallel for schedule(static)
    for (int i = 0; i < n; i++) {
        const float* dz = k.dz.data() + size_t(r0 + i) * E;
        float* o = dx + size_t(i) * C;
        for (int e = 0; e < E; e++) {
            const float* wrow = wr + size_t(e) * C;
            for (int c = 0; c < C; c++) o[c] += dz[e] * wrow[c];
        }
    }
}

namespace {

// Rows [b, e) of the local experts' stacked weight gradients of `rows` rows each: expert x's rows [lb, le)
// over its rows of the expert side, one call each.
template <class F>
void per_expert(const MoeActs& a, int rows, int b, int e, F&& f) {
    for (int x = b / rows; x * rows < e; x++) {
        const int lb = std::max(b, x * rows) - x * rows, le = std::min(e, (x + 1) * rows) - x * rows;
        f(x, expert_rows(a, x), lb, le);
    }
}

}  // namespace

void moe_fc_grad(const UnitContext& u, const MoeGrads& g, const MoeActs& a, const MoeKeep& k, int b, int e, bool acc) {
    const MoeDims d = dims(u);
    const int C = u.cfg->n_embd;
    const DType t = u.prec.activation;
    RaggedGemmScope ragged;
    per_expert(a, d.Ffc, b, e, [&](int x, ExpertRows r, int lb, int le) {
        float* dw = g.fc + size_t(x) * g.stride;
        if (r.n == 0) {
            if (!acc) std::memset(dw + size_t(lb) * C, 0, sizeof(float) * size_t(le - lb) * C);
            return;
        }
        matmul_backward_weight(dw, nullptr, k.dhl.data() + size_t(r.r0) * d.Ffc, at(a.local_x(), t, size_t(r.r0) * C), t,
                               r.n, C, d.Ffc, lb, le, acc, u.matmul());
    });
}

void moe_proj_grad(const UnitContext& u, const MoeGrads& g, const MoeActs& a, const MoeKeep& k, int b, int e, bool acc) {
    const MoeDims d = dims(u);
    const int C = u.cfg->n_embd;
    const DType t = u.prec.activation;
    RaggedGemmScope ragged;
    per_expert(a, C, b, e, [&](int x, ExpertRows r, int lb, int le) {
        float* dw = g.proj + size_t(x) * g.stride;
        if (r.n == 0) {
            if (!acc) std::memset(dw + size_t(lb) * d.F, 0, sizeof(float) * size_t(le - lb) * d.F);
            return;
        }
        matmul_backward_weight(dw, nullptr, k.local_dy() + size_t(r.r0) * C, at(a.al.data(), t, size_t(r.r0) * d.F), t,
                               r.n, d.F, C, lb, le, acc, u.matmul());
    });
}

void moe_router_grad(const UnitContext& u, const MoeGrads& g, const MoeKeep& k, const void* x, int r0, int n, int b,
                     int e) {
    const int C = u.cfg->n_embd, E = u.cfg->moe.n_experts;
    const DType t = u.prec.activation;
    std::vector<float> row(static_cast<size_t>(C));
    for (int i = 0; i < n; i++) {
        const float* xr = row_f32(x, t, size_t(i), C, row.data());
        const float* dz = k.dz.data() + size_t(r0 + i) * E;
        for (int ex = b; ex < e; ex++) {
            float* gr = g.router + size_t(ex) * C;
            for (int c = 0; c < C; c++) gr[c] += dz[ex] * xr[c];
        }
    }
}
}  // namespace shardlm::model
