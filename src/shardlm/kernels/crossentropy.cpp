#include "shardlm/kernels/crossentropy.h"

#include "shardlm/core/contention.h"
#include "shardlm/core/profile.h"
#include "shardlm/core/runtime.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>

#include "shardlm/core/dtype_simd.h"
#include "shardlm/kernels/vec_math.h"

namespace shardlm::kernels {

namespace {

// sum_j exp(x_j - mx); if `store`, also writes the exponentials to out (which may be x). With next, the
// thread's next row of V floats is asked for a line per 16 columns, so that it streams in while this row's
// exponentials are computed from cache, instead of when its max pass starts.
template <bool store>
float row_sum_exp(const float* x, float* out, int V, float mx, const float* next = nullptr) {
    using namespace simd;
    V16 s = zero();
    const V16 vm = set1(mx);
    for (int j = 0; j < V; j += 16) {
        if (next) __builtin_prefetch(next + j, 0, 2);
        const M16 m = mask_below(size_t(j), size_t(V));
        const V16 e = maskz(m, exp16(load(m, x + j) - vm));
        if constexpr (store) simd::store(m, out + j, e);
        s = s + e;
    }
    return reduce_add(s);
}

// f(n, next) for rows n in [0, N) over the threads, next the row after n when the same thread takes it next
// (else null): rows go out in runs of up to 8, so that row_sum_exp can ask for the thread's next row while
// it works on this one (a row is 200 KB at GPT-2's vocabulary: two fit in a 512 KB L2). A row's bits do not
// depend on the runs.
template <class F>
void rows_in_runs(int N, F&& f) {
    const int run = std::clamp(N / (2 * team_threads()), 1, 8);
#pragma omp parallel for schedule(dynamic, 1)
    for (int r0 = 0; r0 < N; r0 += run) {
        const int r1 = std::min(N, r0 + run);
        for (int n = r0; n < r1; n++) f(n, n + 1 < r1);
    }
}

// One row's gradient from its exponentials x[0, V): x * scale (dloss * softmax) - dloss at the target t
// (when 0 <= t < V), zero on the padding [V, Vp). Written to d in bf16 (x left holding the exponentials),
// or in place in x.
void grad_row(float* x, unsigned short* d, int t, int V, int Vp, float dloss, float row_scale) {
    using namespace simd;
    const V16 scale = set1(row_scale);
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
    rows_in_runs(N, [&](int n, bool next) {
        float* x = logits + size_t(n) * Vp;
        int t = targets[n];
        float xt = x[t];
        float mx = row_max(x, V);
        float sum = row_sum_exp<true>(x, x, V, mx, next ? x + Vp : nullptr);
        losses[n] = mx + std::log(sum) - xt;
        // with a bf16 buffer the gradient goes there only; x is left holding the exponentials
        grad_row(x, dlogits_bf16 ? dlogits_bf16 + size_t(n) * Vp : nullptr, t, V, Vp, dloss, dloss / sum);
    });
}

void crossentropy_forward(float* losses, const float* logits, const int* targets, int N, int V, int Vp) {
    profile::Scope prof_("cross-entropy", 0, 4.0 * N * Vp);
    rows_in_runs(N, [&](int n, bool next) {
        const float* x = logits + size_t(n) * Vp;
        float mx = row_max(x, V);
        float sum = row_sum_exp<false>(x, nullptr, V, mx, next ? x + Vp : nullptr);
        losses[n] = mx + std::log(sum) - x[targets[n]];
    });
}

// ---- a block of columns at a time ------------------------------------------------------------------

void ce_rows_start(const CeRowStats& st, int rows) {
    for (int r = 0; r < rows; r++) st.m[r] = -INFINITY, st.s[r] = 0.0f, st.xt[r] = 0.0f, st.et[r] = 0.0f;
}

void ce_block_stats(const float* x, unsigned short* e, size_t lde, float* mb, const CeRowStats& st, const int* targets,
                    int rows, int n, int width, int c0) {
    profile::Scope prof_("cross-entropy", 0, 4.0 * rows * double(n) + (e ? 2.0 * rows * double(width) : 0.0));
    // a short kernel (tens of microseconds a block): on the calling thread alone while the CPUs are shared
#pragma omp parallel if (!cpu_contended())
    {
#pragma omp for schedule(static) nowait
        for (int r = 0; r < rows; r++) {
            using namespace simd;
            const float* row = x + size_t(r) * size_t(width);
            unsigned short* er = e ? e + size_t(r) * lde : nullptr;
            const int t = targets[r] - c0;
            const float b = row_max(row, n);
            mb[r] = b;
            if (er)  // the padding's gradient: 0
                for (int j = n; j < width; j++) er[j] = 0;
            if (n <= 0) continue;
            const V16 vb = set1(b);
            V16 sum = zero();
            int j = 0;
            // whole cache lines of the gradient's place: streamed past the caches (it is read again only after
            // every block, from memory)
            if (er && reinterpret_cast<uintptr_t>(er) % 64 == 0) {
                for (; j + 32 <= n; j += 32) {
                    const V16 e0 = exp16(loadu(row + j) - vb), e1 = exp16(loadu(row + j + 16) - vb);
                    sum = sum + e0;
                    sum = sum + e1;
                    stream_u16x32(er + j, bf16_round(e0), bf16_round(e1));
                }
            }
            for (; j < n; j += 16) {
                const M16 k = mask_below(size_t(j), size_t(n));
                const V16 ex = maskz(k, exp16(load(k, row + j) - vb));
                if (er) store_u16(k, er + j, bf16_round(ex));
                sum = sum + ex;
            }
            if (t >= 0 && t < n) {  // the target's logit, and its exponential unrounded (lane 0 of the same exp16)
                st.xt[r] = row[t];
                st.et[r] = reduce_add(maskz(mask_first(1), exp16(set1(row[t]) - vb)));
            }
            if (b == -INFINITY) continue;  // every real logit -inf: nothing to add (and -inf - -inf is NaN)
            // the first block: m = b, and exp(-inf - b) = 0 drops the empty sum
            const float m = std::max(st.m[r], b);
            st.s[r] = st.s[r] * std::exp(st.m[r] - m) + reduce_add(sum) * std::exp(b - m);
            st.m[r] = m;
        }
        if (e) simd::stream_fence();  // this thread's streamed rows complete before the team joins
    }
}

void ce_rows_loss(float* losses, const CeRowStats& st, int rows) {
    for (int r = 0; r < rows; r++) losses[r] = st.m[r] + std::log(st.s[r]) - st.xt[r];
}

void ce_rows_grad(unsigned short* e, size_t lde, const float* mb, int width, const CeRowStats& st, const int* targets,
                  int rows, int V, float dloss) {
    profile::Scope prof_("cross-entropy", 0, 4.0 * rows * double(V));
#pragma omp parallel for schedule(static)
    for (int r = 0; r < rows; r++) {
        using namespace simd;
        unsigned short* er = e + size_t(r) * lde;
        float target_scale = 0.0f;
        const int t = targets[r];
        for (int b = 0, c0 = 0; c0 < V; b++, c0 += width) {
            // e holds bf16(exp(x - mb)): times exp(mb - m) / s, the softmax
            const float scale = dloss * (std::exp(mb[size_t(b) * size_t(rows) + size_t(r)] - st.m[r]) / st.s[r]);
            const V16 vs = set1(scale);
            const int n = std::min(width, V - c0);
            unsigned short* p = er + c0;
            for (int j = 0; j < n; j += 16) {
                const M16 k = mask_below(size_t(j), size_t(n));
                store_u16(k, p + j, bf16_round(bf16_widen(load_u16(k, p + j)) * vs));
            }
            if (t >= c0 && t < c0 + n) target_scale = scale;
        }
        // the target's from its unrounded exponential, - dloss as the fp32 path
        if (t >= 0 && t < V) er[t] = f32_to_bf16(st.et[r] * target_scale - dloss);
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
        grad_row(x, dlogits_bf16 ? dlogits_bf16 + size_t(n) * Vp_loc : nullptr, t, Vreal, Vp_loc, dloss,
                 dloss / stats[n]);
    }
}

}  // namespace shardlm::kernels
