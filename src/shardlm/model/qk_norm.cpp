// model/qk_norm.cpp: the queries' and keys' RMS normalisation (model/qk_norm.h).
#include "shardlm/model/qk_norm.h"

#include <cmath>
#include <cstring>
#include <vector>

#include "shardlm/core/dtype_simd.h"
#include "shardlm/model/unit_ops.h"

namespace shardlm::model {

namespace {

// The two norms' columns in a row of [q | k]: q [0, Ct), k [Ct, Ct + KVt HS); their widths over the tp group.
struct Halves {
    int Ct, width;
    float q_full, k_full;
};
Halves halves(const UnitContext& u, const BlockDims& d) {
    const int KVC = d.KVt * d.HS, tp = u.tp_size();
    return {d.Ct, d.Ct + KVC, float(d.Ct * tp), float(KVC * tp)};
}

// fn(r, buf) for rows [0, n), each thread with a buffer of `width` floats.
template <class F>
void for_rows(int n, int width, F&& fn) {
#pragma omp parallel
    {
        std::vector<float> buf(static_cast<size_t>(width));
#pragma omp for schedule(static)
        for (int r = 0; r < n; r++) fn(r, buf.data());
    }
}

}  // namespace

void qk_norm_forward(const UnitContext& u, const BlockDims& d, const float* gain, void* qkv, void* pre, float* rstd,
                     int n) {
    const Halves h = halves(u, d);
    const DType t = u.prec.activation;
    const float eps = u.cfg->ln_eps;
    auto row_of = [&](int r) { return at(qkv, t, size_t(r) * size_t(d.Wqkv)); };
    std::vector<float> ss(size_t(n) * 2);  // each row's sums of squares, q's and k's (over the group)
    for_rows(n, h.width, [&](int r, float* x) {
        std::memcpy(at(pre, t, size_t(r) * size_t(h.width)), row_of(r), size_t(h.width) * dtype_bytes(t));
        convert_to_f32(x, row_of(r), t, size_t(h.width));
        float q = 0, k = 0;
        for (int c = 0; c < h.Ct; c++) q += x[c] * x[c];
        for (int c = h.Ct; c < h.width; c++) k += x[c] * x[c];
        ss[size_t(r) * 2] = q, ss[size_t(r) * 2 + 1] = k;
    });
    if (u.tp_size() > 1) u.tp->all_reduce_sum(ss.data(), ss.size());
    for_rows(n, h.width, [&](int r, float* x) {
        convert_to_f32(x, row_of(r), t, size_t(h.width));
        const float rq = 1.0f / std::sqrt(ss[size_t(r) * 2] / h.q_full + eps);
        const float rk = 1.0f / std::sqrt(ss[size_t(r) * 2 + 1] / h.k_full + eps);
        for (int c = 0; c < h.width; c++) x[c] = (x[c] * (c < h.Ct ? rq : rk)) * gain[c];
        store_row(row_of(r), t, x, size_t(h.width));
        rstd[size_t(r) * 2] = rq, rstd[size_t(r) * 2 + 1] = rk;
    });
}

void qk_norm_backward_input(const UnitContext& u, const BlockDims& d, const float* gain, const void* pre,
                            const float* rstd, float* dqkv, float* kept, int n) {
    const Halves h = halves(u, d);
    const DType t = u.prec.activation;
    auto pre_of = [&](int r) { return at(pre, t, size_t(r) * size_t(h.width)); };
    // each row's sums of d(normalised) * gain * normalised, q's and k's (over the group)
    std::vector<float> dot(size_t(n) * 2);
    for_rows(n, h.width, [&](int r, float* x) {
        convert_to_f32(x, pre_of(r), t, size_t(h.width));
        const float* g = dqkv + size_t(r) * size_t(d.Wqkv);
        std::memcpy(kept + size_t(r) * size_t(h.width), g, sizeof(float) * size_t(h.width));
        const float rq = rstd[size_t(r) * 2], rk = rstd[size_t(r) * 2 + 1];
        float q = 0, k = 0;
        for (int c = 0; c < h.Ct; c++) q += g[c] * gain[c] * (x[c] * rq);
        for (int c = h.Ct; c < h.width; c++) k += g[c] * gain[c] * (x[c] * rk);
        dot[size_t(r) * 2] = q, dot[size_t(r) * 2 + 1] = k;
    });
    if (u.tp_size() > 1) u.tp->all_reduce_sum(dot.data(), dot.size());
    for_rows(n, h.width, [&](int r, float* x) {
        convert_to_f32(x, pre_of(r), t, size_t(h.width));
        float* g = dqkv + size_t(r) * size_t(d.Wqkv);
        const float rq = rstd[size_t(r) * 2], rk = rstd[size_t(r) * 2 + 1];
        const float bq = dot[size_t(r) * 2] / h.q_full, bk = dot[size_t(r) * 2 + 1] / h.k_full;
        for (int c = 0; c < h.width; c++) {
            const float rs = c < h.Ct ? rq : rk, b = c < h.Ct ? bq : bk;
            g[c] = rs * (g[c] * gain[c] - (x[c] * rs) * b);
        }
    });
}

void qk_norm_backward_params(const UnitContext& u, const BlockDims& d, float* dgain, const float* kept, const void* pre,
                             const float* rstd, int n, int b, int e) {
    const Halves h = halves(u, d);
    const DType t = u.prec.activation;
#pragma omp parallel for schedule(static)
    for (int c = b; c < e; c++) {
        const size_t half = c < h.Ct ? 0 : 1;
        float s = 0;
        for (int r = 0; r < n; r++) {
            float x;
            convert_to_f32(&x, at(pre, t, size_t(r) * size_t(h.width) + size_t(c)), t, 1);
            s += kept[size_t(r) * size_t(h.width) + size_t(c)] * (x * rstd[size_t(r) * 2 + half]);
        }
        dgain[c] += s;
    }
}

}  // namespace shardlm::model
