// planner/hardware.h: GPU presets, clusters, and how fast a cluster computes and communicates.
//
// A cluster is num_gpus GPUs of one kind, gpus_per_node to a node. Ranks are numbered node by node,
// so a group of consecutive ranks that fits in a node talks over NVLink (intra_node_GBps) and any
// group spanning nodes is limited by the network (inter_node_GBps per GPU). Bandwidths are per GPU
// and one direction (NVLink's marketing figure counts both directions: A100 600 GB/s -> 300).
//
// Compute time = FLOPs / (peak x efficiency). The efficiency of a GEMM depends on its shape through
// its smallest dimension d (the head dimension for attention, h/t or the token count for the others):
//     efficiency(d) = gemm_max * d / (d + gemm_half_dim)
// a saturating curve: large GEMMs reach gemm_max of peak, thin ones (small d) much less (tile and
// wave quantisation, NVIDIA's "Matrix Multiplication Background" guide). Memory-bound work (norms,
// softmax, dropout, GELU, the optimiser) runs at hbm_GBps x memory_efficiency. The default constants
// are documented in docs/PLANNER.md, with the published run they were chosen against. Where a cluster
// file lists measured shapes (`shardlm calibrate` writes them), the curve is corrected near each of them:
// gemm_efficiency_at.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "shardlm/cost/comm.h"

namespace shardlm::planner {

// Fp8: Transformer Engine / torchao float8 style: the linear layers' GEMMs in FP8 (per-tensor scaled) at
// the GPU's FP8 peak; attention, the head, norms and activations in bf16; master weights and optimiser
// state as bf16 runs keep them.
enum class Precision { Bf16, Fp16, Fp32, Fp8 };
std::string precision_name(Precision p);  // "bf16" | "fp16" | "fp32" | "fp8"
bool precision_from_name(const std::string& s, Precision* out);

// One product measured: M x K times K x N, at `efficiency` of the peak of the precision it ran in.
struct MeasuredGemm {
    double M = 0, N = 0, K = 0, efficiency = 0;
};

// One GPU generation's achieved fractions of its datasheet peaks (docs/PLANNER.md: each preset's with
// its source). The defaults are the A100's.
struct Efficiency {
    double gemm_max = 0.66;       // fraction of peak a large GEMM reaches
    double gemm_half_dim = 32;    // smallest dimension at which a GEMM reaches half of gemm_max
    double memory = 0.80;         // fraction of HBM bandwidth memory-bound kernels reach
    double fp8_gemm_max = 0.55;   // fraction of the FP8 peak a large FP8 GEMM reaches (same curve)
    double flash = 0.60;          // fraction of the 16-bit peak a fused (flash) attention kernel reaches
    // the same two in PyTorch-style runs (policy framework "pytorch": FlashAttention-2 / SDPA kernels,
    // torchao's dynamically scaled float8 linears)
    double fp8_gemm_max_pytorch = 0.55, flash_pytorch = 0.60;
    double intra_link = 1.0;      // achieved fraction of intra_node_GBps (NCCL bus bandwidth / datasheet)
    double inter_link = 1.0;      // achieved fraction of inter_node_GBps
    // CPU ranks that run lanes (cost::runs_lanes): the GEMM curve of single-threaded products on every
    // thread at once, per rank (calibrate measures it); 0: the curve above serves every policy
    double lanes_gemm_max = 0, lanes_gemm_half_dim = 0;
    // Products measured at their shapes (cluster keys gemm_shapes, lanes_gemm_shapes; none on the GPU
    // presets): what the curve cannot say from the smallest dimension alone, such as a long vocabulary
    // side whose operand streams from memory. Shared: a search copies the cluster for every policy.
    std::shared_ptr<const std::vector<MeasuredGemm>> gemm_shapes, lanes_gemm_shapes;
};

struct GpuSpec {
    std::string name;
    double peak_tflops = 0;       // dense bf16/fp16 tensor-core peak
    double peak_tflops_tf32 = 0;  // dense TF32 (fp32 training runs its matmuls as TF32)
    double peak_tflops_fp32 = 0;  // plain fp32 (CUDA cores)
    double peak_tflops_fp8 = 0;   // dense FP8 tensor-core peak; 0: the GPU has no FP8 (A100)
    double memory_gb = 0;         // HBM, 1e9 bytes
    double hbm_GBps = 0;          // HBM bandwidth
    double intra_node_GBps = 0;   // NVLink per GPU, one direction
    double inter_node_GBps = 0;   // network per GPU, one direction
    Efficiency efficiency;        // this generation's constants (make_cluster copies them)
};
const std::vector<GpuSpec>& gpu_presets();
// Case-insensitive; nullptr if unknown.
const GpuSpec* gpu_preset(const std::string& name);
// Case-insensitive; throws with the list of presets if unknown.
GpuSpec find_gpu(const std::string& name);

struct Cluster {
    GpuSpec gpu;
    int num_gpus = 0;
    int gpus_per_node = 0;
    double intra_node_alpha_us = 2;  // latency per ring step (NCCL over NVLink)
    double inter_node_alpha_us = 6;  // latency per ring step (over InfiniBand)
    double reserve_gb = 1.0;         // per GPU: CUDA context, library workspaces (counted in buffers)
    // The fraction of overlappable (DP/ZeRO, CP) communication that really hides behind compute: 1 on
    // GPUs (copy engines, NVLink/NIC DMA); measured by `calibrate` on CPUs, where communication needs
    // the same cores (0 when ranks outnumber them).
    double comm_overlap = 1.0;
    // The framework's caching allocator: it reserves this fraction more than the tensors it holds at
    // the peak (reserved over allocated; docs/PLANNER.md: fitted to the published peaks, per framework
    // style: Megatron-style runs and PyTorch-style ones apart); 0 for this engine's CPU runs (calibrate
    // measures resident memory).
    double allocator_overhead = 0, allocator_overhead_pytorch = 0;
    int threads_per_rank = 0;  // CPU ranks (calibrate): their threads, for the lanes rule; 0 on GPUs
    // How much faster a rank computes while the other ranks idle than while they compute too (ranks that
    // share a CPU's cores and caches; calibrate measures it; 1: GPUs, which share nothing). The constants
    // above are measured with every rank computing: a pipeline's slow stage computes alone part of the time.
    // Measured with one rank busy; a stage of several ranks gets it in proportion to the ranks left idle.
    double alone_speedup = 1.0;
    Efficiency efficiency;
    int nodes() const { return gpus_per_node > 0 ? (num_gpus + gpus_per_node - 1) / gpus_per_node : 0; }
};
// The GPU presets' allocator_overhead and allocator_overhead_pytorch (PyTorch's caching allocator,
// reserved over allocated at the peak): fitted on the fit cases' published memory figures of each
// framework style (hardware.cpp).
inline constexpr double kGpuAllocatorOverhead = 0.11, kGpuAllocatorOverheadPytorch = 0.12;
// The most GPUs a cluster may have (ten million: far beyond any built, far below int's range).
inline constexpr int kMaxGpus = 10'000'000;
Cluster make_cluster(const GpuSpec& gpu, int gpus_per_node, int nodes);
// "ampere" (A100 presets) or "hopper" (H100, H200, and any other GPU): the generations whose constants
// are fitted apart (validation.h) and whose Megatron differs (policy.h default_framework).
std::string generation(const Cluster& c);
// Empty if usable, else what is wrong.
std::string check_cluster(const Cluster& c);

// FLOP/s of one GPU in that precision (fp8: its FP8 peak; fp32: TF32). MFU divides by it.
double peak_flops(const Cluster& c, Precision p);
// Achieved FLOP/s of a GEMM with that smallest dimension (fp8: the linear layers' FP8 GEMMs; lanes:
// the ranks' threads each run whole sequences single-threaded, the lanes curve where measured).
double gemm_flops(const Cluster& c, Precision p, double min_dim, bool lanes = false, bool pytorch = false);
// The fraction of peak an M x K by K x N product reaches: the curve at its smallest dimension, times the
// measured shapes' ratio to the curve, their logarithms averaged with modified Shepard weights that vanish
// at d = ln 4 (d the distance in log M, log N, log K) beside the curve's own ratio of 1: at a measured shape
// its measurement, among them a blend, farther than a factor of 4 from all of them the curve.
double gemm_efficiency_at(const Cluster& c, Precision p, double M, double N, double K, bool lanes = false,
                          bool pytorch = false);
// The 16-bit (or fp32) precision the rest of the step runs in: bf16 for fp8, else p.
Precision compute_precision(Precision p);
double hbm_bytes_per_s(const Cluster& c);                    // achieved, memory-bound kernels
// The link a group uses whose members lie within `span` consecutive ranks (span <= gpus_per_node:
// NVLink; otherwise the network).
cost::Link group_link(const Cluster& c, int span);
bool fits_in_node(const Cluster& c, int span);

}  // namespace shardlm::planner
