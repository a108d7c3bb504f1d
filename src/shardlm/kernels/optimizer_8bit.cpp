// kernels/optimizer_8bit.cpp: adam8bit's 8-bit block-wise quantisation (Dettmers et al. 2022): the codes,
// the nearest code of a value (a search, and the table that answers without one), blocks quantised and
// dequantised, and one block's step (kernels/optimizer_kernels.h).
#include <immintrin.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "shardlm/core/check.h"
#include "shardlm/core/simd.h"
#include "shardlm/kernels/optimizer_kernels.h"

namespace shardlm::kernels {

namespace {

// numpy.linspace(start, stop, n)[k]: k * step + start, two roundings (volatile: not fused into one
// FMA, which gives -1.4e-17 for linspace(-1, 1, 255)[127] instead of 0), the last point exactly stop
double linspace_at(double start, double stop, int n, int k) {
    if (k == n - 1) return stop;
    volatile double offset = k * ((stop - start) / (n - 1));
    return offset + start;
}

}  // namespace

Code8 dynamic_code(bool is_signed) {
    // bitsandbytes create_dynamic_map(signed, max_exponent_bits = 7, total_bits = 8): for exponent i,
    // the midpoints of linspace(0.1, 1, 2^i + 1) (signed) or linspace(0.1, 1, 2^(i+1) + 1) (unsigned)
    // scaled by 10^(i - 6), with their negatives when signed; then 0 and 1.
    std::vector<double> d;
    for (int i = 0; i < 7; i++) {
        const int items = is_signed ? (1 << i) + 1 : (1 << (i + 1)) + 1;
        const double scale = std::pow(10.0, i - 6);
        for (int k = 0; k + 1 < items; k++) {
            auto at = [&](int j) { return linspace_at(0.1, 1.0, items, j); };
            const double mean = (at(k) + at(k + 1)) / 2.0;
            d.push_back(scale * mean);
            if (is_signed) d.push_back(-scale * mean);
        }
    }
    d.push_back(0.0);
    d.push_back(1.0);
    std::sort(d.begin(), d.end());
    if (is_signed) d[0] = -1.0;
    Code8 c;
    for (size_t i = 0; i < 256; i++) c[i] = float(d[i]);
    return c;
}

Code8 linear_code(bool is_signed) {
    // bitsandbytes create_linear_map(signed, 8, add_zero = True): linspace(-1, 1, 255) and a second 0,
    // or linspace(0, 1, 256)
    std::vector<double> d;
    const int n = is_signed ? 255 : 256;
    const double lo = is_signed ? -1.0 : 0.0;
    for (int k = 0; k < n; k++) d.push_back(linspace_at(lo, 1.0, n, k));
    if (is_signed) d.push_back(0.0);
    std::sort(d.begin(), d.end());
    Code8 c;
    for (size_t i = 0; i < 256; i++) c[i] = float(d[i]);
    return c;
}

uint8_t nearest_code(const Code8& code, float x) {
    if (x != x) return 255;  // NaN: where a search of "the first value exceeding x" ends (none does)
    // lo: the first index whose value exceeds x (256 if none), by halving without branches: the comparisons of
    // an 8-bit state's values are as good as random, and a mispredicted branch at each of 8 levels had made
    // adam8bit's step 40x slower than AdamW's
    const float* base = code.data();
    for (size_t n = 256; n > 1;) {
        const size_t half = n / 2;
        base = base[half] <= x ? base + half : base;
        n -= half;
    }
    const int lo = int(base - code.data()) + (*base <= x ? 1 : 0);
    if (lo == 0) return 0;
    if (lo == 256) return 255;
    const float below = x - code[size_t(lo - 1)], above = code[size_t(lo)] - x;
    return uint8_t(above < below ? lo : lo - 1);
}

CodeIndex::CodeIndex(const Code8& c) : code(c) {
    std::fill(padded_.begin(), padded_.end(), std::numeric_limits<float>::infinity());  // (never <= a finite y)
    std::copy(c.begin(), c.end(), padded_.begin());
    auto count = [&](float y) { return int(std::upper_bound(c.begin(), c.end(), y) - c.begin()); };  // values <= y
    auto at = [](uint32_t bits) { return std::bit_cast<float>(bits); };
    // The entry of the y whose |y| has representations lo .. hi (at most 1.0f's), of one sign: kOne | their code when
    // they share one (nearest_code is monotonic in y: the same code at both ends is every y's in between), else
    // -1 - (how many values are <= the least of them)
    auto entry = [&](uint32_t lo, uint32_t hi, bool negative) {
        hi = std::min(hi, 0x3f800000u);
        if (lo > hi) return int(kOne);  // (past 1: never read)
        const float least = negative ? -at(hi) : at(lo), most = negative ? -at(lo) : at(hi);
        const uint8_t a = nearest_code(c, least), b = nearest_code(c, most);
        return a == b ? int(kOne | a) : -1 - count(least);
    };
    table_.assign(2 * kSide + 1, 0);
    fine_.clear();
    int extra = 0;  // the most code values inside one bucket
    for (uint32_t b = 0; b < kSide; b++)
        for (bool negative : {false, true}) {
            // bucket b of |y|: representations [b 2^16, (b + 1) 2^16)
            const uint32_t lo = b << 16, hi = lo | 0xffffu;
            const size_t slot = negative ? kSide - 1 - b : kSide + b;
            const int e = entry(lo, hi, negative);
            if (e >= 0) {
                table_[slot] = uint16_t(e);
                continue;
            }
            // a boundary inside: the bucket's ordinal among such, and its kFine parts' entries
            const size_t ordinal = fine_.size() / kFine;
            SHARDLM_CHECK(ordinal < kOne, "CodeIndex: more than ", kOne, " buckets hold a boundary between codes");
            table_[slot] = uint16_t(ordinal);
            for (uint32_t f = 0; f < kFine; f++) {
                const uint32_t flo = lo | (f << kFineShift), fhi = flo | ((1u << kFineShift) - 1u);
                const int fe = entry(flo, fhi, negative);
                fine_.push_back(uint16_t(fe >= 0 ? fe : -1 - fe));
            }
            const float least = negative ? -at(std::min(hi, 0x3f800000u)) : at(lo),
                        most = negative ? -at(lo) : at(std::min(hi, 0x3f800000u));
            extra = std::max(extra, count(most) - count(least));
        }
    fine_.push_back(0);  // (read by the last part's 32-bit gather)
    SHARDLM_CHECK(extra <= kMaxExtra, "CodeIndex: ", extra, " code values share one bucket (at most ", kMaxExtra, ")");
}

uint8_t CodeIndex::nearest(float y) const {
    const uint32_t bits = std::bit_cast<uint32_t>(y), mag = bits & 0x7fffffffu;
    if (mag > 0x3f800000u) return nearest_code(code, y);  // |y| > 1 or NaN (never in a block: y = x / absmax)
    const uint32_t b = mag >> 16;
    uint16_t e = table_[bits >> 31 ? kSide - 1 - b : kSide + b];
    if (e & kOne) return uint8_t(e);  // one code for the whole bucket
    e = fine_[size_t(e) * kFine + ((mag >> kFineShift) & (kFine - 1))];
    if (e & kOne) return uint8_t(e);  // one code for the bucket's part
    // lo: the number of values <= y (nearest_code's search's answer): the part's count, then its own values
    int lo = e;
    const int base = lo;
    for (int j = 0; j < kMaxExtra; j++) lo += padded_[size_t(base + j)] <= y ? 1 : 0;
    if (lo == 0) return 0;
    if (lo == 256) return 255;
    const float below = y - code[size_t(lo - 1)], above = code[size_t(lo)] - y;
    return uint8_t(above < below ? lo : lo - 1);
}

// ---- blocks, 16 values at a time (8 on AVX2) ---------------------------------------------------------------
// Each value is nearest()'s arithmetic in a vector lane: y = x / absmax (one correctly rounded division either
// way), its bucket's entry in table_, then (only the lanes that need them) its part's in fine_, the comparisons
// with padded_ and the two neighbours' distances, all read by gathers; a lane with |y| > 1 or NaN (never in a
// block but for a NaN x) takes nearest_code's search as nearest does. Before (one value at a time) adam8bit's step took 16x AdamW's on GPT-2 (bench_optimizer).

namespace {

float absmax_of(const float* x, size_t n) {
    float absmax = 0.0f;
    size_t i = 0;
#if defined(__AVX512F__)
    // max(v, acc) keeps acc where v is NaN, as the scalar max(acc, v) does; the lanes' maxima in any order
    // (max is exact)
    __m512 acc = _mm512_setzero_ps();
    for (; i + 16 <= n; i += 16) acc = simd::max({_mm512_abs_ps(_mm512_loadu_ps(x + i))}, {acc}).v;
    alignas(64) float lanes[16];
    _mm512_store_ps(lanes, acc);
    for (float v : lanes) absmax = std::max(absmax, v);
#elif defined(__AVX2__)
    const __m256 sign = _mm256_set1_ps(-0.0f);
    __m256 acc = _mm256_setzero_ps();
    for (; i + 8 <= n; i += 8) acc = _mm256_max_ps(_mm256_andnot_ps(sign, _mm256_loadu_ps(x + i)), acc);
    alignas(32) float lanes[8];
    _mm256_store_ps(lanes, acc);
    for (float v : lanes) absmax = std::max(absmax, v);
#endif
    for (; i < n; i++) absmax = std::max(absmax, std::fabs(x[i]));
    return absmax;
}

}  // namespace

// The nearest codes of x / absmax, 16 (AVX-512) or 8 (AVX2) at a time where the build has the
// instructions, then one at a time; |y| > 1 and NaN go through nearest_code's search.
void CodeIndex::nearest_of(const float* x, size_t n, float absmax, uint8_t* q) const {
    size_t i = 0;
#if defined(__AVX512F__)
    i = nearest_of_avx512(x, n, absmax, q);
#elif defined(__AVX2__)
    i = nearest_of_avx2(x, n, absmax, q);
#endif
    const bool scaled = absmax > 0.0f;
    for (; i < n; i++) q[i] = nearest(scaled ? x[i] / absmax : 0.0f);
}

#if defined(__AVX512F__)
// Every element, 16 lanes at a time (the last masked). Returns how far it went (at least n).
size_t CodeIndex::nearest_of_avx512(const float* x, size_t n, float absmax, uint8_t* q) const {
    const bool scaled = absmax > 0.0f;
    auto y_at = [&](size_t i) { return scaled ? x[i] / absmax : 0.0f; };
    size_t i = 0;
    const __m512 va = _mm512_set1_ps(absmax);
    const __m512i side = _mm512_set1_epi32(int(kSide)), one = _mm512_set1_epi32(1), low16 = _mm512_set1_epi32(0xffff),
                  abs_bits = _mm512_set1_epi32(0x7fffffff), top = _mm512_set1_epi32(0x3f800000),
                  zero = _mm512_setzero_si512(), last = _mm512_set1_epi32(255),
                  one_code = _mm512_set1_epi32(kOne), fine_mask = _mm512_set1_epi32(kFine - 1);
    for (; i < n; i += 16) {
        const __mmask16 live = n - i >= 16 ? __mmask16(0xffff) : __mmask16((1u << (n - i)) - 1u);
        const __m512 y = scaled ? _mm512_div_ps(_mm512_maskz_loadu_ps(live, x + i), va) : _mm512_setzero_ps();
        const __m512i bits = _mm512_castps_si512(y), mag = _mm512_and_si512(bits, abs_bits);
        const __mmask16 odd = _mm512_cmpgt_epu32_mask(mag, top) & live;  // |y| > 1 or NaN: the search below
        const __m512i b = _mm512_maskz_srli_epi32(__mmask16(~odd), mag, 16);
        const __mmask16 neg = _mm512_cmplt_epi32_mask(bits, zero);
        const __m512i bucket = _mm512_mask_sub_epi32(_mm512_add_epi32(side, b), neg, _mm512_sub_epi32(side, one), b);
        const __m512i e = _mm512_and_si512(_mm512_i32gather_epi32(bucket, table_.data(), 2), low16);
        __m512i r = e;  // a bucket of one code: its low 8 bits
        const __mmask16 hard = __mmask16(~_mm512_test_epi32_mask(e, one_code) & live & ~odd);
        if (hard) {  // the lanes whose bucket holds a boundary between codes: its part's entry
            const __m512i part = _mm512_add_epi32(_mm512_slli_epi32(e, kFineBits),
                                                  _mm512_and_si512(_mm512_srli_epi32(mag, kFineShift), fine_mask));
            const __m512i f = _mm512_and_si512(_mm512_mask_i32gather_epi32(e, hard, part, fine_.data(), 2), low16);
            r = _mm512_mask_mov_epi32(r, hard, f);
            const __mmask16 hardest = __mmask16(hard & ~_mm512_test_epi32_mask(f, one_code));
            if (hardest) {  // a boundary inside the part too: its count, then nearest's comparisons
                const __m512 none = _mm512_setzero_ps();
                __m512i lo = f;
                for (int j = 0; j < kMaxExtra; j++) {
                    const __m512 v = _mm512_mask_i32gather_ps(none, hardest, _mm512_add_epi32(f, _mm512_set1_epi32(j)),
                                                              padded_.data(), 4);
                    lo = _mm512_mask_add_epi32(lo, hardest & _mm512_cmp_ps_mask(v, y, _CMP_LE_OQ), lo, one);
                }
                const __m512i lo1 = _mm512_sub_epi32(lo, one);
                const __m512 above =
                    _mm512_sub_ps(_mm512_mask_i32gather_ps(none, hardest, _mm512_min_epi32(lo, last), code.data(), 4), y);
                const __m512 below =
                    _mm512_sub_ps(y, _mm512_mask_i32gather_ps(none, hardest, _mm512_max_epi32(lo1, zero), code.data(), 4));
                // lo 0: -1 or 0, made 0; lo 256: 255 or 256, made 255 (nearest's ends)
                const __m512i h = _mm512_mask_blend_epi32(_mm512_cmp_ps_mask(above, below, _CMP_LT_OQ), lo1, lo);
                r = _mm512_mask_mov_epi32(r, hardest, _mm512_min_epi32(_mm512_max_epi32(h, zero), last));
            }
        }
        r = _mm512_and_si512(r, last);
        _mm512_mask_cvtepi32_storeu_epi8(q + i, live, r);
        for (unsigned m = odd; m; m &= m - 1) q[i + size_t(std::countr_zero(m))] = nearest_code(code, y_at(i + size_t(std::countr_zero(m))));
    }
    return i;
}
#endif

#if defined(__AVX2__)
// Whole groups of 8 elements. Returns how many it did.
size_t CodeIndex::nearest_of_avx2(const float* x, size_t n, float absmax, uint8_t* q) const {
    const bool scaled = absmax > 0.0f;
    auto y_at = [&](size_t i) { return scaled ? x[i] / absmax : 0.0f; };
    size_t i = 0;
    const __m256 va = _mm256_set1_ps(absmax);
    const __m256i side = _mm256_set1_epi32(int(kSide)), one = _mm256_set1_epi32(1), low16 = _mm256_set1_epi32(0xffff),
                  abs_bits = _mm256_set1_epi32(0x7fffffff), top = _mm256_set1_epi32(0x3f800000),
                  zero = _mm256_setzero_si256(), last = _mm256_set1_epi32(255), one_code = _mm256_set1_epi32(kOne);
    const __m256i fine_mask = _mm256_set1_epi32(kFine - 1);
    // 32 bits at each 16-bit entry (the low half used)
    const int* table = reinterpret_cast<const int*>(table_.data());
    const int* fine = reinterpret_cast<const int*>(fine_.data());
    for (; i + 8 <= n; i += 8) {
        const __m256 y = scaled ? _mm256_div_ps(_mm256_loadu_ps(x + i), va) : _mm256_setzero_ps();
        const __m256i bits = _mm256_castps_si256(y), mag = _mm256_and_si256(bits, abs_bits);
        const __m256i odd = _mm256_cmpgt_epi32(mag, top);  // (both non-negative as signed)
        const __m256i b = _mm256_srli_epi32(_mm256_andnot_si256(odd, mag), 16);
        const __m256i neg = _mm256_srai_epi32(bits, 31);
        const __m256i bucket = _mm256_blendv_epi8(_mm256_add_epi32(side, b), _mm256_sub_epi32(_mm256_sub_epi32(side, one), b), neg);
        const __m256i e = _mm256_and_si256(_mm256_i32gather_epi32(table, bucket, 2), low16);
        __m256i r = e;  // a bucket of one code: its low 8 bits
        // (lanes whose entry is not kOne | c, and not odd)
        const __m256i hard =
            _mm256_andnot_si256(odd, _mm256_cmpeq_epi32(_mm256_and_si256(e, one_code), zero));
        if (!_mm256_testz_si256(hard, hard)) {  // the lanes whose bucket holds a boundary between codes: its part's
            const __m256i part = _mm256_add_epi32(_mm256_slli_epi32(e, kFineBits),
                                                  _mm256_and_si256(_mm256_srli_epi32(mag, kFineShift), fine_mask));
            const __m256i f = _mm256_and_si256(_mm256_mask_i32gather_epi32(e, fine, part, hard, 2), low16);
            r = _mm256_blendv_epi8(r, f, hard);
            const __m256i hardest = _mm256_and_si256(hard, _mm256_cmpeq_epi32(_mm256_and_si256(f, one_code), zero));
            if (!_mm256_testz_si256(hardest, hardest)) {  // a boundary inside the part too: nearest's comparisons
                const __m256 none = _mm256_setzero_ps(), hm = _mm256_castsi256_ps(hardest);
                __m256i lo = f;
                for (int j = 0; j < kMaxExtra; j++) {
                    const __m256 v = _mm256_mask_i32gather_ps(none, padded_.data(), _mm256_add_epi32(f, _mm256_set1_epi32(j)), hm, 4);
                    lo = _mm256_sub_epi32(lo, _mm256_and_si256(hardest, _mm256_castps_si256(_mm256_cmp_ps(v, y, _CMP_LE_OQ))));
                }
                const __m256i lo1 = _mm256_sub_epi32(lo, one);
                const __m256 above = _mm256_sub_ps(_mm256_mask_i32gather_ps(none, code.data(), _mm256_min_epi32(lo, last), hm, 4), y);
                const __m256 below = _mm256_sub_ps(y, _mm256_mask_i32gather_ps(none, code.data(), _mm256_max_epi32(lo1, zero), hm, 4));
                __m256i h = _mm256_blendv_epi8(lo1, lo, _mm256_castps_si256(_mm256_cmp_ps(above, below, _CMP_LT_OQ)));
                h = _mm256_min_epi32(_mm256_max_epi32(h, zero), last);
                r = _mm256_blendv_epi8(r, h, hardest);
            }
        }
        r = _mm256_and_si256(r, last);
        alignas(32) int32_t lanes[8];
        _mm256_store_si256(reinterpret_cast<__m256i*>(lanes), r);
        for (int l = 0; l < 8; l++) q[i + size_t(l)] = uint8_t(lanes[l]);
        for (unsigned m = unsigned(_mm256_movemask_ps(_mm256_castsi256_ps(odd))); m; m &= m - 1)
            q[i + size_t(std::countr_zero(m))] = nearest_code(code, y_at(i + size_t(std::countr_zero(m))));
    }
    return i;
}
#endif

float quantize_block(const float* x, size_t n, const CodeIndex& index, uint8_t* q) {
    const float absmax = absmax_of(x, n);
    index.nearest_of(x, n, absmax, q);
    return absmax;
}

void dequantize_block(const uint8_t* q, size_t n, const Code8& code, float absmax, float* x) {
    size_t i = 0;
#if defined(__AVX512F__)
    const __m512 va = _mm512_set1_ps(absmax);
    for (; i + 16 <= n; i += 16) {
        const __m512i k = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(q + i)));
        _mm512_storeu_ps(x + i, _mm512_mul_ps(_mm512_i32gather_ps(k, code.data(), 4), va));
    }
#elif defined(__AVX2__)
    const __m256 va = _mm256_set1_ps(absmax);
    for (; i + 8 <= n; i += 8) {
        const __m256i k = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(q + i)));
        _mm256_storeu_ps(x + i, _mm256_mul_ps(_mm256_i32gather_ps(code.data(), k, 4), va));
    }
#endif
    for (; i < n; i++) x[i] = code[q[i]] * absmax;
}

void adam8bit_block(float* p, const float* g, uint8_t* qm, uint8_t* qv, float* am, float* av, size_t n,
                    const CodeIndex& code_m, const CodeIndex& code_v, float lr, float beta1, float beta2, float eps,
                    float wd, int step, float gs, float* scratch) {
    float *m = scratch, *v = scratch + n;
    dequantize_block(qm, n, code_m.code, *am, m);
    dequantize_block(qv, n, code_v.code, *av, v);
    adamw_update(p, g, m, v, n, lr, beta1, beta2, eps, wd, step, gs);
    *am = quantize_block(m, n, code_m, qm);
    *av = quantize_block(v, n, code_v, qv);
}

}  // namespace shardlm::kernels
