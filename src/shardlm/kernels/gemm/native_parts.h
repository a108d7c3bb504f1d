// kernels/gemm/native_parts.h: what the native GEMMs (native.cpp, native_bf16.cpp and
// native_drive.h) and their packing (native_pack.cpp) share: the tile's and the blocks' sizes, and
// the packing routines. Nothing else includes it. AVX-512 builds, and the fp32 parts of AVX2 + FMA builds
// (SHARDLM_NATIVE_FP32; the tiles there are native_avx2.cpp's).
#pragma once
#if defined(__AVX512F__) || (defined(__AVX2__) && defined(__FMA__))
#define SHARDLM_NATIVE_FP32 1
#include <immintrin.h>

#include <cstdint>

#include "shardlm/core/dtype.h"
#include "shardlm/kernels/gemm/operand.h"

namespace shardlm::kernels::native::detail {

constexpr int kMr = 8;         // rows of the register tile
constexpr int kNv = 3;         // its 16-column vectors
constexpr int kNr = 16 * kNv;  // its columns: one panel of packed B
constexpr int kKc = 384;       // fp32: k per block (a panel of B: 384 x 48 floats, 72 KiB)
constexpr int kKc16 = 768;     // bf16: k per block (384 pairs of k: the same bytes)
constexpr int kMc = 256;       // rows of A that one pass over a block's panels reads (256 x 384 floats: L2)
constexpr int kNb = 4 * kNr;   // columns of C per item (192): the item's panels of B stay in L2

// 32 bits of two adjacent bf16 values (a pair of k), read from 16-bit storage
typedef uint32_t __attribute__((may_alias, aligned(2))) word_t;

inline int cdiv(int a, int b) { return (a + b - 1) / b; }
inline int even(int k) { return (k + 1) / 2 * 2; }
// The columns of a 16-column vector that are there (the first n): one bit each. __mmask16 itself where the
// build has AVX-512 (the same unsigned short).
using Mask16 = uint16_t;
inline Mask16 prefix(int n) { return n >= 16 ? Mask16(0xffff) : n <= 0 ? Mask16(0) : Mask16((1u << n) - 1u); }

// The cache lines of R rows of a tile of C (the vectors of cm that hold columns, 16 floats each; rows ldc apart),
// asked for before the tile's loop over k so that they have arrived when it ends: a tile reads C (accumulating)
// and writes it once per block of k, from memory when C is larger than the caches (a weight's gradient, the
// head's logits). The columns past cm's are another item's: not fetched.
template <int R, int NV>
inline void prefetch_c(const float* c, long ldc, const Mask16* cm) {
    int bytes = 0;
    for (int v = 0; v < NV; v++) bytes += cm[v] ? 64 : 0;
    if (bytes == 0) return;
#pragma GCC unroll 8
    for (int i = 0; i < R; i++) {
        const char* p = reinterpret_cast<const char*>(c + i * ldc);
        for (int l = 0; l < bytes; l += 64) __builtin_prefetch(p + l, 1, 3);
        __builtin_prefetch(p + bytes - 1, 1, 3);  // the row's last line, when it does not start a line
    }
}

// an operand's element as fp32
inline float load1(const void* data, DType t, long i) {
    if (t == DType::F32) return static_cast<const float*>(data)[i];
    return bf16_to_f32(static_cast<const uint16_t*>(data)[i]);
}

// ---- packing B: panels of 48 columns, one row of 48 values (fp32) or words (bf16 pairs) per step of k ----
// B(k0 .. k0 + kc, n0 .. n0 + nb) into panels of 16 nv columns at bp (panel p at bp + p * kc * 16 nv; columns
// past nb are 0).
void pack_b_f32(const Operand& B, int k0, int kc, int n0, int nb, float* bp, int nv = kNv);
// The bf16 pairs of the same (kp = ceil(kc / 2) rows of 48 words a panel; a k past K is 0). AVX512_BF16 only,
// as the other bf16 packings.
void pack_b_bf16(const Operand& B, int K, int k0, int kc, int n0, int nb, uint32_t* bp);

// ---- packing A into strips (when it cannot be read where it lies) ----------------------------------------
// Strip s holds rows s * 8 .. s * 8 + 7 (rows past M are 0): for each step of k (fp32; even(K) steps) or
// pair of k (bf16; even(ceil(K / 2)) pairs), the 8 values or words of its rows.
// A with contiguous columns: steps 2u, 2u + 1 (fp32) or pairs 2u, 2u + 1 (bf16) of the strips of rows
// q0 .. q0 + rows, at ap (strip 0 of those rows).
void pack_a_lines_f32(const Operand& A, int K, int q0, int rows, int u, float* ap);
void pack_a_lines_bf16(const Operand& A, int K, int q0, int rows, int u, uint32_t* ap);
// Any other bf16 A: one strip, rows i0 .. (< M), at d.
void pack_a_strip_bf16(const Operand& A, int M, int K, int i0, uint32_t* d);

}  // namespace shardlm::kernels::native::detail

#endif
