// kernels/gemm/gemm.h: the GEMM layer's one face: the products (fp32 and bf16 operands, transposes, an
// accumulate flag, fp32 or 16-bit C), the linear layers built on them, and which library runs them. Behind
// it: the libraries' calls (gemm.cpp), the native kernels (native.h), the tuner that picks a library per
// shape and its cache (tuner.h), and the product tap that tests replay (tap.h).
//
// The engine's fp32 and bf16 GEMMs, each on the library that runs its shape fastest
// (docs/DESIGN.md, kernels/: "GEMM libraries, chosen by measurement", "The native GEMM").
//
// Three libraries can run every product: OpenBLAS (sgemm; for bf16 operands, widened to fp32 first:
// a bf16 x bf16 product is exact in fp32, so only the order of the fp32 sums differs), oneDNN (its fp32
// matmul; its bf16 matmul on AVX512_BF16 or AMX kernels) and shardlm's own kernels (kernels/gemm/native.h:
// fp32 FMA and AVX512_BF16 tiles on AVX-512, fp32 FMA tiles on AVX2; bf16 products without AVX512_BF16 have
// none). `--gemm`
// chooses:
//   openblas  every product on OpenBLAS (bf16 operands widened)
//   onednn    every product on oneDNN, attention's tiles included: OpenBLAS is never called, so
//             main() does not re-exec itself to give OpenBLAS its OPENBLAS_CORETYPE
//   native    every product on the native kernels (bf16 ones without AVX512_BF16: widened, on OpenBLAS)
//   auto      per shape and precision: the first time a process meets a shape (its dimensions,
//             transposes, leading dimensions, whether it accumulates; for bf16 also the operand types and
//             the threads oneDNN runs it on), every library runs it on the real operands (its first
//             rows) and the fastest is kept: the native kernels (where the build has them, else OpenBLAS)
//             unless another is over 3 % faster. The choice is written to a cache file per CPU model
//             (gemm_cache_path()), so that every later process on the machine makes the same one
//             without timing. Attention's tiles (small, dozens of shapes) are not timed: they run on the
//             native kernels from panels packed once per head. Without a usable cache (no lock, not writable)
//             nothing is timed: OpenBLAS runs every product, the same choice in every process.
//
// Balanced (sgemm_balanced): on OpenBLAS and oneDNN the columns of C are cut into blocks (2 per CPU of
// the machine, multiples of 64 columns; SHARDLM_GEMM_BLOCKS sets another count, for measuring) that the
// OpenMP threads take dynamically, each block one single-threaded product on the chosen library: when
// another process takes one of the cores, the thread sharing it simply takes fewer blocks (OpenBLAS's own
// static split made the step wait for the slowed half: bench/RESULTS.md). Every element is computed by
// one call over the whole K on the same block whatever the thread count, so results do not depend on the
// threads, with either library. The native kernels cut C into blocks of their own the same way, and
// their bits depend on neither the threads nor the cut.
#pragma once
#include <cblas.h>

#include <cstddef>
#include <functional>
#include <string>
#include <string_view>

#include "shardlm/core/enum_names.h"
#include "shardlm/core/dtype.h"
#include "shardlm/kernels/gemm/native.h"
#include "shardlm/kernels/gemm/backend.h"

namespace shardlm::kernels {


// C(M,N) = alpha op(A)(M,K) op(B)(K,N) + beta C, row-major (cblas_sgemm's arguments), balanced as above,
// on the library chosen for this shape.
void sgemm_balanced(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int M, int N, int K, float alpha, const float* A, int lda,
                    const float* B, int ldb, float beta, float* C, int ldc);
// The same as one call on the calling thread's threads (attention's tiles, inside parallel regions):
// OpenBLAS, or oneDNN with --gemm onednn, or the native kernels with --gemm native.
void sgemm_tile(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int M, int N, int K, float alpha, const float* A, int lda,
                const float* B, int ldb, float beta, float* C, int ldc);
// One library, no choosing (tests, bench_gemm, the timing itself). cut_n > 0: cut the columns into
// blocks as a product of cut_n columns would be (auto's timing of a wide product's first blocks).
void sgemm_balanced_on(GemmBackend b, CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int M, int N, int K, float alpha,
                       const float* A, int lda, const float* B, int ldb, float beta, float* C, int ldc, int cut_n = 0);

// The library the calling thread's last sgemm_balanced or gemm_mixed ran on (auto's choice for its shape):
// what benchmarks measure a product's share of the peak by (machine.h: product_isa).
GemmBackend gemm_last_library();
void note_gemm_library(GemmBackend b);  // the products' own call

// sgemm_tile's one call on one library (OpenBLAS, oneDNN or the native kernels), no choosing.
void sgemm_tile_on(GemmBackend b, CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int M, int N, int K, float alpha, const float* A,
                   int lda, const float* B, int ldb, float beta, float* C, int ldc);

bool gemm_has_native_bf16();  // this build has native bf16 kernels (AVX512_BF16; the fp32 ones are in every build)

// "auto: 9 shapes, 1 on OpenBLAS, 3 on oneDNN, 5 native (4 timed now; cache ~/.cache/shardlm/gemm-...json)",
// or "openblas" / "onednn" / "native" when forced: for the end of a run.
std::string gemm_summary();

// ---- linear layers ---------------------------------------------------------------------------------
// Weights are stored [OC, C] (out, in), like torch.nn.Linear; HF's Conv1D [in, out] is transposed
// on import/export only.
//
// Precision (like PyTorch's torch.set_float32_matmul_precision): fp32 runs sgemm on the fp32
// operands. bf16 rounds both operands of every product to bf16 (nearest even) and multiplies them
// on oneDNN's AVX512_BF16 kernels with fp32 accumulation and fp32 outputs; parameters, gradients,
// activations and the optimiser stay fp32. Bias and bias gradients are fp32 in both.


enum class MatmulPrecision { fp32, bf16 };
inline constexpr EnumName<MatmulPrecision> kMatmulPrecisionNames[] = {{MatmulPrecision::fp32, "fp32"},
                                                                      {MatmulPrecision::bf16, "bf16"}};
constexpr const auto& enum_names(MatmulPrecision) { return kMatmulPrecisionNames; }
// "fp32" / "bf16"; from_name returns false for anything else.
std::string_view matmul_precision_name(MatmulPrecision p);
bool matmul_precision_from_name(std::string_view s, MatmulPrecision* out);

// out(N,OC) = inp(N,C) @ weight(OC,C)^T + bias(OC)      (bias may be null)
// accumulate: false -> out =, true -> out += (used to add a projection onto the residual stream).
void matmul_forward(float* out, const float* inp, const float* weight, const float* bias,
                    int N, int C, int OC, bool accumulate = false,
                    MatmulPrecision precision = MatmulPrecision::fp32);

// dinp(N,C) = dout(N,OC) @ weight(OC,C)        (=, overwritten; null to skip)
// dweight(OC,C) += dout^T @ inp (= if !accumulate_dweight: saves zeroing the gradient buffer on the
// first micro-batch), dbias(OC) += column sums of dout (dbias may be null). Column sums run over rows
// in order: bit-identical for any thread count.
// At bf16 precision dout is rounded to bf16 once for both products: into dout16 (N, OC) when given (kept
// for a later matmul_backward_weight), else, when dinp is asked for, into the thread's scratch (dweight alone
// rounds it as its product reads it). dout16 only with bf16 products.
void matmul_backward(float* dinp, float* dweight, float* dbias,
                     const float* dout, const float* inp, const float* weight,
                     int N, int C, int OC, bool accumulate_dweight = true,
                     MatmulPrecision precision = MatmulPrecision::fp32, unsigned short* dout16 = nullptr);

// Mixed precision: operands stored in 16 bits (the activations a step keeps, the 16-bit copy of
// the weights), accumulation in fp32. bf16 operands go to oneDNN's AVX512_BF16 kernels as they are
// (no rounding pass); fp16 operands (this CPU has no AVX512_FP16 and oneDNN 2.6 no fp16 matmul for
// it) are widened to fp32 and multiplied by sgemm. inp_t and w_t are F32, BF16 or F16 and equal;
// out is out_t (F32 or the operands' type), bias fp32 (may be null).
void matmul_forward(void* out, DType out_t, const void* inp, const void* weight, DType in_t, const float* bias, int N,
                    int C, int OC);
// dinp (fp32, =, null to skip), dweight (fp32, += or =), dbias (fp32, +=, null to skip) from the
// fp32 dout and 16-bit (in_t) inp and weight; dout16 as above (bf16 only).
void matmul_backward(float* dinp, float* dweight, float* dbias, const float* dout, const void* inp, const void* weight,
                     DType in_t, int N, int C, int OC, bool accumulate_dweight, unsigned short* dout16 = nullptr);

// dbias(OC) += column sums of dout(N, OC) (rows ld floats apart; 0: OC), rows in order: bit-identical
// for any thread count.
void bias_backward(float* dbias, const float* dout, int N, int OC, int ld = 0);

// Rows [oc0, oc1) of a linear layer's weight gradient over all N rows of the micro-batch:
// dweight[oc0:oc1, :] (+=, or = unless accumulate) dout[:, oc0:oc1]^T @ inp, and dbias[oc0:oc1] +=
// the column sums of dout (dbias may be null). inp (N, C) is stored as in_t (F32, BF16 or F16), dout
// fp32; products as matmul_backward makes them (fp32 inp at `precision`). The lanes of a rank
// (model/units.h) split each weight gradient so; [0, OC) is the whole of matmul_backward's. With bf16
// products, dout16 (null: none) is dout rounded to bf16 (as matmul_backward's dout16 keeps it): the
// product reads it instead of rounding dout again (the same values; dbias still sums the fp32 dout).
void matmul_backward_weight(float* dweight, float* dbias, const float* dout, const void* inp, DType in_t, int N, int C,
                            int OC, int oc0, int oc1, bool accumulate, MatmulPrecision precision = MatmulPrecision::fp32,
                            const unsigned short* dout16 = nullptr);
// out(N,C) = (x + bias) + y: the residual add after a row-parallel linear's reduction (bias may be null; it is
// added once, after the reduction, in the order the one-process path adds it). out may alias x.
void residual_add(float* out, const float* x, const float* bias, const float* y, int N, int C);
// The same with x and out stored as t (F32, BF16 or F16), y fp32.
void residual_add(void* out, const void* x, DType t, const float* bias, const float* y, int N, int C);

// matmul_backward at bf16 precision with dout already rounded to bf16 (the fused classifier writes
// it so, saving a pass over the (N, Vp) logits): dinp =, dweight += (or =); no bias.
void matmul_backward_bf16(float* dinp, float* dweight, const unsigned short* dout_bf16, const float* inp,
                          const float* weight, int N, int C, int OC, bool accumulate_dweight);

// The bf16 products (matmul_bf16.cpp): C(M,N) = A(M,K) B(K,N) (+ C if accumulate), fp32 accumulation,
// operands given as bf16 with arbitrary row/column strides (in elements).
struct Bf16Matrix {
    const unsigned short* data;
    long row_stride, col_stride;
};
void gemm_bf16(float* c, const Bf16Matrix& a, const Bf16Matrix& b, int M, int N, int K, bool accumulate);
// The same with operands that may be fp32 (rounded to bf16 as the product reads them: the native kernels
// round them as they pack them, the other libraries in a pass of their own) at any strides, C (F32 or
// BF16) rows of N: every bf16 product of the engine goes through here, on the library --gemm chooses.
void gemm_mixed(void* c, DType c_t, const native::Operand& a, const native::Operand& b, int M, int N, int K,
                bool accumulate, const float* bias);
// The same on one library, no choosing (tests, benchmarks): native (the widened sgemm where this build has no
// bf16 kernels), onednn (widened where oneDNN has no bf16 matmul for this CPU) or openblas (widened).
void gemm_mixed_on(GemmBackend lib, void* c, DType c_t, const native::Operand& a, const native::Operand& b, int M, int N,
                   int K, bool accumulate, const float* bias);
// Which kernels run them: "onednn" (AVX512_BF16 or AVX-512 kernels), "native" (kernels/gemm/native.h) or,
// on a CPU for which neither has a bf16 product (AVX2 only), "sgemm-widened": the operands widened to fp32
// (exact) and sgemm. --gemm (kernels/gemm/gemm.h) chooses between them where there is a choice: "auto" then.
const char* bf16_matmul_backend();
bool onednn_makes_bf16();  // oneDNN has a bf16 matmul for this CPU
// The same with C stored as c_t (F32 or BF16) and an fp32 bias(N) added (null: none).
void gemm_bf16(void* c, DType c_t, const Bf16Matrix& a, const Bf16Matrix& b, int M, int N, int K, bool accumulate,
               const float* bias);
// A bf16 copy of n floats in scratch buffer `slot` (0-2, reused by the next call with that slot).
// Scratch buffers and oneDNN primitives are the calling thread's own: lanes use them at once.
const unsigned short* to_bf16_scratch(int slot, const float* src, size_t n);
// The same for `cols` columns of `rows` rows ld floats apart, copied contiguous ((rows, cols)).
const unsigned short* to_bf16_scratch(int slot, const float* src, size_t rows, size_t cols, size_t ld);
// An fp32 copy of n values of type t in scratch buffer `slot` (0-2); t == F32 returns src itself.
const float* to_f32_scratch(int slot, const void* src, DType t, size_t n);

}  // namespace shardlm::kernels
