// data/loader: which tokens make each row, in sequential and random order.
#include <gtest/gtest.h>

#include <numeric>
#include <set>
#include <vector>

#include "shardlm/data/loader.h"

namespace {

using shardlm::data::BatchLoader;

// A shard whose token at position i is i (mod 65536), so a row's first input is where it starts.
std::vector<uint16_t> ramp(size_t n) {
    std::vector<uint16_t> t(n);
    std::iota(t.begin(), t.end(), 0);
    return t;
}

TEST(BatchLoader, SequentialRowsWrapAround) {
    const int T = 8, G = 3;
    BatchLoader l(ramp(8 * 5 + 1), T, shardlm::data::Order::Sequential, 1, "ramp");
    ASSERT_EQ(l.num_rows(), 5);
    std::vector<int> in(T), tg(T);
    for (int k = 0; k < 4; k++)
        for (int j = 0; j < G; j++) {
            l.fill(k, G, j, in.data(), tg.data());
            int r = (k * G + j) % 5;
            for (int t = 0; t < T; t++) {
                ASSERT_EQ(in[t], r * T + t);
                ASSERT_EQ(tg[t], r * T + t + 1);
            }
        }
}

// Each epoch: one phase in [0, T) for all its rows, every row at that phase exactly once, every
// window inside the shard; the same (seed, epoch) gives the same rows, and phases change over epochs.
TEST(BatchLoader, RandomEpochsArePermutationsAtAPhase) {
    const int T = 16, G = 4;
    const size_t n = 16 * 50 + 7;
    BatchLoader l(ramp(n), T, shardlm::data::Order::Random, 42, "ramp"), again(ramp(n), T, shardlm::data::Order::Random, 42, "ramp");
    const int64_t rows = (int64_t(n) - T) / T;
    std::vector<int> in(T), tg(T), in2(T), tg2(T);
    std::set<int> phases;
    int64_t r = 0;
    for (int epoch = 0; epoch < 6; epoch++) {
        std::set<int> starts;
        for (int64_t i = 0; i < rows; i++, r++) {
            l.fill(r / G, G, int(r % G), in.data(), tg.data());
            again.fill(r / G, G, int(r % G), in2.data(), tg2.data());
            ASSERT_EQ(in, in2);
            for (int t = 0; t < T; t++) ASSERT_EQ(tg[t], in[t] + 1);
            ASSERT_LE(size_t(in[0]) + T + 1, n);
            starts.insert(in[0]);
        }
        ASSERT_EQ(int64_t(starts.size()), rows) << "epoch " << epoch << " repeats a row";
        int phase = *starts.begin() % T;
        for (int s : starts) ASSERT_EQ(s % T, phase) << "epoch " << epoch << " mixes phases";
        phases.insert(phase);
    }
    EXPECT_GT(phases.size(), 1u) << "every epoch cut the rows at the same phase";
}

TEST(BatchLoader, RandomOrderNeedsTwoRows) {
    EXPECT_THROW(BatchLoader(ramp(20), 16, shardlm::data::Order::Random, 1, "tiny.bin"), std::exception);
    EXPECT_NO_THROW(BatchLoader(ramp(20), 16, shardlm::data::Order::Sequential, 1, "tiny.bin"));
}

}  // namespace
