// cli/cmd_calibrate.cpp: `shardlm calibrate`: measure this machine (calibrate/calibrate.h) as
// `mpirun -np N` ranks of --threads threads and write the planner cluster file that describes it:
//   mpirun -np 2 shardlm calibrate --threads 1 --out cpu-2x1.json
//   shardlm plan --model m.json --cluster cpu-2x1.json --policy p.json --global-batch 8 --seq 128 --json
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>

#include "shardlm/calibrate/calibrate.h"
#include "shardlm/cli/commands.h"
#include "shardlm/comm/mpi_env.h"
#include "shardlm/core/check.h"
#include "shardlm/io/atomic_file.h"
#include "shardlm/kernels/gemm/gemm.h"

namespace shardlm::cli {

void add_calibrate_command(CLI::App& app) {
    struct Opts {
        int threads = 0;
        std::string precision = "fp32", out, collectives = "ring", gemm = "auto";
        double min_seconds = 0.05;
    };
    auto o = std::make_shared<Opts>();
    CLI::App* c = app.add_subcommand(
        "calibrate", "Measure this machine (GEMMs by shape, memory bandwidth, collectives) and write a planner cluster file");
    c->add_option("--threads", o->threads, "Threads per rank, as the runs to predict will use (0: OpenMP's default)")
        ->capture_default_str();
    c->add_option("--precision", o->precision, "Matmuls the GEMM curve is fitted to: fp32 | bf16")->capture_default_str();
    c->add_option("--out", o->out, "Cluster file to write (JSON; default: print it)");
    c->add_option("--collectives", o->collectives,
                  "Whose collectives the links are measured with, as train --collectives: ring | mpi")
        ->capture_default_str();
    c->add_option("--gemm", o->gemm, "Whose GEMMs are measured, as train --gemm: auto | onednn | openblas | native")
        ->capture_default_str();
    c->add_option("--min-seconds", o->min_seconds, "Time per measured point (longer: steadier numbers)")
        ->capture_default_str();
    c->callback([o] {
        calibrate::Options opt;
        opt.threads = o->threads;
        SHARDLM_CHECK(o->threads >= 0, "--threads must be >= 0 (got ", o->threads, ")");
        SHARDLM_CHECK(o->min_seconds > 0 && o->min_seconds <= 10, "--min-seconds must be in (0, 10] (got ",
                      o->min_seconds, ")");
        SHARDLM_CHECK(o->precision == "fp32" || o->precision == "bf16", "--precision '", o->precision,
                      "' is not known\n---> HINT: use fp32 or bf16");
        opt.precision = o->precision == "fp32" ? planner::Precision::Fp32 : planner::Precision::Bf16;
        opt.min_seconds = o->min_seconds;
        comm::CollectivesBackend backend;
        SHARDLM_CHECK(enum_from_name(comm::kCollectivesNames, o->collectives, &backend), "--collectives '",
                      o->collectives, "' is not known\n---> HINT: use ring or mpi");
        comm::set_collectives(backend);
        kernels::GemmBackend gemm;
        SHARDLM_CHECK(setting_parse(o->gemm, &gemm), "--gemm '", o->gemm, "' is not known\n---> HINT: use ",
                      setting_choices(&gemm));
        kernels::set_gemm_backend(gemm);
        if (!o->out.empty()) {  // before measuring for seconds, not after
            const std::filesystem::path dir = std::filesystem::absolute(o->out).parent_path();
            SHARDLM_CHECK(std::filesystem::is_directory(dir), "--out ", o->out, ": the directory ", dir.string(),
                          " does not exist\n---> HINT: create it first, or write the cluster file elsewhere");
            SHARDLM_CHECK(::access(dir.c_str(), W_OK) == 0, "--out ", o->out, ": the directory ", dir.string(),
                          " is not writable\n---> HINT: write the cluster file elsewhere");
        }
        comm::MpiEnv env;
        const calibrate::Calibration cal = calibrate::run(env.world(), opt);
        if (env.world().rank() != 0) return;
        std::fprintf(o->out.empty() ? stderr : stdout, "%s", calibrate::summary(cal).c_str());
        const std::string text = calibrate::to_json(cal).dump(2) + "\n";
        if (o->out.empty()) {
            std::printf("%s", text.c_str());
        } else {
            io::write_file_atomic(o->out, text);
            std::printf("cluster file: %s (shardlm plan --cluster %s ...)\n", o->out.c_str(), o->out.c_str());
        }
    });
}

}  // namespace shardlm::cli
