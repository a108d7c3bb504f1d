// `shardlm doctor` and the run header (issue 25 item 4): the machine, its measured peaks, the GEMM
// kernels per precision, threads and waiting, and one line per trap found in the environment, tested
// with a preset OPENBLAS_CORETYPE (the trap Debian's OpenBLAS sets for the unwary), OMP_WAIT_POLICY
// and more threads than CPUs.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
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
    EXPECT_TRUE(std::regex_search(r.out, std::regex("GEMMs: fp32 OpenBLAS [A-Za-z0-9]+ kernels, bf16 oneDNN [a-z0-9_]+")))
        << r.out;
    EXPECT_TRUE(std::regex_search(r.out, std::regex("sgemm 1024\\^3 [0-9]+ GFLOP/s"))) << r.out;
    EXPECT_GE(count_lines(r.out, "finding: "), 1) << r.out;
    EXPECT_EQ(r.out.find("OPENBLAS_CORETYPE=Haswell"), std::string::npos) << r.out;
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
    EXPECT_EQ(count_lines(r.out, "finding: "), int(std::count(r.out.begin(), r.out.end(), '\n')) - 2) << r.out;
    std::istringstream in(r.out);
    for (std::string line; std::getline(in, line);)
        if (line.rfind("finding: ", 0) == 0) EXPECT_NE(line.find(" -- fix: "), std::string::npos) << line;
}

// The run header names the same, and a trap becomes a warning at the start of the run.
TEST_F(Doctor, TheRunHeaderSaysWhatRuns) {
    if (!__builtin_cpu_supports("avx512f")) GTEST_SKIP() << "the preset trap needs an AVX-512 CPU";
    const CmdResult r = sh("env OPENBLAS_CORETYPE=Haswell " + train_fixture("--steps 1 --threads 1 --ckpt-every 0"),
                           tmp / "train.log");
    ASSERT_EQ(r.code, 0) << r.out;
    EXPECT_TRUE(std::regex_search(r.out, std::regex("machine: .* \\| peaks fp32 [0-9]+ GFLOP/s.* \\| GEMMs: fp32 OpenBLAS "
                                                    "Haswell kernels \\(OPENBLAS_CORETYPE preset\\), bf16 oneDNN .* "
                                                    "\\| threads 1 per rank .* \\| waits: communication sleeps")))
        << r.out;
    EXPECT_NE(r.out.find("warning: OPENBLAS_CORETYPE=Haswell is preset"), std::string::npos) << r.out;
    // the test binary re-exec'd itself (SHARDLM_NO_REEXEC=1 is in its environment): clear that too, or
    // shardlm keeps the library's own choice (Prescott on CPUs OpenBLAS 0.3.21 does not know)
    const CmdResult clean = sh("env -u OPENBLAS_CORETYPE -u SHARDLM_NO_REEXEC -u SHARDLM_SET_CORETYPE " + train_fixture("--steps 1 --threads 1 --ckpt-every 0"),
                               tmp / "clean.log");
    ASSERT_EQ(clean.code, 0) << clean.out;
    EXPECT_EQ(clean.out.find("warning: OPENBLAS_CORETYPE"), std::string::npos) << clean.out;
    EXPECT_NE(clean.out.find("GEMMs: fp32 OpenBLAS SkylakeX kernels"), std::string::npos) << clean.out;
}

}  // namespace
