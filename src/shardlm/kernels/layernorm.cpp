#include "shardlm/kernels/layernorm.h"

#include <cmath>
#include "shardlm/core/dtype_simd.h"
#include "shardlm/core/scratch.h"

namespace shardlm::kernels {

namespace {

// Row n of a (N, C) array of storage type t, as fp32 in buf (or the row itself when fp32).
const float* row_f32(const void* a, DType t, int n, int C, float* buf) {
    if (t == DType::F32) return static_cast<const float*>(a) + size_t(n) * C;
    load_row(buf, at(a, t, size_t(n) * C), t, size_t(C));
    return buf;
}

}  // namespace

namespace {

inline void ln_row(float* o, float* mean, float* rstd, const float* x, const float* weight, const float* bias, int C,
                   float eps) {
    float s = 0.0f;
#pragma omp simd reduction(+ : s)
    for (int i = 0; i < C; i++) s += x[i];
    float m = s / C;
    float v = 0.0f;
#pragma omp simd reduction(+ : v)
    for (int i = 0; i < C; i++) {
        float d = x[i] - m;
        v += d * d;
    }
    float r = 1.0f / std::sqrt(v / C + eps);
#pragma omp simd
    for (int i = 0; i < C; i++) o[i] = (x[i] - m) * r * weight[i] + bias[i];
    *mean = m;
    *rstd = r;
}

}  // namespace

void layernorm_forward(float* out, float* mean, float* rstd,
                       const float* inp, const float* weight, const float* bias,
                       int N, int C, float eps) {
#pragma omp parallel for schedule(dynamic, 8)
    for (int n = 0; n < N; n++) ln_row(out + size_t(n) * C, mean + n, rstd + n, inp + size_t(n) * C, weight, bias, C, eps);
}

void layernorm_backward(float* dinp, float* dweight, float* dbias,
                        const float* dout, const float* inp, const float* weight,
                        const float* mean, const float* rstd, int N, int C) {
    // Pass 1, row-local: dinp.
#pragma omp parallel for schedule(dynamic, 8)
    for (int n = 0; n < N; n++) {
        const float* x = inp + size_t(n) * C;
        const float* g = dout + size_t(n) * C;
        float* dx = dinp + size_t(n) * C;
        float m = mean[n], r = rstd[n];
        float a = 0.0f, b = 0.0f;  // sum(dnorm), sum(dnorm * norm)
#pragma omp simd reduction(+ : a, b)
        for (int i = 0; i < C; i++) {
            float dn = g[i] * weight[i];
            a += dn;
            b += dn * (x[i] - m) * r;
        }
        a /= C;
        b /= C;
#pragma omp simd
        for (int i = 0; i < C; i++) {
            float norm = (x[i] - m) * r;
            dx[i] += r * (g[i] * weight[i] - a - norm * b);
        }
    }
    // Pass 2, column-parallel: dweight, dbias, rows in order.
    constexpr int kCols = 64;
    int nblk = (C + kCols - 1) / kCols;
#pragma omp parallel for schedule(dynamic, 1)
    for (int blk = 0; blk < nblk; blk++) {
        int c0 = blk * kCols, c1 = c0 + kCols < C ? c0 + kCols : C;
        float dw[kCols] = {}, db[kCols] = {};
        for (int n = 0; n < N; n++) {
            const float* x = inp + size_t(n) * C;
            const float* g = dout + size_t(n) * C;
            float m = mean[n], r = rstd[n];
#pragma omp simd
            for (int i = c0; i < c1; i++) {
                dw[i - c0] += g[i] * (x[i] - m) * r;
                db[i - c0] += g[i];
            }
        }
        for (int i = c0; i < c1; i++) {
            dweight[i] += dw[i - c0];
            dbias[i] += db[i - c0];
        }
    }
}

void layernorm_forward(void* out, DType out_t, float* mean, float* rstd, const void* inp, DType in_t,
                       const float* weight, const float* bias, int N, int C, float eps) {
    if (out_t == DType::F32 && in_t == DType::F32) {
        layernorm_forward(static_cast<float*>(out), mean, rstd, static_cast<const float*>(inp), weight, bias, N, C, eps);
        return;
    }
#pragma omp parallel
    {
        float* xin = thread_scratch(0, 2 * size_t(C));
        float* y = xin + C;
#pragma omp for schedule(static)
        for (int n = 0; n < N; n++) {
            const float* x = row_f32(inp, in_t, n, C, xin);
            ln_row(y, mean + n, rstd + n, x, weight, bias, C, eps);
            store_row(at(out, out_t, size_t(n) * C), out_t, y, size_t(C));
        }
    }
}

void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout, const void* inp, DType in_t,
                        const float* weight, const float* mean, const float* rstd, int N, int C) {
    if (in_t == DType::F32) {
        layernorm_backward(dinp, dweight, dbias, dout, static_cast<const float*>(inp), weight, mean, rstd, N, C);
        return;
    }
    // the fp32 kernel on widened rows, a block of rows at a time (column sums stay in row order)
    constexpr int kRows = 64;
    float* x = thread_scratch(1, size_t(kRows) * C);
    for (int n0 = 0; n0 < N; n0 += kRows) {
        const int rows = N - n0 < kRows ? N - n0 : kRows;
        convert_to_f32(x, at(inp, in_t, size_t(n0) * C), in_t, size_t(rows) * C);
        layernorm_backward(dinp + size_t(n0) * C, dweight, dbias, dout + size_t(n0) * C, x, weight, mean + n0, rstd + n0,
                           rows, C);
    }
}

}  // namespace shardlm::kernels
