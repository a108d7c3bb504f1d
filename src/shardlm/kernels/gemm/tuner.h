// kernels/gemm/tuner.h: --gemm auto's choices: each shape timed once on every library, the fastest
// kept in this process's table and in a cache file per CPU model (platform/cpu.h), which `shardlm
// doctor`, `shardlm calibrate` and the benchmarks read.
#pragma once
#include <functional>
#include <string>

#include "shardlm/kernels/gemm/native.h"
#include "shardlm/kernels/gemm/backend.h"

namespace shardlm::kernels {

// What a shape is known by (gemm_choice's key): "fp32 NT 1024x2304x768 ld 768,768,2304 openblas:SkylakeX
// onednn:2.6.3/avx512_core_bf16 native:6 blocks:2x2".
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

// Products whose rows follow the data (a mixture of experts' products over the tokens each expert was
// sent): while one is alive on a thread, gemm_key rounds that thread's M and K up to a power of two and
// marks the key "ragged", so that auto times one shape per size class instead of one per token count.
// Nor does auto time oneDNN for them (gemm_onednn_candidate): oneDNN builds and keeps a primitive, JIT code
// included, for every exact shape it runs, and over the token counts of a long run that cache would grow
// by hundreds of MB; the native kernels and OpenBLAS keep nothing per shape.
class RaggedGemmScope {
public:
    RaggedGemmScope();
    ~RaggedGemmScope();
    RaggedGemmScope(const RaggedGemmScope&) = delete;
    RaggedGemmScope& operator=(const RaggedGemmScope&) = delete;

private:
    bool outer_;
};
// Whether auto may run this thread's next product on oneDNN (not inside a RaggedGemmScope).
bool gemm_onednn_candidate();

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
// The cache file as it stands: "PATH: 14 shapes, 2 on OpenBLAS, 5 on oneDNN, 7 native" or "PATH: none yet (...)".
std::string gemm_cache_report();
// Forget this process's table (tests: the next lookups read the cache file as a new process would).
void gemm_forget_choices();

}  // namespace shardlm::kernels
