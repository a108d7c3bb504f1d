// kernels/gemm.h: the engine's fp32 and bf16 GEMMs, each on the library that runs its shape fastest
// (docs/DESIGN.md, kernels/: "GEMM libraries, chosen by measurement", "The native GEMM").
//
// Three libraries can run every product: OpenBLAS (sgemm; for bf16 operands, widened to fp32 first:
// a bf16 x bf16 product is exact in fp32, so only the order of the fp32 sums differs), oneDNN (its fp32
// matmul; its bf16 matmul on AVX512_BF16 or AMX kernels) and shardlm's own kernels (kernels/gemm_native.h:
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

#include <functional>
#include <string>

#include "shardlm/core/enum_names.h"
#include "shardlm/kernels/gemm_native.h"

namespace shardlm::kernels {

enum class GemmBackend { Auto, OneDnn, OpenBlas, Native };
inline constexpr EnumName<GemmBackend> kGemmBackendNames[] = {{GemmBackend::Auto, "auto"},
                                                              {GemmBackend::OneDnn, "onednn"},
                                                              {GemmBackend::OpenBlas, "openblas"},
                                                              {GemmBackend::Native, "native"}};
constexpr const auto& enum_names(GemmBackend) { return kGemmBackendNames; }

// Process-wide; set before the first product (a run's setup). The library default is openblas (the
// kernel tests compare shapes to the bit); `shardlm train` defaults to auto.
void set_gemm_backend(GemmBackend b);
GemmBackend gemm_backend();

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

// Column blocks per CPU of the machine in a balanced product: 2, or SHARDLM_GEMM_BLOCKS (for measuring)
int gemm_blocks_per_cpu();

bool gemm_has_native_bf16();  // this build has native bf16 kernels (AVX512_BF16; the fp32 ones are in every build)

// ---- the product tap: every product the engine issues, as it enters this layer --------------------------
// Where a product entered: sgemm_balanced (fp32), sgemm_tile (fp32, one call on the calling thread), one of
// attention's tiles on a B packed into panels of nr columns (fp32, native::gemm_packed), gemm_mixed (bf16
// products; matmul.h).
enum class ProductPath { Balanced, Tile, Packed, Mixed };
struct ProductCall {
    ProductPath path = ProductPath::Balanced;
    int M = 0, N = 0, K = 0;
    native::Operand a{}, b{};  // op(A) (M x K) and op(B) (K x N) as the product reads them
    float alpha = 1, beta = 0;  // C = alpha op(A) op(B) + beta C (Mixed: alpha 1, beta 1 when it accumulates)
    void* c = nullptr;          // C: F32, or (Mixed) c_t, rows ldc elements apart
    DType c_t = DType::F32;
    long ldc = 0;
    const float* bias = nullptr;  // Mixed: an fp32 bias(N) added (null: none)
    int nr = 0;                   // Packed: the panels' width
};
// Called with each product before it runs, from the thread that runs it (lanes call it at once); empty:
// none (the default: one relaxed load per product). Set it while no product runs (tests/model's
// ProductLibraries records every product of a training step and replays it on each library).
using ProductTap = std::function<void(const ProductCall&)>;
void set_product_tap(ProductTap tap);
void tap_product(const ProductCall& call);  // the entry points' call (a no-op without a tap)

// ---- auto's choices ----------------------------------------------------------------------------------
// What a shape is known by (gemm_choice's key): "fp32 NT 1024x2304x768 ld 768,768,2304 openblas:SkylakeX
// onednn:2.6.3/avx512_core_bf16 native:6 blocks:2x2".
enum class GemmKind { Fp32, Bf16 };
// What auto measured of a shape: each library's best seconds (0: not run, e.g. a library this build or
// CPU does not have).
struct GemmTiming {
    double openblas = 0, onednn = 0, native = 0;
    std::string onednn_impl;  // oneDNN's name of the implementation it ran it on ("brg:avx512_core_bf16"; "": not timed)
};
// The choice a timing makes: the native kernels where timed (else OpenBLAS), unless another library is
// over 3 % faster (a short timing on a shared machine is noisy: a tie keeps the first).
GemmBackend gemm_choose(const GemmTiming& t);
// The library auto runs this product on: from this process's table, else the cache file, else timed
// now by `time` and recorded in both. Serialised across the machine's processes by a lock on the cache,
// so that one shape is timed once, alone. time must not choose again (it runs the libraries through
// sgemm_balanced_on, never sgemm_balanced): the lock is held while it runs.
GemmBackend gemm_choice(const std::string& key, const std::function<void(GemmTiming*)>& time);
// The timing of one library: a first run (oneDNN makes its primitive, pages are touched), then up to 3
// runs or 20 ms; the best run's seconds.
double gemm_time_best(const std::function<void()>& run);
// auto's timing of a shape: each library once (primitives made, pages touched), then in turn, 2 to 4
// rounds (until 40 ms are spent), so that a machine whose speed drifts slows them alike; the best of each
// (null: a library not timed).
// cold (when given) runs before each timed run: it drops the product's operands from the caches.
void gemm_time_each(const std::function<void()>& openblas, const std::function<void()>& onednn,
                    const std::function<void()>& native, GemmTiming* t, const std::function<void()>& cold = {});
// [p, p + bytes) written back and dropped from every cache level; the bytes an operand of rows x cols
// elements spans (element (r, c) at r * rs + c * cs); the rows x cols of x dropped so
void flush_from_caches(const void* p, size_t bytes);
size_t operand_span(long rows, long cols, long rs, long cs, size_t elem);
void flush_from_caches(const native::Operand& x, long rows, long cols);
// A product of more rows than this is timed on its first rows only (the rows of op(A) and C; the same
// N and K): its speed per row is the same, and the scratch C and the timing stay small when a long
// sequence makes M tens of thousands of rows.
int gemm_timing_rows();
// And a product whose timing's scratch C (rows x N floats) would pass gemm_timing_floats is timed on
// its first columns (at least `least`, a multiple of `step`): the vocabulary's products would
// otherwise add a transient of tens to hundreds of MB to a run's peak memory the first time a shape is met.
size_t gemm_timing_floats();
int gemm_timing_cols(int rows, int N, int step, int least);
// threads 0: not part of the key. The key ends with what else decides the speeds: OpenBLAS's kernels,
// oneDNN's version and effective ISA (a user's ONEDNN_MAX_CPU_ISA makes other keys), and the column blocks
// (per CPU x CPUs).
std::string gemm_key(GemmKind kind, char ta, char tb, int M, int N, int K, long lda, long ldb, long ldc, int threads,
                     const char* extra = "");

// The implementation of the last oneDNN primitive the calling thread ran ("brg:avx512_core_bf16", "" if none):
// what auto's timing records as the ISA a shape ran on. note_onednn_impl: the products' own call, with the
// primitive's name (it must outlive the next note: the primitive caches' entries do).
const std::string& onednn_last_impl();
void note_onednn_impl(const std::string* impl);

// The cache file: $SHARDLM_CACHE_DIR, else $XDG_CACHE_HOME/shardlm, else $HOME/.cache/shardlm, then
// gemm-<cpu model>-f<family>m<model>.json. Its "shapes" map holds each key's choice, every library's timing,
// "onednn_impl" (oneDNN's name for what it ran the shape on, "brg:avx512_core_bf16") and "isa": what the
// chosen library ran it on ("native avx512_bf16", oneDNN's name, "openblas SkylakeX").
std::string gemm_cache_path();
// "auto: 9 shapes, 1 on OpenBLAS, 3 on oneDNN, 5 native (4 timed now; cache ~/.cache/shardlm/gemm-...json)",
// or "openblas" / "onednn" / "native" when forced: for the end of a run.
std::string gemm_summary();
// The cache file as it stands: "PATH: 14 shapes, 2 on OpenBLAS, 5 on oneDNN, 7 native" or "PATH: none yet (...)".
std::string gemm_cache_report();
// Forget this process's table (tests: the next lookups read the cache file as a new process would).
void gemm_forget_choices();

}  // namespace shardlm::kernels
