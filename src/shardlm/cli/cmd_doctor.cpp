// cli/cmd_doctor.cpp: `shardlm doctor`: what this machine is and what runs on it (the run header's
// line: CPU, peaks measured now, GEMM kernels per precision, threads, how waiting threads wait), a
// 1024^3 sgemm against the fp32 peak, then one line per trap found in the environment (a preset
// OPENBLAS_CORETYPE that picks weaker kernels, OMP_* settings, more threads than CPUs, oversubscribed
// ranks) with its fix. Exits 0 whatever it finds: it informs, it does not judge the run.
#include <cstdio>
#include <cstdlib>

#include "shardlm/cli/commands.h"
#include "shardlm/comm/group.h"
#include "shardlm/core/check.h"
#include "shardlm/core/runtime.h"
#include "shardlm/kernels/gemm/gemm.h"
#include "shardlm/kernels/gemm/tuner.h"
#include "shardlm/kernels/machine.h"

namespace shardlm::cli {

void add_doctor_command(CLI::App& app) {
    auto threads = std::make_shared<int>(0);
    auto gemm = std::make_shared<std::string>("auto");
    CLI::App* c = app.add_subcommand("doctor", "Print the machine, its measured peaks and GEMM kernels, and the traps in "
                                               "the environment that slow training (one line each)");
    c->add_option("--threads", *threads, "Threads to measure with (0 = the OpenMP default, as train)");
    c->add_option("--gemm", *gemm, "The GEMM libraries to describe, as train --gemm: auto | onednn | openblas | native")
        ->capture_default_str();
    c->callback([threads, gemm] {
        kernels::GemmBackend backend;
        SHARDLM_CHECK(setting_parse(*gemm, &backend), "--gemm '", *gemm, "' is not known\n---> HINT: use ",
                      setting_choices(&backend));
        kernels::set_gemm_backend(backend);
        set_threads(*threads);
        const int t = get_threads();
        const kernels::MachineInfo m = kernels::machine_info(t, 0.2, true);
        const comm::WaitMode w = comm::background_wait();
        std::printf("machine: %s\n", kernels::describe(m, t).c_str());
        if (backend == kernels::GemmBackend::Auto)
            std::printf("gemm choices: %s\n", kernels::gemm_cache_report().c_str());
        std::printf("threads: %d (OpenMP), %s; communication waits %s; OpenMP barriers: %s\n", t,
                    std::getenv("OMP_PROC_BIND") ? "bound by OMP_PROC_BIND" : "train binds one per CPU when they fit",
                    w == comm::WaitMode::Sleep ? "by sleeping" : w == comm::WaitMode::Yield ? "by yielding" : "by spinning",
                    std::getenv("OMP_WAIT_POLICY")  ? (std::string("OMP_WAIT_POLICY ") + std::getenv("OMP_WAIT_POLICY")).c_str()
                    : std::getenv("GOMP_SPINCOUNT") ? (std::string("spin ") + std::getenv("GOMP_SPINCOUNT") + " then sleep").c_str()
                                                    : "libgomp's default spinning");
        const char* local = std::getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
        const auto found = kernels::findings(m, t, local ? std::max(1, std::atoi(local)) : 1);
        for (const std::string& f : found) std::printf("finding: %s\n", f.c_str());
        if (found.empty()) std::printf("finding: none\n");
    });
}

}  // namespace shardlm::cli
