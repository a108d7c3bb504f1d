// kernels/machine.h: what this machine is and what runs on it, for the run header and `shardlm
// doctor`: the CPU and its instruction sets, its peaks measured now per instruction set (the FMA,
// VDPBF16PS and AMX TDPBF16PS loops of kernels/peak_loops.h, a fraction of a second), the GEMM backends
// and the kernels they run per precision (OpenBLAS's core for fp32, oneDNN's ISA for bf16, as a user's
// ONEDNN_MAX_CPU_ISA leaves it), and the traps in the environment that slow a run down.
//
// A product's share of the peak is against the peak of the instruction set it ran on (product_isa): a bf16
// product oneDNN runs on AMX tiles against AMX's, one on AVX512_BF16 against VDPBF16PS's, one widened to fp32
// against the FMA peak.
#pragma once
#include <set>
#include <string>
#include <vector>

#include "shardlm/kernels/gemm/gemm.h"
#include "shardlm/platform/cpu.h"
#include "shardlm/platform/peaks.h"

namespace shardlm::kernels {

using platform::ProductIsa;


// What `lib` (not auto) runs products of `kind` on here: oneDNN's effective ISA (ONEDNN_MAX_CPU_ISA
// respected), the native kernels' AVX512_BF16 tiles where the build has them, else the fp32 FMA (bf16 widened).
ProductIsa product_isa(GemmBackend lib, GemmKind kind);
// The best a run's bf16 products reach under --gemm `gemm` (auto: the best library here).
ProductIsa bf16_products_isa(GemmBackend gemm);

struct MachineInfo {
    std::string cpu;           // /proc/cpuinfo's model name
    std::string isa;           // "avx512f avx512_bf16 amx_bf16" ... the ones that matter here
    int cpus_online = 0;       // CPUs the machine has online
    int cpus_allowed = 0;      // CPUs this process may run on (its affinity mask)
    bool has_avx512 = false, has_bf16_dot = false;
    bool has_amx = false;  // AMX-BF16 tiles usable by this process (peak_loops.h: has_amx_bf16)
    std::string amx_unavailable;  // why not, where the CPU lists amx_bf16
    // all `threads` threads, measured (0: not measured, or no such instruction set)
    double fp32_peak_gflops = 0, bf16_peak_gflops = 0, amx_peak_gflops = 0;
    double peak(ProductIsa isa) const { return platform::isa_peak(isa, fp32_peak_gflops, bf16_peak_gflops, amx_peak_gflops); }
    double fp32_gemm_gflops = 0;  // a 1024^3 product on the engine's path, on sgemm_library(gemm) (0: not measured)
    std::string openblas_core;          // the kernels OpenBLAS runs (openblas_get_corename)
    std::string openblas_coretype_env;  // OPENBLAS_CORETYPE as set ("" if not)
    bool coretype_ours = false;         // shardlm set it (main's re-exec), not the user
    std::string onednn_isa;             // the ISA oneDNN's bf16 matmuls use
    std::string onednn_max_isa;         // ONEDNN_MAX_CPU_ISA as the user set it ("" if not)
    GemmBackend gemm = GemmBackend::OpenBlas;  // --gemm (kernels/gemm/gemm.h) as set when asked
    bool onednn_bf16 = false;                  // oneDNN makes bf16 matmuls here (else they are widened)
};

// seconds: the time the peak loops take (0: skip them); gemm: also time one sgemm.
MachineInfo machine_info(int threads, double seconds, bool gemm = false);
// The library that product is timed on: oneDNN with --gemm onednn; the native kernels with native, or
// with auto where the build has them (auto's first choice); else OpenBLAS.
GemmBackend sgemm_library(GemmBackend gemm);

// "Intel(R) Xeon(R) Processor, 2 CPUs (avx512f avx512_bf16 amx_bf16) | peaks fp32 230 GFLOP/s, bf16 dot 115,
// AMX 3700 (2 threads, measured) | GEMMs: fp32 OpenBLAS SkylakeX kernels, bf16 oneDNN avx512_core_amx" (with
// ONEDNN_MAX_CPU_ISA set: "oneDNN avx512_core_bf16 (ONEDNN_MAX_CPU_ISA=AVX512_CORE_BF16)"; --gemm
// openblas: "bf16 widened to fp32 on OpenBLAS"; onednn: "fp32 oneDNN ..."; native: "fp32 native AVX-512
// kernels, bf16 native AVX512_BF16 kernels"; auto: "auto per shape: fp32 native AVX-512 kernels, OpenBLAS
// SkylakeX kernels or oneDNN avx512_core_amx, bf16 native AVX512_BF16 kernels, oneDNN avx512_core_amx or
// widened to fp32 on OpenBLAS", without the native bf16 kernels where the build has none; "native AVX2
// kernels" on a build without AVX-512)
std::string describe(const MachineInfo& m, int threads);

// The traps this process's environment sets for the kernels, one sentence each with its fix: an
// OPENBLAS_CORETYPE that picks weaker kernels than the CPU has, OMP_* settings that fight the
// engine's threading, more threads than CPUs, more ranks x threads on the node than CPUs
// (ranks_on_node: OMPI_COMM_WORLD_LOCAL_SIZE, or 1). One line each: "what -- fix: what to do".
// bf16: also say what a missing AVX512_BF16 costs (the run header leaves it to the bf16 runs).
std::vector<std::string> findings(const MachineInfo& m, int threads, int ranks_on_node, bool bf16 = true);

}  // namespace shardlm::kernels
