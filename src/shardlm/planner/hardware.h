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
// are documented in docs/PLANNER.md, with the published run they were chosen against.
#pragma once
#include <string>
#include <vector>

#include "shardlm/cost/comm.h"

namespace shardlm::planner {

enum class Precision { Bf16, Fp16, Fp32 };
std::string precision_name(Precision p);  // "bf16" | "fp16" | "fp32"
bool precision_from_name(const std::string& s, Precision* out);

struct Efficiency {
    double gemm_max = 0.66;       // fraction of peak a large GEMM reaches
    double gemm_half_dim = 32;    // smallest dimension at which a GEMM reaches half of gemm_max
    double memory = 0.80;         // fraction of HBM bandwidth memory-bound kernels reach
};

struct GpuSpec {
    std::string name;
    double peak_tflops = 0;       // dense bf16/fp16 tensor-core peak
    double peak_tflops_tf32 = 0;  // dense TF32 (fp32 training runs its matmuls as TF32)
    double peak_tflops_fp32 = 0;  // plain fp32 (CUDA cores)
    double memory_gb = 0;         // HBM, 1e9 bytes
    double hbm_GBps = 0;          // HBM bandwidth
    double intra_node_GBps = 0;   // NVLink per GPU, one direction
    double inter_node_GBps = 0;   // network per GPU, one direction
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
    Efficiency efficiency;
    int nodes() const { return gpus_per_node > 0 ? (num_gpus + gpus_per_node - 1) / gpus_per_node : 0; }
};
Cluster make_cluster(const GpuSpec& gpu, int gpus_per_node, int nodes);
// Empty if usable, else what is wrong.
std::string check_cluster(const Cluster& c);

double peak_flops(const Cluster& c, Precision p);           // FLOP/s of one GPU
double gemm_flops(const Cluster& c, Precision p, double min_dim);  // achieved FLOP/s for that shape
double hbm_bytes_per_s(const Cluster& c);                    // achieved, memory-bound kernels
// The link a group uses whose members lie within `span` consecutive ranks (span <= gpus_per_node:
// NVLink; otherwise the network).
cost::Link group_link(const Cluster& c, int span);
bool fits_in_node(const Cluster& c, int span);

}  // namespace shardlm::planner
