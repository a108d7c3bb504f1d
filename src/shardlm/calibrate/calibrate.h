// calibrate/calibrate.h: measure this machine as the engine will use it and describe it as a planner
// cluster (planner/hardware.h), so that `shardlm plan --cluster FILE` predicts the engine's own runs.
//
// Run under `mpirun -np N` with the threads per rank of the runs to predict: every measurement runs
// on all ranks at once, so ranks that share cores see the share they will get in training. A "GPU" of
// the cluster is one rank; all ranks are on one node (gpus_per_node = N; the network constants are
// set equal to the node's, since nothing across nodes was measured).
//
// What is measured, and which cluster key it becomes:
//   peaks        our FMA loop (fp32) and VDPBF16PS loop (bf16, if the CPU has AVX512_BF16) on every
//                thread: peak_tflops (16-bit) and peak_tflops_tf32 = peak_tflops_fp32 (fp32)
//   GEMMs        the engine's matmul forward + backward (kernels/gemm/gemm.h, 6 M N K FLOPs) over a grid
//                of shapes in the precision asked for; gemm_max and gemm_half_dim are the least-squares
//                fit (in log space) of the planner's curve gemm_max d / (d + gemm_half_dim) against
//                the smallest dimension d; with more than one thread per rank, the same shapes as lanes
//                run them (every thread a single-threaded product of its share of the rows, at once):
//                lanes_gemm_max, lanes_gemm_half_dim, used for policies that run lanes (cost::runs_lanes)
//   memory       a STREAM triad: hbm_GBps; the engine's memory-bound kernels (LayerNorm, GELU, fused
//                cross-entropy, AdamW; bytes read + written): memory_efficiency = their rate / triad
//   links        the engine's ring collectives (comm/group.h: all-reduce, reduce-scatter, all-gather,
//                send/recv) over 64 KiB - 16 MiB: intra_node_alpha_us and intra_node_GBps are the
//                least-squares fit of t = steps alpha + bytes per rank / beta (cost/comm.h's formulas)
//   overlap      compute alone, an 8 MiB background all-reduce alone (the engine's comm thread), both
//                at once: comm_overlap = (t_compute + t_comm - t_both) / t_comm, clamped to [0, 1]
//   latency      under load: GEMMs with a small all-reduce between them against the GEMMs alone; the
//                extra time per all-reduce / its ring steps, if above the fitted alpha, becomes alpha
//                (ranks that outnumber the cores wait for a descheduled peer: the scheduler's slice)
//   reserve      this process's resident memory at the end, every buffer freed (MPI's shared segments
//                used, OpenMP's threads and the BLAS's buffers up): reserve_gb
//   memory_gb    the machine's MemTotal shared by the ranks
#pragma once
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "shardlm/comm/group.h"
#include "shardlm/planner/hardware.h"

namespace shardlm::calibrate {

struct Options {
    int threads = 0;                                         // per rank; 0: the OpenMP default
    planner::Precision precision = planner::Precision::Fp32;  // the matmuls the GEMM curve is fitted to
    double min_seconds = 0.05;                               // per timed point (repeated until this long)
};

struct GemmPoint {
    int M = 0, N = 0, K = 0;  // tokens, output features, input features
    double gflops = 0;        // forward + backward, per rank
};

struct CommPoint {
    std::string op;
    double bytes = 0;           // the buffer (cost/comm.h convention)
    double seconds = 0;         // median, slowest rank
    double fitted_seconds = 0;  // the alpha-beta fit's
};

struct MemoryPoint {
    std::string kernel;
    double bytes = 0, seconds = 0;
};

struct Calibration {
    int ranks = 1, threads = 1;
    planner::Precision precision = planner::Precision::Fp32;
    // per rank, all its threads: the fp32 FMA, AVX512_BF16 dot product and AMX tile peaks (0: no such ISA;
    // bf16 then stands at the fp32 peak), and the peak of the ISA the bf16 products run on under this --gemm
    // (kernels/machine.h: bf16_products_isa), which the bf16 GEMM curve and the planner's 16-bit peak use
    double fp32_peak_gflops = 0, bf16_peak_gflops = 0, amx_peak_gflops = 0, bf16_products_peak_gflops = 0;
    std::string bf16_products_isa;  // "AMX", "AVX512_BF16" or "fp32 FMA"
    std::vector<GemmPoint> gemm;
    double gemm_max = 0, gemm_half_dim = 0, gemm_fit_rms = 0;  // rms of the relative error
    // threads > 1: the same shapes as lanes run them (single-threaded products on every thread at once)
    std::vector<GemmPoint> lanes_gemm;
    double lanes_gemm_max = 0, lanes_gemm_half_dim = 0, lanes_gemm_fit_rms = 0;
    double triad_GBps = 0;
    std::vector<MemoryPoint> memory;
    double memory_bound_GBps = 0;
    std::vector<CommPoint> comm;
    double alpha_us = 0, link_GBps = 0;
    double idle_alpha_us = 0, loaded_alpha_us = 0;  // the fit's, and the one measured under load
    double overlap = 1;                             // comm_overlap
    // more than one rank: how much faster rank 0's products run while the others idle (alone_speedup), and
    // the shapes it was measured on, timed alone
    double alone_speedup = 1;
    std::vector<GemmPoint> alone_gemm;
    int cpus = 0;                                   // CPUs this rank may run on (its affinity mask)
    double reserve_gb = 0, memory_gb = 0;
};

// The fits, exposed for tests. fit_gemm_curve sets gemm_max, gemm_half_dim and gemm_fit_rms from
// c.gemm against peak_gflops; fit_links sets alpha_us, link_GBps and each point's fitted_seconds from
// c.comm over c.ranks ranks.
void fit_gemm_curve(Calibration& c, double peak_gflops);
void fit_links(Calibration& c);

// Collective over `world`: every rank must call it. The results are rank 0's view (slowest rank for
// timings).
Calibration run(comm::Group& world, const Options& o);

planner::Cluster to_cluster(const Calibration& c);
// The cluster file (planner/plan_io.h's keys) plus "measured": the points behind the constants.
nlohmann::json to_json(const Calibration& c);
// A few lines for people: the constants and the fit quality.
std::string summary(const Calibration& c);

}  // namespace shardlm::calibrate
