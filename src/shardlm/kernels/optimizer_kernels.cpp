#include "shardlm/kernels/optimizer_kernels.h"

#include <cmath>
#include <vector>

namespace shardlm::kernels {

void sgd_update(float* p, const float* g, size_t n, float lr, float wd) {
#pragma omp parallel for simd schedule(static)
    for (size_t i = 0; i < n; i++) {
        float d = g[i] + wd * p[i];
        p[i] -= lr * d;
    }
}

void momentum_update(float* p, const float* g, float* buf, size_t n, float lr, float mu, float wd) {
    // PyTorch: buf = g on the first step, then mu*buf + g; a zero-initialised buf gives the same.
#pragma omp parallel for simd schedule(static)
    for (size_t i = 0; i < n; i++) {
        float d = g[i] + wd * p[i];
        float b = mu * buf[i] + d;
        buf[i] = b;
        p[i] -= lr * b;
    }
}

void adagrad_update(float* p, const float* g, float* sum, size_t n, float lr, float eps, float wd) {
#pragma omp parallel for simd schedule(static)
    for (size_t i = 0; i < n; i++) {
        float d = g[i] + wd * p[i];
        float s = sum[i] + d * d;
        sum[i] = s;
        p[i] -= lr * (d / (std::sqrt(s) + eps));
    }
}

void adam_update(float* p, const float* g, float* m, float* v, size_t n, float lr, float beta1, float beta2,
                 float eps, float wd, int step) {
    // Bias corrections in double, as PyTorch computes them in Python floats.
    double bc1 = 1.0 - std::pow(double(beta1), step);
    float bc2_sqrt = float(std::sqrt(1.0 - std::pow(double(beta2), step)));
    float step_size = float(double(lr) / bc1);
#pragma omp parallel for simd schedule(static)
    for (size_t i = 0; i < n; i++) {
        float d = g[i] + wd * p[i];
        float mi = beta1 * m[i] + (1.0f - beta1) * d;
        float vi = beta2 * v[i] + (1.0f - beta2) * d * d;
        m[i] = mi;
        v[i] = vi;
        float denom = std::sqrt(vi) / bc2_sqrt + eps;
        p[i] -= step_size * (mi / denom);
    }
}

void adamw_update(float* p, const float* g, float* m, float* v, size_t n, float lr, float beta1, float beta2,
                  float eps, float wd, int step) {
    // Bias corrections in double, as PyTorch computes them in Python floats.
    double bc1 = 1.0 - std::pow(double(beta1), step);
    float bc2_sqrt = float(std::sqrt(1.0 - std::pow(double(beta2), step)));
    float step_size = float(double(lr) / bc1);
    float decay = 1.0f - lr * wd;
#pragma omp parallel for simd schedule(static)
    for (size_t i = 0; i < n; i++) {
        float d = g[i];
        float mi = beta1 * m[i] + (1.0f - beta1) * d;
        float vi = beta2 * v[i] + (1.0f - beta2) * d * d;
        m[i] = mi;
        v[i] = vi;
        float denom = std::sqrt(vi) / bc2_sqrt + eps;
        p[i] = p[i] * decay - step_size * (mi / denom);
    }
}

double sum_squares(const float* x, size_t n) {
    constexpr size_t kChunk = 1 << 16;
    size_t nchunk = (n + kChunk - 1) / kChunk;
    std::vector<double> part(nchunk);
#pragma omp parallel for schedule(static)
    for (size_t c = 0; c < nchunk; c++) {
        size_t i0 = c * kChunk, i1 = i0 + kChunk < n ? i0 + kChunk : n;
        double s = 0.0;
#pragma omp simd reduction(+ : s)
        for (size_t i = i0; i < i1; i++) s += double(x[i]) * double(x[i]);
        part[c] = s;
    }
    double s = 0.0;
    for (double v : part) s += v;
    return s;
}

void scale_inplace(float* x, size_t n, float s) {
#pragma omp parallel for simd schedule(static)
    for (size_t i = 0; i < n; i++) x[i] *= s;
}

}  // namespace shardlm::kernels
