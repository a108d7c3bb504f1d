// kernels/sample_labels.h: labels drawn from the model's own softmax, for Sophia-G's Gauss-Newton-
// Bartlett estimator (Liu et al. 2023): the gradient of the loss on labels y ~ softmax(logits), squared,
// estimates the diagonal of the Gauss-Newton matrix.
//
// The draw is by inverse CDF in vocabulary order, from a uniform that is a pure function of (seed, key):
// for the token numbered `key` of a step (row x T + position within the step's global batch),
// u = uniform(seed, key) in [0, 1), and the label is the first real class v at which the cumulative sum
// of exp(logit - max) over classes 0..v exceeds u times the row's total. Any layout draws the same
// labels: data parallelism numbers rows globally, pipeline stages leave it to the head's stage, and
// the vocabulary-parallel version below cuts the same cumulative sum at the ranks' boundaries. (Logits
// equal to rounding give the same label unless u falls within rounding of a boundary between two
// classes.) tools/reference/optim_torch.py draws the same labels in torch from the same hash.
#pragma once
#include <cstdint>

namespace shardlm::kernels {

// splitmix64's finaliser (Steele et al. 2014): a bijection of 64-bit integers whose outputs pass BigCrush.
inline uint64_t mix64(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}
// The seed of one step's draws, from the run's seed.
inline uint64_t label_sample_seed(uint64_t run_seed, int64_t step) {
    return mix64(mix64(run_seed ^ 0x50484941534f53ULL) + uint64_t(step));
}
// The uniform of the token numbered key: 53 random bits in [0, 1).
inline double label_uniform(uint64_t seed, int64_t key) {
    return double(mix64(seed + 0x9e3779b97f4a7c15ULL * (uint64_t(key) + 1)) >> 11) * 0x1.0p-53;
}

// One rank holds the whole vocabulary: labels(N) from logits (N, Vp), of which the first V columns are
// real classes, and the tokens' keys(N).
void sample_labels(int* labels, const float* logits, const int* keys, int N, int V, int Vp, uint64_t seed);

// Vocabulary-parallel (kernels/crossentropy.h's split: this rank holds columns [v0, v0 + Vp_loc), the
// first Vreal of them real), after the all-reduce max mx(N):
//   1. sample_local_sums: sums(N) = sum over this rank's real columns of exp(x - mx)  -> all-gather
//      (rank-major: all_sums[r N + n])
//   2. sample_claim: on the rank whose interval of the cumulative sum holds u times the total, the
//      label + 1, else 0 (exactly one rank claims each token)  -> all-reduce sum, minus 1
void sample_local_sums(float* sums, const float* logits, const float* mx, int N, int Vreal, int Vp_loc);
void sample_claim(float* claims, const float* logits, const float* mx, const float* all_sums, int tp, int rank,
                  const int* keys, int N, int Vreal, int Vp_loc, int v0, uint64_t seed);

}  // namespace shardlm::kernels
