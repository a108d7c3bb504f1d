// kernels/gemm/native_bf16.cpp: the native bf16 GEMMs (native.h, gemm_bf16): products of bf16 pairs summed
// in fp32 by AVX512_BF16 dot products; how they run a product is in native_drive.h, shared with the fp32
// ones (native.cpp).
#include "shardlm/kernels/gemm/native.h"
#include "shardlm/kernels/gemm/native_drive.h"
#include "shardlm/kernels/gemm/native_parts.h"

#include <immintrin.h>

#include <algorithm>
#include <cstdint>

#include "shardlm/core/aligned_buffer.h"
#include "shardlm/core/check.h"
#include "shardlm/core/simd.h"

// GCC 12's AVX-512 headers give the shuffles an operand _mm512_undefined_ps() that is initialised from
// itself: a -Wuninitialized false alarm at every inlined unpack and shuffle
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif

namespace shardlm::kernels::native {

#if defined(__AVX512F__) && defined(__AVX512BF16__)

namespace {

using namespace detail;

// ---- the register tile ---------------------------------------------------------------------------------

// C(R x 48, the columns of cm) (+)= A(R x 2 kp) B(2 kp x 48) on pairs of k: A's pair p of row i is the word
// a[i * lda + p] (rows) or a[i + p * lda] (KMAJOR); B a packed panel (kp rows of 48 words).
template <int R, bool KMAJOR>
__attribute__((noinline)) void tile_bf16(int kp, const word_t* __restrict a, long lda, const uint32_t* __restrict b,
                                         float* c, long ldc, const __mmask16* cm, int mode) {
    __m512 acc[R][kNv];
#pragma GCC unroll 8
    for (int i = 0; i < R; i++)
#pragma GCC unroll 3
        for (int v = 0; v < kNv; v++) acc[i][v] = _mm512_setzero_ps();
    const word_t* row[R];
#pragma GCC unroll 8
    for (int i = 0; i < R; i++) row[i] = KMAJOR ? a + i : a + i * lda;
    const long step = KMAJOR ? lda : 1;
    prefetch_c<R, kNv>(c, ldc, cm);
#pragma GCC unroll 4
    for (int p = 0; p < kp; p++) {
        const __m512bh b0 = (__m512bh)_mm512_load_si512(b), b1 = (__m512bh)_mm512_load_si512(b + 16),
                       b2 = (__m512bh)_mm512_load_si512(b + 32);
#pragma GCC unroll 8
        for (int i = 0; i < R; i++) {
            const __m512bh x = (__m512bh)_mm512_set1_epi32(int(row[i][p * step]));
            acc[i][0] = _mm512_dpbf16_ps(acc[i][0], x, b0);
            acc[i][1] = _mm512_dpbf16_ps(acc[i][1], x, b1);
            acc[i][2] = _mm512_dpbf16_ps(acc[i][2], x, b2);
        }
        b += kNr;
    }
#pragma GCC unroll 8
    for (int i = 0; i < R; i++)
#pragma GCC unroll 3
        for (int v = 0; v < kNv; v++) {
            float* q = c + i * ldc + 16 * v;
            __m512 x = acc[i][v];
            if (mode != kStore) x = _mm512_add_ps(x, _mm512_maskz_loadu_ps(cm[v], q));
            _mm512_mask_storeu_ps(q, cm[v], x);
        }
}

template <bool KMAJOR>
void tile_bf16_rows(int R, int kp, const word_t* a, long lda, const uint32_t* b, float* c, long ldc, const __mmask16* cm,
                    int mode) {
    switch (R) {
#define SHARDLM_TILE(r) \
    case r: return tile_bf16<r, KMAJOR>(kp, a, lda, b, c, ldc, cm, mode);
        SHARDLM_TILE(1) SHARDLM_TILE(2) SHARDLM_TILE(3) SHARDLM_TILE(4)
        SHARDLM_TILE(5) SHARDLM_TILE(6) SHARDLM_TILE(7) SHARDLM_TILE(8)
#undef SHARDLM_TILE
    }
}

// ---- items ----------------------------------------------------------------------------------------------

// The rows r0 .. r1 of C (cols c0 .. c1) on bf16 pairs. A: direct rows (words at row i, pair q:
// A.data + i * rs + 2q) or packed strips (ap, rows from ap_row0). C: the fp32 target (C, or the
// item's tile), rows ldc apart; first block: C = x, or C += x when add.
void bf16_item(int r0, int r1, int c0, int c1, Next next, int K, const Operand& A, const uint32_t* ap, int ap_row0,
               const Operand& B, float* C, long ldc, bool add) {
    const int nb = c1 - c0, panels = cdiv(nb, kNr), kp_all = even(cdiv(K, 2));
    uint32_t* bp = reinterpret_cast<uint32_t*>(scratch(0, size_t(cdiv(std::min(K, kKc16), 2)) * size_t(panels) * kNr));
    for (int k0 = 0; k0 < K; k0 += kKc16) {
        const int kc = std::min(kKc16, K - k0), kp = cdiv(kc, 2);
        pack_b_bf16(B, K, k0, kc, c0, nb, bp);
        const int mode = k0 > 0 || add ? kAddC : kStore;
        PrefetchB fetch = PrefetchB::after(B, K, kKc16, k0, kc, c0, nb, next, panels * cdiv(r1 - r0, kMr));
        for_tiles(r0, r1, nb, [&](int i, int R, int p, const __mmask16* cm) {
            fetch.step();
            const uint32_t* b = bp + size_t(p) * kp * kNr;
            float* c = C + long(i - r0) * ldc + p * kNr;
            if (ap) {
                const auto* a = reinterpret_cast<const word_t*>(ap + size_t(i - ap_row0) * kp_all + size_t(k0 / 2) * kMr);
                tile_bf16_rows<true>(R, kp, a, kMr, b, c, ldc, cm, mode);
            } else {
                const auto* a =
                    reinterpret_cast<const word_t*>(static_cast<const uint16_t*>(A.data) + long(i) * A.rs + k0);
                tile_bf16_rows<false>(R, kp, a, A.rs / 2, b, c, ldc, cm, mode);
            }
        });
    }
}

// the fp32 tile (rows x cols, ld) + bias, written to C as c_t (rows ldc apart)
void finish_tile(float* t, long ld, int rows, int cols, const float* bias, void* C, DType c_t, long ldc) {
    for (int i = 0; i < rows; i++) {
        float* r = t + i * ld;
        for (int j = 0; j < cols; j += 16) {
            const __mmask16 m = prefix(cols - j);
            __m512 x = _mm512_maskz_loadu_ps(m, r + j);
            if (bias) x = _mm512_add_ps(x, _mm512_maskz_loadu_ps(m, bias + j));
            if (c_t == DType::F32) _mm512_mask_storeu_ps(static_cast<float*>(C) + i * ldc + j, m, x);
            else _mm256_mask_storeu_epi16(static_cast<uint16_t*>(C) + i * ldc + j, m, simd::bf16_round({x}));
        }
    }
}

}  // namespace

bool has_bf16() { return true; }

void gemm_bf16(void* C, DType c_t, long ldc, const Operand& A, const Operand& B, int M, int N, int K, bool accumulate,
               const float* bias) {
    SHARDLM_CHECK((A.t == DType::F32 || A.t == DType::BF16) && (B.t == DType::F32 || B.t == DType::BF16),
                  "native gemm_bf16: F32 or BF16 operands");
    SHARDLM_CHECK(c_t == DType::F32 || c_t == DType::BF16, "native gemm_bf16: C is F32 or BF16");
    if (M <= 0 || N <= 0) return;
    // A is read where it lies when its rows hold whole pairs of k as 32-bit words
    const bool direct = A.t == DType::BF16 && A.cs == 1 && A.rs % 2 == 0 && K % 2 == 0 &&
                        reinterpret_cast<uintptr_t>(A.data) % 4 == 0;
    // C in fp32 as the sums run: C itself, or (bf16 C, or a bias to add after the whole sum) a tile of the item
    const bool tile = c_t != DType::F32 || bias;
    const int threads = team_threads(), kp = even(cdiv(std::max(K, 1), 2));
    const bool packed = !direct && K > 0;
    const int chunk = chunk_rows(M, long(kp) * 4, packed);
    thread_local AlignedBuffer<uint32_t> strips;
    if (packed && strips.size() < size_t(chunk) * kp) strips.resize(size_t(chunk) * kp);
    uint32_t* ap = packed ? strips.data() : nullptr;
    const long eb = long(dtype_bytes(c_t));
    auto item = [&](int r0, int r1, int c0, int c1, int q0, Next next) {
        char* out = static_cast<char*>(C) + (long(r0) * ldc + c0) * eb;
        const float* b0 = bias ? bias + c0 : nullptr;
        if (!tile && K > 0) {
            bf16_item(r0, r1, c0, c1, next, K, A, ap, q0, B, static_cast<float*>(C) + long(r0) * ldc + c0, ldc, accumulate);
            return;
        }
        float* t = scratch(1, size_t(r1 - r0) * kNb);
        if (accumulate || K == 0)  // C's old values (K 0: C = bias, + C when accumulating)
            for (int i = r0; i < r1; i++)
                for (int j = c0; j < c1; j++)
                    t[size_t(i - r0) * kNb + size_t(j - c0)] = accumulate ? load1(C, c_t, long(i) * ldc + j) : 0.0f;
        if (K > 0) bf16_item(r0, r1, c0, c1, next, K, A, ap, q0, B, t, kNb, accumulate);
        finish_tile(t, kNb, r1 - r0, c1 - c0, b0, out, c_t, ldc);
    };
    const bool lines = A.rs == 1 && A.cs != 1;  // contiguous columns: packed a line of every strip at a time
    run_chunks(
        M, N, chunk, threads, packed, [&](int rows) { return lines ? kp / 2 : cdiv(rows, kMr); },
        [&](int q0, int rows, int u) {
            if (lines) pack_a_lines_bf16(A, K, q0, rows, u, ap);
            else pack_a_strip_bf16(A, M, K, q0 + u * kMr, ap + size_t(u) * kMr * kp);
        },
        item);
}

#else  // no AVX512_BF16: OpenBLAS and oneDNN serve the bf16 products (kernels/gemm/gemm.h)

bool has_bf16() { return false; }
void gemm_bf16(void*, DType, long, const Operand&, const Operand&, int, int, int, bool, const float*) {
    SHARDLM_CHECK(false, "native gemm_bf16: this build has no AVX512_BF16 kernels");
}

#endif

}  // namespace shardlm::kernels::native
