#include "shardlm/kernels/encoder.h"

#include "shardlm/core/contention.h"
#include "shardlm/core/profile.h"

#include <cstddef>

#include "shardlm/core/dtype_simd.h"

namespace shardlm::kernels {

namespace {
// the position of row r of a sequence
inline size_t row_position(const int* pos, int r) { return size_t(pos ? pos[r] : r); }
}  // namespace

void encoder_forward(float* out, const int* tokens, const float* wte, const float* wpe, int B, int T, int C,
                     const int* pos) {
    profile::Scope prof_("embedding forward", 0, 12.0 * B * T * C);
#pragma omp parallel for schedule(dynamic, 8) if (!cpu_contended())
    for (int bt = 0; bt < B * T; bt++) {
        const float* e = wte + size_t(tokens[bt]) * C;
        const float* p = wpe + row_position(pos, bt % T) * C;
        float* o = out + size_t(bt) * C;
#pragma omp simd
        for (int i = 0; i < C; i++) o[i] = e[i] + p[i];
    }
}

void encoder_backward(float* dwte, float* dwpe, const float* dout, const int* tokens, int B, int T, int C,
                      const int* pos) {
    profile::Scope prof_("embedding backward", 0, 12.0 * B * T * C);
    constexpr int kCols = 64;
    int nblk = (C + kCols - 1) / kCols;
#pragma omp parallel for schedule(dynamic, 1) if (!cpu_contended())
    for (int blk = 0; blk < nblk; blk++) {
        int c0 = blk * kCols, c1 = c0 + kCols < C ? c0 + kCols : C;
        for (int bt = 0; bt < B * T; bt++) {
            const float* g = dout + size_t(bt) * C;
            float* e = dwte + size_t(tokens[bt]) * C;
            float* p = dwpe + row_position(pos, bt % T) * C;
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
#pragma omp parallel for schedule(dynamic, 8) if (!cpu_contended())
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
    profile::Scope prof_("embedding backward", 0, 12.0 * N * C);
    const int nblk = (C + kCols - 1) / kCols;
#pragma omp parallel for schedule(dynamic, 1) if (!cpu_contended())
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

void position_forward(float* out, const float* wpe, int n0, int N, int T, int C, const int* pos) {
#pragma omp parallel for schedule(dynamic, 8) if (!cpu_contended())
    for (int n = 0; n < N; n++) {
        float* o = out + size_t(n) * C;
        const float* p = wpe + row_position(pos, (n0 + n) % T) * C;
#pragma omp simd
        for (int i = 0; i < C; i++) o[i] += p[i];
    }
}

void position_backward(float* dwpe, const float* dout, int n0, int N, int T, int C, const int* pos) {
    const int nblk = (C + kCols - 1) / kCols;
#pragma omp parallel for schedule(dynamic, 1) if (!cpu_contended())
    for (int blk = 0; blk < nblk; blk++) {
        const int c0 = blk * kCols, c1 = c0 + kCols < C ? c0 + kCols : C;
        for (int n = 0; n < N; n++) {
            const float* g = dout + size_t(n) * C;
            float* p = dwpe + row_position(pos, (n0 + n) % T) * C;
#pragma omp simd
            for (int i = c0; i < c1; i++) p[i] += g[i];
        }
    }
}

}  // namespace shardlm::kernels

namespace shardlm::kernels {

namespace {

inline simd::M16 mask_of(int j, int C) { return simd::mask_below(size_t(j), size_t(C)); }

template <DType W, DType O>
void encoder_impl(void* out, const int* tokens, const void* wte, const void* wpe, int B, int T, int C, const int* pos) {
#pragma omp parallel for schedule(dynamic, 8) if (!cpu_contended())
    for (int bt = 0; bt < B * T; bt++) {
        const size_t e = size_t(tokens[bt]) * C, p = row_position(pos, bt % T) * C, o = size_t(bt) * C;
        for (int j = 0; j < C; j += 16) {
            const simd::M16 m = mask_of(j, C);
            store16<O>(out, o + j, m, load16<W>(wte, e + j, m) + load16<W>(wpe, p + j, m));
        }
    }
}

template <DType W>
void embedding_impl(float* out, const int* tokens, const void* wte_local, int v0, int v1, int N, int C) {
#pragma omp parallel for schedule(dynamic, 8) if (!cpu_contended())
    for (int n = 0; n < N; n++) {
        float* o = out + size_t(n) * C;
        const int t = tokens[n];
        for (int j = 0; j < C; j += 16) {
            const simd::M16 m = mask_of(j, C);
            const simd::V16 v = t >= v0 && t < v1 ? load16<W>(wte_local, size_t(t - v0) * C + j, m) : simd::zero();
            simd::store(m, o + j, v);
        }
    }
}

template <DType W>
void position_impl(float* out, const void* wpe, int n0, int N, int T, int C, const int* pos) {
#pragma omp parallel for schedule(dynamic, 8) if (!cpu_contended())
    for (int n = 0; n < N; n++) {
        float* o = out + size_t(n) * C;
        const size_t p = row_position(pos, (n0 + n) % T) * C;
        for (int j = 0; j < C; j += 16) {
            const simd::M16 m = mask_of(j, C);
            simd::store(m, o + j, simd::load(m, o + j) + load16<W>(wpe, p + j, m));
        }
    }
}

}  // namespace

void encoder_forward(void* out, DType out_t, const int* tokens, const void* wte, const void* wpe, DType w_t, int B,
                     int T, int C, const int* pos) {
    profile::Scope prof_("embedding forward", 0, 12.0 * B * T * C);
    if (out_t == DType::F32 && w_t == DType::F32) {
        encoder_forward(static_cast<float*>(out), tokens, static_cast<const float*>(wte), static_cast<const float*>(wpe),
                        B, T, C, pos);
        return;
    }
    SHARDLM_DTYPE_SWITCH(w_t, W, SHARDLM_DTYPE_SWITCH(out_t, O, encoder_impl<W, O>(out, tokens, wte, wpe, B, T, C, pos)))
}

void embedding_forward(float* out, const int* tokens, const void* wte_local, DType w_t, int v0, int v1, int N, int C) {
    SHARDLM_DTYPE_SWITCH(w_t, W, embedding_impl<W>(out, tokens, wte_local, v0, v1, N, C))
}

void position_forward(float* out, const void* wpe, DType w_t, int n0, int N, int T, int C, const int* pos) {
    SHARDLM_DTYPE_SWITCH(w_t, W, position_impl<W>(out, wpe, n0, N, T, C, pos))
}

}  // namespace shardlm::kernels
