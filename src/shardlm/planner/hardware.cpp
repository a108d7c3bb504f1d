#include "shardlm/planner/hardware.h"

#include <algorithm>
#include <cmath>
#include <cctype>

#include "shardlm/core/check.h"
#include "shardlm/core/enum_names.h"

namespace shardlm::planner {

namespace {
constexpr EnumName<Precision> kPrecisionNames[] = {
    {Precision::Bf16, "bf16"}, {Precision::Fp16, "fp16"}, {Precision::Fp32, "fp32"}, {Precision::Fp8, "fp8"}};
}  // namespace

std::string precision_name(Precision p) { return enum_name(kPrecisionNames, p); }
bool precision_from_name(const std::string& s, Precision* out) { return enum_from_name(kPrecisionNames, s, out); }

// Vendors' published figures (dense, i.e. without the 2:4 sparsity doubling of the datasheets'
// headline numbers):
//   A100 SXM4: NVIDIA A100 Tensor Core GPU datasheet: BF16/FP16 312 TFLOPS, TF32 156, FP32 19.5;
//     40 GB HBM2 at 1,555 GB/s or 80 GB HBM2e at 2,039 GB/s; NVLink 3 600 GB/s (both directions).
//     Network: DGX A100 datasheet, 8 x 200 Gb/s HDR InfiniBand per 8-GPU node = 25 GB/s per GPU.
//   H100 SXM5: NVIDIA H100 Tensor Core GPU datasheet: BF16/FP16 989 TFLOPS (1,979 with sparsity),
//     FP8 1,979 (3,958 with sparsity), TF32 494.5, FP32 67; 80 GB HBM3 at 3.35 TB/s; NVLink 4 900 GB/s
//     (both directions).
//     Network: DGX H100 datasheet, 8 x 400 Gb/s ConnectX-7 (NDR) per node = 50 GB/s per GPU.
//   H200 SXM: NVIDIA H200 product page/datasheet: compute as H100 SXM; 141 GB HBM3e at 4.8 TB/s;
//     NVLink 900 GB/s; DGX H200 networking as DGX H100 (8 x 400 Gb/s).
// A100 has no FP8 tensor cores (peak_tflops_fp8 0: precision fp8 is refused).
//
// Each generation's efficiency constants (Efficiency; docs/PLANNER.md "Per-generation constants"):
//   links (sources): the bus bandwidth NCCL reaches over the datasheet's line rate. NVLink: NCCL's
//     maintainer (NVIDIA/nccl-tests#212, 2024-05-06): "450GB/s is the line rate. With the protocol
//     overhead (~20%) NCCL can get an effective NVLink bandwidth of 370GB/s" (H100/H200: 0.82); A100
//     rings reach ~230 of 300 GB/s (nccl-tests#149, #178: busbw 200-230 GB/s; 0.77). Network: the same
//     ~20 % protocol overhead on the NICs' line rate (0.80, both generations).
//   flash attention, Megatron-style runs (source): the fused kernel's share of the 16-bit peak, forward
//     and backward: A100 0.60 (FlashAttention-2, Dao 2023: "50-73% of the theoretical maximum FLOPs/s
//     on A100"); H100 0.60 (FlashAttention-3 / cuDNN, Shah et al. 2024: up to 75 % forward, the
//     backward lower).
//   fitted on the "fit" cases of tests/planner/published_runs.json only (bench/fit_planner.cpp --fit;
//     planner::fit_constants; the test checks these equal its output): gemm_max, gemm_half_dim,
//     flash_pytorch (PyTorch-style runs' FlashAttention-2/Triton/SDPA kernels: A100 0.47, H100 0.18),
//     fp8_gemm_max (Transformer Engine) and fp8_gemm_max_pytorch (torchao float8), and the allocator's
//     overhead per framework style (kGpuAllocatorOverhead, kGpuAllocatorOverheadPytorch). The held-out
//     cases' error is in docs/PLANNER.md. memory 0.8: Megatron-LM's table (docs/PLANNER.md).
const std::vector<GpuSpec>& gpu_presets() {
    // gemm_max, gemm_half_dim, memory, fp8_gemm_max, flash, fp8_gemm_max_pytorch, flash_pytorch,
    // intra_link, inter_link
    const Efficiency ampere{0.64, 16, 0.80, 0.0, 0.60, 0.0, 0.47, 0.77, 0.80, 0, 0, {}, {}};
    const Efficiency hopper{0.55, 256, 0.80, 0.65, 0.60, 0.61, 0.18, 0.82, 0.80, 0, 0, {}, {}};
    static const std::vector<GpuSpec> p = {
        // name         16-bit  TF32   FP32   FP8  HBM GB  HBM GB/s NVLink GB/s  net GB/s
        {"A100-40GB",     312,  156,  19.5,     0,    40,    1555,     300,        25, ampere},
        {"A100-80GB",     312,  156,  19.5,     0,    80,    2039,     300,        25, ampere},
        {"H100-SXM",      989,  494.5,  67,  1979,    80,    3350,     450,        50, hopper},
        {"H200",          989,  494.5,  67,  1979,   141,    4800,     450,        50, hopper},
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

std::string generation(const Cluster& c) { return c.gpu.name.rfind("A100", 0) == 0 ? "ampere" : "hopper"; }

Cluster make_cluster(const GpuSpec& gpu, int gpus_per_node, int nodes) {
    Cluster c;
    c.gpu = gpu;
    c.efficiency = gpu.efficiency;
    c.allocator_overhead = kGpuAllocatorOverhead, c.allocator_overhead_pytorch = kGpuAllocatorOverheadPytorch;
    c.gpus_per_node = gpus_per_node;
    c.num_gpus = gpus_per_node * nodes;
    return c;
}

std::string check_cluster(const Cluster& c) {
    const GpuSpec& g = c.gpu;
    if (c.num_gpus <= 0) return cat("num_gpus must be > 0 (got ", c.num_gpus, ")");
    if (c.gpus_per_node <= 0) return cat("gpus_per_node must be > 0 (got ", c.gpus_per_node, ")");
    if (c.num_gpus % c.gpus_per_node != 0)
        return cat("num_gpus (", c.num_gpus, ") is not a whole number of nodes of ", c.gpus_per_node, " GPUs",
                   c.num_gpus < c.gpus_per_node ? cat(" (for one node of ", c.num_gpus, ", say gpus_per_node ", c.num_gpus, ")")
                                                : std::string());
    if (c.num_gpus > kMaxGpus) return cat("num_gpus (", c.num_gpus, ") is above the planner's ", kMaxGpus, " GPUs");
    for (auto [key, v] : {std::pair{"peak_tflops", g.peak_tflops}, {"memory_gb", g.memory_gb},
                          {"intra_node_GBps", g.intra_node_GBps}, {"inter_node_GBps", g.inter_node_GBps},
                          {"hbm_GBps", g.hbm_GBps}, {"peak_tflops_tf32", g.peak_tflops_tf32},
                          {"peak_tflops_fp32", g.peak_tflops_fp32}})
        if (!(v >= 1e-3 && v <= 1e6))  // no device is outside these (a PFLOP/s, a PB, a PB/s: 1e3 to 1e6 times today's)
            return cat(key, " must be in [0.001, 1e6] (got ", v, ")");
    const Efficiency& e = c.efficiency;
    if (!(e.gemm_max > 0 && e.gemm_max <= 1) || !(e.memory > 0 && e.memory <= 1) || !(e.gemm_half_dim >= 0))
        return "efficiency: gemm_max and memory must be in (0, 1], gemm_half_dim >= 0";
    for (auto [key, v] : {std::pair{"flash_efficiency", e.flash}, {"flash_efficiency_pytorch", e.flash_pytorch},
                          {"intra_node_link_efficiency", e.intra_link},
                          {"inter_node_link_efficiency", e.inter_link}})
        if (!(v > 0 && v <= 1)) return cat(key, " must be in (0, 1] (got ", v, ")");
    if (!(e.lanes_gemm_max >= 0 && e.lanes_gemm_max <= 1) || !(e.lanes_gemm_half_dim >= 0))
        return "lanes_gemm_max must be in [0, 1], lanes_gemm_half_dim >= 0";
    if (c.threads_per_rank < 0) return cat("threads_per_rank must be >= 0 (got ", c.threads_per_rank, ")");
    if (!(c.alone_speedup >= 1 && c.alone_speedup <= 4))
        return cat("alone_speedup must be in [1, 4] (got ", c.alone_speedup, "; 1: ranks that share nothing)");
    for (auto [key, v] : {std::pair{"allocator_overhead", c.allocator_overhead},
                          {"allocator_overhead_pytorch", c.allocator_overhead_pytorch}})
        if (!(v >= 0 && v < 1)) return cat(key, " must be in [0, 1) (got ", v, ")");
    if (!(g.peak_tflops_fp8 >= 0)) return cat("peak_tflops_fp8 must be >= 0 (got ", g.peak_tflops_fp8, ")");
    if (g.peak_tflops_fp8 > 0 && !(e.fp8_gemm_max > 0 && e.fp8_gemm_max <= 1 && e.fp8_gemm_max_pytorch > 0 &&
                                   e.fp8_gemm_max_pytorch <= 1))
        return cat("fp8_gemm_max and fp8_gemm_max_pytorch must be in (0, 1] (got ", e.fp8_gemm_max, ", ",
                   e.fp8_gemm_max_pytorch, ")");
    if (c.intra_node_alpha_us < 0 || c.inter_node_alpha_us < 0 || c.reserve_gb < 0)
        return "latencies and reserve_gb must be >= 0";
    if (!(c.comm_overlap >= 0 && c.comm_overlap <= 1)) return cat("comm_overlap must be in [0, 1] (got ", c.comm_overlap, ")");
    return "";
}

double peak_flops(const Cluster& c, Precision p) {
    switch (p) {
        case Precision::Fp32: return 1e12 * c.gpu.peak_tflops_tf32;
        case Precision::Fp8: return 1e12 * c.gpu.peak_tflops_fp8;
        default: return 1e12 * c.gpu.peak_tflops;
    }
}

Precision compute_precision(Precision p) { return p == Precision::Fp8 ? Precision::Bf16 : p; }

double gemm_flops(const Cluster& c, Precision p, double min_dim, bool lanes, bool pytorch) {
    const Efficiency& e = c.efficiency;
    if (lanes && e.lanes_gemm_max > 0)
        return peak_flops(c, p) * e.lanes_gemm_max * min_dim / (min_dim + e.lanes_gemm_half_dim);
    const double top = p == Precision::Fp8 ? (pytorch ? e.fp8_gemm_max_pytorch : e.fp8_gemm_max) : e.gemm_max;
    return peak_flops(c, p) * top * min_dim / (min_dim + e.gemm_half_dim);
}

double gemm_efficiency_at(const Cluster& c, Precision p, double M, double N, double K, bool lanes, bool pytorch) {
    const auto curve = [&](double m, double n, double k) {
        return gemm_flops(c, p, std::min({m, n, k}), lanes, pytorch) / peak_flops(c, p);
    };
    const double at = curve(M, N, K);
    const Efficiency& e = c.efficiency;
    const auto& shapes = lanes && e.lanes_gemm_max > 0 ? e.lanes_gemm_shapes : e.gemm_shapes;
    if (!shapes || shapes->empty() || p == Precision::Fp8) return at;
    // Franke and Nielson's modified Shepard weights ((R - d)+ / (R d))^2, R = ln 4: a measured shape counts
    // only within a factor of 4 along the diagonal; the curve weighs 1 / R^2, as much as one at R / 2
    const double R = std::log(4.0);
    double weights = 1 / (R * R), sum = 0;
    for (const MeasuredGemm& g : *shapes) {
        const double d =
            std::sqrt(std::pow(std::log(M / g.M), 2) + std::pow(std::log(N / g.N), 2) + std::pow(std::log(K / g.K), 2));
        const double ratio = std::log(g.efficiency / curve(g.M, g.N, g.K));
        if (d < 1e-6) return std::min(1.0, at * std::exp(ratio));
        if (d >= R) continue;
        const double w = std::pow((R - d) / (R * d), 2);
        weights += w, sum += w * ratio;
    }
    return std::min(1.0, at * std::exp(sum / weights));
}

double hbm_bytes_per_s(const Cluster& c) { return c.gpu.hbm_GBps * 1e9 * c.efficiency.memory; }

bool fits_in_node(const Cluster& c, int span) {
    return c.num_gpus <= c.gpus_per_node || (span <= c.gpus_per_node && c.gpus_per_node % span == 0);
}

cost::Link group_link(const Cluster& c, int span) {
    const Efficiency& e = c.efficiency;
    if (fits_in_node(c, span)) return {c.intra_node_alpha_us * 1e-6, c.gpu.intra_node_GBps * 1e9 * e.intra_link};
    return {c.inter_node_alpha_us * 1e-6, c.gpu.inter_node_GBps * 1e9 * e.inter_link};
}

}  // namespace shardlm::planner
