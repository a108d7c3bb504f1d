#include "shardlm/kernels/peak_loops.h"

#include <immintrin.h>

namespace shardlm::kernels {

namespace {

// (_mm512_reduce_add_ps inside a target("avx512f") function trips a GCC 12 -Wuninitialized false alarm)
__attribute__((target("avx512f"))) float sum_lanes(const __m512 (&a)[16]) {
    alignas(64) float lanes[16];
    float s = 0;
    for (int i = 0; i < 16; i++) {
        _mm512_store_ps(lanes, a[i]);
        for (float x : lanes) s += x;
    }
    return s;
}

__attribute__((target("avx512f"))) float fma512(long iters) {
    __m512 a[16];
    for (int i = 0; i < 16; i++) a[i] = _mm512_set1_ps(1.0f + float(i) * 1e-3f);
    const __m512 b = _mm512_set1_ps(0.999999f), c = _mm512_set1_ps(1e-7f);
    for (long it = 0; it < iters; it++) {
#pragma GCC unroll 16
        for (int i = 0; i < 16; i++) a[i] = _mm512_fmadd_ps(a[i], b, c);
    }
    return sum_lanes(a);
}

// 12 chains: with b and c that leaves 2 of AVX2's 16 ymm registers (16 chains, as the AVX-512 loop has, spilled
// to the stack and measured 54 of a Zen 3 core's 76-93 GFLOP/s); 8 would do for a 4-cycle FMA on two pipes.
constexpr int kChains256 = 12;

__attribute__((target("avx2,fma"))) float fma256(long iters) {
    __m256 a[kChains256];
    for (int i = 0; i < kChains256; i++) a[i] = _mm256_set1_ps(1.0f + float(i) * 1e-3f);
    const __m256 b = _mm256_set1_ps(0.999999f), c = _mm256_set1_ps(1e-7f);
    for (long it = 0; it < iters; it++) {
#pragma GCC unroll 16
        for (int i = 0; i < kChains256; i++) a[i] = _mm256_fmadd_ps(a[i], b, c);
    }
    alignas(32) float lanes[8];
    float s = 0;
    for (int i = 0; i < kChains256; i++) {
        _mm256_store_ps(lanes, a[i]);
        for (float x : lanes) s += x;
    }
    return s;
}

__attribute__((target("avx512f,avx512bf16"))) float dpbf16(long iters) {
    __m512 a[16];
    for (int i = 0; i < 16; i++) a[i] = _mm512_set1_ps(1.0f + float(i) * 1e-3f);
    const __m512bh b = _mm512_cvtne2ps_pbh(_mm512_set1_ps(1e-3f), _mm512_set1_ps(-1e-3f));
    const __m512bh c = _mm512_cvtne2ps_pbh(_mm512_set1_ps(1e-4f), _mm512_set1_ps(1e-4f));
    for (long it = 0; it < iters; it++) {
#pragma GCC unroll 16
        for (int i = 0; i < 16; i++) a[i] = _mm512_dpbf16_ps(a[i], b, c);
    }
    return sum_lanes(a);
}

}  // namespace

float fp32_fma_chains(long iters) { return __builtin_cpu_supports("avx512f") ? fma512(iters) : fma256(iters); }
double fp32_fma_flops_per_iter() { return __builtin_cpu_supports("avx512f") ? 16.0 * 16 * 2 : kChains256 * 8.0 * 2; }
bool has_bf16_dot() { return __builtin_cpu_supports("avx512bf16"); }
float bf16_dot_chains(long iters) { return dpbf16(iters); }

}  // namespace shardlm::kernels
