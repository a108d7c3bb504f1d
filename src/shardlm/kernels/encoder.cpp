#include "shardlm/kernels/encoder.h"

#include <cstddef>

namespace shardlm::kernels {

void encoder_forward(float* out, const int* tokens, const float* wte, const float* wpe, int B, int T, int C) {
#pragma omp parallel for schedule(static)
    for (int bt = 0; bt < B * T; bt++) {
        const float* e = wte + size_t(tokens[bt]) * C;
        const float* p = wpe + size_t(bt % T) * C;
        float* o = out + size_t(bt) * C;
#pragma omp simd
        for (int i = 0; i < C; i++) o[i] = e[i] + p[i];
    }
}

void encoder_backward(float* dwte, float* dwpe, const float* dout, const int* tokens, int B, int T, int C) {
    constexpr int kCols = 64;
    int nblk = (C + kCols - 1) / kCols;
#pragma omp parallel for schedule(static)
    for (int blk = 0; blk < nblk; blk++) {
        int c0 = blk * kCols, c1 = c0 + kCols < C ? c0 + kCols : C;
        for (int bt = 0; bt < B * T; bt++) {
            const float* g = dout + size_t(bt) * C;
            float* e = dwte + size_t(tokens[bt]) * C;
            float* p = dwpe + size_t(bt % T) * C;
#pragma omp simd
            for (int i = c0; i < c1; i++) {
                e[i] += g[i];
                p[i] += g[i];
            }
        }
    }
}

}  // namespace shardlm::kernels

namespace shardlm::kernels {

namespace {
constexpr int kCols = 64;  // column block of the in-order accumulations
}

void embedding_forward(float* out, const int* tokens, const float* wte_local, int v0, int v1, int N, int C) {
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        float* o = out + size_t(n) * C;
        const int t = tokens[n];
        if (t >= v0 && t < v1) {
            const float* e = wte_local + size_t(t - v0) * C;
#pragma omp simd
            for (int i = 0; i < C; i++) o[i] = e[i];
        } else {
#pragma omp simd
            for (int i = 0; i < C; i++) o[i] = 0.0f;
        }
    }
}

void embedding_backward(float* dwte_local, const float* dout, const int* tokens, int v0, int v1, int N, int C) {
    const int nblk = (C + kCols - 1) / kCols;
#pragma omp parallel for schedule(static)
    for (int blk = 0; blk < nblk; blk++) {
        const int c0 = blk * kCols, c1 = c0 + kCols < C ? c0 + kCols : C;
        for (int n = 0; n < N; n++) {
            const int t = tokens[n];
            if (t < v0 || t >= v1) continue;
            const float* g = dout + size_t(n) * C;
            float* e = dwte_local + size_t(t - v0) * C;
#pragma omp simd
            for (int i = c0; i < c1; i++) e[i] += g[i];
        }
    }
}

void position_forward(float* out, const float* wpe, int n0, int N, int T, int C) {
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        float* o = out + size_t(n) * C;
        const float* p = wpe + size_t((n0 + n) % T) * C;
#pragma omp simd
        for (int i = 0; i < C; i++) o[i] += p[i];
    }
}

void position_backward(float* dwpe, const float* dout, int n0, int N, int T, int C) {
    const int nblk = (C + kCols - 1) / kCols;
#pragma omp parallel for schedule(static)
    for (int blk = 0; blk < nblk; blk++) {
        const int c0 = blk * kCols, c1 = c0 + kCols < C ? c0 + kCols : C;
        for (int n = 0; n < N; n++) {
            const float* g = dout + size_t(n) * C;
            float* p = dwpe + size_t((n0 + n) % T) * C;
#pragma omp simd
            for (int i = c0; i < c1; i++) p[i] += g[i];
        }
    }
}

}  // namespace shardlm::kernels
