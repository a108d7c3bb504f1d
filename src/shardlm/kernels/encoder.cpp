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
