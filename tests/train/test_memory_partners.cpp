// Where each rank's checkpoint kept in memory is copied (train/memory_checkpoint.h, choose_partners): on
// another host whenever the hosts allow it, every rank keeping exactly one other rank's copy.
#include <gtest/gtest.h>

#include <set>
#include <string>
#include <vector>

#include "shardlm/train/memory_checkpoint.h"

namespace {

using shardlm::train::choose_partners;

// next: a dp ring over dp x tp ranks (rank = tp_rank + tp * dp_rank)
std::vector<int> dp_ring(int dp, int tp) {
    std::vector<int> next(size_t(dp * tp));
    for (int r = 0; r < dp * tp; r++) next[size_t(r)] = r % tp + tp * ((r / tp + 1) % dp);
    return next;
}

// ranks filled into hosts in order, per_host each
std::vector<std::string> hosts_of(int n, int per_host) {
    std::vector<std::string> h;
    for (int r = 0; r < n; r++) h.push_back("node" + std::to_string(r / per_host));
    return h;
}

void expect_permutation(const std::vector<int>& p) {
    std::set<int> seen(p.begin(), p.end());
    EXPECT_EQ(seen.size(), p.size());
    for (size_t r = 0; r < p.size(); r++) EXPECT_NE(p[r], int(r)) << "rank " << r << " keeps its own copy";
}

TEST(MemoryPartners, TheNextReplicaWhenItIsOnAnotherHost) {
    // dp4 x tp2 on 4 nodes of 2: the next replica is 2 ranks on, on the next node
    const std::vector<int> next = dp_ring(4, 2);
    EXPECT_EQ(choose_partners(next, hosts_of(8, 2)), next);
    // one machine: the next replica (a lost process's copy survives it; a lost machine takes both)
    EXPECT_EQ(choose_partners(next, hosts_of(8, 8)), next);
    EXPECT_EQ(choose_partners({0}, {"a"}), std::vector<int>{-1});
}

TEST(MemoryPartners, AnotherHostWhenTheReplicaSharesOne) {
    // dp8 on 2 nodes of 4 (consecutive ranks on a node): the next replica is on the same node for 6 of 8
    for (const auto& [n, per] : {std::pair{8, 4}, std::pair{12, 4}, std::pair{6, 3}, std::pair{16, 8}}) {
        const std::vector<std::string> hosts = hosts_of(n, per);
        const std::vector<int> p = choose_partners(dp_ring(n, 1), hosts);
        expect_permutation(p);
        for (int r = 0; r < n; r++) EXPECT_NE(hosts[size_t(p[size_t(r)])], hosts[size_t(r)]) << n << " ranks, rank " << r;
    }
    // hosts of unequal sizes: still one copy per rank, each elsewhere where the sizes allow
    const std::vector<std::string> uneven = {"a", "a", "a", "b"};
    const std::vector<int> p = choose_partners(dp_ring(4, 1), uneven);
    expect_permutation(p);
    EXPECT_EQ(uneven[size_t(p[0])], "b");
    EXPECT_EQ(uneven[size_t(p[3])], "a");
}

}  // namespace
