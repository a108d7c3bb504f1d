#include "shardlm/planner/hardware.h"

#include <algorithm>
#include <cctype>

#include "shardlm/core/check.h"
#include "shardlm/core/enum_names.h"

namespace shardlm::planner {

namespace {
constexpr EnumName<Precision> kPrecisionNames[] = {
    {Precision::Bf16, "bf16"}, {Precision::Fp16, "fp16"}, {Precision::Fp32, "fp32"}};
}  // namespace

std::string precision_name(Precision p) { return enum_name(kPrecisionNames, p); }
bool precision_from_name(const std::string& s, Precision* out) { return enum_from_name(kPrecisionNames, s, out); }

// Vendors' published figures (dense, i.e. without the 2:4 sparsity doubling of the datasheets'
// headline numbers):
//   A100 SXM4: NVIDIA A100 Tensor Core GPU datasheet: BF16/FP16 312 TFLOPS, TF32 156, FP32 19.5;
//     40 GB HBM2 at 1,555 GB/s or 80 GB HBM2e at 2,039 GB/s; NVLink 3 600 GB/s (both directions).
//     Network: DGX A100 datasheet, 8 x 200 Gb/s HDR InfiniBand per 8-GPU node = 25 GB/s per GPU.
//   H100 SXM5: NVIDIA H100 Tensor Core GPU datasheet: BF16/FP16 989 TFLOPS (1,979 with sparsity),
//     TF32 494.5, FP32 67; 80 GB HBM3 at 3.35 TB/s; NVLink 4 900 GB/s (both directions).
//     Network: DGX H100 datasheet, 8 x 400 Gb/s ConnectX-7 (NDR) per node = 50 GB/s per GPU.
//   H200 SXM: NVIDIA H200 product page/datasheet: compute as H100 SXM; 141 GB HBM3e at 4.8 TB/s;
//     NVLink 900 GB/s; DGX H200 networking as DGX H100 (8 x 400 Gb/s).
const std::vector<GpuSpec>& gpu_presets() {
    static const std::vector<GpuSpec> p = {
        // name         16-bit  TF32   FP32  HBM GB  HBM GB/s NVLink GB/s  net GB/s
        {"A100-40GB",     312,  156,  19.5,    40,    1555,     300,        25},
        {"A100-80GB",     312,  156,  19.5,    80,    2039,     300,        25},
        {"H100-SXM",      989,  494.5,  67,    80,    3350,     450,        50},
        {"H200",          989,  494.5,  67,   141,    4800,     450,        50},
    };
    return p;
}

const GpuSpec* gpu_preset(const std::string& name) {
    auto lower = [](std::string s) {
        for (auto& ch : s) ch = char(std::tolower(static_cast<unsigned char>(ch)));
        return s;
    };
    for (const auto& g : gpu_presets())
        if (lower(g.name) == lower(name)) return &g;
    return nullptr;
}

GpuSpec find_gpu(const std::string& name) {
    if (const GpuSpec* g = gpu_preset(name)) return *g;
    std::string names;
    for (const auto& g : gpu_presets()) names += (names.empty() ? "" : ", ") + g.name;
    fail("unknown GPU preset '", name, "'\n---> HINT: choose one of ", names,
         ", or describe the machine in a --cluster FILE.json");
}

Cluster make_cluster(const GpuSpec& gpu, int gpus_per_node, int nodes) {
    Cluster c;
    c.gpu = gpu;
    c.gpus_per_node = gpus_per_node;
    c.num_gpus = gpus_per_node * nodes;
    return c;
}

std::string check_cluster(const Cluster& c) {
    const GpuSpec& g = c.gpu;
    if (c.num_gpus <= 0) return cat("num_gpus must be > 0 (got ", c.num_gpus, ")");
    if (c.gpus_per_node <= 0) return cat("gpus_per_node must be > 0 (got ", c.gpus_per_node, ")");
    if (c.num_gpus > c.gpus_per_node && c.num_gpus % c.gpus_per_node != 0)
        return cat("num_gpus (", c.num_gpus, ") is not a whole number of nodes of ", c.gpus_per_node, " GPUs");
    for (auto [key, v] : {std::pair{"peak_tflops", g.peak_tflops}, {"memory_gb", g.memory_gb},
                          {"intra_node_GBps", g.intra_node_GBps}, {"inter_node_GBps", g.inter_node_GBps},
                          {"hbm_GBps", g.hbm_GBps}, {"peak_tflops_tf32", g.peak_tflops_tf32},
                          {"peak_tflops_fp32", g.peak_tflops_fp32}})
        if (!(v > 0)) return cat(key, " must be > 0 (got ", v, ")");
    const Efficiency& e = c.efficiency;
    if (!(e.gemm_max > 0 && e.gemm_max <= 1) || !(e.memory > 0 && e.memory <= 1) || !(e.gemm_half_dim >= 0))
        return "efficiency: gemm_max and memory must be in (0, 1], gemm_half_dim >= 0";
    if (c.intra_node_alpha_us < 0 || c.inter_node_alpha_us < 0 || c.reserve_gb < 0)
        return "latencies and reserve_gb must be >= 0";
    if (!(c.comm_overlap >= 0 && c.comm_overlap <= 1)) return cat("comm_overlap must be in [0, 1] (got ", c.comm_overlap, ")");
    return "";
}

double peak_flops(const Cluster& c, Precision p) {
    return 1e12 * (p == Precision::Fp32 ? c.gpu.peak_tflops_tf32 : c.gpu.peak_tflops);
}

double gemm_flops(const Cluster& c, Precision p, double min_dim) {
    const Efficiency& e = c.efficiency;
    return peak_flops(c, p) * e.gemm_max * min_dim / (min_dim + e.gemm_half_dim);
}

double hbm_bytes_per_s(const Cluster& c) { return c.gpu.hbm_GBps * 1e9 * c.efficiency.memory; }

bool fits_in_node(const Cluster& c, int span) {
    return c.num_gpus <= c.gpus_per_node || (span <= c.gpus_per_node && c.gpus_per_node % span == 0);
}

cost::Link group_link(const Cluster& c, int span) {
    if (fits_in_node(c, span)) return {c.intra_node_alpha_us * 1e-6, c.gpu.intra_node_GBps * 1e9};
    return {c.inter_node_alpha_us * 1e-6, c.gpu.inter_node_GBps * 1e9};
}

}  // namespace shardlm::planner
