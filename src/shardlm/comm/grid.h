// comm/grid.h: the process grid world = dp * cp * tp * pp and its sub-groups.
//
// Ranks are laid out tensor-parallel fastest, then context-parallel, then data-parallel, then pipeline
// (Megatron-Core's order tp-cp-dp-pp):
//     rank = tp_rank + tp * (cp_rank + cp * (dp_rank + dp * pp_rank))
// so the ranks of a tp group are neighbours (the chattiest group stays on one node), and the cp ring
// (every layer's keys and values) comes next.
// Worked example, 8 ranks with tp = 2, dp = 2, pp = 2 (cp = 1):
//     rank      0  1  2  3  4  5  6  7
//     tp_rank   0  1  0  1  0  1  0  1
//     dp_rank   0  0  1  1  0  0  1  1
//     pp_rank   0  0  0  0  1  1  1  1
//     tp groups {0,1} {2,3} {4,5} {6,7}    (same dp_rank and pp_rank)
//     dp groups {0,2} {1,3} {4,6} {5,7}    (same tp_rank and pp_rank)
//     pp groups {0,4} {1,5} {2,6} {3,7}    (same tp_rank and dp_rank)
// and 8 ranks with dp = 2, cp = 2, tp = 2 (pp = 1):
//     rank      0  1  2  3  4  5  6  7
//     tp_rank   0  1  0  1  0  1  0  1
//     cp_rank   0  0  1  1  0  0  1  1
//     dp_rank   0  0  0  0  1  1  1  1
//     cp groups {0,2} {1,3} {4,6} {5,7}    (one sequence's slices: the same rows of the batch)
//     dp groups {0,4} {1,5} {2,6} {3,7}
//     dp x cp   {0,2,4,6} {1,3,5,7}        (the ranks that hold the same parameters)
// Within each group, ranks are ordered by the group's own coordinate (dp().rank() == dp_rank()); in the
// dp x cp group (dp_cp()) cp fastest: rank cp_rank + cp * dp_rank. Every rank of it computes gradients
// of the same parameters from different tokens, so gradients are summed over it and ZeRO shards over it;
// with cp = 1 it is the dp group itself.
#pragma once
#include "shardlm/comm/group.h"

namespace shardlm::comm {

struct GridDims {
    int dp = 0;  // 0: world size / (cp * tp * pp)
    int tp = 1;
    int pp = 1;
    int cp = 1;
    // expert parallelism (model/moe.h): the dp ranks in groups of ep consecutive ones, each holding 1/ep
    // of every MoE layer's experts; not a factor of the world (it divides dp)
    int ep = 1;
};

struct GridCoords {
    int dp = 0, tp = 0, pp = 0, cp = 0;
};

class Grid {
public:
    // Collective over world (three MPI_Comm_split calls; five with cp > 1). Throws on a wrong
    // factorisation, e.g. "invalid parallel layout: dp(3) * tp(1) * pp(1) = 3 != world size 4".
    static Grid create(const Group& world, GridDims dims);
    // Checks dims against world_size and fills in dp = 0. Pure (no MPI).
    static GridDims resolve(GridDims dims, int world_size);
    static int rank_of(const GridDims& d, const GridCoords& c) {
        return c.tp + d.tp * (c.cp + d.cp * (c.dp + d.dp * c.pp));
    }
    static GridCoords coords_of(const GridDims& d, int rank) {
        return {(rank / (d.tp * d.cp)) % d.dp, rank % d.tp, rank / (d.tp * d.cp * d.dp), (rank / d.tp) % d.cp};
    }

    const GridDims& dims() const { return dims_; }
    int world_rank() const { return world_rank_; }
    int world_size() const { return dims_.dp * dims_.cp * dims_.tp * dims_.pp; }
    int dp_rank() const { return coords_.dp; }
    int tp_rank() const { return coords_.tp; }
    int pp_rank() const { return coords_.pp; }
    int cp_rank() const { return coords_.cp; }
    int dp_size() const { return dims_.dp; }
    int tp_size() const { return dims_.tp; }
    int pp_size() const { return dims_.pp; }
    int cp_size() const { return dims_.cp; }

    // Collective over world (every rank calls it): the group of the two pipeline stages that hold the
    // tied token embedding, the embedding's (`embedding_stage`) and the head's (`head_stage`), at this
    // rank's dp and tp coordinates, ordered by stage; every other rank, and every rank when the two
    // are one stage, gets a group of its own (size 1).
    Group tied_embedding_group(const Group& world, int embedding_stage, int head_stage) const;

    Group& dp() { return dp_; }
    Group& tp() { return tp_; }
    Group& pp() { return pp_; }
    Group& cp() { return cp_; }  // a self group with cp = 1
    Group& dp_cp() { return dims_.cp > 1 ? dp_cp_ : dp_; }
    const Group& dp() const { return dp_; }
    const Group& tp() const { return tp_; }
    const Group& pp() const { return pp_; }
    const Group& cp() const { return cp_; }
    const Group& dp_cp() const { return dims_.cp > 1 ? dp_cp_ : dp_; }
    // the dp x cp group's size and this rank's place in it
    int dp_cp_size() const { return dims_.dp * dims_.cp; }
    int dp_cp_rank() const { return coords_.cp + dims_.cp * coords_.dp; }
    // Expert parallelism: the ep group (dp ranks ep r .. ep r + ep - 1: their tokens meet their experts
    // in all-to-alls) and the expert-data-parallel group (the ranks holding the same experts: the dp / ep
    // ranks of the same ep rank, times cp; their gradients are summed and ZeRO shards them there). With
    // ep = 1: a self group, and dp_cp().
    Group& ep() { return ep_; }
    const Group& ep() const { return ep_; }
    Group& edp() { return dims_.ep > 1 ? edp_ : dp_cp(); }
    const Group& edp() const { return dims_.ep > 1 ? edp_ : dp_cp(); }
    int ep_size() const { return dims_.ep; }
    int ep_rank() const { return coords_.dp % dims_.ep; }

private:
    struct Groups {
        Group dp, tp, pp, cp, dp_cp, ep, edp;
    };
    Grid(GridDims d, int world_rank, Groups g);
    GridDims dims_;
    int world_rank_;
    GridCoords coords_;
    Group dp_, tp_, pp_, cp_, dp_cp_, ep_, edp_;
};

}  // namespace shardlm::comm
