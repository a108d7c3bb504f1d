// --collectives mpi (comm/mpi_collectives.h) against our ring: the MPI library's all-reduce,
// reduce-scatter, all-gather and broadcast give the ring's results (sums to 1e-6 relative, bf16 sums
// within a bf16 step, moves bit for bit), blocking and non-blocking, in place and not, and count the
// ring's bytes. Run under mpirun with 2, 3 and 4 ranks (3: uneven blocks) and without (size 1).
#include <cmath>
#include <random>
#include <vector>

#include "comm_test.h"
#include "shardlm/core/dtype.h"

namespace shardlm::comm::test {
namespace {

class MpiBackend : public CommTest {
protected:
    void TearDown() override {
        set_collectives(CollectivesBackend::Ring);
        CommTest::TearDown();
    }
    std::vector<float> values(size_t n, uint32_t seed) {
        std::mt19937 rng(seed + 977u * uint32_t(rank()));
        std::normal_distribution<float> d(0.0f, 1.0f);
        std::vector<float> v(n);
        for (auto& x : v) x = d(rng);
        return v;
    }
    // Runs fn under each backend; returns the bytes this rank's world counted for each.
    template <typename F>
    std::pair<uint64_t, uint64_t> both(F fn) {
        uint64_t bytes[2];
        for (int b = 0; b < 2; b++) {
            set_collectives(b == 0 ? CollectivesBackend::Ring : CollectivesBackend::Mpi);
            world().reset_stats();
            fn(b);
            bytes[b] = world().stats().total_bytes_sent();
        }
        set_collectives(CollectivesBackend::Ring);
        return {bytes[0], bytes[1]};
    }
};

float rel(const std::vector<float>& a, const std::vector<float>& b) {
    float worst = 0, scale = 1e-30f;
    for (size_t i = 0; i < a.size(); i++) worst = std::max(worst, std::fabs(a[i] - b[i])), scale = std::max(scale, std::fabs(b[i]));
    return worst / scale;
}

TEST_F(MpiBackend, AllReduceEqualsTheRingToRounding) {
    for (size_t n : {size_t(1), size_t(7), size_t(1000), size_t(3 * 262144 + 5)}) {
        const std::vector<float> x = values(n, 1);
        std::vector<float> out[2];
        const auto [ring, mpi] = both([&](int b) {
            out[b] = x;
            world().all_reduce_sum(out[b].data(), n);
        });
        EXPECT_LT(rel(out[1], out[0]), 1e-6f) << n;
        EXPECT_EQ(ring, mpi) << n << ": the MPI backend counts the ring's bytes";
        // non-blocking, and double and max
        std::vector<float> nb = x;
        set_collectives(CollectivesBackend::Mpi);
        Request r = world().iall_reduce_sum(nb.data(), n);
        r.wait();
        EXPECT_EQ(nb, out[1]) << n << ": the non-blocking call is the same MPI reduction";
        std::vector<double> d(n, double(rank()) + 0.5);
        world().all_reduce_sum(d.data(), n);
        EXPECT_DOUBLE_EQ(d[0], nranks() * (nranks() - 1) / 2.0 + 0.5 * nranks());
        std::vector<float> m(n, float(rank()));
        world().all_reduce_max(m.data(), n);
        EXPECT_EQ(m[n - 1], float(nranks() - 1));
        set_collectives(CollectivesBackend::Ring);
    }
}

TEST_F(MpiBackend, Bf16SumsAndReduceScatter) {
    const size_t m = 1001, n = m * size_t(nranks());
    const std::vector<float> x = values(n, 2);
    std::vector<uint16_t> h(n);
    for (size_t i = 0; i < n; i++) h[i] = f32_to_bf16(x[i]);
    std::vector<uint16_t> out16[2];
    std::vector<float> rs[2];
    const auto [ring, mpi] = both([&](int b) {
        out16[b] = h;
        world().all_reduce_sum(out16[b].data(), n, DType::BF16);
        rs[b].assign(m, 0.0f);
        world().reduce_scatter_sum(x.data(), rs[b].data(), m);
    });
    for (size_t i = 0; i < n; i++) {
        const float a = bf16_to_f32(out16[0][i]), b = bf16_to_f32(out16[1][i]);
        // each addition rounds to bf16: orders differ by a few bf16 steps of the sum at most
        EXPECT_NEAR(a, b, 4 * (nranks() - 1) * std::max(std::fabs(a), 1.0f) / 128) << i;
    }
    EXPECT_LT(rel(rs[1], rs[0]), 1e-6f);
    EXPECT_EQ(ring, mpi);
}

TEST_F(MpiBackend, AllGatherAndBroadcastMoveTheSameBits) {
    const size_t m = 12345;
    const std::vector<float> mine = values(m, 3);
    std::vector<float> out[2], inplace[2], bc[2];
    const auto [ring, mpi] = both([&](int b) {
        out[b].assign(m * size_t(nranks()), -1.0f);
        world().all_gather(mine.data(), out[b].data(), m);
        inplace[b].assign(m * size_t(nranks()), 0.0f);
        std::copy(mine.begin(), mine.end(), inplace[b].begin() + std::ptrdiff_t(m * size_t(rank())));
        world().all_gather(inplace[b].data() + m * size_t(rank()), inplace[b].data(), m);
        for (int root = 0; root < nranks(); root++) {
            bc[b] = mine;
            world().broadcast(bc[b].data(), m, root);
        }
    });
    EXPECT_EQ(out[0], out[1]);
    EXPECT_EQ(inplace[0], inplace[1]);
    EXPECT_EQ(inplace[1], out[1]);
    EXPECT_EQ(bc[0], bc[1]);
    EXPECT_EQ(ring, mpi);
}

}  // namespace
}  // namespace shardlm::comm::test
