// `shardlm doctor` and the run header (issue 25 item 4): the machine, its measured peaks, the GEMM
// kernels per precision, threads and waiting, and one line per trap found in the environment, tested
// with a preset OPENBLAS_CORETYPE (the trap Debian's OpenBLAS sets for the unwary), OMP_WAIT_POLICY
// and more threads than CPUs.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>

#include "cli_run.h"

namespace {

using namespace shardlm::test;

int count_lines(const std::string& out, const std::string& prefix) {
    std::istringstream in(out);
    int n = 0;
    for (std::string line; std::getline(in, line);) n += line.rfind(prefix, 0) == 0;
    return n;
}

class Doctor : public CliTest {};

TEST_F(Doctor, NamesTheMachineAndItsKernels) {
    const CmdResult r = sh("env -u OPENBLAS_CORETYPE -u OMP_WAIT_POLICY " + kBin + " doctor --threads 1", tmp / "doctor.log");
    ASSERT_EQ(r.code, 0) << r.out;
    EXPECT_EQ(count_lines(r.out, "machine: "), 1) << r.out;
    EXPECT_TRUE(std::regex_search(r.out, std::regex("peaks fp32 [0-9]+ GFLOP/s"))) << r.out;
    // --gemm auto (the default): every library, per shape (the native kernels where the build has them); the
    // cache file and what it holds
    EXPECT_TRUE(std::regex_search(r.out, std::regex("GEMMs: auto per shape: fp32 (native (AVX-512|AVX2) kernels, )?OpenBLAS "
                                                    "[A-Za-z0-9]+ kernels or oneDNN [a-z0-9_]+, bf16 ")))
        << r.out;
    EXPECT_TRUE(std::regex_search(r.out, std::regex("\ngemm choices: .*/gemm-[a-z0-9-]+\\.json: "))) << r.out;
    EXPECT_TRUE(std::regex_search(r.out, std::regex("sgemm 1024\\^3 [0-9]+ GFLOP/s"))) << r.out;
    EXPECT_GE(count_lines(r.out, "finding: "), 1) << r.out;
    EXPECT_EQ(r.out.find("OPENBLAS_CORETYPE=Haswell"), std::string::npos) << r.out;
    // AMX is named with its measured peak where the CPU lists it (or why this process cannot use it), not elsewhere
    std::ostringstream cpuinfo;
    cpuinfo << std::ifstream("/proc/cpuinfo").rdbuf();
    const bool amx = std::regex_search(cpuinfo.str(), std::regex("\\bamx_bf16\\b"));
    EXPECT_EQ(std::regex_search(r.out, std::regex("bf16 dot ([0-9]+|none), AMX ([0-9]+|none \\()")), amx) << r.out;
}

// A user's ONEDNN_MAX_CPU_ISA is left to oneDNN and shown beside the ISA it leaves
TEST_F(Doctor, ShowsTheUsersOneDnnIsaLimit) {
    const CmdResult r = sh("env ONEDNN_MAX_CPU_ISA=AVX2 " + kBin + " doctor --threads 1 --gemm onednn", tmp / "isa.log");
    ASSERT_EQ(r.code, 0) << r.out;
    EXPECT_NE(r.out.find("fp32 oneDNN avx2 (ONEDNN_MAX_CPU_ISA=AVX2)"), std::string::npos) << r.out;
    // oneDNN has no bf16 matmul at AVX2: the bf16 products widen to fp32
    EXPECT_NE(r.out.find("bf16 widened to fp32 on OpenBLAS"), std::string::npos) << r.out;
}

// Every trap is one line "finding: what -- fix: what to do", and doctor still exits 0.
TEST_F(Doctor, OneLinePerTrapWithItsFix) {
    const long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    const CmdResult r = sh("env OPENBLAS_CORETYPE=Haswell OMP_WAIT_POLICY=active " + kBin + " doctor --threads " +
                               std::to_string(cpus + 2),
                           tmp / "doctor.log");
    ASSERT_EQ(r.code, 0) << r.out;
    const bool avx512 = __builtin_cpu_supports("avx512f");
    if (avx512) {
        EXPECT_NE(r.out.find("finding: OPENBLAS_CORETYPE=Haswell is preset"), std::string::npos) << r.out;
        EXPECT_NE(r.out.find("OpenBLAS Haswell kernels (OPENBLAS_CORETYPE preset)"), std::string::npos) << r.out;
    }
    EXPECT_NE(r.out.find("finding: OMP_WAIT_POLICY=ACTIVE"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("finding: " + std::to_string(cpus + 2) + " threads on"), std::string::npos) << r.out;
    EXPECT_EQ(count_lines(r.out, "finding: "), 2 + (avx512 ? 1 : 0) + (__builtin_cpu_supports("avx512bf16") ? 0 : 1))
        << r.out;
    EXPECT_EQ(count_lines(r.out, "finding: "), int(std::count(r.out.begin(), r.out.end(), '\n')) - 3) << r.out;
    std::istringstream in(r.out);
    for (std::string line; std::getline(in, line);)
        if (line.rfind("finding: ", 0) == 0) {
            EXPECT_NE(line.find(" -- fix: "), std::string::npos) << line;
        }
}

// The run header names the same, and a trap becomes a warning at the start of the run.
TEST_F(Doctor, TheRunHeaderSaysWhatRuns) {
    if (!__builtin_cpu_supports("avx512f")) GTEST_SKIP() << "the preset trap needs an AVX-512 CPU";
    const CmdResult r = sh("env OPENBLAS_CORETYPE=Haswell " + train_fixture("--steps 1 --threads 1 --ckpt-every 0"),
                           tmp / "train.log");
    ASSERT_EQ(r.code, 0) << r.out;
    EXPECT_TRUE(std::regex_search(r.out, std::regex("machine: .* \\| peaks fp32 [0-9]+ GFLOP/s.* \\| GEMMs: auto per shape: fp32 "
                                                    "(native (AVX-512|AVX2) kernels, )?OpenBLAS Haswell kernels \\(OPENBLAS_CORETYPE preset\\) or oneDNN .* "
                                                    "\\| threads 1 per rank .* \\| waits: communication sleeps")))
        << r.out;
    EXPECT_NE(r.out.find("warning: OPENBLAS_CORETYPE=Haswell is preset"), std::string::npos) << r.out;
    // the test binary re-exec'd itself (SHARDLM_NO_REEXEC=1 is in its environment): clear that too, or
    // shardlm keeps the library's own choice (Prescott on CPUs OpenBLAS 0.3.21 does not know)
    const CmdResult clean = sh("env -u OPENBLAS_CORETYPE -u SHARDLM_NO_REEXEC -u SHARDLM_SET_CORETYPE " + train_fixture("--steps 1 --threads 1 --ckpt-every 0"),
                               tmp / "clean.log");
    ASSERT_EQ(clean.code, 0) << clean.out;
    EXPECT_EQ(clean.out.find("warning: OPENBLAS_CORETYPE"), std::string::npos) << clean.out;
    EXPECT_TRUE(std::regex_search(clean.out, std::regex("GEMMs: auto per shape: fp32 (native (AVX-512|AVX2) kernels, )?OpenBLAS "
                                                        "SkylakeX kernels")))
        << clean.out;
    // the end of the run says what auto chose
    EXPECT_TRUE(std::regex_search(clean.out, std::regex("\nGEMMs: auto: [0-9]+ shapes?, [0-9]+ on OpenBLAS, [0-9]+ on oneDNN, "
                                                        "[0-9]+ native")))
        << clean.out;
}

// --gemm onednn: every product on oneDNN, so no OPENBLAS_CORETYPE is set for OpenBLAS (no re-exec with
// GOMP_SPINCOUNT given) and no OpenBLAS trap is reported; openblas: bf16 operands widened; a wrong name
// is an error that lists the right ones.
TEST_F(Doctor, GemmNamesTheLibrariesAndOneDnnNeedsNoCoretype) {
    const CmdResult onednn = sh("env -u OPENBLAS_CORETYPE " + kBin + " doctor --threads 1 --gemm onednn", tmp / "d1.log");
    ASSERT_EQ(onednn.code, 0) << onednn.out;
    EXPECT_TRUE(std::regex_search(onednn.out, std::regex("GEMMs: fp32 oneDNN [a-z0-9_]+, bf16 "))) << onednn.out;
    EXPECT_EQ(onednn.out.find("OpenBLAS does not recognise"), std::string::npos) << onednn.out;
    const CmdResult openblas = sh(kBin + " doctor --threads 1 --gemm openblas", tmp / "d2.log");
    ASSERT_EQ(openblas.code, 0) << openblas.out;
    EXPECT_NE(openblas.out.find("bf16 widened to fp32 on OpenBLAS"), std::string::npos) << openblas.out;
    const CmdResult bad = sh(train_fixture("--steps 1 --gemm cublas"), tmp / "bad.log");
    EXPECT_NE(bad.code, 0);
    EXPECT_NE(bad.out.find("cublas"), std::string::npos) << bad.out;
    EXPECT_NE(bad.out.find("auto, onednn, openblas or native"), std::string::npos) << bad.out;
    // --gemm native: the native kernels for both precisions (where this build has them)
    const CmdResult nat = sh(kBin + " doctor --threads 1 --gemm native", tmp / "d3.log");
    ASSERT_EQ(nat.code, 0) << nat.out;
    if (__builtin_cpu_supports("avx512bf16")) {
        EXPECT_NE(nat.out.find("GEMMs: fp32 native AVX-512 kernels, bf16 native AVX512_BF16 kernels"), std::string::npos)
            << nat.out;
    }
    // the environment of a running `train --gemm onednn` (no re-exec: GOMP_SPINCOUNT is given) has no
    // OPENBLAS_CORETYPE; without --gemm onednn shardlm sets SkylakeX on an AVX-512 CPU
    const auto coretype_of_running = [&](const std::string& flags) {
        const std::string script =
            "env -u OPENBLAS_CORETYPE -u SHARDLM_NO_REEXEC -u SHARDLM_SET_CORETYPE GOMP_SPINCOUNT=1000 " +
            train_fixture("--steps 100000000 --ckpt-every 0 " + flags) +
            " > /dev/null 2>&1 & p=$!\nfor i in $(seq 200); do [ \"$(readlink /proc/$p/exe)\" = \"" +
            std::filesystem::canonical(kBin).string() + "\" ] && break; sleep 0.02; done\nsleep 0.2\n"
            "tr '\\0' '\\n' < /proc/$p/environ | grep '^OPENBLAS_CORETYPE=' || echo none\nkill -KILL $p; wait $p\n";
        shardlm::io::write_file_atomic((tmp / "env.sh").string(), script);
        return sh("bash " + (tmp / "env.sh").string(), tmp / "env.log").out;
    };
    EXPECT_EQ(coretype_of_running("--gemm onednn").substr(0, 4), "none");
    if (__builtin_cpu_supports("avx512f")) {
        EXPECT_EQ(coretype_of_running("--gemm auto").substr(0, 26), "OPENBLAS_CORETYPE=SkylakeX");
    }
}

}  // namespace
