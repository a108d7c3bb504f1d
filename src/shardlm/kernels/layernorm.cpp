#include "shardlm/kernels/layernorm.h"

#include <cmath>

namespace shardlm::kernels {

void layernorm_forward(float* out, float* mean, float* rstd,
                       const float* inp, const float* weight, const float* bias,
                       int N, int C, float eps) {
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const float* x = inp + size_t(n) * C;
        float* o = out + size_t(n) * C;
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
        mean[n] = m;
        rstd[n] = r;
    }
}

void layernorm_backward(float* dinp, float* dweight, float* dbias,
                        const float* dout, const float* inp, const float* weight,
                        const float* mean, const float* rstd, int N, int C) {
    // Pass 1, row-local: dinp.
#pragma omp parallel for schedule(static)
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
#pragma omp parallel for schedule(static)
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

}  // namespace shardlm::kernels
