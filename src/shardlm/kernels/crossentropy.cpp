#include "shardlm/kernels/crossentropy.h"

#include "shardlm/core/profile.h"

#include <cmath>
#include <cstddef>

#include "shardlm/core/dtype_simd.h"
#include "shardlm/kernels/vec_math.h"

namespace shardlm::kernels {

namespace {

// sum_j exp(x_j - mx); if `store`, also writes the exponentials to out (which may be x).
template <bool store>
float row_sum_exp(const float* x, float* out, int V, float mx) {
    using namespace simd;
    V16 s = zero();
    const V16 vm = set1(mx);
    for (int j = 0; j < V; j += 16) {
        const M16 m = mask_below(size_t(j), size_t(V));
        const V16 e = maskz(m, exp16(load(m, x + j) - vm));
        if constexpr (store) simd::store(m, out + j, e);
        s = s + e;
    }
    return reduce_add(s);
}

// One row's gradient from its exponentials x[0, V): dloss * softmax - dloss at the target t (when
// 0 <= t < V), zero on the padding [V, Vp). Written to d in bf16 (x left holding the exponentials), or
// in place in x.
void grad_row(float* x, unsigned short* d, int t, int V, int Vp, float dloss, float sum) {
    using namespace simd;
    const V16 scale = set1(dloss / sum);
    if (d) {
        for (int j = 0; j < Vp; j += 16) {
            const M16 m = j < V ? mask_below(size_t(j), size_t(V)) : mask_first(0);
            const M16 mp = mask_below(size_t(j), size_t(Vp));
            V16 g = load(m, x + j) * scale;  // padding -> 0
            if (t >= j && t < j + 16 && t < V)  // - dloss at the target, rounded as the fp32 path rounds it
                g = mask_sub(g, mask_lane(t - j), g, set1(dloss));
            store_u16(mp, d + j, bf16_round(g));
        }
        return;
    }
    for (int j = 0; j < V; j += 16) {
        const M16 m = mask_below(size_t(j), size_t(V));
        simd::store(m, x + j, load(m, x + j) * scale);
    }
    if (t >= 0 && t < V) x[t] -= dloss;
    for (int j = V; j < Vp; j++) x[j] = 0.0f;
}

}  // namespace

void crossentropy_forward_backward(float* logits, float* losses, const int* targets,
                                   int N, int V, int Vp, float dloss, unsigned short* dlogits_bf16) {
    profile::Scope prof_("cross-entropy", 0, 8.0 * N * Vp);
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
    profile::Scope prof_("cross-entropy", 0, 4.0 * N * Vp);
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
