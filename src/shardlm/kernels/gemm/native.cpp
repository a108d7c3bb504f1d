// kernels/gemm/native.cpp: the native fp32 GEMMs (native.h): their entry points for every build with native
// kernels, and the AVX-512 register tiles and items (AVX2's are in native_avx2.cpp); the bf16 ones are in
// native_bf16.cpp, how both run a product in native_drive.h.
#include "shardlm/kernels/gemm/native.h"
#include "shardlm/kernels/gemm/native_drive.h"
#include "shardlm/kernels/gemm/native_parts.h"

#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "shardlm/core/aligned_buffer.h"
#include "shardlm/core/check.h"
#include "shardlm/core/simd.h"

// GCC 12's AVX-512 headers give the shuffles an operand _mm512_undefined_ps() that is initialised from
// itself: a -Wuninitialized false alarm at every inlined unpack and shuffle
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif

namespace shardlm::kernels::native {

#if defined(__AVX512F__)

namespace detail {
namespace {

// ---- register tiles ---------------------------------------------------------------------------------

// C(R x 16 NV, the columns of cm) op= alpha A(R x kc) B(kc x 16 NV): A(i, k) at a[i * lda + k] (rows) or
// a[i + k * lda] (KMAJOR); B a packed panel (kc rows of BS floats, the first 16 NV read). The GEMMs run 8 x 48
// (NV 3: 24 accumulators); products whose columns come in 64s (attention's tiles, its head size) run 6 x 64
// (NV 4), or, when their columns fit in 16, 32 or 48 (a small head size), 12 x 16, 12 x 32 or 8 x 48 of the
// 64-column panel (NV 1, 2 or 3, BS 64) instead of a 6 x 64 tile that computes columns only to drop them.
// Each element of C is the same chain of fused multiply-adds over k whatever the tile: the same bits.
template <int R, int NV, bool KMAJOR, int BS = 16 * NV>
__attribute__((noinline)) void tile_f32(int kc, const float* __restrict a, long lda, const float* __restrict b, float* c,
                                        long ldc, const __mmask16* cm, float alpha, float beta, int mode) {
    __m512 acc[R][NV];
#pragma GCC unroll 16
    for (int i = 0; i < R; i++)
#pragma GCC unroll 4
        for (int v = 0; v < NV; v++) acc[i][v] = _mm512_setzero_ps();
    const float* row[R];
#pragma GCC unroll 16
    for (int i = 0; i < R; i++) row[i] = KMAJOR ? a + i : a + i * lda;
    const long step = KMAJOR ? lda : 1;
    prefetch_c<R, NV>(c, ldc, cm);
#pragma GCC unroll 4
    for (int k = 0; k < kc; k++) {
        __m512 bv[NV];
#pragma GCC unroll 4
        for (int v = 0; v < NV; v++) bv[v] = _mm512_load_ps(b + 16 * v);
#pragma GCC unroll 16
        for (int i = 0; i < R; i++) {
            const __m512 x = _mm512_set1_ps(row[i][k * step]);
#pragma GCC unroll 4
            for (int v = 0; v < NV; v++) acc[i][v] = _mm512_fmadd_ps(x, bv[v], acc[i][v]);
        }
        b += BS;
    }
    const __m512 va = _mm512_set1_ps(alpha), vb = _mm512_set1_ps(beta);
#pragma GCC unroll 16
    for (int i = 0; i < R; i++)
#pragma GCC unroll 4
        for (int v = 0; v < NV; v++) {
            float* p = c + i * ldc + 16 * v;
            __m512 x = _mm512_mul_ps(acc[i][v], va);
            if (mode != kStore) {
                const __m512 old = _mm512_maskz_loadu_ps(cm[v], p);
                x = mode == kAddC ? _mm512_add_ps(x, old) : _mm512_fmadd_ps(vb, old, x);
            }
            _mm512_mask_storeu_ps(p, cm[v], x);
        }
}


// The tiles by their rows (1 .. 8 for NV 3, 1 .. 6 for NV 4): a switch over the template's instances.
template <int NV, bool KMAJOR>
void tile_f32_rows(int R, int kc, const float* a, long lda, const float* b, float* c, long ldc, const __mmask16* cm,
                   float alpha, float beta, int mode) {
    switch (R) {
#define SHARDLM_TILE(r) \
    case r: return tile_f32<r, NV, KMAJOR>(kc, a, lda, b, c, ldc, cm, alpha, beta, mode);
        SHARDLM_TILE(1) SHARDLM_TILE(2) SHARDLM_TILE(3) SHARDLM_TILE(4) SHARDLM_TILE(5) SHARDLM_TILE(6)
#undef SHARDLM_TILE
        case 7: if constexpr (NV == 3) return tile_f32<7, 3, KMAJOR>(kc, a, lda, b, c, ldc, cm, alpha, beta, mode); break;
        case 8: if constexpr (NV == 3) return tile_f32<8, 3, KMAJOR>(kc, a, lda, b, c, ldc, cm, alpha, beta, mode); break;
    }
}


// The narrow tiles of a 64-column panel: NV 1, 2 or 3 of its 4 vectors, 1 .. narrow_rows(NV) rows (at most
// 24 accumulators)
constexpr int narrow_rows(int nv) { return nv == 3 ? 8 : 12; }

template <int NV, bool KMAJOR>
void tile_f32_narrow(int R, int kc, const float* a, long lda, const float* b, float* c, long ldc, const __mmask16* cm,
                     float alpha, float beta, int mode) {
    switch (R) {
#define SHARDLM_TILE(r) \
    case r: return tile_f32<r, NV, KMAJOR, 64>(kc, a, lda, b, c, ldc, cm, alpha, beta, mode);
        SHARDLM_TILE(1) SHARDLM_TILE(2) SHARDLM_TILE(3) SHARDLM_TILE(4) SHARDLM_TILE(5) SHARDLM_TILE(6)
        SHARDLM_TILE(7) SHARDLM_TILE(8)
#undef SHARDLM_TILE
        case 9: if constexpr (NV < 3) return tile_f32<9, NV, KMAJOR, 64>(kc, a, lda, b, c, ldc, cm, alpha, beta, mode); break;
        case 10: if constexpr (NV < 3) return tile_f32<10, NV, KMAJOR, 64>(kc, a, lda, b, c, ldc, cm, alpha, beta, mode); break;
        case 11: if constexpr (NV < 3) return tile_f32<11, NV, KMAJOR, 64>(kc, a, lda, b, c, ldc, cm, alpha, beta, mode); break;
        case 12: if constexpr (NV < 3) return tile_f32<12, NV, KMAJOR, 64>(kc, a, lda, b, c, ldc, cm, alpha, beta, mode); break;
    }
}

template <int NV>
void narrow_product(int M, int kc, bool kmajor, const float* a0, long lda, const float* b, float* C, long ldc, int nb,
                    float alpha, float beta, int mode) {
    for_tiles(
        0, M, nb,
        [&](int i, int R, int, const __mmask16* cm) {
            float* c = C + long(i) * ldc;
            if (kmajor) tile_f32_narrow<NV, true>(R, kc, a0 + i, lda, b, c, ldc, cm, alpha, beta, mode);
            else tile_f32_narrow<NV, false>(R, kc, a0 + long(i) * lda, lda, b, c, ldc, cm, alpha, beta, mode);
        },
        narrow_rows(NV), 64);
}

// sgemm's item: per block of k (kKc), B's panels packed (the lines of the next block fetched while the tiles
// run), then tile(i, R, p, cm, b, k0, kc, mode) for the tiles of rows r0 .. r1 (kMr rows at most) and each
// panel p (its packed block at b): each panel over kMc rows at a time (for_tiles)
template <class Tile>
void f32_blocks(int r0, int r1, int c0, int c1, Next next, int K, const Operand& B, float beta, const Tile& tile) {
    const int nb = c1 - c0, panels = cdiv(nb, kNr);
    float* bp = scratch(0, size_t(std::min(K, kKc)) * size_t(panels) * kNr);
    for (int k0 = 0; k0 < K; k0 += kKc) {
        const int kc = std::min(kKc, K - k0);
        pack_b_f32(B, k0, kc, c0, nb, bp);
        const int mode = k0 > 0 ? kAddC : beta == 0.0f ? kStore : kBetaC;
        PrefetchB fetch = PrefetchB::after(B, K, kKc, k0, kc, c0, nb, next, panels * cdiv(r1 - r0, kMr));
        for_tiles(r0, r1, nb, [&](int i, int R, int p, const Mask16* cm) {
            fetch.step();
            tile(i, R, p, cm, bp + size_t(p) * kc * kNr, k0, kc, mode);
        });
    }
}

}  // namespace

// ---- fp32 ------------------------------------------------------------------------------------------------

void f32_item(int r0, int r1, int c0, int c1, Next next, int K, float alpha, const Operand& A, const float* ap,
              int ap_row0, const Operand& B, float beta, float* C, long ldc) {
    const bool kmajor = A.rs == 1 && A.cs != 1;
    const float* a0 = static_cast<const float*>(A.data);
    f32_blocks(r0, r1, c0, c1, next, K, B, beta,
               [&](int i, int R, int p, const __mmask16* cm, const float* b, int k0, int kc, int mode) {
                   float* c = C + long(i) * ldc + c0 + p * kNr;
                   if (ap)  // strip (i - ap_row0) / 8
                       tile_f32_rows<kNv, true>(R, kc, ap + size_t(i - ap_row0) * even(K) + size_t(k0) * kMr, kMr, b, c, ldc,
                                                cm, alpha, beta, mode);
                   else if (kmajor)
                       tile_f32_rows<kNv, true>(R, kc, a0 + i + long(k0) * A.cs, A.cs, b, c, ldc, cm, alpha, beta, mode);
                   else
                       tile_f32_rows<kNv, false>(R, kc, a0 + long(i) * A.rs + k0, A.rs, b, c, ldc, cm, alpha, beta, mode);
               });
}

void packed_tiles(int M, int k0, int kc, int n0, int n1, float alpha, const Operand& A, const PackedB& B, float beta,
                  float* C, long ldc, int mode) {
    const bool kmajor = A.rs == 1 && A.cs != 1, wide = B.nr == 64;
    const float* a0 = static_cast<const float*>(A.data);
    if (wide && n1 - n0 <= 48) {  // one panel, 16, 32 or 48 of its columns: the narrow tiles
        const float* b = B.data + (size_t(n0 / B.nr) * B.K + k0) * B.nr;
        const long lda = kmajor ? A.cs : A.rs;
        if (n1 - n0 <= 16) narrow_product<1>(M, kc, kmajor, a0, lda, b, C, ldc, n1 - n0, alpha, beta, mode);
        else if (n1 - n0 <= 32) narrow_product<2>(M, kc, kmajor, a0, lda, b, C, ldc, n1 - n0, alpha, beta, mode);
        else narrow_product<3>(M, kc, kmajor, a0, lda, b, C, ldc, n1 - n0, alpha, beta, mode);
        return;
    }
    for_tiles(
        0, M, n1 - n0,
        [&](int i, int R, int p, const __mmask16* cm) {
            const float* b = B.data + (size_t(n0 / B.nr + p) * B.K + k0) * B.nr;
            float* c = C + long(i) * ldc + p * B.nr;
            // A's column 0 multiplies B's row k0
            const float* a = kmajor ? a0 + i : a0 + long(i) * A.rs;
            const long lda = kmajor ? A.cs : A.rs;
            if (wide) {
                if (kmajor) tile_f32_rows<4, true>(R, kc, a, lda, b, c, ldc, cm, alpha, beta, mode);
                else tile_f32_rows<4, false>(R, kc, a, lda, b, c, ldc, cm, alpha, beta, mode);
            } else {
                if (kmajor) tile_f32_rows<kNv, true>(R, kc, a, lda, b, c, ldc, cm, alpha, beta, mode);
                else tile_f32_rows<kNv, false>(R, kc, a, lda, b, c, ldc, cm, alpha, beta, mode);
            }
        },
        wide ? 6 : kMr, B.nr);
}

}  // namespace detail

#endif

#if defined(SHARDLM_NATIVE_FP32)

using namespace detail;

void sgemm(int M, int N, int K, float alpha, const Operand& A, const Operand& B, float beta, float* C, long ldc) {
    SHARDLM_CHECK(A.t == DType::F32 && B.t == DType::F32, "native sgemm: fp32 operands");
    SHARDLM_CHECK(A.rs == 1 || A.cs == 1, "native sgemm: A needs contiguous rows or columns");
    if (M <= 0 || N <= 0) return;
    if (K <= 0) {  // C = beta C
        for (int i = 0; i < M; i++)
            for (int j = 0; j < N; j++) C[long(i) * ldc + j] = beta == 0.0f ? 0.0f : beta * C[long(i) * ldc + j];
        return;
    }
    // A with contiguous columns (a transposed operand) is packed into strips up front (pack_a_lines_f32), but
    // where the instruction set's items copy it as they go (packs_a_up_front)
    const bool packed = A.rs == 1 && A.cs != 1 && M > 1 && packs_a_up_front(N);
    const int threads = team_threads(), chunk = chunk_rows(M, long(even(K)) * 4, packed);
    thread_local AlignedBuffer<float> strips;
    if (packed && strips.size() < size_t(chunk) * even(K)) strips.resize(size_t(chunk) * even(K));
    float* ap = packed ? strips.data() : nullptr;
    run_chunks(
        M, N, chunk, threads, packed, [&](int) { return cdiv(K, 2); },
        [&](int q0, int rows, int u) { pack_a_lines_f32(A, K, q0, rows, u, ap); },
        [&](int r0, int r1, int c0, int c1, int q0, Next next) {
            f32_item(r0, r1, c0, c1, next, K, alpha, A, ap, q0, B, beta, C, ldc);
        });
}

size_t packed_b_floats(int K, int N, int nr) {
    return size_t(std::max(K, 1)) * size_t(cdiv(std::max(N, 1), nr)) * nr;
}

PackedB pack_b(const Operand& B, int K, int N, float* storage, int nr) {
    SHARDLM_CHECK(B.t == DType::F32 && (nr == 48 || nr == 64), "native pack_b: fp32 operands, panels of 48 or 64 columns");
    if (K > 0 && N > 0) pack_b_f32(B, 0, K, 0, N, storage, nr / 16);
    return {storage, K, N, nr};
}

void gemm_packed(int M, int k0, int k1, int n0, int n1, float alpha, const Operand& A, const PackedB& B, float beta,
                 float* C, long ldc) {
    SHARDLM_CHECK(A.t == DType::F32 && (A.rs == 1 || A.cs == 1) && n0 % B.nr == 0 && k0 >= 0 && k1 <= B.K && n1 <= B.N,
                  "native gemm_packed: fp32 A with contiguous rows or columns, n0 a multiple of ", B.nr,
                  ", ranges inside B");
    if (M <= 0 || n1 <= n0) return;
    const int kc = k1 - k0, mode = beta == 0.0f ? kStore : beta == 1.0f ? kAddC : kBetaC;
    if (kc <= 0) {
        for (int i = 0; i < M; i++)
            for (int j = 0; j < n1 - n0; j++) C[long(i) * ldc + j] = mode == kStore ? 0.0f : beta * C[long(i) * ldc + j];
        return;
    }
    packed_tiles(M, k0, kc, n0, n1, alpha, A, B, beta, C, ldc, mode);
}

#else
#error "the native kernels need AVX-512F, or AVX2 + FMA (as core/simd.h does)"
#endif

}  // namespace shardlm::kernels::native
