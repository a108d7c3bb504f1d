// The native GEMMs (kernels/gemm/native.h) against a double-precision product of the same (rounded) values,
// on every operand layout and on sizes that leave partial tiles, panels and blocks of k; and the bits they
// promise: the same whatever the threads and however C is cut.
#include <gtest/gtest.h>
#include <omp.h>

#include <cstdint>
#include <array>
#include <cstring>
#include <vector>

#include "kernel_test_util.h"
#include "shardlm/core/aligned_buffer.h"
#include "shardlm/core/dtype.h"
#include "shardlm/kernels/gemm/native.h"

namespace shardlm::test {
namespace {

using kernels::native::Operand;

// A (rows x cols) matrix stored row-major (layout 'N') or column-major ('T'), as fp32 or bf16 values
struct Stored {
    int rows, cols;
    char layout;
    DType t;
    Vec values;                   // the values as the product sees them (bf16: already rounded)
    std::vector<uint16_t> bits;   // bf16 storage
    std::vector<float> f32;       // fp32 storage
    Stored(int r, int c, char l, DType type, uint32_t seed) : rows(r), cols(c), layout(l), t(type) {
        values = randn(size_t(r) * c, seed);
        const size_t n = values.size();
        if (t == DType::BF16) {
            bits.resize(n);
            for (size_t i = 0; i < n; i++) values[i] = bf16_to_f32(f32_to_bf16(values[i]));
        }
        // storage index of (i, j)
        f32.resize(t == DType::F32 ? n : 0);
        for (int i = 0; i < r; i++)
            for (int j = 0; j < c; j++) {
                const size_t s = layout == 'N' ? size_t(i) * c + j : size_t(j) * r + i;
                if (t == DType::F32) f32[s] = values[size_t(i) * c + j];
                else bits[s] = f32_to_bf16(values[size_t(i) * c + j]);
            }
    }
    Operand op() const {
        const void* d = t == DType::F32 ? static_cast<const void*>(f32.data()) : static_cast<const void*>(bits.data());
        return layout == 'N' ? Operand{d, t, cols, 1} : Operand{d, t, 1, rows};
    }
    // the part from element (r0, c0) on
    Operand op_from(int r0, int c0) const {
        Operand o = op();
        o.data = static_cast<const char*>(o.data) + (size_t(r0) * o.rs + size_t(c0) * o.cs) * dtype_bytes(t);
        return o;
    }
    float operator()(int i, int j) const { return values[size_t(i) * cols + j]; }
};

// f() with the OpenMP team at `threads`, then the team as it was
template <class F>
auto on_threads(int threads, const F& f) {
    const int saved = omp_get_max_threads();
    omp_set_num_threads(threads);
    auto r = f();
    omp_set_num_threads(saved);
    return r;
}

// sum_k A(i,k) B(k,j) in double, each operand's value rounded to bf16 first when `round`
std::vector<double> reference(const Stored& A, const Stored& B, bool round) {
    const int M = A.rows, K = A.cols, N = B.cols;
    auto r = [&](float x) { return round ? double(bf16_to_f32(f32_to_bf16(x))) : double(x); };
    std::vector<double> c(size_t(M) * N, 0.0);
    for (int i = 0; i < M; i++)
        for (int k = 0; k < K; k++) {
            const double a = r(A(i, k));
            for (int j = 0; j < N; j++) c[size_t(i) * N + j] += a * r(B(k, j));
        }
    return c;
}

// every |got - want| within tol * (sum_k |A(i,k) B(k,j)|): the error bound of an fp32 sum of K products
void expect_close(const Vec& got, long ldc, const std::vector<double>& want, const Stored& A, const Stored& B, double tol) {
    const int M = A.rows, K = A.cols, N = B.cols;
    int bad = 0;
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            double mag = 0;
            for (int k = 0; k < K; k++) mag += std::fabs(double(A(i, k)) * B(k, j));
            const double g = got[size_t(i) * ldc + j], w = want[size_t(i) * N + j];
            if (std::fabs(g - w) > tol * (mag + 1e-30) && bad++ < 5)
                ADD_FAILURE() << "C(" << i << "," << j << ") = " << g << ", want " << w << " (|A||B| " << mag << ")";
        }
    EXPECT_EQ(bad, 0);
}

struct Shape {
    int M, N, K;
};
// partial tiles (8 rows), panels (48 columns), items (192 columns), blocks of k (384 fp32, 768 bf16)
const Shape kShapes[] = {{1, 1, 1},    {7, 5, 3},     {8, 48, 16},   {9, 49, 17},   {37, 200, 385},
                         {64, 64, 64}, {100, 97, 770}, {259, 390, 129}, {16, 1000, 8}, {513, 17, 1537}};

TEST(NativeGemm, Fp32EveryLayoutAndEdge) {
    for (const Shape& s : kShapes)
        for (char la : {'N', 'T'})
            for (char lb : {'N', 'T'}) {
                SCOPED_TRACE(::testing::Message() << s.M << "x" << s.N << "x" << s.K << " " << la << lb);
                const Stored A(s.M, s.K, la, DType::F32, 1), B(s.K, s.N, lb, DType::F32, 2);
                const long ldc = s.N + 3;  // C rows wider than N: nothing outside the N columns is written
                Vec c(size_t(s.M) * ldc, 7.0f);
                kernels::native::sgemm(s.M, s.N, s.K, 1.0f, A.op(), B.op(), 0.0f, c.data(), ldc);
                expect_close(c, ldc, reference(A, B, false), A, B, 1e-6);
                for (int i = 0; i < s.M; i++)
                    for (long j = s.N; j < ldc; j++) ASSERT_EQ(c[size_t(i) * ldc + j], 7.0f);
            }
}

TEST(NativeGemm, Fp32AlphaAndBeta) {
    const int M = 19, N = 70, K = 400;  // two blocks of k: beta applies once
    const Stored A(M, K, 'N', DType::F32, 3), B(K, N, 'T', DType::F32, 4);
    const Vec c0 = randn(size_t(M) * N, 5);
    Vec c = c0;
    kernels::native::sgemm(M, N, K, 0.5f, A.op(), B.op(), -2.0f, c.data(), N);
    std::vector<double> want = reference(A, B, false);
    for (size_t i = 0; i < want.size(); i++) want[i] = 0.5 * want[i] - 2.0 * c0[i];
    expect_close(c, N, want, A, B, 2e-6);
    // beta 0 never reads C (NaN there stays out)
    Vec n(size_t(M) * N, NAN);
    kernels::native::sgemm(M, N, K, 1.0f, A.op(), B.op(), 0.0f, n.data(), N);
    for (float x : n) ASSERT_TRUE(std::isfinite(x));
}

TEST(NativeGemm, Bf16EveryOperandTypeLayoutAndEdge) {
    if (!kernels::native::has_bf16()) GTEST_SKIP() << "no AVX512_BF16 in this build";
    for (const Shape& s : kShapes)
        for (DType ta : {DType::BF16, DType::F32})
            for (char la : {'N', 'T'})
                for (char lb : {'N', 'T'}) {
                    const DType tb = ta == DType::BF16 ? DType::F32 : DType::BF16;  // mixed too
                    SCOPED_TRACE(::testing::Message() << s.M << "x" << s.N << "x" << s.K << " " << la << lb << " A "
                                                      << dtype_name(ta));
                    const Stored A(s.M, s.K, la, ta, 6), B(s.K, s.N, lb, tb, 7);
                    Vec c(size_t(s.M) * s.N, 7.0f);
                    kernels::native::gemm_bf16(c.data(), DType::F32, s.N, A.op(), B.op(), s.M, s.N, s.K, false, nullptr);
                    // products of bf16 values are exact in fp32: only the fp32 sums round
                    expect_close(c, s.N, reference(A, B, true), A, B, 1e-6);
                }
}

TEST(NativeGemm, Bf16AccumulateBiasAndBf16Output) {
    if (!kernels::native::has_bf16()) GTEST_SKIP() << "no AVX512_BF16 in this build";
    const int M = 21, N = 100, K = 1000;  // two blocks of k
    const Stored A(M, K, 'N', DType::BF16, 8), B(K, N, 'T', DType::BF16, 9);
    const std::vector<double> ab = reference(A, B, true);
    const Vec c0 = randn(size_t(M) * N, 10), bias = randn(size_t(N), 11);
    Vec c = c0;
    kernels::native::gemm_bf16(c.data(), DType::F32, N, A.op(), B.op(), M, N, K, true, nullptr);
    std::vector<double> want(ab.size());
    for (size_t i = 0; i < ab.size(); i++) want[i] = ab[i] + c0[i];
    expect_close(c, N, want, A, B, 2e-6);
    // bias, C in bf16: the fp32 sum plus the bias, rounded once
    std::vector<uint16_t> c16(size_t(M) * N, 0);
    Vec f32(size_t(M) * N);
    kernels::native::gemm_bf16(f32.data(), DType::F32, N, A.op(), B.op(), M, N, K, false, bias.data());
    kernels::native::gemm_bf16(c16.data(), DType::BF16, N, A.op(), B.op(), M, N, K, false, bias.data());
    for (size_t i = 0; i < c16.size(); i++) ASSERT_EQ(c16[i], f32_to_bf16(f32[i])) << i;
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) ASSERT_NEAR(f32[size_t(i) * N + j], ab[size_t(i) * N + j] + bias[j], 1e-3);
}

// The bits of an element do not depend on the threads, on the rows or columns computed with it, or on
// where it falls in a tile: a row block, a column block and one row alone equal the whole product.
TEST(NativeGemm, BitsDoNotDependOnThreadsOrCut) {
    const int M = 203, N = 421, K = 900;
    for (DType t : {DType::F32, DType::BF16}) {
        if (t == DType::BF16 && !kernels::native::has_bf16()) continue;
        SCOPED_TRACE(dtype_name(t));
        const Stored A(M, K, 'N', t, 12), B(K, N, 'T', t, 13);
        auto run = [&](int m0, int m1, int n0, int n1, int threads) {
            return on_threads(threads, [&] {
                Vec c(size_t(m1 - m0) * (n1 - n0));
                const Operand as = A.op_from(m0, 0), bs = B.op_from(0, n0);
                if (t == DType::F32) kernels::native::sgemm(m1 - m0, n1 - n0, K, 1.0f, as, bs, 0.0f, c.data(), n1 - n0);
                else kernels::native::gemm_bf16(c.data(), DType::F32, n1 - n0, as, bs, m1 - m0, n1 - n0, K, false, nullptr);
                return c;
            });
        };
        const Vec whole = run(0, M, 0, N, 1);
        EXPECT_EQ(run(0, M, 0, N, 2), whole);
        EXPECT_EQ(run(0, M, 0, N, 3), whole);
        auto expect_part = [&](int m0, int m1, int n0, int n1) {
            const Vec part = run(m0, m1, n0, n1, 2);
            for (int i = m0; i < m1; i++)
                for (int j = n0; j < n1; j++)
                    ASSERT_EQ(part[size_t(i - m0) * (n1 - n0) + (j - n0)], whole[size_t(i) * N + j]) << i << "," << j;
        };
        expect_part(37, 150, 0, N);  // rows from the middle of a tile
        expect_part(0, M, 101, 333);  // columns from the middle of a panel
        expect_part(200, 201, 5, 6);  // one element
    }
}

// A stored by columns (a weight gradient's transposed operand) gives the bits of the same A stored by rows,
// whether sgemm packs its strips first (wide products) or, on AVX2, copies each tile's rows of a block as it
// goes (at most 64 columns: a narrow input's weight gradient; 96 rows at a time, rows 96-191 of 193 the last
// whole group, without reading past them), on one thread or three, rows cut anywhere, one row of it alone,
// and with alpha and beta.
TEST(NativeGemm, ColumnMajorAGivesTheBitsOfRowMajorA) {
    const Shape shapes[] = {{513, 17, 1537}, {300, 64, 800}, {300, 65, 800}, {7, 64, 5}, {193, 40, 400}, {40, 100, 390}};
    for (const Shape& s : shapes) {
        SCOPED_TRACE(::testing::Message() << s.M << "x" << s.N << "x" << s.K);
        const Stored Ar(s.M, s.K, 'N', DType::F32, 21), Ac(s.M, s.K, 'T', DType::F32, 21), B(s.K, s.N, 'N', DType::F32, 22);
        const Vec c0 = randn(size_t(s.M) * s.N, 23);
        // rows m0 .. m1 of alpha A B + beta C0
        auto run = [&](const Stored& A, int m0, int m1, int threads, float alpha = 1.0f, float beta = 0.0f) {
            return on_threads(threads, [&] {
                Vec c(c0.begin() + long(m0) * s.N, c0.begin() + long(m1) * s.N);
                kernels::native::sgemm(m1 - m0, s.N, s.K, alpha, A.op_from(m0, 0), B.op(), beta, c.data(), s.N);
                return c;
            });
        };
        const Vec rows = run(Ar, 0, s.M, 1);
        EXPECT_EQ(run(Ac, 0, s.M, 1), rows);
        EXPECT_EQ(run(Ac, 0, s.M, 3), rows);
        EXPECT_EQ(run(Ac, 0, s.M, 2, 0.5f, -2.0f), run(Ar, 0, s.M, 1, 0.5f, -2.0f));
        auto expect_rows = [&](int m0, int m1) {
            const Vec part = run(Ac, m0, m1, 2);
            for (int i = m0; i < m1; i++)
                for (int j = 0; j < s.N; j++)
                    ASSERT_EQ(part[size_t(i - m0) * s.N + j], rows[size_t(i) * s.N + j]) << i << "," << j;
        };
        if (s.M > 8) expect_rows(s.M / 3 + 1, s.M - 2);  // rows from the middle of a tile
        expect_rows(s.M - 1, s.M);                        // one row of a wider A: columns s.M floats apart
    }
}

// A packed B read by many products, each a range of its rows and columns (attention's tiles): the same
// bits as sgemm on those ranges (one block of k), with A given as its rows or as its columns. Ranges of at
// most 16, 32 or 48 columns (a small head size) run the 64-column panels' narrow tiles (12, 12 or 8 rows):
// M 29 takes whole tiles and a part.
TEST(NativeGemm, PackedProductsReadTheirRangesOfB) {
    const int K = 150, N = 130;
    for (int nr : {48, 64})
    for (char lb : {'N', 'T'}) {
        const Stored B(K, N, lb, DType::F32, 14);
        AlignedBuffer<float> storage(kernels::native::packed_b_floats(K, N, nr));
        const kernels::native::PackedB pb = kernels::native::pack_b(B.op(), K, N, storage.data(), nr);
        for (char la : {'N', 'T'})
            for (int M : {11, 29})
            for (auto [k0, k1, n0, n1] : {std::array{0, K, 0, N}, std::array{17, 111, nr, 130}, std::array{5, 6, 2 * nr, 130},
                                          std::array{0, K, 0, 16}, std::array{3, 100, nr, nr + 32}, std::array{9, 80, 0, 20},
                                          std::array{1, 150, 0, 47}}) {
                SCOPED_TRACE(::testing::Message() << "panels " << nr << " " << lb << la << " M " << M << " k " << k0 << ".."
                                                  << k1 << " n " << n0 << ".." << n1);
                // C's rows ldc apart, 16 columns past the product's (attention writes a head's columns of a wider
                // row): the columns between must keep their 3.0f
                const int nk = k1 - k0, nn = n1 - n0, ldc = nn + 16;
                const Stored A(M, nk, la, DType::F32, 15);
                Vec got(size_t(M) * ldc, 3.0f), want(got.size(), 3.0f);
                kernels::native::gemm_packed(M, k0, k1, n0, n1, 0.5f, A.op(), pb, 0.0f, got.data(), ldc);
                const Operand bs = B.op();  // B's block from (k0, n0)
                const Operand block{static_cast<const float*>(bs.data) + long(k0) * bs.rs + long(n0) * bs.cs, DType::F32,
                                    bs.rs, bs.cs};
                kernels::native::sgemm(M, nn, nk, 0.5f, A.op(), block, 0.0f, want.data(), ldc);
                EXPECT_EQ(got, want);
                for (int i = 0; i < M; i++)
                    for (int j = nn; j < ldc; j++) ASSERT_EQ(got[size_t(i) * ldc + j], 3.0f) << i << "," << j;
                // accumulating: C += the product
                Vec acc(got.size(), 1.0f), acc_want(got.size(), 1.0f);
                kernels::native::gemm_packed(M, k0, k1, n0, n1, 0.5f, A.op(), pb, 1.0f, acc.data(), ldc);
                kernels::native::sgemm(M, nn, nk, 0.5f, A.op(), block, 1.0f, acc_want.data(), ldc);
                EXPECT_EQ(acc, acc_want);
            }
    }
}

}  // namespace
}  // namespace shardlm::test
