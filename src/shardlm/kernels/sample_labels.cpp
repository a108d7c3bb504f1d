#include "shardlm/kernels/sample_labels.h"

#include <cmath>
#include <cstddef>

#include "shardlm/kernels/vec_math.h"

namespace shardlm::kernels {

namespace {

// exp(x - mx) of columns [j, j + 16) below V (0 past V) into e
inline V16 block_exp(const float* x, int j, int V, float mx) {
    using namespace simd;
    const M16 m = mask_below(size_t(j), size_t(V));
    return maskz(m, exp16(load(m, x + j) - set1(mx)));
}

// The sum of exp(x - mx) over [0, V): 16 columns at a time, the blocks added in order in double.
double row_total(const float* x, int V, float mx) {
    double s = 0;
    for (int j = 0; j < V; j += 16) s += double(simd::reduce_add(block_exp(x, j, V, mx)));
    return s;
}

// The first column v of [0, V) at which base + the cumulative sum (the same blocks as row_total's)
// exceeds target; V - 1 if none does (rounding at the very end).
int row_pick(const float* x, int V, float mx, double base, double target) {
    double cum = base;
    for (int j = 0; j < V; j += 16) {
        const V16 e = block_exp(x, j, V, mx);
        const double b = double(simd::reduce_add(e));
        if (cum + b > target) {
            alignas(64) float lanes[16];
            simd::storeu(lanes, e);
            double c = cum;
            const int n = V - j < 16 ? V - j : 16;
            for (int l = 0; l < n; l++) {
                c += double(lanes[l]);
                if (c > target) return j + l;
            }
            return j + n - 1;  // the lanes in order fell short of the block's sum by rounding
        }
        cum += b;
    }
    return V - 1;
}

}  // namespace

void sample_labels(int* labels, const float* logits, const int* keys, int N, int V, int Vp, uint64_t seed) {
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const float* x = logits + size_t(n) * size_t(Vp);
        const float mx = row_max(x, V);
        const double total = row_total(x, V, mx);
        labels[n] = row_pick(x, V, mx, 0.0, label_uniform(seed, keys[n]) * total);
    }
}

void sample_local_sums(float* sums, const float* logits, const float* mx, int N, int Vreal, int Vp_loc) {
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) sums[n] = Vreal > 0 ? float(row_total(logits + size_t(n) * size_t(Vp_loc), Vreal, mx[n])) : 0.0f;
}

void sample_claim(float* claims, const float* logits, const float* mx, const float* all_sums, int tp, int rank,
                  const int* keys, int N, int Vreal, int Vp_loc, int v0, uint64_t seed) {
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        // the ranks' intervals [P_r, P_r + S_r) of the cumulative sum, added in rank order (every
        // rank computes the same P from the same gathered sums); the last rank with a real column
        // takes the end (a target at or past the total by rounding)
        double before = 0, total = 0;
        int last = 0;
        for (int r = 0; r < tp; r++) {
            const double s = double(all_sums[size_t(r) * size_t(N) + size_t(n)]);
            if (r < rank) before += s;
            if (s > 0) last = r;
            total += s;
        }
        const double target = label_uniform(seed, keys[n]) * total;
        const double mine = double(all_sums[size_t(rank) * size_t(N) + size_t(n)]);
        const bool claim = Vreal > 0 && target >= before && (target < before + mine || rank == last);
        claims[n] = claim ? float(v0 + row_pick(logits + size_t(n) * size_t(Vp_loc), Vreal, mx[n], before, target) + 1)
                          : 0.0f;
    }
}

}  // namespace shardlm::kernels
