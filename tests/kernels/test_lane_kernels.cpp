// The kernels lanes (model/units.h) are made of: weight gradients over a range of output rows, the
// two halves of LayerNorm's backward, bf16 products run inside a parallel region, and the binding of
// threads to CPUs of their own.
#include <gtest/gtest.h>
#include <omp.h>
#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <set>
#include <thread>
#include <vector>

#include "shardlm/core/dtype.h"
#include "shardlm/core/runtime.h"
#include "shardlm/kernels/gemm/gemm.h"
#include "shardlm/kernels/layernorm.h"

namespace {

using namespace shardlm;
using namespace shardlm::kernels;

std::vector<float> random(size_t n, unsigned seed) {
    std::mt19937 g(seed);
    std::normal_distribution<float> d(0.0f, 1.0f);
    std::vector<float> v(n);
    for (float& x : v) x = d(g);
    return v;
}

// n values stored as t (the fp32 values rounded to it).
std::vector<unsigned char> stored(const std::vector<float>& v, DType t) {
    std::vector<unsigned char> out(v.size() * dtype_bytes(t));
    convert_from_f32(out.data(), t, v.data(), v.size());
    return out;
}

struct Format {
    DType in;
    MatmulPrecision products;
};

class WeightGradSlices : public ::testing::TestWithParam<Format> {};

// Output-row blocks of the weight gradient, as lanes take them, equal matmul_backward's whole one.
TEST_P(WeightGradSlices, EqualTheWholeProduct) {
    const auto [in_t, products] = GetParam();
    const int N = 37, C = 72, OC = 100;  // blocks cut at 16, 48 and 96: none a multiple of OC
    const std::vector<float> dout = random(size_t(N) * OC, 1), x = random(size_t(N) * C, 2), w = random(size_t(OC) * C, 3);
    const std::vector<float> init = random(size_t(OC) * C, 4), binit = random(size_t(OC), 5);
    const auto xs = stored(x, in_t), ws = stored(w, in_t);
    for (const bool acc : {false, true}) {
        std::vector<float> whole = init, wb = binit, split = init, sb = binit;
        if (in_t == DType::F32)
            matmul_backward(nullptr, whole.data(), wb.data(), dout.data(), x.data(), w.data(), N, C, OC, acc, products);
        else
            matmul_backward(nullptr, whole.data(), wb.data(), dout.data(), xs.data(), ws.data(), in_t, N, C, OC, acc);
        const int cuts[] = {0, 16, 48, 96, OC};
        for (int i = 0; i + 1 < 5; i++)
            matmul_backward_weight(split.data(), sb.data(), dout.data(), xs.data(), in_t, N, C, OC, cuts[i], cuts[i + 1],
                                   acc, products);
        for (size_t i = 0; i < whole.size(); i++)
            ASSERT_NEAR(split[i], whole[i], 1e-5f * (1.0f + std::fabs(whole[i]))) << "dW element " << i << " acc " << acc;
        for (int i = 0; i < OC; i++) ASSERT_EQ(sb[size_t(i)], wb[size_t(i)]) << "db element " << i;
    }
}

INSTANTIATE_TEST_SUITE_P(All, WeightGradSlices,
                         ::testing::Values(Format{DType::F32, MatmulPrecision::fp32},
                                           Format{DType::F32, MatmulPrecision::bf16},
                                           Format{DType::BF16, MatmulPrecision::fp32},
                                           Format{DType::F16, MatmulPrecision::fp32}));

// With bf16 products a block keeps its linears' output gradients in bf16 as the input gradient's product
// rounded them (matmul_backward's dout16), and the weight gradient's slices read that copy: the copy is
// dout rounded to nearest even, the input gradient does not change, and the weight gradient's slices are
// those of the gradient the copy was rounded from (the native kernels: to the bit, the same chain of sums;
// oneDNN, whose primitive then reads the operand at other strides, within its rounding), while the biases'
// gradients sum the fp32 dout given beside it. The copy given to the slices is rounded from another gradient
// than dout, so that slices which ignored it would fail.
TEST(KeptBf16Dout, GivesTheProductsOfDoutRoundedAgain) {
    const int N = 37, C = 72, OC = 100;
    const std::vector<float> dout = random(size_t(N) * OC, 41), x = random(size_t(N) * C, 42), w = random(size_t(OC) * C, 43);
    const std::vector<float> other = random(size_t(N) * OC, 46);  // the gradient the slices' copy comes from
    const std::vector<float> init = random(size_t(OC) * C, 44), binit = random(size_t(OC), 45);
    const auto rounded = stored(dout, DType::BF16);
    struct Restore {  // the library in force before, even when an assertion ends the test early
        GemmBackend b = gemm_backend();
        ~Restore() { set_gemm_backend(b); }
    } restore;
    std::vector<GemmBackend> libs;
    if (gemm_has_native_bf16()) libs.push_back(GemmBackend::Native);
    if (onednn_makes_bf16()) libs.push_back(GemmBackend::OneDnn);
    if (libs.empty()) GTEST_SKIP() << "no bf16 products on this CPU (the widened sgemm path keeps no copy)";
    for (const GemmBackend lib : libs)
        for (const DType in_t : {DType::F32, DType::BF16}) {
            set_gemm_backend(lib);
            const auto xs = stored(x, in_t), ws = stored(w, in_t);
            auto backward = [&](const std::vector<float>& d, float* dinp, unsigned short* keep) {
                if (in_t == DType::F32)
                    matmul_backward(dinp, nullptr, nullptr, d.data(), x.data(), w.data(), N, C, OC, false,
                                    MatmulPrecision::bf16, keep);
                else
                    matmul_backward(dinp, nullptr, nullptr, d.data(), xs.data(), ws.data(), in_t, N, C, OC, false, keep);
            };
            std::vector<float> dinp(size_t(N) * C), dinp_kept(size_t(N) * C), scratch(size_t(N) * C);
            std::vector<unsigned short> keep(size_t(N) * OC, 0xffff), keep_other(size_t(N) * OC, 0xffff);
            backward(dout, dinp.data(), nullptr);
            backward(dout, dinp_kept.data(), keep.data());
            ASSERT_EQ(0, std::memcmp(keep.data(), rounded.data(), rounded.size())) << "the kept copy is not dout rounded";
            EXPECT_EQ(dinp, dinp_kept);
            backward(other, scratch.data(), keep_other.data());
            for (const bool acc : {false, true}) {
                // slices rounding `other` as they read it, and slices reading its copy beside the fp32 dout
                std::vector<float> again = init, kept = init, kb = binit, db = binit;
                const int cuts[] = {0, 16, 48, 96, OC};
                for (int i = 0; i + 1 < 5; i++) {
                    matmul_backward_weight(again.data(), nullptr, other.data(), xs.data(), in_t, N, C, OC, cuts[i],
                                           cuts[i + 1], acc, MatmulPrecision::bf16);
                    matmul_backward_weight(kept.data(), kb.data(), dout.data(), xs.data(), in_t, N, C, OC, cuts[i],
                                           cuts[i + 1], acc, MatmulPrecision::bf16, keep_other.data());
                    bias_backward(db.data() + cuts[i], dout.data() + cuts[i], N, cuts[i + 1] - cuts[i], OC);
                }
                EXPECT_EQ(kb, db) << "the biases' gradients sum the fp32 dout";
                if (lib == GemmBackend::Native) {
                    EXPECT_EQ(again, kept) << "native, acc " << acc;
                } else {
                    for (size_t i = 0; i < again.size(); i++)
                        ASSERT_NEAR(kept[i], again[i], 1e-5f * (1.0f + std::fabs(again[i]))) << "oneDNN, element " << i;
                }
            }
        }
}

// layernorm_backward_input + layernorm_backward_params over column ranges = layernorm_backward, to the bit.
TEST(LayerNormHalves, EqualTheWholeBackward) {
    const int N = 29, C = 150;  // column ranges [0, 48), [48, 150): blocks of 64 that do not line up
    for (const DType t : {DType::F32, DType::BF16, DType::F16}) {
        const std::vector<float> x = random(size_t(N) * C, 6), dout = random(size_t(N) * C, 7), w = random(size_t(C), 8);
        const auto xs = stored(x, t);
        std::vector<float> mean(N + 0u), rstd(N + 0u), y(size_t(N) * C), b(C + 0u, 0.1f);
        layernorm_forward(y.data(), DType::F32, mean.data(), rstd.data(), xs.data(), t, w.data(), b.data(), N, C, 1e-5f);
        std::vector<float> dx = random(size_t(N) * C, 9), dw = random(size_t(C), 10), db = random(size_t(C), 11);
        std::vector<float> dx2 = dx, dw2 = dw, db2 = db;
        layernorm_backward(dx.data(), dw.data(), db.data(), dout.data(), xs.data(), t, w.data(), mean.data(), rstd.data(),
                           N, C);
        layernorm_backward_input(dx2.data(), dout.data(), xs.data(), t, w.data(), mean.data(), rstd.data(), N, C);
        layernorm_backward_params(dw2.data(), db2.data(), dout.data(), xs.data(), t, mean.data(), rstd.data(), N, C, 48,
                                  C);
        layernorm_backward_params(dw2.data(), db2.data(), dout.data(), xs.data(), t, mean.data(), rstd.data(), N, C, 0, 48);
        EXPECT_EQ(dx, dx2);
        EXPECT_EQ(dw, dw2);
        EXPECT_EQ(db, db2);
    }
}

// Two lanes at once running bf16 products of their own (operands rounded through the thread's scratch,
// primitives made for one thread) get what the same products give run alone, outside any region.
TEST(Bf16InLanes, EqualTheProductsOutside) {
    const int M = 256, N = 384, K = 128;
    std::vector<std::vector<float>> a, w, outside(2), inside(2);
    for (int l = 0; l < 2; l++) {
        a.push_back(random(size_t(M) * K, 20 + unsigned(l)));
        w.push_back(random(size_t(N) * K, 30 + unsigned(l)));
        outside[size_t(l)].assign(size_t(M) * N, 0.0f);
        matmul_forward(outside[size_t(l)].data(), a.back().data(), w.back().data(), nullptr, M, K, N, false,
                       MatmulPrecision::bf16);
    }
    bool same[2] = {true, true};
#pragma omp parallel num_threads(2)
    {
        omp_set_num_threads(1);
        const int l = omp_get_thread_num();
        std::vector<float> out(size_t(M) * N);
        for (int rep = 0; rep < 20; rep++) {
            matmul_forward(out.data(), a[size_t(l)].data(), w[size_t(l)].data(), nullptr, M, K, N, false,
                           MatmulPrecision::bf16);
            same[l] = same[l] && out == outside[size_t(l)];
        }
    }
    EXPECT_TRUE(same[0]);
    EXPECT_TRUE(same[1]);
    EXPECT_EQ(omp_get_max_threads(), get_threads()) << "the lanes' thread count leaked out of their region";
}

int cpus_of_this_thread() {
    cpu_set_t s;
    pthread_getaffinity_np(pthread_self(), sizeof(s), &s);
    return CPU_COUNT(&s);
}

// Each OpenMP thread on a CPU of its own; a helper thread made after it gets every CPU back.
TEST(BindThreads, OneCpuPerThreadAndHelpersUnbound) {
    cpu_set_t all;
    sched_getaffinity(0, sizeof(all), &all);
    const int cpus = CPU_COUNT(&all);
    if (cpus < 2 || std::getenv("OMP_PROC_BIND")) GTEST_SKIP() << "needs 2 CPUs and OMP_PROC_BIND unset";
    const int before = get_threads();
    set_threads(2);
    ASSERT_TRUE(bind_threads());
    std::set<int> seen;
    for (int region = 0; region < 3; region++) {  // the same threads, still bound, region after region
#pragma omp parallel num_threads(2)
        {
            const int n = cpus_of_this_thread(), cpu = sched_getcpu();
#pragma omp critical
            {
                EXPECT_EQ(n, 1);
                seen.insert(cpu);
            }
        }
    }
    EXPECT_EQ(seen.size(), 2u);
    int helper = 0;
    std::thread([&] {
        unbind_this_thread();
        helper = cpus_of_this_thread();
    }).join();
    EXPECT_EQ(helper, cpus);
#pragma omp parallel num_threads(2)
    unbind_this_thread();  // the rest of this binary runs as it did
    set_threads(before);
}

}  // namespace
