#include "shardlm/kernels/layernorm.h"

#include "shardlm/core/contention.h"
#include "shardlm/core/profile.h"

#include <algorithm>
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
    if (bias) {
#pragma omp simd
        for (int i = 0; i < C; i++) o[i] = (x[i] - m) * r * weight[i] + bias[i];
    } else {
#pragma omp simd
        for (int i = 0; i < C; i++) o[i] = (x[i] - m) * r * weight[i];
    }
    *mean = m;
    *rstd = r;
}

}  // namespace

void layernorm_forward(float* out, float* mean, float* rstd,
                       const float* inp, const float* weight, const float* bias,
                       int N, int C, float eps) {
    profile::Scope prof_("layernorm forward", 0, 8.0 * N * C);
#pragma omp parallel for schedule(dynamic, 8) if (!cpu_contended())
    for (int n = 0; n < N; n++) ln_row(out + size_t(n) * C, mean + n, rstd + n, inp + size_t(n) * C, weight, bias, C, eps);
}

void layernorm_backward(float* dinp, float* dweight, float* dbias,
                        const float* dout, const float* inp, const float* weight,
                        const float* mean, const float* rstd, int N, int C) {
    layernorm_backward(dinp, dweight, dbias, dout, inp, DType::F32, weight, mean, rstd, N, C);
}

void layernorm_forward(void* out, DType out_t, float* mean, float* rstd, const void* inp, DType in_t,
                       const float* weight, const float* bias, int N, int C, float eps) {
    profile::Scope prof_("layernorm forward", 0, double(dtype_bytes(out_t) + dtype_bytes(in_t)) * N * C);
    if (out_t == DType::F32 && in_t == DType::F32) {
        layernorm_forward(static_cast<float*>(out), mean, rstd, static_cast<const float*>(inp), weight, bias, N, C, eps);
        return;
    }
#pragma omp parallel if (!cpu_contended())
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
    layernorm_backward_input(dinp, dout, inp, in_t, weight, mean, rstd, N, C);
    layernorm_backward_params(dweight, dbias, dout, inp, in_t, mean, rstd, N, C, 0, C);
}

// Row-local: dinp += d(LayerNorm)/d(inp) (rows widened to fp32 when stored in 16 bits).
void layernorm_backward_input(float* dinp, const float* dout, const void* inp, DType in_t, const float* weight,
                              const float* mean, const float* rstd, int N, int C) {
    profile::Scope prof_("layernorm backward", 0, (8.0 + dtype_bytes(in_t)) * N * C);
#pragma omp parallel if (!cpu_contended())
    {
        float* buf = in_t == DType::F32 ? nullptr : thread_scratch(1, size_t(C));
#pragma omp for schedule(dynamic, 8)
        for (int n = 0; n < N; n++) {
            const float* x = row_f32(inp, in_t, n, C, buf);
            const float* g = dout + size_t(n) * C;
            float* dx = dinp + size_t(n) * C;
            const float m = mean[n], r = rstd[n];
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
    }
}

// Column blocks of 64 in parallel, rows summed in order: bit-identical for any thread count.
void layernorm_backward_params(float* dweight, float* dbias, const float* dout, const void* inp, DType in_t,
                               const float* mean, const float* rstd, int N, int C, int c0, int c1) {
    profile::Scope prof_("layernorm backward", 0, (4.0 + dtype_bytes(in_t)) * N * (c1 - c0));
    constexpr int kCols = 64;
    const int nblk = (c1 - c0 + kCols - 1) / kCols;
#pragma omp parallel for schedule(dynamic, 1) if (!cpu_contended())
    for (int blk = 0; blk < nblk; blk++) {
        const int b0 = c0 + blk * kCols, w = std::min(kCols, c1 - b0);
        float dw[kCols] = {}, db[kCols] = {}, xb[kCols];
        for (int n = 0; n < N; n++) {
            const float* x = xb;
            if (in_t == DType::F32) x = static_cast<const float*>(inp) + size_t(n) * C + b0;
            else load_row(xb, at(inp, in_t, size_t(n) * C + b0), in_t, size_t(w));
            const float* g = dout + size_t(n) * C + b0;
            const float m = mean ? mean[n] : 0.0f, r = rstd[n];
#pragma omp simd
            for (int i = 0; i < w; i++) {
                dw[i] += g[i] * (x[i] - m) * r;
                db[i] += g[i];
            }
        }
        for (int i = 0; i < w; i++) dweight[b0 + i] += dw[i];
        if (dbias)
            for (int i = 0; i < w; i++) dbias[b0 + i] += db[i];
    }
}

// ---- RMSNorm ------------------------------------------------------------------------------------

void rmsnorm_forward(void* out, DType out_t, float* rstd, const void* inp, DType in_t, const float* weight, int N,
                     int C, float eps) {
    profile::Scope prof_("rmsnorm forward", 0, double(dtype_bytes(out_t) + dtype_bytes(in_t)) * N * C);
#pragma omp parallel if (!cpu_contended())
    {
        float* xin = in_t == DType::F32 ? nullptr : thread_scratch(0, 2 * size_t(C));
        float* y = out_t == DType::F32 ? nullptr : (xin ? xin + C : thread_scratch(0, size_t(C)));
#pragma omp for schedule(dynamic, 8)
        for (int n = 0; n < N; n++) {
            const float* x = row_f32(inp, in_t, n, C, xin);
            float* o = y ? y : static_cast<float*>(out) + size_t(n) * C;
            float ss = 0.0f;
#pragma omp simd reduction(+ : ss)
            for (int i = 0; i < C; i++) ss += x[i] * x[i];
            const float r = 1.0f / std::sqrt(ss / C + eps);
#pragma omp simd
            for (int i = 0; i < C; i++) o[i] = (x[i] * r) * weight[i];
            rstd[n] = r;
            if (y) store_row(at(out, out_t, size_t(n) * C), out_t, y, size_t(C));
        }
    }
}

void rmsnorm_backward_input(float* dinp, const float* dout, const void* inp, DType in_t, const float* weight,
                            const float* rstd, int N, int C) {
#pragma omp parallel if (!cpu_contended())
    {
        float* buf = in_t == DType::F32 ? nullptr : thread_scratch(1, size_t(C));
#pragma omp for schedule(dynamic, 8)
        for (int n = 0; n < N; n++) {
            const float* x = row_f32(inp, in_t, n, C, buf);
            const float* g = dout + size_t(n) * C;
            float* dx = dinp + size_t(n) * C;
            const float r = rstd[n];
            float b = 0.0f;  // mean(dnorm * norm)
#pragma omp simd reduction(+ : b)
            for (int i = 0; i < C; i++) b += g[i] * weight[i] * (x[i] * r);
            b /= C;
#pragma omp simd
            for (int i = 0; i < C; i++) dx[i] += r * (g[i] * weight[i] - (x[i] * r) * b);
        }
    }
}

void rmsnorm_backward_params(float* dweight, const float* dout, const void* inp, DType in_t, const float* rstd, int N,
                             int C, int c0, int c1) {
    // LayerNorm's weight gradient with no mean to subtract (x - 0 is x: the same sums) and no bias
    layernorm_backward_params(dweight, nullptr, dout, inp, in_t, nullptr, rstd, N, C, c0, c1);
}

}  // namespace shardlm::kernels
