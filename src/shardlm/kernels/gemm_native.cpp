// kernels/gemm_native.cpp: the native GEMMs (gemm_native.h): register tiles, packing, and the cut of C
// into the threads' blocks.
#include "shardlm/kernels/gemm_native.h"
#include "shardlm/kernels/gemm_native_parts.h"

#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <atomic>
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

namespace {

using namespace detail;

// How the tile writes C: C = x; C = x + C; C = x + beta C.
enum Mode { kStore, kAddC, kBetaC };

// The calling thread's scratch (slot 0: packed B; 1: an fp32 tile of C), grown as needed.
float* scratch(int slot, size_t floats) {
    thread_local AlignedBuffer<float> buf[2];
    if (buf[slot].size() < floats) buf[slot].resize(floats);
    return buf[slot].data();
}

// ---- register tiles ---------------------------------------------------------------------------------

// C(R x 16 NV, the columns of cm) op= alpha A(R x kc) B(kc x 16 NV): A(i, k) at a[i * lda + k] (rows) or
// a[i + k * lda] (KMAJOR); B a packed panel (kc rows of 16 NV). The GEMMs run 8 x 48 (NV 3: 24 accumulators);
// products whose columns come in 64s (attention's tiles, its head size) run 6 x 64 (NV 4).
template <int R, int NV, bool KMAJOR>
__attribute__((noinline)) void tile_f32(int kc, const float* __restrict a, long lda, const float* __restrict b, float* c,
                                        long ldc, const __mmask16* cm, float alpha, float beta, int mode) {
    __m512 acc[R][NV];
#pragma GCC unroll 8
    for (int i = 0; i < R; i++)
#pragma GCC unroll 4
        for (int v = 0; v < NV; v++) acc[i][v] = _mm512_setzero_ps();
    const float* row[R];
#pragma GCC unroll 8
    for (int i = 0; i < R; i++) row[i] = KMAJOR ? a + i : a + i * lda;
    const long step = KMAJOR ? lda : 1;
#pragma GCC unroll 4
    for (int k = 0; k < kc; k++) {
        __m512 bv[NV];
#pragma GCC unroll 4
        for (int v = 0; v < NV; v++) bv[v] = _mm512_load_ps(b + 16 * v);
#pragma GCC unroll 8
        for (int i = 0; i < R; i++) {
            const __m512 x = _mm512_set1_ps(row[i][k * step]);
#pragma GCC unroll 4
            for (int v = 0; v < NV; v++) acc[i][v] = _mm512_fmadd_ps(x, bv[v], acc[i][v]);
        }
        b += 16 * NV;
    }
    const __m512 va = _mm512_set1_ps(alpha), vb = _mm512_set1_ps(beta);
#pragma GCC unroll 8
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

#if defined(__AVX512BF16__)
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
#endif

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

#if defined(__AVX512BF16__)
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
#endif

// ---- the cut of C into items, and the threads ------------------------------------------------------------

// Items of rb rows x kNb columns: whole columns of C when there are at least two blocks of columns per
// thread (B's panels are packed once per item, so fewer row blocks pack less), else rows cut too.
struct Cut {
    int rb, row_blocks, col_blocks;
    int count() const { return row_blocks * col_blocks; }
};
Cut cut(int M, int N, int threads) {
    Cut c;
    c.col_blocks = cdiv(N, kNb);
    const int want = threads > 1 ? 2 * threads : 1;
    const int rows_cut = c.col_blocks >= want ? 1 : cdiv(want, c.col_blocks);
    c.rb = std::max(kMr, cdiv(cdiv(M, rows_cut), kMr) * kMr);
    c.row_blocks = cdiv(M, c.rb);
    return c;
}

int team() { return omp_in_parallel() ? 1 : std::max(1, omp_get_max_threads()); }

// The columns of the item a thread takes after the one it runs (c1 <= c0: none), so the running item can
// fetch the next one's first block of B while its last block computes.
struct Next {
    int c0 = 0, c1 = 0;
};

// A product run in chunks of rows: each chunk's strips of A packed by the team (units(rows) pieces of work,
// pack(q0, rows, u) for each: the chunk's rows from q0; none when !packed), then its items (item(r0, r1, c0,
// c1, q0, next)) taken as they come: a thread claims its next item before it runs the one it holds. On one
// thread (threads 1, or inside a parallel region) everything in order.
template <class Units, class Pack, class Item>
void run_chunks(int M, int N, int chunk, int threads, bool packed, const Units& units, const Pack& pack, const Item& item) {
    for (int q0 = 0; q0 < M; q0 += chunk) {
        const int rows = std::min(chunk, M - q0), strips = packed ? units(rows) : 0;
        const Cut c = cut(rows, N, threads);
        auto cols = [&](int it) {
            Next n;
            if (it < c.count()) n.c0 = (it / c.row_blocks) * kNb, n.c1 = std::min(N, n.c0 + kNb);
            return n;
        };
        auto one = [&](int it, int next) {
            const int r0 = q0 + (it % c.row_blocks) * c.rb;
            const Next mine = cols(it);
            item(r0, std::min(q0 + rows, r0 + c.rb), mine.c0, mine.c1, q0, cols(next));
        };
        if (threads <= 1) {
            for (int u = 0; u < strips; u++) pack(q0, rows, u);
            for (int it = 0; it < c.count(); it++) one(it, it + 1);
            continue;
        }
        std::atomic<int> claims{0};
#pragma omp parallel num_threads(threads)
        {
            if (packed) {
#pragma omp for schedule(static)
                for (int u = 0; u < strips; u++) pack(q0, rows, u);
            }
            // ahead only while the others keep items enough to share: the items a slow thread holds (a
            // busy neighbour on its core) must not be the tail the others wait for
            const int n = c.count();
            for (int it = claims.fetch_add(1, std::memory_order_relaxed); it < n;) {
                const bool ahead = n - claims.load(std::memory_order_relaxed) > 2 * threads;
                const int next = ahead ? claims.fetch_add(1, std::memory_order_relaxed) : n;
                one(it, next);
                it = ahead ? next : claims.fetch_add(1, std::memory_order_relaxed);
            }
        }
    }
}

// Rows of A per chunk when A is packed: its strips at most 16 MiB
int chunk_rows(int M, long strip_row_bytes, bool packed) {
    if (!packed) return std::max(M, 1);
    const long rows = (16L << 20) / std::max(1L, strip_row_bytes) / kMr * kMr;
    return int(std::max<long>(kMr, std::min<long>(rows, long(cdiv(M, kMr)) * kMr)));
}

// The tiles of rows r0 .. r1 and nb columns for one block of k: kMc rows of A at a time (they stay in L2),
// each panel of B (nr columns) in turn over them, mr rows a tile; tile(first row, rows, panel, column masks)
template <class Tile>
void for_tiles(int r0, int r1, int nb, const Tile& tile, int mr = kMr, int nr = kNr) {
    const int panels = cdiv(nb, nr);
    for (int m0 = r0; m0 < r1; m0 += kMc) {
        const int m1 = std::min(r1, m0 + kMc);
        for (int p = 0; p < panels; p++) {
            __mmask16 cm[4];
            for (int v = 0; v < 4; v++) cm[v] = prefix(nb - p * nr - 16 * v);
            for (int i = m0; i < m1; i += mr) tile(i, std::min(mr, m1 - i), p, cm);
        }
    }
}

// ---- fp32 ------------------------------------------------------------------------------------------------

// The cache lines of B(k0 .. k0 + kc, n0 .. n0 + nb) that the next block's packing reads, fetched into L2 a few
// at a time while this block's tiles run (step() after each tile), so the packing reads L2 instead of waiting
// for memory: B (a weight, read once per product) is not in cache. Segments of B: its rows (rows contiguous)
// or its columns (columns contiguous); other layouts are not fetched.
class PrefetchB {
public:
    // What a block's tiles fetch: the item's next block of k (blocks of kb), or, after its last block, the
    // first block of the next item (none: next.c1 <= next.c0), spread over the block's `tiles` tiles
    static PrefetchB after(const Operand& B, int K, int kb, int k0, int kc, int c0, int nb, Next next, int tiles) {
        return k0 + kc < K ? PrefetchB(B, k0 + kc, std::min(kb, K - k0 - kc), c0, nb, tiles)
                           : PrefetchB(B, 0, std::min(kb, K), next.c0, next.c1 - next.c0, tiles);
    }
    PrefetchB(const Operand& B, int k0, int kc, int n0, int nb, int steps) {
        if (kc <= 0 || nb <= 0 || (B.cs != 1 && B.rs != 1)) return;
        const bool rows = B.cs == 1;
        base_ = static_cast<const char*>(B.data);
        segs_ = rows ? kc : nb;
        const long e = long(dtype_bytes(B.t));
        seg_stride_ = (rows ? B.rs : B.cs) * e;
        first_ = (rows ? long(k0) * B.rs + n0 : long(n0) * B.cs + k0) * e;
        len_ = long(rows ? nb : kc) * e;
        const long lines = long(segs_) * (len_ / 64 + 2);
        per_step_ = int(std::max(1L, (lines + steps - 1) / std::max(steps, 1)));
        start_segment();
    }
    void step() {
        for (int n = 0; n < per_step_ && seg_ < segs_; n++) {
            _mm_prefetch(reinterpret_cast<const char*>(line_ * 64), _MM_HINT_T1);
            if (++line_ > last_line_ && ++seg_ < segs_) start_segment();
        }
    }

private:
    void start_segment() {
        const long start = long(reinterpret_cast<uintptr_t>(base_)) + first_ + long(seg_) * seg_stride_;
        line_ = start / 64, last_line_ = (start + len_ - 1) / 64;
    }
    const char* base_ = nullptr;
    int segs_ = 0, seg_ = 0, per_step_ = 0;
    long seg_stride_ = 0, first_ = 0, len_ = 0, line_ = 0, last_line_ = 0;
};

// The rows r0 .. r1, columns c0 .. c1 of C. A: where it lies (rows, or columns contiguous) or packed strips
// (ap, from row ap_row0).
void f32_item(int r0, int r1, int c0, int c1, Next next, int K, float alpha, const Operand& A, const float* ap,
              int ap_row0, const Operand& B, float beta, float* C, long ldc) {
    const int nb = c1 - c0, panels = cdiv(nb, kNr);
    float* bp = scratch(0, size_t(std::min(K, kKc)) * size_t(panels) * kNr);
    const bool kmajor = A.rs == 1 && A.cs != 1;
    const float* a0 = static_cast<const float*>(A.data);
    for (int k0 = 0; k0 < K; k0 += kKc) {
        const int kc = std::min(kKc, K - k0);
        pack_b_f32(B, k0, kc, c0, nb, bp);
        const int mode = k0 > 0 ? kAddC : beta == 0.0f ? kStore : kBetaC;
        PrefetchB fetch = PrefetchB::after(B, K, kKc, k0, kc, c0, nb, next, panels * cdiv(r1 - r0, kMr));
        for_tiles(r0, r1, nb, [&](int i, int R, int p, const __mmask16* cm) {
            fetch.step();
            const float* b = bp + size_t(p) * kc * kNr;
            float* c = C + long(i) * ldc + c0 + p * kNr;
            if (ap)  // strip (i - ap_row0) / 8
                tile_f32_rows<kNv, true>(R, kc, ap + size_t(i - ap_row0) * even(K) + size_t(k0) * kMr, kMr, b, c, ldc, cm, alpha,
                                    beta, mode);
            else if (kmajor)
                tile_f32_rows<kNv, true>(R, kc, a0 + i + long(k0) * A.cs, A.cs, b, c, ldc, cm, alpha, beta, mode);
            else
                tile_f32_rows<kNv, false>(R, kc, a0 + long(i) * A.rs + k0, A.rs, b, c, ldc, cm, alpha, beta, mode);
        });
    }
}

}  // namespace

bool has_fp32() { return true; }

void sgemm(int M, int N, int K, float alpha, const Operand& A, const Operand& B, float beta, float* C, long ldc) {
    SHARDLM_CHECK(A.t == DType::F32 && B.t == DType::F32, "native sgemm: fp32 operands");
    SHARDLM_CHECK(A.rs == 1 || A.cs == 1, "native sgemm: A needs contiguous rows or columns");
    if (M <= 0 || N <= 0) return;
    if (K <= 0) {  // C = beta C
        for (int i = 0; i < M; i++)
            for (int j = 0; j < N; j++) C[long(i) * ldc + j] = beta == 0.0f ? 0.0f : beta * C[long(i) * ldc + j];
        return;
    }
    // A with contiguous columns (a transposed operand) is packed into strips: see pack_a_strip_f32
    const bool packed = A.rs == 1 && A.cs != 1 && M > 1;
    const int threads = team(), chunk = chunk_rows(M, long(even(K)) * 4, packed);
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
    const bool kmajor = A.rs == 1 && A.cs != 1, wide = B.nr == 64;
    const float* a0 = static_cast<const float*>(A.data);
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

#if defined(__AVX512BF16__)

namespace {

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
    const int threads = team(), kp = even(cdiv(std::max(K, 1), 2));
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

#else
bool has_bf16() { return false; }
void gemm_bf16(void*, DType, long, const Operand&, const Operand&, int, int, int, bool, const float*) {
    SHARDLM_CHECK(false, "native gemm_bf16: this build has no AVX512_BF16 kernels");
}
#endif

#else  // no AVX-512: OpenBLAS and oneDNN serve every product (kernels/gemm.h)

bool has_fp32() { return false; }
bool has_bf16() { return false; }
void sgemm(int, int, int, float, const Operand&, const Operand&, float, float*, long) {
    SHARDLM_CHECK(false, "native sgemm: this build has no AVX-512 kernels");
}
void gemm_bf16(void*, DType, long, const Operand&, const Operand&, int, int, int, bool, const float*) {
    SHARDLM_CHECK(false, "native gemm_bf16: this build has no AVX-512 kernels");
}
size_t packed_b_floats(int, int, int) { return 0; }
PackedB pack_b(const Operand&, int K, int N, float*, int) {
    SHARDLM_CHECK(false, "native pack_b: this build has no AVX-512 kernels");
    return {nullptr, K, N, 0};
}
void gemm_packed(int, int, int, int, int, float, const Operand&, const PackedB&, float, float*, long) {
    SHARDLM_CHECK(false, "native gemm_packed: this build has no AVX-512 kernels");
}

#endif

}  // namespace shardlm::kernels::native
