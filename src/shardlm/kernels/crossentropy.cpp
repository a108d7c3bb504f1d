#include "shardlm/kernels/crossentropy.h"

#include <cmath>
#include <cstddef>

#include "shardlm/core/dtype_simd.h"
#include "shardlm/kernels/vec_math.h"

namespace shardlm::kernels {

namespace {

float row_max(const float* x, int V) {
    __m512 mx = _mm512_set1_ps(-INFINITY);
    for (int j = 0; j < V; j += 16) {
        __mmask16 m = j + 16 <= V ? __mmask16(0xffff) : tail_mask(V - j);
        mx = _mm512_mask_max_ps(mx, m, mx, _mm512_maskz_loadu_ps(m, x + j));
    }
    return _mm512_reduce_max_ps(mx);
}

// sum_j exp(x_j - mx); if `store`, also writes the exponentials to out (which may be x).
template <bool store>
float row_sum_exp(const float* x, float* out, int V, float mx) {
    __m512 s = _mm512_setzero_ps(), vm = _mm512_set1_ps(mx);
    for (int j = 0; j < V; j += 16) {
        __mmask16 m = j + 16 <= V ? __mmask16(0xffff) : tail_mask(V - j);
        __m512 e = exp512(_mm512_sub_ps(_mm512_maskz_loadu_ps(m, x + j), vm));
        e = _mm512_maskz_mov_ps(m, e);
        if constexpr (store) _mm512_mask_storeu_ps(out + j, m, e);
        s = _mm512_add_ps(s, e);
    }
    return _mm512_reduce_add_ps(s);
}

// One row's gradient from its exponentials x[0, V): dloss * softmax - dloss at the target t (when
// 0 <= t < V), zero on the padding [V, Vp). Written to d in bf16 (x left holding the exponentials), or
// in place in x.
void grad_row(float* x, unsigned short* d, int t, int V, int Vp, float dloss, float sum) {
    const __m512 scale = _mm512_set1_ps(dloss / sum);
    if (d) {
        for (int j = 0; j < Vp; j += 16) {
            __mmask16 m = j + 16 <= V ? __mmask16(0xffff) : j < V ? tail_mask(V - j) : __mmask16(0);
            __mmask16 mp = j + 16 <= Vp ? __mmask16(0xffff) : tail_mask(Vp - j);
            __m512 g = _mm512_mul_ps(_mm512_maskz_loadu_ps(m, x + j), scale);  // padding -> 0
            if (t >= j && t < j + 16 && t < V)  // - dloss at the target, rounded as the fp32 path rounds it
                g = _mm512_mask_sub_ps(g, __mmask16(1u << (t - j)), g, _mm512_set1_ps(dloss));
            _mm256_mask_storeu_epi16(d + j, mp, f32x16_to_bf16(g));
        }
        return;
    }
    for (int j = 0; j < V; j += 16) {
        __mmask16 m = j + 16 <= V ? __mmask16(0xffff) : tail_mask(V - j);
        _mm512_mask_storeu_ps(x + j, m, _mm512_mul_ps(_mm512_maskz_loadu_ps(m, x + j), scale));
    }
    if (t >= 0 && t < V) x[t] -= dloss;
    for (int j = V; j < Vp; j++) x[j] = 0.0f;
}

}  // namespace

void crossentropy_forward_backward(float* logits, float* losses, const int* targets,
                                   int N, int V, int Vp, float dloss, unsigned short* dlogits_bf16) {
#pragma omp parallel for schedule(dynamic, 1)
    for (int n = 0; n < N; n++) {
        float* x = logits + size_t(n) * Vp;
        int t = targets[n];
        float xt = x[t];
        float mx = row_max(x, V);
        float sum = row_sum_exp<true>(x, x, V, mx);
        losses[n] = mx + std::log(sum) - xt;
        // with a bf16 buffer the gradient goes there only; x is left holding the exponentials
        grad_row(x, dlogits_bf16 ? dlogits_bf16 + size_t(n) * Vp : nullptr, t, V, Vp, dloss, sum);
    }
}

void crossentropy_forward(float* losses, const float* logits, const int* targets, int N, int V, int Vp) {
#pragma omp parallel for schedule(dynamic, 1)
    for (int n = 0; n < N; n++) {
        const float* x = logits + size_t(n) * Vp;
        float mx = row_max(x, V);
        float sum = row_sum_exp<false>(x, nullptr, V, mx);
        losses[n] = mx + std::log(sum) - x[targets[n]];
    }
}

}  // namespace shardlm::kernels

namespace shardlm::kernels {

void vocab_parallel_max(float* mx, const float* logits, int N, int Vreal, int Vp_loc) {
#pragma omp parallel for schedule(dynamic, 8)
    for (int n = 0; n < N; n++) mx[n] = Vreal > 0 ? row_max(logits + size_t(n) * Vp_loc, Vreal) : -INFINITY;
}

void vocab_parallel_sums(float* stats, float* logits, const int* targets, const float* mx, int N, int Vreal,
                         int Vp_loc, int v0, bool store_exp) {
#pragma omp parallel for schedule(dynamic, 1)
    for (int n = 0; n < N; n++) {
        float* x = logits + size_t(n) * Vp_loc;
        const int t = targets[n] - v0;
        stats[N + n] = (t >= 0 && t < Vreal) ? x[t] : 0.0f;
        if (Vreal == 0) stats[n] = 0.0f;
        else stats[n] = store_exp ? row_sum_exp<true>(x, x, Vreal, mx[n]) : row_sum_exp<false>(x, nullptr, Vreal, mx[n]);
    }
}

void vocab_parallel_loss(float* losses, const float* mx, const float* stats, int N) {
    for (int n = 0; n < N; n++) losses[n] = mx[n] + std::log(stats[n]) - stats[N + n];
}

void vocab_parallel_grad(float* logits, const int* targets, const float* stats, int N, int Vreal, int Vp_loc, int v0,
                         float dloss, unsigned short* dlogits_bf16) {
#pragma omp parallel for schedule(dynamic, 1)
    for (int n = 0; n < N; n++) {
        float* x = logits + size_t(n) * Vp_loc;  // holds exp(x - mx) over the real columns
        const int t = targets[n] - v0;
        grad_row(x, dlogits_bf16 ? dlogits_bf16 + size_t(n) * Vp_loc : nullptr, t, Vreal, Vp_loc, dloss, stats[n]);
    }
}

}  // namespace shardlm::kernels
