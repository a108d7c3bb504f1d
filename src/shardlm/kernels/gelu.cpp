#include "shardlm/kernels/gelu.h"

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
#pragma omp parallel for schedule(dynamic, 1)
    for (size_t c = 0; c < nchunk; c++) {
        size_t i0 = c * kChunk, i1 = i0 + kChunk < n ? i0 + kChunk : n;
        for (size_t i = i0; i < i1; i += 16) {
            __mmask16 m = i + 16 <= i1 ? __mmask16(0xffff) : tail_mask(int(i1 - i));
            __m512 x = load16<D>(inp, i, m);
            __m512 x3 = _mm512_mul_ps(_mm512_mul_ps(x, x), x);
            __m512 u = _mm512_mul_ps(_mm512_set1_ps(kS), _mm512_fmadd_ps(_mm512_set1_ps(kA), x3, x));
            __m512 t = tanh512(u);
            __m512 y = _mm512_mul_ps(_mm512_mul_ps(_mm512_set1_ps(0.5f), x), _mm512_add_ps(_mm512_set1_ps(1.0f), t));
            store16<D>(out, i, m, y);
        }
    }
}

template <DType D>
void backward(float* dinp, const void* inp, const float* dout, size_t n) {
    size_t nchunk = (n + kChunk - 1) / kChunk;
#pragma omp parallel for schedule(dynamic, 1)
    for (size_t c = 0; c < nchunk; c++) {
        size_t i0 = c * kChunk, i1 = i0 + kChunk < n ? i0 + kChunk : n;
        for (size_t i = i0; i < i1; i += 16) {
            __mmask16 m = i + 16 <= i1 ? __mmask16(0xffff) : tail_mask(int(i1 - i));
            __m512 x = load16<D>(inp, i, m);
            __m512 g = _mm512_maskz_loadu_ps(m, dout + i);
            __m512 x2 = _mm512_mul_ps(x, x);
            __m512 u = _mm512_mul_ps(_mm512_set1_ps(kS), _mm512_fmadd_ps(_mm512_mul_ps(_mm512_set1_ps(kA), x2), x, x));
            __m512 t = tanh512(u);
            __m512 one = _mm512_set1_ps(1.0f), half = _mm512_set1_ps(0.5f);
            __m512 sech2 = _mm512_fnmadd_ps(t, t, one);
            __m512 du = _mm512_mul_ps(_mm512_set1_ps(kS), _mm512_fmadd_ps(_mm512_set1_ps(3.0f * kA), x2, one));
            // d/dx = 0.5 (1 + t) + 0.5 x sech^2(u) du/dx
            __m512 d = _mm512_fmadd_ps(_mm512_mul_ps(half, x), _mm512_mul_ps(sech2, du), _mm512_mul_ps(half, _mm512_add_ps(one, t)));
            _mm512_mask_storeu_ps(dinp + i, m, _mm512_mul_ps(d, g));
        }
    }
}

}  // namespace

void gelu_forward(float* out, const float* inp, size_t n) { forward<DType::F32>(out, inp, n); }
void gelu_backward(float* dinp, const float* inp, const float* dout, size_t n) {
    backward<DType::F32>(dinp, inp, dout, n);
}
void gelu_forward(void* out, const void* inp, DType t, size_t n) { SHARDLM_DTYPE_SWITCH(t, D, forward<D>(out, inp, n)) }
void gelu_backward(float* dinp, const void* inp, DType t, const float* dout, size_t n) {
    SHARDLM_DTYPE_SWITCH(t, D, backward<D>(dinp, inp, dout, n))
}

}  // namespace shardlm::kernels
