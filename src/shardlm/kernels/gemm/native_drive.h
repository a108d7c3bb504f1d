// kernels/gemm/native_drive.h: how the native GEMMs run a product, shared by the fp32 kernels (native.cpp
// on AVX-512, native_avx2.cpp on AVX2) and the bf16 ones (native_bf16.cpp): the threads' scratch,
// the cut of C into items that the threads take, the tiles of an item's block, and the lines of B fetched
// ahead of their packing. Only those include it. Builds with native kernels (SHARDLM_NATIVE_FP32: AVX-512,
// or AVX2 + FMA).
#pragma once
#include "shardlm/kernels/gemm/native_parts.h"
#if defined(SHARDLM_NATIVE_FP32)
#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>

#include "shardlm/core/aligned_buffer.h"
#include "shardlm/core/runtime.h"
#include "shardlm/core/dtype.h"

namespace shardlm::kernels::native::detail {

// How the tile writes C: C = x; C = x + C; C = x + beta C.
enum Mode { kStore, kAddC, kBetaC };

// The calling thread's scratch (slot 0: packed B; 1: an fp32 tile of C (bf16), or sixteen tiles' rows of a
// transposed A (AVX2 f32_item)), grown as needed.
inline float* scratch(int slot, size_t floats) {
    thread_local AlignedBuffer<float> buf[2];
    if (buf[slot].size() < floats) buf[slot].resize(floats);
    return buf[slot].data();
}

// ---- the cut of C into items, and the threads ------------------------------------------------------------

// Items of rb rows x kNb columns: whole columns of C when there are at least two blocks of columns per
// thread (B's panels are packed once per item, so fewer row blocks pack less), else rows cut too.
struct Cut {
    int rb, row_blocks, col_blocks;
    int count() const { return row_blocks * col_blocks; }
};
inline Cut cut(int M, int N, int threads) {
    Cut c;
    c.col_blocks = cdiv(N, kNb);
    const int want = threads > 1 ? 2 * threads : 1;
    const int rows_cut = c.col_blocks >= want ? 1 : cdiv(want, c.col_blocks);
    c.rb = std::max(kMr, cdiv(cdiv(M, rows_cut), kMr) * kMr);
    c.row_blocks = cdiv(M, c.rb);
    return c;
}

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
inline int chunk_rows(int M, long strip_row_bytes, bool packed) {
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
            Mask16 cm[4];
            for (int v = 0; v < 4; v++) cm[v] = prefix(nb - p * nr - 16 * v);
            for (int i = m0; i < m1; i += mr) tile(i, std::min(mr, m1 - i), p, cm);
        }
    }
}

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

// ---- what each instruction set's tiles provide (native.cpp: AVX-512; native_avx2.cpp: AVX2) -----

// Whether sgemm packs a transposed A's strips before the items run. On AVX2 a narrow product's (N <= 64: the
// weight gradient of a narrow input, such as a small model's head, d(wte) 50304 x 64 over thousands of rows of
// k) is not: packing copies all of A through memory and back, while its item copies 96 rows of a block at a
// time into its tiles' copies as it reaches them (OpenBLAS's order; one core 0.7x OpenBLAS before, 1.1x
// after, with six rows a copy; bench/RESULTS.md).
#if defined(__AVX512F__)
inline bool packs_a_up_front(int) { return true; }
#else
inline bool packs_a_up_front(int N) { return N > 64; }
#endif

// sgemm's item: rows r0 .. r1, columns c0 .. c1 of C, every block of k. A where it lies (rows contiguous), packed
// strips (ap, from row ap_row0), or a transposed A that sgemm did not pack (one row, M = 1; on AVX2 also a
// narrow product's, packs_a_up_front): read where it lies on AVX-512, on AVX2 96 rows of a block at a time
// copied as the item reaches them.
void f32_item(int r0, int r1, int c0, int c1, Next next, int K, float alpha, const Operand& A, const float* ap,
              int ap_row0, const Operand& B, float beta, float* C, long ldc);
// gemm_packed's tiles: one block of k (k0, kc > 0), columns n0 .. n1 of a packed B, on the calling thread
void packed_tiles(int M, int k0, int kc, int n0, int n1, float alpha, const Operand& A, const PackedB& B, float beta,
                  float* C, long ldc, int mode);

}  // namespace shardlm::kernels::native::detail

#endif
