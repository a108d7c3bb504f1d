// kernels/gemm/native_avx2.cpp: the native fp32 GEMMs' tiles, items and packing for CPUs with AVX2 and FMA but
// no AVX-512 (Zen 3, Intel before Skylake-SP and the client cores). The entry points (native.cpp), the
// cut into items, the blocks of k (kKc), the layout of A's strips and B's prefetch (native_drive.h,
// native_parts.h) are the AVX-512 kernels'; the register tiles are narrower, and an sgemm item runs its
// blocks in another order (item_blocks):
//   - sgemm: 6 x 16 tiles (two 8-column vectors, 12 accumulators) where A is read where it lies, 4 x 24
//     (three vectors) down the 8-row strips of a packed A; B packed per block into panels of the tile's width;
//     a transposed A of a narrow product (packs_a_up_front) copied 96 rows of a block at a time (copy_rows),
//     6 x 16;
//   - gemm_packed (attention's tiles): 6 x 16 across its 48- or 64-column panels.
// Each element of C is still one chain of fused multiply-adds over k in blocks of kKc, the blocks added in
// order, then alpha, then beta C, whatever the tile, the threads or the cut: the AVX-512 kernels' chain
// (whether the compiler contracts the epilogue alike in both is not checked: the two have not been compared
// bit for bit). (16 ymm registers: 12 accumulators, the vectors of B and one broadcast of A.)
#include "shardlm/kernels/gemm/native.h"
#include "shardlm/kernels/gemm/native_drive.h"
#include "shardlm/kernels/gemm/native_parts.h"

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
// a[i + k * lda] (KMAJOR); B kc rows of a panel, bs floats apart (the first 8 NV of each read).
template <int R, int NV, bool KMAJOR>
__attribute__((noinline)) void tile8(int kc, const float* __restrict a, long lda, const float* __restrict b, long bs, float* c,
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
        b += bs;
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

// The tiles by their rows (1 .. 4 for NV 3, 1 .. 6 for NV 1 and 2): a switch over the template's instances.
template <int NV, bool KMAJOR>
void tile8_rows(int R, int kc, const float* a, long lda, const float* b, long bs, float* c, long ldc, int n, float alpha,
                float beta, int mode) {
    switch (R) {
#define SHARDLM_TILE(r) \
    case r: return tile8<r, NV, KMAJOR>(kc, a, lda, b, bs, c, ldc, n, alpha, beta, mode);
        SHARDLM_TILE(1) SHARDLM_TILE(2) SHARDLM_TILE(3) SHARDLM_TILE(4)
#undef SHARDLM_TILE
        case 5: if constexpr (NV < 3) return tile8<5, NV, KMAJOR>(kc, a, lda, b, bs, c, ldc, n, alpha, beta, mode); break;
        case 6: if constexpr (NV < 3) return tile8<6, NV, KMAJOR>(kc, a, lda, b, bs, c, ldc, n, alpha, beta, mode); break;
    }
}

// The columns of the product that panel p (nr columns) holds
inline int panel_cols(int nb, int p, int nr) { return std::min(nr, nb - p * nr); }

}  // namespace

// ---- packing (the layouts of native_parts.h) ----------------------------------------------------------

namespace {

// B(k0 .. k0 + kc, n0 .. n0 + nb) into panels of nr columns (a multiple of 8) at bp: panel p at bp + p kc nr,
// one row of nr values per step of k; columns past nb are 0
void pack_b_panels(const Operand& B, int k0, int kc, int n0, int nb, float* bp, int nr) {
    const float* src = static_cast<const float*>(B.data);
    const int per = nr / 8, groups = cdiv(nb, nr) * per;  // 8-column groups, whole panels
    auto dest = [&](int g) { return bp + size_t(g / per) * kc * nr + 8 * (g % per); };
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

}  // namespace

void pack_b_f32(const Operand& B, int k0, int kc, int n0, int nb, float* bp, int nv) {
    pack_b_panels(B, k0, kc, n0, nb, bp, 16 * nv);
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

namespace {

// A transposed A copied for f32_item's 6 x 16 tiles: groups of kCopyRows rows (sixteen tiles), each tile's
// copy kCopyStride floats (kKc steps of k of six values, and room for an 8-wide store's last two)
constexpr int kCopyRows = 16 * 6;
constexpr size_t kCopyStride = size_t(6) * kKc + 8;

// A transposed A's rows g0 .. g0 + rows (rows <= kCopyRows) of the block k0 .. k0 + kc, A(i, k) at a[i + k cs],
// into the copies of cdiv(rows, 6) tiles at t, kCopyStride floats apart, [k][6] each (a partial tile's missing
// rows 0). A step of k's values are contiguous: each whole tile 8 at a time (two past its rows, overwritten by
// the next step's, or from two before and shifted when nothing of A's follows in the group), a partial tile one
// at a time. With ahead, the next group's lines of the block (rows g0 + kCopyRows ..) are asked for into L2
// while it copies: no prefetcher follows steps of k a row of A apart.
void copy_rows(const float* a, long cs, int g0, int rows, int k0, int kc, float* t, bool ahead) {
    constexpr int rs = 6, group = kCopyRows;
    constexpr size_t ts = kCopyStride;
    const int whole = rows / rs;
    const __m256i left2 = _mm256_setr_epi32(2, 3, 4, 5, 6, 7, 7, 7);
    for (int k = 0; k < kc; k++) {
        const float* s = a + g0 + long(k0 + k) * cs;
        float* d = t + rs * k;
        if (ahead) {
            for (int l = 0; l < group; l += 16) __builtin_prefetch(s + group + l, 0, 2);
            __builtin_prefetch(s + 2 * group - 1, 0, 2);  // the seventh line, when the rows are not line-aligned
        }
        int u = 0;
        for (; rs * u + 8 <= rows; u++) _mm256_storeu_ps(d + u * ts, _mm256_loadu_ps(s + rs * u));
        if (u < whole) {  // the last whole tile, its rows the group's last: from two before, shifted
            if (u > 0) _mm256_storeu_ps(d + u * ts, _mm256_permutevar8x32_ps(_mm256_loadu_ps(s + rs * u - 2), left2));
            else
                for (int j = 0; j < rs; j++) d[j] = s[j];
            u++;
        }
        if (u * rs < rows)  // a partial tile
            for (int j = 0; j < rs; j++) d[u * ts + j] = rs * u + j < rows ? s[rs * u + j] : 0.0f;
    }
}

// An item's blocks of k with tiles of RS rows x 8 NV columns: per block, B's panels packed (8 NV columns each,
// kc rows of them one after another), then for each RS rows of the item every panel in turn. The tile's rows
// of A (at most 6 x kKc floats) stay in L1 while it sweeps the block's panels, which stay in L2 and are read
// in order (64 or 96 bytes a step of k): the order OpenBLAS's Haswell kernels run. The AVX-512 order (each
// 48-column panel over 256 rows) read both operands from L2 here, the panel (384 x 48 floats, 72 KiB) being
// more than L1 holds: on one core of a Zen 3, bench_gemm's GPT-2 shapes ran at 0.91-0.92x OpenBLAS's speed,
// in this order at 1.08-1.14x (bench/RESULTS.md).
// rows(i, k0, &lda) gives A(i, k0) and the step between A's rows (rows) or its steps of k (KMAJOR).
template <int RS, int NV, bool KMAJOR, class Rows>
void item_blocks(int r0, int r1, int c0, int c1, Next next, int K, float alpha, const Operand& B, float beta, float* C,
                 long ldc, const Rows& rows) {
    constexpr int ns = 8 * NV;
    const int nb = c1 - c0, panels = cdiv(nb, ns), last = nb - (panels - 1) * ns;
    float* bp = scratch(0, size_t(std::min(K, kKc)) * size_t(panels) * ns);
    for (int k0 = 0; k0 < K; k0 += kKc) {
        const int kc = std::min(kKc, K - k0);
        pack_b_panels(B, k0, kc, c0, nb, bp, ns);
        const int mode = k0 > 0 ? kAddC : beta == 0.0f ? kStore : kBetaC;
        PrefetchB fetch = PrefetchB::after(B, K, kKc, k0, kc, c0, nb, next, panels * cdiv(r1 - r0, RS));
        for (int i = r0; i < r1; i += RS) {
            const int R = std::min(RS, r1 - i);
            long lda;
            const float* a = rows(i, k0, &lda);
            for (int p = 0; p < panels; p++) {
                fetch.step();
                const float* b = bp + size_t(p) * kc * ns;
                float* c = C + long(i) * ldc + c0 + p * ns;
                // the last panel's tile only as wide as its columns' vectors
                const int n = p + 1 < panels ? ns : last, nv = p + 1 < panels ? NV : cdiv(n, 8);
                if (nv == NV) tile8_rows<NV, KMAJOR>(R, kc, a, lda, b, ns, c, ldc, n, alpha, beta, mode);
                else if (nv == 2) tile8_rows<2, KMAJOR>(R, kc, a, lda, b, ns, c, ldc, n, alpha, beta, mode);
                else tile8_rows<1, KMAJOR>(R, kc, a, lda, b, ns, c, ldc, n, alpha, beta, mode);
            }
        }
    }
}

}  // namespace

// Tiles of 6 x 16 (two vectors of B and six broadcasts of A a step of k, as OpenBLAS's) where A is read where
// it lies; 4 x 24 down packed strips of A (8 rows each: a 6-row tile would straddle two).
void f32_item(int r0, int r1, int c0, int c1, Next next, int K, float alpha, const Operand& A, const float* ap,
              int ap_row0, const Operand& B, float beta, float* C, long ldc) {
    const float* a0 = static_cast<const float*>(A.data);
    if (ap)  // strip (i - ap_row0) / 8, its rows from (i - ap_row0) % 8
        return item_blocks<4, 3, true>(r0, r1, c0, c1, next, K, alpha, B, beta, C, ldc, [&](int i, int k0, long* lda) {
            const int d = i - ap_row0;
            *lda = kMr;
            return ap + size_t(d / kMr * kMr) * even(K) + size_t(k0) * kMr + d % kMr;
        });
    if (A.rs == 1 && A.cs != 1) {
        // a transposed A that sgemm did not pack (a narrow product's, packs_a_up_front, or one row): the
        // rows of a block copied 96 at a time (six cache lines of each step of k, read once) into sixteen
        // tiles' copies as the item reaches them (copy_rows); each tile's copy then stays in L1 while the
        // block's panels read it (OpenBLAS's order). Copying one tile's six rows at a time read each line
        // of A two or three times, from L2 at best: A's steps of k fall in few sets of L1 when their stride
        // is a multiple of 8 lines (the head's 50304 floats, 3144 lines: 8 sets of 64). 96 rows rather than
        // 48: each of memory's pages gives twice as many lines at a time (the head's d(wte) 27-29 % of the
        // default model's step with 48, 25-27 % with 96; 192 no better).
        constexpr int group = kCopyRows;
        float* t = scratch(1, size_t(group / 6) * kCopyStride);
        return item_blocks<6, 2, true>(r0, r1, c0, c1, next, K, alpha, B, beta, C, ldc, [&](int i, int k0, long* lda) {
            const int g0 = r0 + (i - r0) / group * group;
            if (i == g0)  // the group's first tile: copy the group
                copy_rows(a0, A.cs, g0, std::min(group, r1 - g0), k0, std::min(kKc, K - k0), t, g0 + group < r1);
            *lda = 6;
            return static_cast<const float*>(t + size_t((i - g0) / 6) * kCopyStride);
        });
    }
    item_blocks<6, 2, false>(r0, r1, c0, c1, next, K, alpha, B, beta, C, ldc, [&](int i, int k0, long* lda) {
        *lda = A.rs;
        return a0 + long(i) * A.rs + k0;
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
                    if (kmajor) tile8_rows<2, true>(R, kc, a, lda, b, 64, c, ldc, n, alpha, beta, mode);
                    else tile8_rows<2, false>(R, kc, a, lda, b, 64, c, ldc, n, alpha, beta, mode);
                } else {
                    if (kmajor) tile8_rows<2, true>(R, kc, a, lda, b, kNr, c, ldc, n, alpha, beta, mode);
                    else tile8_rows<2, false>(R, kc, a, lda, b, kNr, c, ldc, n, alpha, beta, mode);
                }
            }
        },
        6, B.nr);
}

}  // namespace shardlm::kernels::native::detail

#endif
