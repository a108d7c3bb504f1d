// kernels/gemm/native.h: shardlm's own GEMMs for AVX-512 (fp32 FMA and AVX512_BF16 dot products) and, fp32
// only, for AVX2 + FMA (native_avx2.cpp: 6 x 16 and 4 x 24 tiles, the same bits), the third library
// under kernels/gemm/gemm.h's dispatcher beside OpenBLAS and oneDNN (docs/DESIGN.md, kernels/:
// "The native GEMM").
//
// The BLIS/GotoBLAS structure, sized for one core's caches: on AVX-512 an 8 x 48 register tile (24
// accumulators, three 16-column vectors of B and one broadcast of A per step of k; AVX2's tiles and order:
// native_avx2.cpp), B packed per block of k into 48-column panels that stay in L2, A read where it lies (its rows, or its columns) with no copy when its layout
// lets the tile broadcast from it. What the other libraries do not do:
//   - bf16 operands may be given as fp32: they are rounded to bf16 (nearest even, the bits of
//     convert_from_f32) as they are packed, so a mixed-precision product needs no rounding pass of its own;
//   - the result does not depend on the threads, on how the product is cut, or on where a row or column
//     falls in the cut: every element is the same chain of fused multiply-adds over k in blocks of a fixed
//     size (kKc), the blocks added in order. A product cut into lanes' rows, or into a rank's columns of a
//     wider one, gives the bits of the whole.
// Threads: the calling thread's OpenMP team (omp_get_max_threads()) outside a parallel region, splitting C
// into blocks of columns (and of rows when the columns are too few) that the threads take as they come;
// inside one (a lane) the calling thread alone.
#pragma once
#include <cstddef>

#include "shardlm/core/dtype.h"
#include "shardlm/kernels/gemm/operand.h"

namespace shardlm::kernels::native {

bool has_bf16();  // this build has the bf16 kernels (AVX512_BF16); the fp32 ones are in every build

// C(M,N) = alpha op(A)(M,K) op(B)(K,N) + beta C: fp32 operands, C rows ldc floats apart (beta 0: C is not read).
void sgemm(int M, int N, int K, float alpha, const Operand& A, const Operand& B, float beta, float* C, long ldc);

// C(M,N) = A(M,K) B(K,N) (+ C when accumulate) (+ bias(N)): products of bf16 values summed in fp32. BF16
// operands are read as they are, F32 ones rounded to bf16 as they are packed. C is F32 or BF16 (rounded
// once, from the fp32 sum), rows ldc elements apart; bias fp32 or null.
void gemm_bf16(void* C, DType c_t, long ldc, const Operand& A, const Operand& B, int M, int N, int K, bool accumulate,
               const float* bias);

// ---- products of a packed B on the calling thread (attention's tiles: one operand, many products) -------
// B (K x N fp32) packed once into panels of nr columns (K x nr floats each, K * nr floats apart; nr 48, or
// 64 for products whose columns come in 64s: attention's key tiles and head size), for products that each
// read a range of its rows and of its columns.
struct PackedB {
    const float* data;
    int K, N, nr;
};
size_t packed_b_floats(int K, int N, int nr);  // the storage pack_b fills (64-byte aligned)
PackedB pack_b(const Operand& B, int K, int N, float* storage, int nr);
// C(M x (n1 - n0)) = alpha A(M x (k1 - k0)) B[k0:k1, n0:n1] + beta C, on this thread: A fp32 (its column 0
// multiplies B's row k0) with rows (cs 1) or columns (rs 1) contiguous, n0 a multiple of the panels (nr), C rows ldc floats apart (beta 0: C is not read). Each
// element is the same chain of FMAs over k0 .. k1 as sgemm's (one block of k).
void gemm_packed(int M, int k0, int k1, int n0, int n1, float alpha, const Operand& A, const PackedB& B, float beta,
                 float* C, long ldc);

}  // namespace shardlm::kernels::native
