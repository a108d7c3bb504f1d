// kernels/optimizer_adafactor.cpp: Adafactor's passes over a tensor (kernels/optimizer_kernels.h): the row and
// column sums of the squared gradient, and the factored and vector updates with their RMS sums. Each sum is
// taken in an order that does not depend on the threads.
#include <algorithm>
#include <cmath>
#include <vector>

#include "shardlm/kernels/optimizer_kernels.h"

namespace shardlm::kernels {

void adafactor_square_sums(const float* g, float gs, size_t i0, size_t n, size_t cols, size_t real_rows,
                           double* row, double* col) {
    const size_t i1 = std::min(i0 + n, real_rows * cols);
    if (i0 >= i1) return;
    const size_t r0 = i0 / cols, r1 = (i1 - 1) / cols + 1;
    // rows in parallel (each sums its own elements), then columns in parallel chunks, each summing
    // down the rows in order: the same sums for any thread count
#pragma omp parallel for schedule(dynamic, 16)
    for (size_t r = r0; r < r1; r++) {
        const size_t b = std::max(i0, r * cols), e = std::min(i1, (r + 1) * cols);
        double s = 0;
        for (size_t i = b; i < e; i++) {
            const double x = double(g[i - i0] * gs);
            s += x * x;
        }
        row[r] += s;
    }
#pragma omp parallel for schedule(dynamic, 1)
    for (size_t c0 = 0; c0 < cols; c0 += 256) {
        const size_t c1 = std::min(cols, c0 + 256);
        for (size_t r = r0; r < r1; r++) {
            const size_t b = std::max(i0, r * cols + c0), e = std::min(i1, r * cols + c1);
            for (size_t i = b; i < e; i++) {
                const double x = double(g[i - i0] * gs);
                col[i - r * cols] += x * x;
            }
        }
    }
}

namespace {

// p -= wd lr p; u = u / clip_div * lr; first moment; p -= u (transformers' Adafactor, in its order)
inline void adafactor_apply(float& p, float* m, float u, const AdafactorApply& a) {
    u = u / a.clip_div * a.lr;
    if (a.first_moment) {
        *m = a.beta1 * *m + (1.0f - a.beta1) * u;
        u = *m;
    }
    p = p + (-a.wd * a.lr) * p;
    p = p - u;
}

// sums of per-row partials, in order: the same for any thread count
double ordered_sum(const std::vector<double>& part) {
    double s = 0;
    for (double x : part) s += x;
    return s;
}

}  // namespace

double adafactor_factored(float* p, const float* g, float* m, size_t i0, size_t n, size_t cols, size_t real_rows,
                          const float* rf, const float* cf, float gs, const AdafactorApply* apply) {
    const size_t i1 = std::min(i0 + n, real_rows * cols);
    if (i0 >= i1) return 0.0;
    const size_t r0 = i0 / cols, r1 = (i1 - 1) / cols + 1;
    std::vector<double> part(r1 - r0);
#pragma omp parallel for schedule(dynamic, 16)
    for (size_t r = r0; r < r1; r++) {
        const size_t b = std::max(i0, r * cols), e = std::min(i1, (r + 1) * cols);
        double s = 0;
        for (size_t i = b; i < e; i++) {
            const size_t k = i - i0;
            const float u = (rf[r] * cf[i - r * cols]) * (g[k] * gs);
            if (apply) adafactor_apply(p[k], m ? m + k : nullptr, u, *apply);
            else s += double(u) * u;
        }
        part[r - r0] = s;
    }
    return ordered_sum(part);
}

double adafactor_vector(float* p, const float* g, float* v, float* m, size_t n, float beta2t, float eps1, float gs,
                        const AdafactorApply* apply) {
    constexpr size_t kChunk = 4096;
    std::vector<double> part((n + kChunk - 1) / kChunk);
#pragma omp parallel for schedule(dynamic, 1)
    for (size_t c = 0; c < part.size(); c++) {
        double s = 0;
        for (size_t i = c * kChunk; i < std::min(n, (c + 1) * kChunk); i++) {
            const float gi = g[i] * gs;
            if (!apply) v[i] = beta2t * v[i] + (1.0f - beta2t) * (gi * gi + eps1);
            const float u = (1.0f / std::sqrt(v[i])) * gi;
            if (apply) adafactor_apply(p[i], m ? m + i : nullptr, u, *apply);
            else s += double(u) * u;
        }
        part[c] = s;
    }
    return ordered_sum(part);
}

}  // namespace shardlm::kernels
