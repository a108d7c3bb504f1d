// kernels/gemm_native_avx2.cpp: the native fp32 GEMMs' tiles and packing for CPUs with AVX2 and FMA but no
// AVX-512 (Zen 3, Intel before Skylake-SP and the client cores): the entry points (gemm_native.cpp), the cut
// into items, the blocks of k and the layout of packed B and of A's strips (gemm_native_drive.h,
// gemm_native_parts.h) are the AVX-512 kernels', only the register tiles are narrower:
//   - sgemm: 4 x 24 (three 8-column vectors, 12 accumulators), two of them across a 48-column panel, two
//     down an 8-row strip of packed A;
//   - gemm_packed (attention's tiles): 6 x 16 (two vectors, 12 accumulators), across 48- or 64-column panels.
// Each element of C is still one chain of fused multiply-adds over k in blocks of kKc, the blocks added in
// order, then alpha, then beta C, whatever the threads or the cut: the AVX-512 kernels' chain (whether the
// compiler contracts the epilogue alike in both is not checked: the two have not been compared bit for bit).
// (16 ymm registers: 12 accumulators, the vectors of B and one broadcast of A.)
#include "shardlm/kernels/gemm_native.h"
#include "shardlm/kernels/gemm_native_drive.h"
#include "shardlm/kernels/gemm_native_parts.h"

#if defined(SHARDLM_NATIVE_FP32) && !defined(__AVX512F__)
#include <immintrin.h>

#include <algorithm>

namespace shardlm::kernels::native::detail {

namespace {

// n of 8 consecutive floats at p (the rest 0), and the first n of x stored at p. Nothing past the n is
// touched: a part of a vector goes through a copy (VMASKMOV may fault on masked-off elements on AMD: its
// manual leaves that to the implementation; only a product's edges take this path).
inline __m256 load_n(const float* p, int n) {
    if (n >= 8) return _mm256_loadu_ps(p);
    alignas(32) float t[8] = {};
    for (int j = 0; j < n; j++) t[j] = p[j];
    return _mm256_load_ps(t);
}
inline void store_n(float* p, int n, __m256 x) {
    if (n >= 8) return _mm256_storeu_ps(p, x);
    alignas(32) float t[8];
    _mm256_store_ps(t, x);
    for (int j = 0; j < n; j++) p[j] = t[j];
}

// r[i] <- column i of the 8 x 8 matrix whose rows are r[0..7]
void transpose8(__m256 r[8]) {
    __m256 t[8], s[8];
    for (int i = 0; i < 8; i += 2) {
        t[i] = _mm256_unpacklo_ps(r[i], r[i + 1]);
        t[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]);
    }
    for (int i = 0; i < 8; i += 4) {
        s[i] = _mm256_shuffle_ps(t[i], t[i + 2], 0x44);
        s[i + 1] = _mm256_shuffle_ps(t[i], t[i + 2], 0xEE);
        s[i + 2] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0x44);
        s[i + 3] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0xEE);
    }
    for (int i = 0; i < 4; i++) {
        r[i] = _mm256_permute2f128_ps(s[i], s[i + 4], 0x20);
        r[i + 4] = _mm256_permute2f128_ps(s[i], s[i + 4], 0x31);
    }
}

// C(R x 8 NV, its first n columns) op= alpha A(R x kc) B(kc x 8 NV): A(i, k) at a[i * lda + k] (rows) or
// a[i + k * lda] (KMAJOR); B kc rows of a packed panel, BS floats apart (the first 8 NV of each read).
template <int R, int NV, bool KMAJOR, int BS>
__attribute__((noinline)) void tile8(int kc, const float* __restrict a, long lda, const float* __restrict b, float* c,
                                     long ldc, int n, float alpha, float beta, int mode) {
    __m256 acc[R][NV];
#pragma GCC unroll 8
    for (int i = 0; i < R; i++)
#pragma GCC unroll 4
        for (int v = 0; v < NV; v++) acc[i][v] = _mm256_setzero_ps();
    const float* row[R];
#pragma GCC unroll 8
    for (int i = 0; i < R; i++) row[i] = KMAJOR ? a + i : a + i * lda;
    const long step = KMAJOR ? lda : 1;
    // C's lines, asked for now so that they have arrived when the loop over k ends (as prefetch_c)
    const int bytes = 4 * std::min(n, 8 * NV);
#pragma GCC unroll 8
    for (int i = 0; i < R; i++) {
        const char* p = reinterpret_cast<const char*>(c + i * ldc);
        for (int l = 0; l < bytes; l += 64) __builtin_prefetch(p + l, 1, 3);
        __builtin_prefetch(p + bytes - 1, 1, 3);
    }
#pragma GCC unroll 4
    for (int k = 0; k < kc; k++) {
        __m256 bv[NV];
#pragma GCC unroll 4
        for (int v = 0; v < NV; v++) bv[v] = _mm256_loadu_ps(b + 8 * v);
#pragma GCC unroll 8
        for (int i = 0; i < R; i++) {
            const __m256 x = _mm256_broadcast_ss(row[i] + k * step);
#pragma GCC unroll 4
            for (int v = 0; v < NV; v++) acc[i][v] = _mm256_fmadd_ps(x, bv[v], acc[i][v]);
        }
        b += BS;
    }
    const __m256 va = _mm256_set1_ps(alpha), vb = _mm256_set1_ps(beta);
#pragma GCC unroll 8
    for (int i = 0; i < R; i++)
#pragma GCC unroll 4
        for (int v = 0; v < NV; v++) {
            const int cols = n - 8 * v;
            if (cols <= 0) break;
            float* p = c + i * ldc + 8 * v;
            __m256 x = _mm256_mul_ps(acc[i][v], va);
            if (mode != kStore) {
                const __m256 old = load_n(p, cols);
                x = mode == kAddC ? _mm256_add_ps(x, old) : _mm256_fmadd_ps(vb, old, x);
            }
            store_n(p, cols, x);
        }
}

// The tiles by their rows (1 .. 4 for NV 3, 1 .. 6 for NV 2): a switch over the template's instances.
template <int NV, bool KMAJOR, int BS>
void tile8_rows(int R, int kc, const float* a, long lda, const float* b, float* c, long ldc, int n, float alpha,
                float beta, int mode) {
    switch (R) {
#define SHARDLM_TILE(r) \
    case r: return tile8<r, NV, KMAJOR, BS>(kc, a, lda, b, c, ldc, n, alpha, beta, mode);
        SHARDLM_TILE(1) SHARDLM_TILE(2) SHARDLM_TILE(3) SHARDLM_TILE(4)
#undef SHARDLM_TILE
        case 5: if constexpr (NV == 2) return tile8<5, 2, KMAJOR, BS>(kc, a, lda, b, c, ldc, n, alpha, beta, mode); break;
        case 6: if constexpr (NV == 2) return tile8<6, 2, KMAJOR, BS>(kc, a, lda, b, c, ldc, n, alpha, beta, mode); break;
    }
}

// The columns of the product that panel p (nr columns) holds
inline int panel_cols(int nb, int p, int nr) { return std::min(nr, nb - p * nr); }

}  // namespace

// ---- packing (the layouts of gemm_native_parts.h) ----------------------------------------------------------

void pack_b_f32(const Operand& B, int k0, int kc, int n0, int nb, float* bp, int nv) {
    const float* src = static_cast<const float*>(B.data);
    const int nr = 16 * nv, groups = cdiv(nb, nr) * 2 * nv;  // 8-column groups, whole panels
    auto dest = [&](int g) { return bp + size_t(g / (2 * nv)) * kc * nr + 8 * (g % (2 * nv)); };
    if (B.cs == 1) {  // rows of B contiguous: each row's nb values read in order, into the panels
        for (int k = 0; k < kc; k++) {
            const float* s = src + long(k0 + k) * B.rs + n0;
            for (int g = 0; g < groups; g++) _mm256_storeu_ps(dest(g) + size_t(k) * nr, load_n(s + 8 * g, nb - 8 * g));
        }
        return;
    }
    if (B.rs == 1) {  // columns of B contiguous: 8 x 8 transposes
        for (int g = 0; g < groups; g++) {
            const int cols = std::min(8, nb - 8 * g);
            float* d = dest(g);
            for (int k = 0; k < kc; k += 8) {
                __m256 r[8];
                for (int j = 0; j < 8; j++)
                    r[j] = j < cols ? load_n(src + long(n0 + 8 * g + j) * B.cs + k0 + k, kc - k) : _mm256_setzero_ps();
                transpose8(r);
                for (int j = 0; j < std::min(8, kc - k); j++) _mm256_storeu_ps(d + size_t(k + j) * nr, r[j]);
            }
        }
        return;
    }
    for (int g = 0; g < groups; g++)
        for (int k = 0; k < kc; k++)
            for (int j = 0; j < 8; j++) {
                const int n = 8 * g + j;
                dest(g)[size_t(k) * nr + j] = n < nb ? src[long(k0 + k) * B.rs + long(n0 + n) * B.cs] : 0.0f;
            }
}

void pack_a_lines_f32(const Operand& A, int K, int q0, int rows, int u, float* ap) {
    const float* c0 = static_cast<const float*>(A.data) + long(2 * u) * A.cs + q0;
    const float* c1 = 2 * u + 1 < K ? c0 + A.cs : nullptr;
    const size_t strip = size_t(kMr) * even(K);
    for (int s = 0; s * kMr < rows; s++) {  // strip s: its 8 rows at step 2u, then at 2u + 1
        const int n = rows - s * kMr;
        float* d = ap + size_t(s) * strip + size_t(2 * u) * kMr;
        _mm256_storeu_ps(d, load_n(c0 + s * kMr, n));
        _mm256_storeu_ps(d + kMr, c1 ? load_n(c1 + s * kMr, n) : _mm256_setzero_ps());
    }
}

// ---- the items -------------------------------------------------------------------------------------------

void f32_item(int r0, int r1, int c0, int c1, Next next, int K, float alpha, const Operand& A, const float* ap,
              int ap_row0, const Operand& B, float beta, float* C, long ldc) {
    const bool kmajor = A.rs == 1 && A.cs != 1;
    const float* a0 = static_cast<const float*>(A.data);
    const int nb = c1 - c0;
    f32_blocks(r0, r1, c0, c1, next, K, B, beta, [&](int i, int R, int p, const Mask16*, const float* bp, int k0, int kc, int mode) {
        const int pc = panel_cols(nb, p, kNr);
        // an 8-row strip's two 4-row halves (i - ap_row0 is a multiple of 8), each across the panel's halves
        for (int s = 0; s < R; s += 4)
            for (int h = 0; h * 24 < pc; h++) {
                const float* b = bp + 24 * h;
                float* c = C + long(i + s) * ldc + c0 + p * kNr + 24 * h;
                const int rows = std::min(4, R - s), n = pc - 24 * h;
                if (ap)
                    tile8_rows<3, true, kNr>(rows, kc, ap + size_t(i - ap_row0) * even(K) + size_t(k0) * kMr + s, kMr, b, c,
                                             ldc, n, alpha, beta, mode);
                else if (kmajor)
                    tile8_rows<3, true, kNr>(rows, kc, a0 + i + s + long(k0) * A.cs, A.cs, b, c, ldc, n, alpha, beta, mode);
                else
                    tile8_rows<3, false, kNr>(rows, kc, a0 + long(i + s) * A.rs + k0, A.rs, b, c, ldc, n, alpha, beta, mode);
            }
    });
}

void packed_tiles(int M, int k0, int kc, int n0, int n1, float alpha, const Operand& A, const PackedB& B, float beta,
                  float* C, long ldc, int mode) {
    const bool kmajor = A.rs == 1 && A.cs != 1;
    const float* a0 = static_cast<const float*>(A.data);
    const long lda = kmajor ? A.cs : A.rs;
    const int nb = n1 - n0;
    for_tiles(
        0, M, nb,
        [&](int i, int R, int p, const Mask16*) {
            const int pc = panel_cols(nb, p, B.nr);
            // A's column 0 multiplies B's row k0
            const float* a = kmajor ? a0 + i : a0 + long(i) * A.rs;
            for (int q = 0; q * 16 < pc; q++) {  // the panel's 16-column quarters (64) or thirds (48)
                const float* b = B.data + (size_t(n0 / B.nr + p) * B.K + k0) * B.nr + 16 * q;
                float* c = C + long(i) * ldc + p * B.nr + 16 * q;
                const int n = pc - 16 * q;
                if (B.nr == 64) {
                    if (kmajor) tile8_rows<2, true, 64>(R, kc, a, lda, b, c, ldc, n, alpha, beta, mode);
                    else tile8_rows<2, false, 64>(R, kc, a, lda, b, c, ldc, n, alpha, beta, mode);
                } else {
                    if (kmajor) tile8_rows<2, true, kNr>(R, kc, a, lda, b, c, ldc, n, alpha, beta, mode);
                    else tile8_rows<2, false, kNr>(R, kc, a, lda, b, c, ldc, n, alpha, beta, mode);
                }
            }
        },
        6, B.nr);
}

}  // namespace shardlm::kernels::native::detail

#endif
