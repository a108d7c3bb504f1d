// comm/grid.h: the process grid world = dp * tp * pp and its sub-groups.
//
// Ranks are laid out tensor-parallel fastest, then data-parallel, then pipeline (Megatron):
//     rank = tp_rank + tp * (dp_rank + dp * pp_rank)
// so the ranks of a tp group are neighbours (the chattiest group stays on one node).
// Worked example, 8 ranks with tp = 2, dp = 2, pp = 2:
//     rank      0  1  2  3  4  5  6  7
//     tp_rank   0  1  0  1  0  1  0  1
//     dp_rank   0  0  1  1  0  0  1  1
//     pp_rank   0  0  0  0  1  1  1  1
//     tp groups {0,1} {2,3} {4,5} {6,7}    (same dp_rank and pp_rank)
//     dp groups {0,2} {1,3} {4,6} {5,7}    (same tp_rank and pp_rank)
//     pp groups {0,4} {1,5} {2,6} {3,7}    (same tp_rank and dp_rank)
// Within each group, ranks are ordered by the group's own coordinate (dp().rank() == dp_rank()).
#pragma once
#include "shardlm/comm/group.h"

namespace shardlm::comm {

struct GridDims {
    int dp = 0;  // 0: world size / (tp * pp)
    int tp = 1;
    int pp = 1;
};

struct GridCoords {
    int dp = 0, tp = 0, pp = 0;
};

class Grid {
public:
    // Collective over world (three MPI_Comm_split calls). Throws on a wrong factorisation, e.g.
    // "invalid parallel layout: dp(3) * tp(1) * pp(1) = 3 != world size 4".
    static Grid create(const Group& world, GridDims dims);
    // Checks dims against world_size and fills in dp = 0. Pure (no MPI).
    static GridDims resolve(GridDims dims, int world_size);
    static int rank_of(const GridDims& d, const GridCoords& c) { return c.tp + d.tp * (c.dp + d.dp * c.pp); }
    static GridCoords coords_of(const GridDims& d, int rank) {
        return {(rank / d.tp) % d.dp, rank % d.tp, rank / (d.tp * d.dp)};
    }

    const GridDims& dims() const { return dims_; }
    int world_rank() const { return world_rank_; }
    int world_size() const { return dims_.dp * dims_.tp * dims_.pp; }
    int dp_rank() const { return coords_.dp; }
    int tp_rank() const { return coords_.tp; }
    int pp_rank() const { return coords_.pp; }
    int dp_size() const { return dims_.dp; }
    int tp_size() const { return dims_.tp; }
    int pp_size() const { return dims_.pp; }

    // Collective over world (every rank calls it): the group of the two pipeline stages that hold the
    // tied token embedding, the embedding's (`embedding_stage`) and the head's (`head_stage`), at this
    // rank's dp and tp coordinates, ordered by stage; every other rank, and every rank when the two
    // are one stage, gets a group of its own (size 1).
    Group tied_embedding_group(const Group& world, int embedding_stage, int head_stage) const;

    Group& dp() { return dp_; }
    Group& tp() { return tp_; }
    Group& pp() { return pp_; }
    const Group& dp() const { return dp_; }
    const Group& tp() const { return tp_; }
    const Group& pp() const { return pp_; }

private:
    Grid(GridDims d, int world_rank, Group dp, Group tp, Group pp);
    GridDims dims_;
    int world_rank_;
    GridCoords coords_;
    Group dp_, tp_, pp_;
};

}  // namespace shardlm::comm
