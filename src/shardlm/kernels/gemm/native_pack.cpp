// kernels/gemm/native_pack.cpp: the native GEMM's packing (native_parts.h): B into panels, A into
// strips, fp32 operands rounded to bf16 on the way (nearest even: convert_from_f32's bits).
#include "shardlm/kernels/gemm/native_parts.h"

#if defined(__AVX512F__)
#include <algorithm>
#include <cstring>

#include "shardlm/core/simd.h"

// GCC 12's AVX-512 headers give the shuffles an operand _mm512_undefined_ps() that is initialised from
// itself: a -Wuninitialized false alarm at every inlined unpack and shuffle
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif

namespace shardlm::kernels::native::detail {

namespace {

// r[i] <- column i of the 16 x 16 matrix of 32-bit values whose rows are r[0..15]
void transpose16(__m512 r[16]) {
    __m512 t[16];
    for (int i = 0; i < 16; i += 2) {
        t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);
        t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
    }
    for (int i = 0; i < 16; i += 4) {
        r[i] = _mm512_shuffle_ps(t[i], t[i + 2], 0x44);
        r[i + 1] = _mm512_shuffle_ps(t[i], t[i + 2], 0xEE);
        r[i + 2] = _mm512_shuffle_ps(t[i + 1], t[i + 3], 0x44);
        r[i + 3] = _mm512_shuffle_ps(t[i + 1], t[i + 3], 0xEE);
    }
    for (int h = 0; h < 16; h += 8)
        for (int i = 0; i < 4; i++) {
            t[h + i] = _mm512_shuffle_f32x4(r[h + i], r[h + i + 4], 0x88);
            t[h + i + 4] = _mm512_shuffle_f32x4(r[h + i], r[h + i + 4], 0xDD);
        }
    for (int i = 0; i < 8; i++) {
        r[i] = _mm512_shuffle_f32x4(t[i], t[i + 8], 0x88);
        r[i + 8] = _mm512_shuffle_f32x4(t[i], t[i + 8], 0xDD);
    }
}

#if defined(__AVX512BF16__)
__mmask32 prefix32(int n) { return n >= 32 ? __mmask32(0xffffffffu) : n <= 0 ? __mmask32(0) : __mmask32((1u << n) - 1u); }


// 16 consecutive values (masked-off lanes 0) as bf16 bits in the low halves of 32-bit lanes; fp32 rounded to
// nearest even (convert_from_f32's bits)
__m512i bf16_lanes(const void* p, DType t, __mmask16 m) {
    if (t == DType::BF16) return _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, p));
    return _mm512_cvtepu16_epi32(simd::bf16_round({_mm512_maskz_loadu_ps(m, p)}));
}
// the words (lo | hi << 16) of 16 columns of two rows of k (hi null: a k past K, 0)
__m512i pair_rows(const void* lo, const void* hi, DType t, __mmask16 m) {
    const __m512i w = bf16_lanes(lo, t, m);
    return hi ? _mm512_or_si512(w, _mm512_slli_epi32(bf16_lanes(hi, t, m), 16)) : w;
}
// the 16 words of 32 consecutive values of k, kk of them there (the rest 0)
__m512i pairs_along(const void* p, DType t, int kk) {
    if (t == DType::BF16) return _mm512_maskz_loadu_epi16(prefix32(kk), p);
    const float* f = static_cast<const float*>(p);
    const __m256i lo = simd::bf16_round({_mm512_maskz_loadu_ps(prefix(kk), f)});
    const __m256i hi = simd::bf16_round({_mm512_maskz_loadu_ps(prefix(kk - 16), f + 16)});
    return _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
}

#endif

}  // namespace

// ---- packing B: panels of 48 columns, one row of 48 values (fp32) or words (bf16 pairs) per step of k ----

// B(k0 .. k0 + kc, n0 .. n0 + nb) into panels at bp (panel p at bp + p * kc * 48; columns past nb are 0).
void pack_b_f32(const Operand& B, int k0, int kc, int n0, int nb, float* bp, int nv) {
    const float* src = static_cast<const float*>(B.data);
    const int nr = 16 * nv, panels = cdiv(nb, nr);
    if (B.cs == 1) {  // rows of B contiguous: each row's nb values read in order, into the panels
        for (int k = 0; k < kc; k++) {
            const float* s = src + (k0 + k) * B.rs + n0;
            for (int g = 0; g < panels * nv; g++)
                _mm512_store_ps(bp + (size_t(g / nv) * kc + k) * nr + 16 * (g % nv),
                                _mm512_maskz_loadu_ps(prefix(nb - 16 * g), s + 16 * g));
        }
        return;
    }
    if (B.rs == 1) {  // columns of B contiguous: 16 x 16 transposes
        for (int g = 0; g < panels * nv; g++) {
            const int cols = std::min(16, nb - g * 16);
            float* d = bp + size_t(g / nv) * kc * nr + 16 * (g % nv);
            for (int k = 0; k < kc; k += 16) {
                const __mmask16 mk = prefix(kc - k);
                __m512 r[16];
                for (int j = 0; j < 16; j++)
                    r[j] = j < cols ? _mm512_maskz_loadu_ps(mk, src + (n0 + g * 16 + j) * B.cs + k0 + k) : _mm512_setzero_ps();
                transpose16(r);
                for (int j = 0; j < std::min(16, kc - k); j++) _mm512_store_ps(d + size_t(k + j) * nr, r[j]);
            }
        }
        return;
    }
    for (int p = 0; p < panels; p++)
        for (int k = 0; k < kc; k++)
            for (int j = 0; j < nr; j++) {
                const int n = p * nr + j;
                bp[(size_t(p) * kc + k) * nr + j] = n < nb ? src[(k0 + k) * B.rs + (n0 + n) * B.cs] : 0.0f;
            }
}

#if defined(__AVX512BF16__)
// The bf16 pairs of B(k0 .. k0 + kc, n0 .. n0 + nb) into panels (kp = ceil(kc / 2) rows of 48 words; a k
// past K and columns past nb are 0).
void pack_b_bf16(const Operand& B, int K, int k0, int kc, int n0, int nb, uint32_t* bp) {
    const int panels = cdiv(nb, kNr), kp = cdiv(kc, 2);
    const long eb = long(dtype_bytes(B.t));
    auto at = [&](long k, long n) { return static_cast<const char*>(B.data) + (k * B.rs + n * B.cs) * eb; };
    if (B.cs == 1) {  // rows contiguous: two rows of k a row of words
        for (int p = 0; p < panels; p++) {
            const int cols = std::min(kNr, nb - p * kNr);
            uint32_t* d = bp + size_t(p) * kp * kNr;
            for (int q = 0; q < kp; q++, d += kNr) {
                const int k = k0 + 2 * q;
                for (int v = 0; v < kNv; v++) {
                    const int n = n0 + p * kNr + 16 * v;
                    _mm512_store_si512(d + 16 * v, pair_rows(at(k, n), k + 1 < K ? at(k + 1, n) : nullptr, B.t,
                                                             prefix(cols - 16 * v)));
                }
            }
        }
        return;
    }
    if (B.rs == 1) {  // columns contiguous: a column's pairs are adjacent; 16 x 16 transposes of words
        for (int g = 0; g < panels * kNv; g++) {
            const int cols = std::min(16, nb - g * 16);
            uint32_t* d = bp + size_t(g / kNv) * kp * kNr + 16 * (g % kNv);
            for (int q = 0; q < kp; q += 16) {
                const int k = k0 + 2 * q, kk = std::min(32, k0 + kc - k);  // k of these 16 pairs
                __m512 r[16];
                for (int j = 0; j < 16; j++)
                    r[j] = j < cols ? _mm512_castsi512_ps(pairs_along(at(k, n0 + g * 16 + j), B.t, kk)) : _mm512_setzero_ps();
                transpose16(r);
                for (int j = 0; j < std::min(16, kp - q); j++)
                    _mm512_store_si512(d + size_t(q + j) * kNr, _mm512_castps_si512(r[j]));
            }
        }
        return;
    }
    for (int p = 0; p < panels; p++)
        for (int q = 0; q < kp; q++)
            for (int j = 0; j < kNr; j++) {
                const int n = p * kNr + j, k = k0 + 2 * q;
                uint32_t w = 0;
                if (n < nb) {
                    const long e0 = long(k) * B.rs + long(n0 + n) * B.cs;
                    w = f32_to_bf16(load1(B.data, B.t, e0));
                    if (k + 1 < K) w |= uint32_t(f32_to_bf16(load1(B.data, B.t, e0 + B.rs))) << 16;
                }
                bp[(size_t(p) * kp + q) * kNr + j] = w;
            }
}
#endif

// ---- packing A into strips (when it cannot be read where it lies) ----------------------------------------
// Strip s holds rows s * 8 .. s * 8 + 7 (rows past M are 0): for each step of k (fp32) or pair of k (bf16),
// the 8 values or words of its rows.

// A with contiguous columns (a transposed operand, its rows a column apart), read where it lies, would
// touch a line of its own at each step of k, and a column stride of a multiple of 4 KiB maps all of a tile's
// lines onto one cache set; its strips are packed instead, a cache line of every strip at a time (two
// steps of k for 8 rows): two columns of A read whole, each strip's line written whole.
// Strips of fp32 hold even(K) steps (a step past K is 0).

// Steps 2u, 2u + 1 of the strips of rows q0 .. q0 + rows
void pack_a_lines_f32(const Operand& A, int K, int q0, int rows, int u, float* ap) {
    const float* c0 = static_cast<const float*>(A.data) + long(2 * u) * A.cs + q0;
    const float* c1 = 2 * u + 1 < K ? c0 + A.cs : nullptr;
    const size_t strip = size_t(kMr) * even(K);
    for (int s = 0; s * kMr < rows; s += 2) {
        const __mmask16 m = prefix(rows - s * kMr);
        const __m512 a = _mm512_maskz_loadu_ps(m, c0 + s * kMr), b = c1 ? _mm512_maskz_loadu_ps(m, c1 + s * kMr) : _mm512_setzero_ps();
        float* d = ap + size_t(s) * strip + size_t(2 * u) * kMr;
        _mm512_store_ps(d, _mm512_shuffle_f32x4(a, b, 0x44));  // rows 0-7 of strip s: step 2u, then 2u + 1
        if ((s + 1) * kMr < rows) _mm512_store_ps(d + strip, _mm512_shuffle_f32x4(a, b, 0xEE));
    }
}

#if defined(__AVX512BF16__)
// bf16 strips hold kp rounded up to even pairs (a pair past K is 0). With contiguous columns, as fp32: pairs
// 2u, 2u + 1 (steps 4u .. 4u + 3) of the strips of rows q0 .. q0 + rows, a line of each strip at a time.
void pack_a_lines_bf16(const Operand& A, int K, int q0, int rows, int u, uint32_t* ap) {
    const long eb = long(dtype_bytes(A.t));
    auto col = [&](int k, int i) -> const void* {
        return k < K ? static_cast<const char*>(A.data) + (long(i) + long(k) * A.cs) * eb : nullptr;
    };
    const size_t strip = size_t(kMr) * even(cdiv(K, 2));
    for (int s = 0; s * kMr < rows; s += 2) {
        const __mmask16 m = prefix(rows - s * kMr);
        const int i = q0 + s * kMr, k = 4 * u;
        const __m512i w0 = pair_rows(col(k, i), col(k + 1, i), A.t, m);
        const __m512i w1 = k + 2 < K ? pair_rows(col(k + 2, i), col(k + 3, i), A.t, m) : _mm512_setzero_si512();
        uint32_t* d = ap + size_t(s) * strip + size_t(2 * u) * kMr;
        _mm512_store_si512(d, _mm512_shuffle_i32x4(w0, w1, 0x44));
        if ((s + 1) * kMr < rows) _mm512_store_si512(d + strip, _mm512_shuffle_i32x4(w0, w1, 0xEE));
    }
}

// Rows contiguous (or neither): one strip (rows i0 ..) at a time, 16 pairs of each row transposed.
void pack_a_strip_bf16(const Operand& A, int M, int K, int i0, uint32_t* d) {
    const int kp = cdiv(K, 2), rows = std::min(kMr, M - i0);
    const long eb = long(dtype_bytes(A.t));
    auto at = [&](long i, long k) { return static_cast<const char*>(A.data) + (i * A.rs + k * A.cs) * eb; };
    if (A.cs == 1) {  // rows contiguous: 16 pairs of each row, transposed
        for (int q = 0; q < kp; q += 16) {
            const int kk = std::min(32, K - 2 * q);
            __m512 r[16];
            for (int j = 0; j < 16; j++)
                r[j] = j < rows ? _mm512_castsi512_ps(pairs_along(at(i0 + j, 2 * q), A.t, kk)) : _mm512_setzero_ps();
            transpose16(r);
            for (int j = 0; j < std::min(16, kp - q); j++)
                _mm256_store_si256(reinterpret_cast<__m256i*>(d + size_t(q + j) * kMr),
                                   _mm512_castsi512_si256(_mm512_castps_si512(r[j])));
        }
        return;
    }
    for (int q = 0; q < kp; q++)
        for (int i = 0; i < kMr; i++) {
            uint32_t w = 0;
            if (i < rows) {
                const long e0 = long(i0 + i) * A.rs + long(2 * q) * A.cs;
                w = f32_to_bf16(load1(A.data, A.t, e0));
                if (2 * q + 1 < K) w |= uint32_t(f32_to_bf16(load1(A.data, A.t, e0 + A.cs))) << 16;
            }
            d[size_t(q) * kMr + i] = w;
        }
}
#endif
}  // namespace shardlm::kernels::native::detail

#endif
