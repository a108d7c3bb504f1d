#include "shardlm/kernels/machine.h"

#include <cblas.h>
#include <omp.h>
#include <sched.h>
#include <unistd.h>

#include <oneapi/dnnl/dnnl.h>

#include <algorithm>
#include <chrono>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <set>
#include <sstream>
#include <vector>

#include "shardlm/core/check.h"
#include "shardlm/core/runtime.h"
#include "shardlm/kernels/gemm/gemm.h"
#include "shardlm/kernels/gemm/tuner.h"
#include "shardlm/platform/cpu.h"
#include "shardlm/platform/peak_loops.h"
#include "shardlm/platform/peaks.h"

namespace shardlm::kernels {

using namespace platform;  // the CPU, its peaks and the loops that measure them

namespace {

// The engine's fp32 product (column blocks on the threads) on one library.
double measure_sgemm(int threads, GemmBackend on) {
    const int n = 1024;
    std::vector<float> a(size_t(n) * n, 0.5f), b(size_t(n) * n, 0.25f), c(size_t(n) * n);
    omp_set_num_threads(threads);
    const double best = gemm_time_best([&] {
        sgemm_balanced_on(on, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, a.data(), n, b.data(), n, 0.0f, c.data(), n);
    });
    return 2.0 * n * n * n / best / 1e9;
}

std::string lower(std::string s) {
    for (char& c : s) c = char(std::tolower(static_cast<unsigned char>(c)));
    return s;
}

}  // namespace

ProductIsa product_isa(GemmBackend lib, GemmKind kind) {
    if (kind == GemmKind::Fp32) return ProductIsa::Fp32Fma;
    switch (lib) {
        case GemmBackend::OneDnn: {
            if (!onednn_makes_bf16()) return ProductIsa::Fp32Fma;  // widened to OpenBLAS
            // the ISAs are sets of bits, each containing the ones below it
            const unsigned isa = unsigned(dnnl_get_effective_cpu_isa());
            const auto has = [isa](dnnl_cpu_isa_t a) { return (isa & unsigned(a)) == unsigned(a); };
            if (has(dnnl_cpu_isa_avx512_core_amx)) return ProductIsa::AmxBf16;
            return has(dnnl_cpu_isa_avx512_core_bf16) ? ProductIsa::Bf16Dot : ProductIsa::Fp32Fma;
        }
        case GemmBackend::Native: return gemm_has_native_bf16() ? ProductIsa::Bf16Dot : ProductIsa::Fp32Fma;
        default: return ProductIsa::Fp32Fma;
    }
}

ProductIsa bf16_products_isa(GemmBackend gemm) {
    if (gemm != GemmBackend::Auto) return product_isa(gemm, GemmKind::Bf16);
    return std::max(product_isa(GemmBackend::OneDnn, GemmKind::Bf16), product_isa(GemmBackend::Native, GemmKind::Bf16));
}

GemmBackend sgemm_library(GemmBackend gemm) {
    if (gemm == GemmBackend::OneDnn) return GemmBackend::OneDnn;
    if (gemm == GemmBackend::Native || gemm == GemmBackend::Auto) return GemmBackend::Native;
    return GemmBackend::OpenBlas;
}

MachineInfo machine_info(int threads, double seconds, bool gemm) {
    MachineInfo m;
    const CpuId& id = cpu_id();
    m.cpu = id.name;
    const std::set<std::string>& flags = id.flags;
    for (const char* want : {"avx2", "avx512f", "avx512_bf16", "avx512_fp16", "amx_bf16"})
        if (flags.count(want)) m.isa.append(m.isa.empty() ? "" : " ").append(want);
    m.has_avx512 = flags.count("avx512f") > 0;
    m.has_bf16_dot = flags.count("avx512_bf16") > 0;
    m.cpus_online = int(sysconf(_SC_NPROCESSORS_ONLN));
    m.cpus_allowed = process_cpus() > 0 ? process_cpus() : m.cpus_online;
    if (const char* c = openblas_get_corename()) m.openblas_core = c;
    if (const char* e = std::getenv("OPENBLAS_CORETYPE")) m.openblas_coretype_env = e;
    // the value shardlm's re-exec set (a child process inherits the marker, so compare the values)
    const char* ours = std::getenv("SHARDLM_SET_CORETYPE");
    m.coretype_ours = ours && m.openblas_coretype_env == ours;
    m.onednn_isa = onednn_isa();
    m.onednn_max_isa = onednn_max_isa_env();
    m.has_amx = has_amx_bf16();
    if (flags.count("amx_bf16") && !m.has_amx) m.amx_unavailable = amx_unavailable();
    m.gemm = gemm_backend();
    m.onednn_bf16 = onednn_makes_bf16();
    threads = std::max(threads, 1);
    if (seconds > 0) {
        m.fp32_peak_gflops = measure_peak(threads, seconds / 2, fp32_fma_flops_per_iter(), fp32_fma_chains);
        if (has_bf16_dot()) m.bf16_peak_gflops = measure_peak(threads, seconds / 2, kBf16DotFlopsPerIter, bf16_dot_chains);
        if (m.has_amx) m.amx_peak_gflops = measure_peak(threads, seconds / 2, kAmxFlopsPerIter, amx_bf16_chains);
    }
    if (gemm) m.fp32_gemm_gflops = measure_sgemm(threads, sgemm_library(m.gemm));
    return m;
}

std::string describe(const MachineInfo& m, int threads) {
    std::ostringstream s;
    s << m.cpu << ", " << m.cpus_online << " CPUs";
    if (m.cpus_allowed != m.cpus_online) s << " (" << m.cpus_allowed << " allowed)";
    if (!m.isa.empty()) s << " (" << m.isa << ")";
    char buf[160];
    if (m.fp32_peak_gflops > 0) {
        std::snprintf(buf, sizeof(buf), " | peaks fp32 %.0f GFLOP/s, bf16 dot %s", m.fp32_peak_gflops,
                      m.bf16_peak_gflops > 0 ? std::to_string(int(m.bf16_peak_gflops + 0.5)).c_str() : "none");
        s << buf;
        if (m.amx_peak_gflops > 0) s << ", AMX " << int(m.amx_peak_gflops + 0.5);
        else if (!m.amx_unavailable.empty()) s << ", AMX none (" << m.amx_unavailable << ")";
        s << " (" << threads << (threads == 1 ? " thread" : " threads") << ", measured)";
    }
    std::string openblas = cat("OpenBLAS ", m.openblas_core.empty() ? "?" : m.openblas_core, " kernels");
    if (!m.openblas_coretype_env.empty() && !m.coretype_ours) openblas += " (OPENBLAS_CORETYPE preset)";
    const std::string onednn =
        "oneDNN " + m.onednn_isa + (m.onednn_max_isa.empty() ? "" : " (ONEDNN_MAX_CPU_ISA=" + m.onednn_max_isa + ")");
    const std::string widened = "widened to fp32 on OpenBLAS";
    const bool nat16 = gemm_has_native_bf16();
#if defined(__AVX512F__)
    const std::string native32 = "native AVX-512 kernels";
#else
    const std::string native32 = "native AVX2 kernels";
#endif
    const std::string native16 = "native AVX512_BF16 kernels";
    s << " | GEMMs: ";
    switch (m.gemm) {
        case GemmBackend::OpenBlas: s << "fp32 " << openblas << ", bf16 " << widened; break;
        case GemmBackend::OneDnn: s << "fp32 " << onednn << ", bf16 " << (m.onednn_bf16 ? onednn : widened); break;
        case GemmBackend::Native:
            s << "fp32 " << native32 << ", bf16 " << (nat16 ? native16 : widened);
            break;
        default:
            s << "auto per shape: fp32 " << native32 << ", " << openblas << " or " << onednn << ", bf16 "
              << (nat16 ? native16 + ", " : "") << (m.onednn_bf16 ? onednn + " or " + widened : widened);
    }
    if (m.fp32_gemm_gflops > 0) {
        const GemmBackend lib = sgemm_library(m.gemm);
        std::snprintf(buf, sizeof(buf), " | sgemm 1024^3 %.0f GFLOP/s on %s", m.fp32_gemm_gflops,
                      lib == GemmBackend::OneDnn ? "oneDNN" : lib == GemmBackend::Native ? "the native kernels" : "OpenBLAS");
        s << buf;
        if (m.fp32_peak_gflops > 0) {
            std::snprintf(buf, sizeof(buf), " (%.0f %% of the fp32 peak)", 100 * m.fp32_gemm_gflops / m.fp32_peak_gflops);
            s << buf;
        }
    }
    return s.str();
}

std::vector<std::string> findings(const MachineInfo& m, int threads, int ranks_on_node, bool bf16) {
    std::vector<std::string> out;
    const std::string core = lower(m.openblas_core);
    const bool avx512_core = core.find("skylakex") != std::string::npos || core.find("cooperlake") != std::string::npos ||
                             core.find("sapphirerapids") != std::string::npos;
    if (m.has_avx512 && !avx512_core && m.gemm != GemmBackend::OneDnn) {  // --gemm onednn never calls OpenBLAS
        std::string why = !m.openblas_coretype_env.empty() && !m.coretype_ours
                              ? cat("OPENBLAS_CORETYPE=", m.openblas_coretype_env, " is preset in the environment")
                              : std::string("OpenBLAS does not recognise this CPU");
        out.push_back(cat(why, ": OpenBLAS runs its ", m.openblas_core.empty() ? "generic" : m.openblas_core,
                          " kernels, not the AVX-512 ones this CPU has (fp32 GEMMs at about half speed or less)",
                          " -- fix: unset OPENBLAS_CORETYPE (shardlm then sets SkylakeX), or set it to SkylakeX"));
    }
    if (const char* w = std::getenv("OMP_WAIT_POLICY"); w && lower(w) == "active")
        out.push_back("OMP_WAIT_POLICY=ACTIVE: idle OpenMP threads spin and take the CPU from the working ones (a busy "
                      "neighbour, more ranks than cores) -- fix: unset it (shardlm sets GOMP_SPINCOUNT=1000)");
    if (const char* sc = std::getenv("GOMP_SPINCOUNT"); sc && std::atoll(sc) > 100000)
        out.push_back(cat("GOMP_SPINCOUNT=", sc, ": threads spin that long at every barrier before sleeping",
                          " -- fix: unset it (shardlm sets 1000)"));
    if (std::getenv("OMP_PROC_BIND"))
        out.push_back("OMP_PROC_BIND is set: shardlm leaves thread binding to libgomp (its own binding, one thread per "
                      "CPU for lanes, is off) -- fix: unset OMP_PROC_BIND and OMP_PLACES");
    if (const char* n = std::getenv("OMP_NUM_THREADS"); n && std::atoi(n) > m.cpus_allowed)
        out.push_back(cat("OMP_NUM_THREADS=", n, " asks for more threads than the ", m.cpus_allowed,
                          " CPUs this process may use -- fix: OMP_NUM_THREADS=", m.cpus_allowed,
                          " or unset (shardlm's --threads)"));
    if (threads > m.cpus_allowed)
        out.push_back(cat(threads, " threads on ", m.cpus_allowed,
                          " allowed CPUs: the threads time-slice and wait for each other at every barrier",
                          " -- fix: --threads ", m.cpus_allowed,
                          " (under mpirun, --bind-to none or fewer ranks: mpirun binds each rank to a core)"));
    if (ranks_on_node > 1 && ranks_on_node * threads > m.cpus_online)
        out.push_back(cat(ranks_on_node, " ranks x ", threads, " thread", threads > 1 ? "s" : "", " on ", m.cpus_online,
                          " CPUs: the node is oversubscribed; ranks wait for descheduled peers in every collective -- fix: ",
                          threads > 1 && ranks_on_node <= m.cpus_online
                              ? cat("--threads ", std::max(1, m.cpus_online / ranks_on_node), ", or fewer ranks")
                              : cat("at most ", m.cpus_online, " rank", m.cpus_online > 1 ? "s" : "", " on this node",
                                    threads > 1 ? " and --threads 1" : "")));
    if (bf16 && !m.has_bf16_dot)
        out.push_back("no AVX512_BF16: oneDNN emulates bf16 matmuls (slower than fp32) -- fix: --precision fp32");
    return out;
}

}  // namespace shardlm::kernels
