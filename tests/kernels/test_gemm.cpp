// The GEMM backends (kernels/gemm/gemm.h, issue 25 item 3): oneDNN's fp32 products equal OpenBLAS's to fp32
// rounding on every transpose, alpha, beta and leading dimension, balanced or as one call, in and out of
// parallel regions; a balanced product's bits do not depend on the threads with either library; bf16
// products on either library agree; and --gemm auto times a new shape once, keeps the faster, writes it
// to the cache file, reads it back in a new process (here: a forgotten table) without timing, times
// a shape once when threads meet it together, and replaces an unreadable cache with a warning.
#include <gtest/gtest.h>
#include <omp.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "shardlm/core/dtype.h"
#include "shardlm/io/atomic_file.h"
#include "shardlm/kernels/gemm/gemm.h"
#include "shardlm/kernels/gemm/tuner.h"

#include "kernel_test_util.h"

namespace {

using shardlm::test::randn;
using shardlm::test::rel_diff;

using namespace shardlm;
using namespace shardlm::kernels;
using Vec = std::vector<float>;
namespace fs = std::filesystem;



struct Case {
    CBLAS_TRANSPOSE ta, tb;
    int M, N, K, pad;  // pad: leading dimensions this much wider than the matrices
    float alpha, beta;
};

// C on `be`, balanced or one call: A, B stored as their transposes say, C (M, N) with ldc = N + pad.
Vec product(GemmBackend be, const Case& c, bool balanced, uint32_t seed) {
    const int arows = c.ta == CblasNoTrans ? c.M : c.K, acols = c.ta == CblasNoTrans ? c.K : c.M;
    const int brows = c.tb == CblasNoTrans ? c.K : c.N, bcols = c.tb == CblasNoTrans ? c.N : c.K;
    const int lda = acols + c.pad, ldb = bcols + c.pad, ldc = c.N + c.pad;
    const Vec a = randn(size_t(arows) * lda, seed), b = randn(size_t(brows) * ldb, seed + 1);
    Vec out = randn(size_t(c.M) * ldc, seed + 2);
    if (balanced) {
        sgemm_balanced_on(be, c.ta, c.tb, c.M, c.N, c.K, c.alpha, a.data(), lda, b.data(), ldb, c.beta, out.data(), ldc);
    } else {
        const GemmBackend saved = gemm_backend();
        set_gemm_backend(be == GemmBackend::OneDnn ? GemmBackend::OneDnn : GemmBackend::OpenBlas);
        sgemm_tile(c.ta, c.tb, c.M, c.N, c.K, c.alpha, a.data(), lda, b.data(), ldb, c.beta, out.data(), ldc);
        set_gemm_backend(saved);
    }
    return out;
}

const std::vector<Case>& cases() {
    static const std::vector<Case> v = {
        {CblasNoTrans, CblasTrans, 96, 300, 70, 0, 1.0f, 0.0f},   // forward: out = inp weight^T
        {CblasNoTrans, CblasNoTrans, 64, 200, 130, 3, 1.0f, 0.0f},  // dinp
        {CblasTrans, CblasNoTrans, 150, 77, 64, 0, 1.0f, 1.0f},    // dweight, accumulated
        {CblasTrans, CblasTrans, 33, 129, 45, 5, 0.125f, 0.5f},    // both transposed, scaled, strided
        {CblasNoTrans, CblasTrans, 17, 40, 64, 7, 0.35f, 1.0f},    // too narrow to cut (attention's tile)
    };
    return v;
}

TEST(Gemm, OneDnnEqualsOpenBlasToFp32Rounding) {
    uint32_t seed = 1;
    for (const Case& c : cases())
        for (bool balanced : {true, false}) {
            const Vec ref = product(GemmBackend::OpenBlas, c, balanced, seed);
            const Vec got = product(GemmBackend::OneDnn, c, balanced, seed);
            EXPECT_LT(rel_diff(got, ref), 2e-6f) << "M " << c.M << " N " << c.N << " K " << c.K << " balanced " << balanced;
            seed += 10;
        }
}

// Inside a parallel region (lanes, attention's heads) every thread runs its own product on one thread:
// a oneDNN primitive planned for the team would compute only its first thread's share.
TEST(Gemm, OneDnnInsideParallelRegionsComputesTheWholeProduct) {
    const Case c = cases()[1];
    const Vec ref = product(GemmBackend::OpenBlas, c, true, 7);
    std::vector<Vec> got(4);
#pragma omp parallel for num_threads(2) schedule(static, 1)
    for (int i = 0; i < 4; i++) got[size_t(i)] = product(GemmBackend::OneDnn, c, i % 2 == 0, 7);
    for (const Vec& g : got) EXPECT_LT(rel_diff(g, ref), 2e-6f);
}

TEST(Gemm, BalancedBitsDoNotDependOnTheThreads) {
    const int saved = omp_get_max_threads();
    for (GemmBackend be : {GemmBackend::OpenBlas, GemmBackend::OneDnn})
        for (const Case& c : cases()) {
            omp_set_num_threads(1);
            const Vec one = product(be, c, true, 3);
            omp_set_num_threads(2);
            const Vec two = product(be, c, true, 3);
            EXPECT_EQ(one, two) << setting_text(be) << " M " << c.M << " N " << c.N << " K " << c.K;
        }
    omp_set_num_threads(saved);
}

// bf16 operands: oneDNN's bf16 matmul and OpenBLAS on the widened operands sum the same exact products
TEST(Gemm, Bf16ProductsAgreeOnBothLibraries) {
    if (!onednn_makes_bf16()) GTEST_SKIP() << "oneDNN has no bf16 matmul for this CPU";
    const int M = 70, N = 150, K = 96;
    const Vec a32 = randn(size_t(M) * K, 11), b32 = randn(size_t(N) * K, 12);
    std::vector<unsigned short> a(a32.size()), b(b32.size());
    convert_from_f32(a.data(), DType::BF16, a32.data(), a.size());
    convert_from_f32(b.data(), DType::BF16, b32.data(), b.size());
    const GemmBackend saved = gemm_backend();
    Vec out[2];
    int i = 0;
    for (GemmBackend be : {GemmBackend::OpenBlas, GemmBackend::OneDnn}) {
        set_gemm_backend(be);
        out[i] = Vec(size_t(M) * N, 0.5f);
        gemm_bf16(out[i].data(), {a.data(), K, 1}, {b.data(), 1, K}, M, N, K, /*accumulate=*/true);
        i++;
    }
    set_gemm_backend(saved);
    EXPECT_LT(rel_diff(out[1], out[0]), 1e-5f);
}

class GemmAuto : public ::testing::Test {
protected:
    fs::path dir;
    std::string saved_env;
    GemmBackend saved = gemm_backend();
    void SetUp() override {
        dir = fs::temp_directory_path() / ("shardlm_gemm_" + std::to_string(::getpid()));
        fs::remove_all(dir);
        if (const char* e = std::getenv("SHARDLM_CACHE_DIR")) saved_env = e;
        setenv("SHARDLM_CACHE_DIR", dir.c_str(), 1);
        gemm_forget_choices();
    }
    void TearDown() override {
        if (saved_env.empty()) unsetenv("SHARDLM_CACHE_DIR");
        else setenv("SHARDLM_CACHE_DIR", saved_env.c_str(), 1);
        gemm_forget_choices();
        set_gemm_backend(saved);
        fs::remove_all(dir);
    }
    nlohmann::json cache() const { return nlohmann::json::parse(io::read_file(gemm_cache_path())); }
};

TEST_F(GemmAuto, TimesANewShapeOnceAndKeepsTheFaster) {
    EXPECT_EQ(gemm_cache_path().rfind(dir.string() + "/gemm-", 0), 0u) << gemm_cache_path();
    int timed = 0;
    const auto onednn_faster = [&](GemmTiming* t) { timed++, t->openblas = 2e-3, t->onednn = 1e-3; };
    const auto openblas_faster = [&](GemmTiming* t) { timed++, t->openblas = 1e-3, t->onednn = 2e-3; };
    EXPECT_EQ(gemm_choice("shape one", onednn_faster), GemmBackend::OneDnn);
    EXPECT_EQ(gemm_choice("shape two", openblas_faster), GemmBackend::OpenBlas);
    EXPECT_EQ(gemm_choice("shape one", openblas_faster), GemmBackend::OneDnn);  // known: not timed again
    EXPECT_EQ(timed, 2);
    // oneDNN only when clearly faster: within 3 % stays on OpenBLAS
    EXPECT_EQ(gemm_choice("a tie", [&](GemmTiming* t) { timed++, t->openblas = 1e-3, t->onednn = 0.98e-3; }), GemmBackend::OpenBlas);
    timed--;
    const nlohmann::json j = cache();
    EXPECT_EQ(j["shapes"]["shape one"]["choice"], "onednn");
    EXPECT_DOUBLE_EQ(j["shapes"]["shape one"]["openblas_ms"].get<double>(), 2.0);
    EXPECT_EQ(j["shapes"]["shape two"]["choice"], "openblas");
    // a new process (the table forgotten) reads the file: the same choices, nothing timed
    gemm_forget_choices();
    EXPECT_EQ(gemm_choice("shape two", onednn_faster), GemmBackend::OpenBlas);
    EXPECT_EQ(gemm_choice("shape one", openblas_faster), GemmBackend::OneDnn);
    EXPECT_EQ(timed, 2);
    // another process's choice, written after this one read the file, is taken as it is
    nlohmann::json edited = cache();
    edited["shapes"]["shape three"] = {{"choice", "onednn"}, {"openblas_ms", 5.0}, {"onednn_ms", 4.0}};
    io::write_file_atomic(gemm_cache_path(), edited.dump());
    EXPECT_EQ(gemm_choice("shape three", openblas_faster), GemmBackend::OneDnn);
    EXPECT_EQ(timed, 2);
}

GemmTiming timing(double openblas, double onednn, double native) {
    GemmTiming t;
    t.openblas = openblas, t.onednn = onednn, t.native = native;
    return t;
}

// With the native kernels timed they are the first choice: another library only when over 3 % faster;
// their timing and choice go to the cache and come back
TEST_F(GemmAuto, NativeIsFirstUnlessAnotherIsClearlyFaster) {
    EXPECT_EQ(gemm_choose(timing(1e-3, 1e-3, 1e-3)), GemmBackend::Native);
    EXPECT_EQ(gemm_choose(timing(0.98e-3, 0.99e-3, 1e-3)), GemmBackend::Native);
    EXPECT_EQ(gemm_choose(timing(0.9e-3, 0.95e-3, 1e-3)), GemmBackend::OpenBlas);
    EXPECT_EQ(gemm_choose(timing(1e-3, 0.9e-3, 1e-3)), GemmBackend::OneDnn);
    EXPECT_EQ(gemm_choose(timing(1e-3, 1.2e-3, 0.5e-3)), GemmBackend::Native);
    EXPECT_EQ(gemm_choose(timing(1e-3, 0, 0)), GemmBackend::OpenBlas);  // neither other library timed
    EXPECT_EQ(gemm_choice("native shape", [](GemmTiming* t) { t->openblas = 2e-3, t->onednn = 3e-3, t->native = 1e-3; }),
              GemmBackend::Native);
    const nlohmann::json j = cache();
    EXPECT_EQ(j["shapes"]["native shape"]["choice"], "native");
    EXPECT_DOUBLE_EQ(j["shapes"]["native shape"]["native_ms"].get<double>(), 1.0);
    // the ISA the chosen library runs it on (a key that is not a bf16 product's: fp32 kernels)
    EXPECT_EQ(j["shapes"]["native shape"]["isa"].get<std::string>().rfind("native avx", 0), 0u) << j.dump();
    gemm_forget_choices();
    EXPECT_EQ(gemm_choice("native shape", [](GemmTiming*) { FAIL() << "timed again"; }), GemmBackend::Native);
    EXPECT_NE(gemm_cache_report().find(": 1 shapes timed on this CPU model, 0 on OpenBLAS, 0 on oneDNN, 1 native"),
              std::string::npos)
        << gemm_cache_report();
}

// A mixture of experts' products (RaggedGemmScope): one key per size class, and oneDNN never timed nor chosen (it
// would keep a primitive for every token count); the same shapes outside the scope time all three libraries
TEST_F(GemmAuto, RaggedProductsLeaveOneDnnOut) {
    set_gemm_backend(GemmBackend::Auto);
    const int N = 96, K = 64;
    const std::vector<float> a = test::randn(size_t(100) * K, 1), b = test::randn(size_t(K) * N, 2);
    std::vector<float> c(size_t(100) * N);
    {
        RaggedGemmScope ragged;
        for (int M : {70, 100, 65})  // one size class (128)
            sgemm_balanced(CblasNoTrans, CblasNoTrans, M, N, K, 1.0f, a.data(), K, b.data(), N, 0.0f, c.data(), N);
        gemm_mixed(c.data(), DType::F32, {a.data(), DType::F32, K, 1}, {b.data(), DType::F32, N, 1}, 70, N, K, false, nullptr);
    }
    const nlohmann::json j = cache();
    ASSERT_EQ(j["shapes"].size(), 2u) << j.dump(1);
    for (const auto& [key, v] : j["shapes"].items()) {
        SCOPED_TRACE(key);
        EXPECT_NE(key.find(" 128x96x64 "), std::string::npos);
        EXPECT_NE(key.find("ragged"), std::string::npos);
        EXPECT_EQ(v["onednn_ms"].get<double>(), 0.0);
        EXPECT_NE(v["choice"], "onednn");
    }
    EXPECT_TRUE(gemm_onednn_candidate());  // (the scope has ended)
    sgemm_balanced(CblasNoTrans, CblasNoTrans, 70, N, K, 1.0f, a.data(), K, b.data(), N, 0.0f, c.data(), N);
    const nlohmann::json all = cache();
    ASSERT_EQ(all["shapes"].size(), 3u) << all.dump(1);
    for (const auto& [key, v] : all["shapes"].items())
        if (key.find("ragged") == std::string::npos) { EXPECT_GT(v["onednn_ms"].get<double>(), 0.0) << key; }
}

// Every shape auto times is recorded with what its chosen library ran it on: the native kernels' ISA,
// OpenBLAS's core, or oneDNN's own name for the implementation it picked (as ONEDNN_MAX_CPU_ISA leaves it),
// which is kept for every shape oneDNN was timed on
TEST_F(GemmAuto, TheCacheNamesTheIsaEachShapeRanOn) {
    set_gemm_backend(GemmBackend::Auto);
    const int M = 256, N = 512, K = 256;
    const std::vector<float> a = test::randn(size_t(M) * K, 1), b = test::randn(size_t(K) * N, 2);
    std::vector<float> c(size_t(M) * N);
    sgemm_balanced(CblasNoTrans, CblasNoTrans, M, N, K, 1.0f, a.data(), K, b.data(), N, 0.0f, c.data(), N);
    gemm_mixed(c.data(), DType::F32, {a.data(), DType::F32, K, 1}, {b.data(), DType::F32, N, 1}, M, N, K, false, nullptr);
    const nlohmann::json j = cache();
    ASSERT_EQ(j["shapes"].size(), 2u) << j.dump(1);
    for (const auto& [key, v] : j["shapes"].items()) {
        const std::string choice = v["choice"], isa = v["isa"];
        SCOPED_TRACE(key + ": " + choice + " on " + isa);
        const std::string impl = v["onednn_impl"];
        if (choice == "native") { EXPECT_EQ(isa.rfind("native avx", 0), 0u); }
        if (choice == "openblas") { EXPECT_EQ(isa.rfind("openblas ", 0), 0u); }
        if (choice == "onednn") { EXPECT_EQ(isa, impl); }
        // oneDNN's name for its implementation, "kind:isa" ("brg:avx512_core_bf16", "gemm:jit"), whichever library wins
        if (v["onednn_ms"].get<double>() > 0) { EXPECT_NE(impl.find(':'), std::string::npos) << impl; }
    }
}

TEST_F(GemmAuto, ThreadsMeetingANewShapeTimeItOnce) {
    std::atomic<int> timed{0};
    std::vector<std::thread> threads;
    std::vector<GemmBackend> got(4);
    for (int i = 0; i < 4; i++)
        threads.emplace_back([&, i] {
            got[size_t(i)] = gemm_choice("shared shape", [&](GemmTiming* t) {
                timed++;
                std::this_thread::sleep_for(std::chrono::milliseconds(20));
                t->openblas = 1e-3, t->onednn = 3e-3;
            });
        });
    for (auto& t : threads) t.join();
    EXPECT_EQ(timed.load(), 1);
    for (GemmBackend b : got) EXPECT_EQ(b, GemmBackend::OpenBlas);
}

TEST_F(GemmAuto, AnUnreadableCacheIsReplacedWithAWarning) {
    fs::create_directories(dir);
    io::write_file_atomic(gemm_cache_path(), "{ not json");
    testing::internal::CaptureStderr();
    EXPECT_EQ(gemm_choice("shape", [](GemmTiming* t) { t->openblas = 1e-3, t->onednn = 2e-3; }), GemmBackend::OpenBlas);
    const std::string err = testing::internal::GetCapturedStderr();
    EXPECT_NE(err.find(gemm_cache_path()), std::string::npos) << err;
    EXPECT_NE(err.find("replaced by new timings"), std::string::npos) << err;
    EXPECT_EQ(cache()["shapes"]["shape"]["choice"], "openblas");
    // a choice that is neither library is not ours either
    io::write_file_atomic(gemm_cache_path(), R"({"shapes": {"shape": {"choice": "cublas"}}})");
    gemm_forget_choices();
    EXPECT_NE(gemm_cache_report().find("unreadable"), std::string::npos) << gemm_cache_report();
}

// No cache to agree through (the directory cannot be made): nothing is timed, OpenBLAS runs the shape,
// the same choice in every process, and a warning says so once
TEST_F(GemmAuto, WithoutAUsableCacheNothingIsTimed) {
    setenv("SHARDLM_CACHE_DIR", "/proc/shardlm-cannot-be-made", 1);
    testing::internal::CaptureStderr();
    int timed = 0;
    const auto onednn_faster = [&](GemmTiming* t) { timed++, t->openblas = 2e-3, t->onednn = 1e-3; };
    EXPECT_EQ(gemm_choice("shape one", onednn_faster), GemmBackend::OpenBlas);
    EXPECT_EQ(gemm_choice("shape two", onednn_faster), GemmBackend::OpenBlas);
    const std::string err = testing::internal::GetCapturedStderr();
    EXPECT_EQ(timed, 0);
    EXPECT_NE(err.find("cannot lock the GEMM cache in /proc/shardlm-cannot-be-made"), std::string::npos) << err;
    EXPECT_EQ(err.find("cannot lock", err.find("cannot lock") + 1), std::string::npos) << "warned twice: " << err;
}

// The fp32 key leaves the threads out (every block is single-threaded on either library): 1 and 2
// threads run a shape on the library its first timing chose, whichever thread count timed it
TEST_F(GemmAuto, Fp32ChoicesDoNotDependOnTheThreads) {
    set_gemm_backend(GemmBackend::Auto);
    const Case c = cases()[0];
    const Vec a = randn(size_t(c.M) * c.K, 5), b = randn(size_t(c.N) * c.K, 6);
    const int saved = omp_get_max_threads();
    Vec out[2];
    for (int t : {1, 2}) {
        omp_set_num_threads(t);
        out[t - 1] = Vec(size_t(c.M) * c.N);
        sgemm_balanced(c.ta, c.tb, c.M, c.N, c.K, 1.0f, a.data(), c.K, b.data(), c.K, 0.0f, out[t - 1].data(), c.N);
    }
    omp_set_num_threads(saved);
    EXPECT_EQ(out[0], out[1]);
    EXPECT_EQ(cache()["shapes"].size(), 1u) << cache().dump();
}

// Through the real products: auto runs a shape on the library it recorded, and the result is that
// library's to the bit; the summary counts the shapes
TEST_F(GemmAuto, RunsEachShapeOnTheRecordedLibrary) {
    set_gemm_backend(GemmBackend::Auto);
    const Case c = cases()[0];
    const Vec a = randn(size_t(c.M) * c.K, 5), b = randn(size_t(c.N) * c.K, 6);
    Vec out(size_t(c.M) * c.N);
    sgemm_balanced(c.ta, c.tb, c.M, c.N, c.K, 1.0f, a.data(), c.K, b.data(), c.K, 0.0f, out.data(), c.N);
    const nlohmann::json j = cache();
    ASSERT_EQ(j["shapes"].size(), 1u) << j.dump();
    const std::string key = j["shapes"].begin().key();
    EXPECT_EQ(key.rfind("fp32 NT 96x300x70 ld 70,70,300 ", 0), 0u) << key;
    GemmBackend recorded;
    ASSERT_TRUE(setting_parse(j["shapes"].begin().value()["choice"].get<std::string>(), &recorded));
    Vec ref(out.size());
    sgemm_balanced_on(recorded, c.ta, c.tb, c.M, c.N, c.K, 1.0f, a.data(), c.K, b.data(), c.K, 0.0f, ref.data(), c.N);
    EXPECT_EQ(out, ref);
    // make the file say the other library: a new process follows the file
    nlohmann::json edited = j;
    const GemmBackend other = recorded == GemmBackend::OneDnn ? GemmBackend::OpenBlas : GemmBackend::OneDnn;
    edited["shapes"][key]["choice"] = setting_text(other);
    io::write_file_atomic(gemm_cache_path(), edited.dump());
    gemm_forget_choices();
    sgemm_balanced(c.ta, c.tb, c.M, c.N, c.K, 1.0f, a.data(), c.K, b.data(), c.K, 0.0f, out.data(), c.N);
    sgemm_balanced_on(other, c.ta, c.tb, c.M, c.N, c.K, 1.0f, a.data(), c.K, b.data(), c.K, 0.0f, ref.data(), c.N);
    EXPECT_EQ(out, ref);
    EXPECT_NE(gemm_summary().find("auto: 1 shape, "), std::string::npos) << gemm_summary();
    EXPECT_NE(gemm_summary().find("0 timed now"), std::string::npos) << gemm_summary();
}

// auto's timing of a product stays small in memory: one that overwrites C is timed in C's own rows, one
// that accumulates into C on its first column blocks within gemm_timing_floats of scratch (C untouched:
// the result is the recorded library's), and bf16 products skip OpenBLAS's widened copies where the
// native bf16 kernels run
TEST(Gemm, TimingColumnsStayWithinTheScratchBudget) {
    EXPECT_EQ(gemm_timing_cols(1024, 4096, 64, 128), 4096);               // 4 Mi floats: within
    const int cols = gemm_timing_cols(1024, 50257, 192, 384);
    EXPECT_LE(size_t(cols) * 1024, gemm_timing_floats());
    EXPECT_EQ(cols % 192, 0);
    EXPECT_GT(size_t(cols + 192) * 1024, gemm_timing_floats());           // the most that fits
    EXPECT_EQ(gemm_timing_cols(1 << 20, 50257, 192, 384), 384);           // never fewer than asked
    EXPECT_EQ(gemm_timing_cols(1 << 20, 300, 192, 384), 300);             // nor more than N
}

// auto's timing starts each timed run from memory (a step meets a weight it last read a layer ago): the
// operands are dropped from the caches before every timed run and not before the untimed first ones, and
// dropping them changes no value
TEST(Gemm, EachTimedRunStartsWithTheOperandsOutOfTheCaches) {
    std::vector<std::string> order;
    GemmTiming t;
    gemm_time_each([&] { order.push_back("openblas"); }, {}, [&] { order.push_back("native"); }, &t,
                   [&] { order.push_back("cold"); });
    ASSERT_GE(order.size(), 2u + 2u * 3u);
    EXPECT_EQ(order[0], "openblas");  // the first runs, untimed: no flush
    EXPECT_EQ(order[1], "native");
    for (size_t i = 2; i < order.size(); i += 2) {
        EXPECT_EQ(order[i], "cold") << "run " << i;
        EXPECT_NE(order[i + 1], "cold") << "run " << i + 1;
    }
    EXPECT_GT(t.openblas, 0.0);
    EXPECT_GT(t.native, 0.0);
    EXPECT_EQ(t.onednn, 0.0);  // not given: not timed

    const Vec x = randn(100003, 7);
    Vec y = x;
    flush_from_caches(y.data() + 1, (y.size() - 2) * sizeof(float));  // an unaligned start and end
    EXPECT_EQ(x, y);
    EXPECT_EQ(operand_span(3, 5, 10, 1, 4), size_t(2 * 10 + 4 + 1) * 4);  // rows 10 apart, the last row's 5
    EXPECT_EQ(operand_span(3, 5, 1, 8, 2), size_t(2 + 4 * 8 + 1) * 2);    // columns 8 apart
    EXPECT_EQ(operand_span(0, 5, 10, 1, 4), 0u);
}

TEST_F(GemmAuto, AWideAccumulatingProductIsTimedOnItsFirstColumns) {
    set_gemm_backend(GemmBackend::Auto);
    const int M = 1024, N = 6000, K = 16;  // 1024 x 6000 floats: over the scratch budget
    const Vec a = randn(size_t(M) * K, 21), b = randn(size_t(N) * K, 22), c0 = randn(size_t(M) * N, 23);
    Vec out = c0;
    sgemm_balanced(CblasNoTrans, CblasTrans, M, N, K, 1.0f, a.data(), K, b.data(), K, 1.0f, out.data(), N);
    const nlohmann::json j = cache();
    ASSERT_EQ(j["shapes"].size(), 1u) << j.dump();
    GemmBackend recorded;
    ASSERT_TRUE(setting_parse(j["shapes"].begin().value()["choice"].get<std::string>(), &recorded));
    Vec ref = c0;
    sgemm_balanced_on(recorded, CblasNoTrans, CblasTrans, M, N, K, 1.0f, a.data(), K, b.data(), K, 1.0f, ref.data(), N);
    EXPECT_EQ(out, ref);  // the timing left C alone: accumulated once
    // overwriting: timed in C's rows, then written again
    Vec over(size_t(M) * N, 7.0f), ref0(size_t(M) * N, -7.0f);
    sgemm_balanced(CblasNoTrans, CblasTrans, M, N, K, 1.0f, a.data(), K, b.data(), K, 0.0f, over.data(), N);
    const nlohmann::json shapes = cache()["shapes"];
    for (const auto& [key, v] : shapes.items())
        if (key.find("acc") == std::string::npos) {
            ASSERT_TRUE(setting_parse(v["choice"].get<std::string>(), &recorded));
        }
    sgemm_balanced_on(recorded, CblasNoTrans, CblasTrans, M, N, K, 1.0f, a.data(), K, b.data(), K, 0.0f, ref0.data(), N);
    for (size_t i = 0; i < over.size(); i++)
        ASSERT_EQ(over[i], ref0[i]) << "element " << i << " (row " << i / N << "), on " << setting_text(recorded);
    if (gemm_has_native_bf16()) {
        const Vec x = randn(size_t(64) * K, 24), w = randn(size_t(N) * K, 25);
        Vec y(size_t(64) * N);
        gemm_mixed(y.data(), DType::F32, {x.data(), DType::F32, K, 1}, {w.data(), DType::F32, 1, K}, 64, N, K, false, nullptr);
        const nlohmann::json now = cache()["shapes"];
        for (const auto& [key, v] : now.items())
            if (key.rfind("bf16", 0) == 0) {
                EXPECT_EQ(v.value("openblas_ms", 0.0), 0.0) << key << ": widened OpenBLAS timed";
            }
    }
}

// Every library writes C's M x N elements and nothing else: not the padding between rows (ldc > N), not
// past the last row (a write there corrupts the heap), for shapes whose widths leave tails of every size.
TEST(Gemm, WritesNothingOutsideC) {
    constexpr float kCanary = -12345.0f;
    for (GemmBackend be : {GemmBackend::OpenBlas, GemmBackend::OneDnn})
        for (int M : {1, 7, 64, 129})
            for (int N : {5, 17, 64, 100, 333})
                for (int K : {3, 48, 256})
                    for (int pad : {0, 9})
                        for (int layout = 0; layout < 4; layout++) {
                            const CBLAS_TRANSPOSE ta = layout & 1 ? CblasTrans : CblasNoTrans;
                            const CBLAS_TRANSPOSE tb = layout & 2 ? CblasTrans : CblasNoTrans;
                            const int ldc = N + pad, lda = ta == CblasNoTrans ? K : M, ldb = tb == CblasNoTrans ? N : K;
                            const Vec a = randn(size_t(M) * K, 1), b = randn(size_t(N) * K, 2);
                            Vec c(size_t(M) * ldc + 64, kCanary);
                            for (int r = 0; r < M; r++)
                                for (int j = 0; j < N; j++) c[size_t(r) * ldc + j] = 0.5f;
                            sgemm_balanced_on(be, ta, tb, M, N, K, 0.5f, a.data(), lda, b.data(), ldb, layout == 3 ? 1.0f : 0.0f,
                                              c.data(), ldc);
                            for (int r = 0; r < M; r++)
                                for (int j = N; j < ldc; j++)
                                    ASSERT_EQ(c[size_t(r) * ldc + j], kCanary) << setting_text(be) << " M " << M << " N " << N
                                                                               << " K " << K << " row " << r << " col " << j;
                            for (size_t i = size_t(M) * ldc; i < c.size(); i++)
                                ASSERT_EQ(c[i], kCanary) << setting_text(be) << " M " << M << " N " << N << " K " << K
                                                         << ": wrote past the end";
                        }
}

}  // namespace
