#include "shardlm/kernels/gelu.h"

#include "shardlm/core/contention.h"
#include "shardlm/core/profile.h"

#include "shardlm/core/dtype_simd.h"
#include "shardlm/kernels/vec_math.h"

namespace shardlm::kernels {

namespace {
constexpr float kS = 0.7978845608028654f;  // sqrt(2/pi)
constexpr float kA = 0.044715f;
constexpr size_t kChunk = 4096;  // elements per OpenMP work item (multiple of 16)

template <DType D>
void forward(void* out, const void* inp, size_t n) {
    size_t nchunk = (n + kChunk - 1) / kChunk;
#pragma omp parallel for schedule(dynamic, 1) if (!cpu_contended())
    for (size_t c = 0; c < nchunk; c++) {
        size_t i0 = c * kChunk, i1 = i0 + kChunk < n ? i0 + kChunk : n;
        for (size_t i = i0; i < i1; i += 16) {
            using namespace simd;
            const M16 m = mask_below(i, i1);
            const V16 x = load16<D>(inp, i, m);
            const V16 x3 = (x * x) * x;
            const V16 u = set1(kS) * fmadd(set1(kA), x3, x);
            const V16 t = tanh16(u);
            const V16 y = (set1(0.5f) * x) * (set1(1.0f) + t);
            store16<D>(out, i, m, y);
        }
    }
}

template <DType D>
void backward(float* dinp, const void* inp, const float* dout, size_t n) {
    size_t nchunk = (n + kChunk - 1) / kChunk;
#pragma omp parallel for schedule(dynamic, 1) if (!cpu_contended())
    for (size_t c = 0; c < nchunk; c++) {
        size_t i0 = c * kChunk, i1 = i0 + kChunk < n ? i0 + kChunk : n;
        for (size_t i = i0; i < i1; i += 16) {
            using namespace simd;
            const M16 m = mask_below(i, i1);
            const V16 x = load16<D>(inp, i, m);
            const V16 g = load(m, dout + i);
            const V16 x2 = x * x;
            const V16 u = set1(kS) * fmadd(set1(kA) * x2, x, x);
            const V16 t = tanh16(u);
            const V16 one = set1(1.0f), half = set1(0.5f);
            const V16 sech2 = fnmadd(t, t, one);
            const V16 du = set1(kS) * fmadd(set1(3.0f * kA), x2, one);
            // d/dx = 0.5 (1 + t) + 0.5 x sech^2(u) du/dx
            const V16 d = fmadd(half * x, sech2 * du, half * (one + t));
            store(m, dinp + i, d * g);
        }
    }
}

}  // namespace

void gelu_forward(float* out, const float* inp, size_t n) {
    profile::Scope prof_("gelu forward", 0, 8.0 * n);
    forward<DType::F32>(out, inp, n);
}
void gelu_backward(float* dinp, const float* inp, const float* dout, size_t n) {
    profile::Scope prof_("gelu backward", 0, 12.0 * n);
    backward<DType::F32>(dinp, inp, dout, n);
}
void gelu_forward(void* out, const void* inp, DType t, size_t n) {
    profile::Scope prof_("gelu forward", 0, 2.0 * dtype_bytes(t) * n);
    SHARDLM_DTYPE_SWITCH(t, D, forward<D>(out, inp, n))
}

namespace {

inline simd::V16 sigmoid16(simd::V16 x) {
    using namespace simd;
    return set1(1.0f) / (set1(1.0f) + exp16(set1(0.0f) - x));
}

template <DType D>
void swiglu_fwd(void* h, const void* gu, int N, int F) {
#pragma omp parallel for schedule(static) if (!cpu_contended())
    for (int n = 0; n < N; n++) {
        const size_t g0 = size_t(n) * 2 * F, u0 = g0 + F, h0 = size_t(n) * F;
        for (int i = 0; i < F; i += 16) {
            using namespace simd;
            const M16 m = mask_below(size_t(i), size_t(F));
            const V16 g = load16<D>(gu, g0 + i, m), u = load16<D>(gu, u0 + i, m);
            store16<D>(h, h0 + i, m, (g * sigmoid16(g)) * u);
        }
    }
}

template <DType D>
void swiglu_bwd(float* dgu, const float* dh, const void* gu, int N, int F) {
#pragma omp parallel for schedule(static) if (!cpu_contended())
    for (int n = 0; n < N; n++) {
        const size_t g0 = size_t(n) * 2 * F, u0 = g0 + F, h0 = size_t(n) * F;
        for (int i = 0; i < F; i += 16) {
            using namespace simd;
            const M16 m = mask_below(size_t(i), size_t(F));
            const V16 g = load16<D>(gu, g0 + i, m), u = load16<D>(gu, u0 + i, m), d = load(m, dh + h0 + i);
            const V16 s = sigmoid16(g), one = set1(1.0f);
            // silu'(g) = s (1 + g (1 - s))
            store(m, dgu + g0 + i, (d * u) * (s * fmadd(g, one - s, one)));
            store(m, dgu + u0 + i, d * (g * s));
        }
    }
}

}  // namespace

void swiglu_forward(void* h, const void* gu, DType t, int N, int F) {
    profile::Scope prof_("swiglu forward", 0, 3.0 * dtype_bytes(t) * N * F);
    SHARDLM_DTYPE_SWITCH(t, D, swiglu_fwd<D>(h, gu, N, F))
}
void swiglu_backward(float* dgu, const float* dh, const void* gu, DType t, int N, int F) {
    profile::Scope prof_("swiglu backward", 0, (12.0 + 2 * dtype_bytes(t)) * N * F);
    SHARDLM_DTYPE_SWITCH(t, D, swiglu_bwd<D>(dgu, dh, gu, N, F))
}
void gelu_backward(float* dinp, const void* inp, DType t, const float* dout, size_t n) {
    profile::Scope prof_("gelu backward", 0, (8.0 + dtype_bytes(t)) * n);
    SHARDLM_DTYPE_SWITCH(t, D, backward<D>(dinp, inp, dout, n))
}

}  // namespace shardlm::kernels
