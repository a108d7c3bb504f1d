// core/simd.h: 16 fp32 lanes and a lane mask, the one vector type of the element-wise kernels
// (softmax, cross-entropy, GELU, embeddings, residuals, Adam, conversions), on two instruction sets:
//   AVX-512F (Zen 4/5, Sapphire/Emerald Rapids): one __m512 and a __mmask16; every operation is the
//            single intrinsic the kernels used before this layer existed, so their bits are unchanged;
//   AVX2 + FMA + F16C (Zen 2/3, Haswell and later): two __m256 halves and two lane masks.
// The build picks one with -march=native (SHARDLM_ARCH_FLAGS): the binary runs on the CPU it was built
// on. The two give the same bits for every element-wise operation (add, mul, fma, div, sqrt, exp,
// conversions); horizontal sums and maxima (reduce_add, reduce_max) add the lanes in another order.
//
// Masks are lane prefixes (the tail of a row: mask_first) or single lanes (mask_lane); 16-bit loads
// and stores take only prefixes (AVX2 has no 16-bit masked move: a partial prefix goes through a
// small buffer).
#pragma once
#include <immintrin.h>

#include <cstddef>
#include <cstring>

#if !defined(__AVX512F__) && !(defined(__AVX2__) && defined(__FMA__) && defined(__F16C__))
#error "shardlm needs AVX-512F, or AVX2 + FMA + F16C: build with -march=native (SHARDLM_ARCH_FLAGS) on such a CPU"
#endif

namespace shardlm::simd {

#if defined(__AVX512F__)
inline constexpr const char* kIsa = "avx512";

struct V16 {
    __m512 v;
};
struct M16 {
    __mmask16 k;
    int n;  // lanes of a prefix mask (16: all), -1: not a prefix
};

inline M16 mask_all() { return {__mmask16(0xffff), 16}; }
inline M16 mask_first(int n) { return {__mmask16((1u << n) - 1u), n}; }  // 0 <= n <= 16
inline M16 mask_lane(int i) { return {__mmask16(1u << i), -1}; }

inline V16 zero() { return {_mm512_setzero_ps()}; }
inline V16 set1(float x) { return {_mm512_set1_ps(x)}; }
inline V16 loadu(const float* p) { return {_mm512_loadu_ps(p)}; }
inline void storeu(float* p, V16 a) { _mm512_storeu_ps(p, a.v); }
inline V16 load(M16 m, const float* p) { return {_mm512_maskz_loadu_ps(m.k, p)}; }  // masked-off lanes 0
inline void store(M16 m, float* p, V16 a) { _mm512_mask_storeu_ps(p, m.k, a.v); }
inline void stream(float* p, V16 a) { _mm512_stream_ps(p, a.v); }  // p 64-byte aligned

inline V16 operator+(V16 a, V16 b) { return {_mm512_add_ps(a.v, b.v)}; }
inline V16 operator-(V16 a, V16 b) { return {_mm512_sub_ps(a.v, b.v)}; }
inline V16 operator*(V16 a, V16 b) { return {_mm512_mul_ps(a.v, b.v)}; }
inline V16 operator/(V16 a, V16 b) { return {_mm512_div_ps(a.v, b.v)}; }
inline V16 fmadd(V16 a, V16 b, V16 c) { return {_mm512_fmadd_ps(a.v, b.v, c.v)}; }    // a b + c, one rounding
inline V16 fnmadd(V16 a, V16 b, V16 c) { return {_mm512_fnmadd_ps(a.v, b.v, c.v)}; }  // c - a b, one rounding
// max and min as their masked forms over every lane, a's lanes the (never used) pass-through: GCC 12's
// _mm512_max_ps passes _mm512_undefined_ps(), a variable initialised from itself, and warns where it is
// inlined (-Wuninitialized, GCC bug 105593); the same instruction and bits
inline V16 max(V16 a, V16 b) { return {_mm512_mask_max_ps(a.v, __mmask16(0xffff), a.v, b.v)}; }
inline V16 min(V16 a, V16 b) { return {_mm512_mask_min_ps(a.v, __mmask16(0xffff), a.v, b.v)}; }
inline V16 sqrt(V16 a) { return {_mm512_sqrt_ps(a.v)}; }
inline V16 round_nearest(V16 a) { return {_mm512_roundscale_ps(a.v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)}; }
// a 2^n for integral n in [-126, 128]
inline V16 scalef(V16 a, V16 n) { return {_mm512_scalef_ps(a.v, n.v)}; }
inline V16 maskz(M16 m, V16 a) { return {_mm512_maskz_mov_ps(m.k, a.v)}; }              // m ? a : 0
inline V16 mask_max(V16 src, M16 m, V16 a, V16 b) { return {_mm512_mask_max_ps(src.v, m.k, a.v, b.v)}; }  // m ? max(a, b) : src
inline V16 mask_sub(V16 src, M16 m, V16 a, V16 b) { return {_mm512_mask_sub_ps(src.v, m.k, a.v, b.v)}; }  // m ? a - b : src
namespace detail {
// a's upper (hi 1) or lower (hi 0) 256 bits, by the masked extract over every lane with a zero pass-through: the
// unmasked one, and GCC 12's _mm512_castps512_ps256 through it, pass _mm256_undefined_pd() (GCC bug 105593, as max)
template <int hi>
inline __m256 half256(__m512 a) {
    return _mm256_castpd_ps(_mm512_mask_extractf64x4_pd(_mm256_setzero_pd(), __mmask8(0xff), _mm512_castps_pd(a), hi));
}
}  // namespace detail
// The lanes' sum and maximum in _mm512_reduce_add_ps's and _mm512_reduce_max_ps's order (GCC 12's
// avx512fintrin.h: upper half op lower half, then upper quarter op lower quarter, then lanes {2, 3, 0, 1},
// then {1, 0}), so the bits are those intrinsics', without their header's false alarm (tested against them)
inline float reduce_add(V16 a) {
    const __m256 h = _mm256_add_ps(detail::half256<1>(a.v), detail::half256<0>(a.v));
    const __m128 q = _mm_add_ps(_mm256_extractf128_ps(h, 1), _mm256_castps256_ps128(h));
    const __m128 p = _mm_add_ps(q, _mm_shuffle_ps(q, q, _MM_SHUFFLE(1, 0, 3, 2)));
    return _mm_cvtss_f32(p) + _mm_cvtss_f32(_mm_shuffle_ps(p, p, _MM_SHUFFLE(1, 1, 1, 1)));
}
inline float reduce_max(V16 a) {
    const __m256 h = _mm256_max_ps(detail::half256<1>(a.v), detail::half256<0>(a.v));
    const __m128 q = _mm_max_ps(_mm256_extractf128_ps(h, 1), _mm256_castps256_ps128(h));
    const __m128 p = _mm_max_ps(q, _mm_shuffle_ps(q, q, _MM_SHUFFLE(1, 0, 3, 2)));
    return _mm_cvtss_f32(_mm_max_ps(p, _mm_shuffle_ps(p, p, _MM_SHUFFLE(0, 1, 0, 1))));
}

// 16 fp32 <-> 16 16-bit patterns in a __m256i
inline __m256i bf16_round(V16 a) {  // nearest even, NaN kept quiet: shardlm::f32_to_bf16's bits
    const __m512i u = _mm512_castps_si512(a.v);
    const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
    __m512i r = _mm512_srli_epi32(_mm512_add_epi32(_mm512_add_epi32(u, _mm512_set1_epi32(0x7fff)), lsb), 16);
    const __m512i abs = _mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff));
    const __mmask16 nan = _mm512_cmpgt_epu32_mask(abs, _mm512_set1_epi32(0x7f800000));
    r = _mm512_mask_or_epi32(r, nan, _mm512_srli_epi32(u, 16), _mm512_set1_epi32(0x40));
    return _mm512_cvtepi32_epi16(r);
}
inline V16 bf16_widen(__m256i h) { return {_mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16))}; }
inline __m256i f16_round(V16 a) { return _mm512_cvtps_ph(a.v, _MM_FROUND_TO_NEAREST_INT); }
inline V16 f16_widen(__m256i h) { return {_mm512_cvtph_ps(h)}; }
inline __m256i load_u16(M16 m, const unsigned short* p) { return _mm256_maskz_loadu_epi16(m.k, p); }
inline void store_u16(M16 m, unsigned short* p, __m256i h) { _mm256_mask_storeu_epi16(p, m.k, h); }
// 32 16-bit values (a, then b) to p, 64-byte aligned, past the caches as stream() stores
inline void stream_u16x32(unsigned short* p, __m256i a, __m256i b) {
    _mm512_stream_si512(reinterpret_cast<__m512i*>(p), _mm512_inserti64x4(_mm512_castsi256_si512(a), b, 1));
}

#else  // AVX2 + FMA + F16C
inline constexpr const char* kIsa = "avx2";

struct V16 {
    __m256 lo, hi;
};
struct M16 {
    __m256i lo, hi;  // all-ones lanes are on
    int n;           // lanes of a prefix mask (16: all), -1: not a prefix
};

namespace detail {
inline __m256i first8(int n) {  // lanes [0, n) of 8 on, n may be < 0 or > 8
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}
inline __m256i pow2(__m256i k) { return _mm256_slli_epi32(_mm256_add_epi32(k, _mm256_set1_epi32(127)), 23); }  // k in [-126, 127]
inline __m128i bf16_round8(__m256 a) {
    const __m256i u = _mm256_castps_si256(a);
    const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
    __m256i r = _mm256_srli_epi32(_mm256_add_epi32(_mm256_add_epi32(u, _mm256_set1_epi32(0x7fff)), lsb), 16);
    const __m256i abs = _mm256_and_si256(u, _mm256_set1_epi32(0x7fffffff));
    const __m256i nan = _mm256_cmpgt_epi32(abs, _mm256_set1_epi32(0x7f800000));  // abs < 2^31: signed compare is exact
    r = _mm256_blendv_epi8(r, _mm256_or_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(0x40)), nan);
    const __m256i packed = _mm256_packus_epi32(r, r);  // every value <= 0xffff: no saturation
    return _mm256_castsi256_si128(_mm256_permute4x64_epi64(packed, 0x08));
}
inline __m256 bf16_widen8(__m128i h) { return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16)); }
inline float hsum8(__m256 a) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}
inline float hmax8(__m256 a) {
    __m128 s = _mm_max_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    s = _mm_max_ps(s, _mm_movehl_ps(s, s));
    s = _mm_max_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}
}  // namespace detail

inline M16 mask_first(int n) { return {detail::first8(n), detail::first8(n - 8), n}; }
inline M16 mask_all() { return mask_first(16); }
inline M16 mask_lane(int i) {
    const __m256i idx_lo = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7), idx_hi = _mm256_setr_epi32(8, 9, 10, 11, 12, 13, 14, 15);
    return {_mm256_cmpeq_epi32(idx_lo, _mm256_set1_epi32(i)), _mm256_cmpeq_epi32(idx_hi, _mm256_set1_epi32(i)), -1};
}

inline V16 zero() { return {_mm256_setzero_ps(), _mm256_setzero_ps()}; }
inline V16 set1(float x) { return {_mm256_set1_ps(x), _mm256_set1_ps(x)}; }
inline V16 loadu(const float* p) { return {_mm256_loadu_ps(p), _mm256_loadu_ps(p + 8)}; }
inline void storeu(float* p, V16 a) {
    _mm256_storeu_ps(p, a.lo);
    _mm256_storeu_ps(p + 8, a.hi);
}
inline V16 load(M16 m, const float* p) {  // masked-off lanes 0, and never read
    if (m.n == 16) return loadu(p);
    return {_mm256_maskload_ps(p, m.lo), _mm256_maskload_ps(p + 8, m.hi)};
}
inline void store(M16 m, float* p, V16 a) {
    if (m.n == 16) return storeu(p, a);
    _mm256_maskstore_ps(p, m.lo, a.lo);
    _mm256_maskstore_ps(p + 8, m.hi, a.hi);
}
inline void stream(float* p, V16 a) {  // p 32-byte aligned
    _mm256_stream_ps(p, a.lo);
    _mm256_stream_ps(p + 8, a.hi);
}

inline V16 operator+(V16 a, V16 b) { return {_mm256_add_ps(a.lo, b.lo), _mm256_add_ps(a.hi, b.hi)}; }
inline V16 operator-(V16 a, V16 b) { return {_mm256_sub_ps(a.lo, b.lo), _mm256_sub_ps(a.hi, b.hi)}; }
inline V16 operator*(V16 a, V16 b) { return {_mm256_mul_ps(a.lo, b.lo), _mm256_mul_ps(a.hi, b.hi)}; }
inline V16 operator/(V16 a, V16 b) { return {_mm256_div_ps(a.lo, b.lo), _mm256_div_ps(a.hi, b.hi)}; }
inline V16 fmadd(V16 a, V16 b, V16 c) { return {_mm256_fmadd_ps(a.lo, b.lo, c.lo), _mm256_fmadd_ps(a.hi, b.hi, c.hi)}; }
inline V16 fnmadd(V16 a, V16 b, V16 c) { return {_mm256_fnmadd_ps(a.lo, b.lo, c.lo), _mm256_fnmadd_ps(a.hi, b.hi, c.hi)}; }
inline V16 max(V16 a, V16 b) { return {_mm256_max_ps(a.lo, b.lo), _mm256_max_ps(a.hi, b.hi)}; }
inline V16 min(V16 a, V16 b) { return {_mm256_min_ps(a.lo, b.lo), _mm256_min_ps(a.hi, b.hi)}; }
inline V16 sqrt(V16 a) { return {_mm256_sqrt_ps(a.lo), _mm256_sqrt_ps(a.hi)}; }
inline V16 round_nearest(V16 a) {
    constexpr int r = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;
    return {_mm256_round_ps(a.lo, r), _mm256_round_ps(a.hi, r)};
}
// a 2^n for integral n in [-126, 128], in two exact steps (2^128 has no fp32 pattern)
inline V16 scalef(V16 a, V16 n) {
    auto half = [](__m256 x, __m256 nf) {
        const __m256i k = _mm256_cvtps_epi32(nf), k1 = _mm256_srai_epi32(k, 1), k2 = _mm256_sub_epi32(k, k1);
        return _mm256_mul_ps(_mm256_mul_ps(x, _mm256_castsi256_ps(detail::pow2(k1))), _mm256_castsi256_ps(detail::pow2(k2)));
    };
    return {half(a.lo, n.lo), half(a.hi, n.hi)};
}
inline V16 maskz(M16 m, V16 a) {
    return {_mm256_and_ps(_mm256_castsi256_ps(m.lo), a.lo), _mm256_and_ps(_mm256_castsi256_ps(m.hi), a.hi)};
}
inline V16 mask_max(V16 src, M16 m, V16 a, V16 b) {
    const V16 x = max(a, b);
    return {_mm256_blendv_ps(src.lo, x.lo, _mm256_castsi256_ps(m.lo)), _mm256_blendv_ps(src.hi, x.hi, _mm256_castsi256_ps(m.hi))};
}
inline V16 mask_sub(V16 src, M16 m, V16 a, V16 b) {
    const V16 x = a - b;
    return {_mm256_blendv_ps(src.lo, x.lo, _mm256_castsi256_ps(m.lo)), _mm256_blendv_ps(src.hi, x.hi, _mm256_castsi256_ps(m.hi))};
}
inline float reduce_add(V16 a) { return detail::hsum8(_mm256_add_ps(a.lo, a.hi)); }
inline float reduce_max(V16 a) { return detail::hmax8(_mm256_max_ps(a.lo, a.hi)); }

inline __m256i bf16_round(V16 a) { return _mm256_set_m128i(detail::bf16_round8(a.hi), detail::bf16_round8(a.lo)); }
inline V16 bf16_widen(__m256i h) {
    return {detail::bf16_widen8(_mm256_castsi256_si128(h)), detail::bf16_widen8(_mm256_extracti128_si256(h, 1))};
}
inline __m256i f16_round(V16 a) {
    return _mm256_set_m128i(_mm256_cvtps_ph(a.hi, _MM_FROUND_TO_NEAREST_INT), _mm256_cvtps_ph(a.lo, _MM_FROUND_TO_NEAREST_INT));
}
inline V16 f16_widen(__m256i h) {
    return {_mm256_cvtph_ps(_mm256_castsi256_si128(h)), _mm256_cvtph_ps(_mm256_extracti128_si256(h, 1))};
}
inline __m256i load_u16(M16 m, const unsigned short* p) {  // m a prefix
    if (m.n == 16) return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
    alignas(32) unsigned short b[16] = {};
    std::memcpy(b, p, size_t(m.n) * 2);
    return _mm256_load_si256(reinterpret_cast<const __m256i*>(b));
}
inline void store_u16(M16 m, unsigned short* p, __m256i h) {  // m a prefix
    if (m.n == 16) return _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), h);
    alignas(32) unsigned short b[16];
    _mm256_store_si256(reinterpret_cast<__m256i*>(b), h);
    std::memcpy(p, b, size_t(m.n) * 2);
}
inline void stream_u16x32(unsigned short* p, __m256i a, __m256i b) {
    _mm256_stream_si256(reinterpret_cast<__m256i*>(p), a);
    _mm256_stream_si256(reinterpret_cast<__m256i*>(p + 16), b);
}
#endif

// The mask of lanes [i, i + 16) that lie below n (i < n).
inline M16 mask_below(size_t i, size_t n) { return i + 16 <= n ? mask_all() : mask_first(int(n - i)); }

// Stores and loads complete: a fence after a run of stream() stores.
inline void stream_fence() { _mm_sfence(); }

}  // namespace shardlm::simd
