// Process grid: factorisation errors, the Megatron layout, and group membership.
#include <numeric>
#include <string>
#include <vector>

#include "comm_test.h"
#include "shardlm/comm/grid.h"
#include "shardlm/core/check.h"

namespace shardlm::comm::test {
namespace {

using GridTest = CommTest;

std::string error_of(GridDims d, int world) {
    try {
        Grid::resolve(d, world);
    } catch (const shardlm::Error& e) {
        return e.what();
    }
    return "";
}

TEST_F(GridTest, FactorisationErrorsListEveryFactor) {
    EXPECT_EQ(error_of({3, 1, 1}, 4), "invalid parallel layout: dp(3) * tp(1) * pp(1) = 3 != world size 4");
    EXPECT_EQ(error_of({2, 2, 2}, 4), "invalid parallel layout: dp(2) * tp(2) * pp(2) = 8 != world size 4");
    EXPECT_EQ(error_of({0, 3, 1}, 4), "invalid parallel layout: tp(3) * pp(1) = 3 does not divide world size 4");
    EXPECT_NE(error_of({1, 0, 1}, 1).find("tp must be >= 1"), std::string::npos);
    EXPECT_NE(error_of({-1, 1, 1}, 1).find("dp must be >= 1"), std::string::npos);
    GridDims d = Grid::resolve({0, 2, 2}, 8);
    EXPECT_EQ(d.dp, 2);
    // Through create() on this world too.
    const int n = nranks();
    EXPECT_THROW(Grid::create(world(), {n + 1, 1, 1}), shardlm::Error);
}

TEST_F(GridTest, MegatronLayoutWorkedExample) {
    // 8 ranks, tp = 2, dp = 2, pp = 2 (the header's example), without MPI.
    const GridDims d{2, 2, 2};
    auto group_of = [&](int rank, char which) {
        GridCoords c = Grid::coords_of(d, rank);
        std::vector<int> g;
        int len = which == 't' ? d.tp : which == 'd' ? d.dp : d.pp;
        for (int i = 0; i < len; i++) {
            GridCoords o = c;
            (which == 't' ? o.tp : which == 'd' ? o.dp : o.pp) = i;
            g.push_back(Grid::rank_of(d, o));
        }
        return g;
    };
    for (int r = 0; r < 8; r++) EXPECT_EQ(Grid::rank_of(d, Grid::coords_of(d, r)), r);
    EXPECT_EQ(group_of(0, 't'), (std::vector<int>{0, 1}));
    EXPECT_EQ(group_of(6, 't'), (std::vector<int>{6, 7}));
    EXPECT_EQ(group_of(0, 'd'), (std::vector<int>{0, 2}));
    EXPECT_EQ(group_of(5, 'd'), (std::vector<int>{5, 7}));
    EXPECT_EQ(group_of(4, 'd'), (std::vector<int>{4, 6}));
    EXPECT_EQ(group_of(1, 'p'), (std::vector<int>{1, 5}));
    EXPECT_EQ(group_of(3, 'p'), (std::vector<int>{3, 7}));
    GridCoords c5 = Grid::coords_of(d, 5);
    EXPECT_EQ(c5.tp, 1);
    EXPECT_EQ(c5.dp, 0);
    EXPECT_EQ(c5.pp, 1);
}

TEST_F(GridTest, DefaultIsPureDataParallel) {
    const int n = nranks();
    Grid g = Grid::create(world(), {});
    EXPECT_EQ(g.dp_size(), n);
    EXPECT_EQ(g.tp_size(), 1);
    EXPECT_EQ(g.pp_size(), 1);
    EXPECT_EQ(g.dp_rank(), rank());
    std::vector<int> all(static_cast<size_t>(n));
    std::iota(all.begin(), all.end(), 0);
    EXPECT_EQ(g.dp().members(), all);
    EXPECT_EQ(g.tp().members(), std::vector<int>{rank()});
    EXPECT_EQ(g.pp().members(), std::vector<int>{rank()});
    double x = 1;
    g.dp().all_reduce_sum(&x, 1);
    EXPECT_EQ(x, double(n));
}

TEST_F(GridTest, FourRanksDp2Tp2) {
    if (nranks() != 4) GTEST_SKIP() << "needs 4 ranks";
    Grid g = Grid::create(world(), {2, 2, 1});
    const int r = rank();
    EXPECT_EQ(g.tp_rank(), r % 2);
    EXPECT_EQ(g.dp_rank(), r / 2);
    EXPECT_EQ(g.pp_rank(), 0);
    EXPECT_EQ(g.tp().members(), (std::vector<int>{r / 2 * 2, r / 2 * 2 + 1}));
    EXPECT_EQ(g.dp().members(), (std::vector<int>{r % 2, r % 2 + 2}));
    EXPECT_EQ(g.pp().members(), std::vector<int>{r});
    EXPECT_EQ(g.dp().rank(), g.dp_rank());
    EXPECT_EQ(g.tp().rank(), g.tp_rank());
    // Each group's all-reduce sees exactly its members.
    double x = r;
    g.dp().all_reduce_sum(&x, 1);
    EXPECT_EQ(x, double(r % 2 + r % 2 + 2));
    double y = r;
    g.tp().all_reduce_sum(&y, 1);
    EXPECT_EQ(y, double(r / 2 * 4 + 1));
    // Bytes on a sub-group follow the sub-group size.
    std::vector<float> v(1024, 1.0f);
    g.dp().reset_stats();
    g.dp().all_reduce_sum(v.data(), v.size());
    EXPECT_EQ(g.dp().stats()[OpKind::AllReduce].bytes_sent, ring_bytes(OpKind::AllReduce, 4096, 2));
}

TEST_F(GridTest, FourRanksDp4) {
    if (nranks() != 4) GTEST_SKIP() << "needs 4 ranks";
    Grid g = Grid::create(world(), {4, 1, 1});
    EXPECT_EQ(g.dp().members(), (std::vector<int>{0, 1, 2, 3}));
    EXPECT_EQ(g.dp_rank(), rank());
    EXPECT_EQ(g.tp().size(), 1);
    EXPECT_EQ(g.pp().size(), 1);
    // pp = 2: pp groups {0,2} {1,3}? No: with dp = 2, tp = 1, pp = 2, rank = dp + 2 * pp.
    Grid h = Grid::create(world(), {0, 1, 2});
    EXPECT_EQ(h.dp_size(), 2);
    EXPECT_EQ(h.pp().members(), (std::vector<int>{rank() % 2, rank() % 2 + 2}));
    EXPECT_EQ(h.dp().members(), (std::vector<int>{rank() / 2 * 2, rank() / 2 * 2 + 1}));
}

// The worked example of grid.h: 8 ranks with dp = 2, cp = 2, tp = 2, as pure coordinates.
TEST(GridCoordinates, ContextParallelSitsBetweenTensorAndData) {
    const GridDims d{2, 2, 1, 2};
    const int cp_rank[] = {0, 0, 1, 1, 0, 0, 1, 1}, dp_rank[] = {0, 0, 0, 0, 1, 1, 1, 1};
    for (int r = 0; r < 8; r++) {
        const GridCoords c = Grid::coords_of(d, r);
        EXPECT_EQ(c.tp, r % 2);
        EXPECT_EQ(c.cp, cp_rank[r]);
        EXPECT_EQ(c.dp, dp_rank[r]);
        EXPECT_EQ(c.pp, 0);
        EXPECT_EQ(Grid::rank_of(d, c), r);
    }
    EXPECT_EQ(Grid::resolve({0, 2, 1, 2}, 8).dp, 2);
    EXPECT_THROW(Grid::resolve({0, 1, 1, 2}, 3), shardlm::Error);
}

// dp = 2, cp = 2: the cp groups are neighbours, the gradients' group is all four, cp fastest.
TEST_F(GridTest, FourRanksDp2Cp2) {
    if (nranks() != 4) GTEST_SKIP() << "needs 4 ranks";
    Grid g = Grid::create(world(), {2, 1, 1, 2});
    const int r = rank();
    EXPECT_EQ(g.cp_rank(), r % 2);
    EXPECT_EQ(g.dp_rank(), r / 2);
    EXPECT_EQ(g.cp().members(), (std::vector<int>{r / 2 * 2, r / 2 * 2 + 1}));
    EXPECT_EQ(g.dp().members(), (std::vector<int>{r % 2, r % 2 + 2}));
    EXPECT_EQ(g.dp_cp().members(), (std::vector<int>{0, 1, 2, 3}));
    EXPECT_EQ(g.dp_cp().rank(), g.dp_cp_rank());
    EXPECT_EQ(g.dp_cp_size(), 4);
    EXPECT_EQ(g.tp().size(), 1);
    double x = r;
    g.cp().all_reduce_sum(&x, 1);
    EXPECT_EQ(x, double(r / 2 * 4 + 1));
    // without cp the gradients' group is the dp group itself
    Grid h = Grid::create(world(), {4, 1, 1});
    EXPECT_EQ(&h.dp_cp(), &h.dp());
    EXPECT_EQ(h.cp().size(), 1);
}

// Expert parallelism carved out of dp 4 (ep 2): the ep groups are consecutive dp ranks {0, 1}, {2, 3}; the
// ranks holding the same experts are {0, 2} and {1, 3}; without ep the experts' group is dp itself; an ep
// that does not divide dp is refused.
TEST_F(GridTest, FourRanksDp4Ep2) {
    if (nranks() != 4) GTEST_SKIP() << "needs 4 ranks";
    Grid g = Grid::create(world(), {4, 1, 1, 1, 2});
    const int r = rank();
    EXPECT_EQ(g.ep_size(), 2);
    EXPECT_EQ(g.ep_rank(), r % 2);
    EXPECT_EQ(g.ep().members(), (std::vector<int>{r / 2 * 2, r / 2 * 2 + 1}));
    EXPECT_EQ(g.edp().members(), (std::vector<int>{r % 2, r % 2 + 2}));
    EXPECT_EQ(g.ep().rank(), g.ep_rank());
    Grid h = Grid::create(world(), {4, 1, 1});
    EXPECT_EQ(&h.edp(), &h.dp());
    EXPECT_EQ(h.ep().size(), 1);
    EXPECT_THROW(Grid::resolve({4, 1, 1, 1, 3}, 4), Error);
}

}  // namespace
}  // namespace shardlm::comm::test
