#include "shardlm/comm/grid.h"

#include "shardlm/core/check.h"

namespace shardlm::comm {

GridDims Grid::resolve(GridDims d, int world_size) {
    SHARDLM_CHECK(d.tp >= 1, "invalid parallel layout: tp must be >= 1 (got ", d.tp, ")");
    SHARDLM_CHECK(d.pp >= 1, "invalid parallel layout: pp must be >= 1 (got ", d.pp, ")");
    SHARDLM_CHECK(d.dp >= 0, "invalid parallel layout: dp must be >= 1, or 0 for world size / (tp * pp) (got ",
                  d.dp, ")");
    if (d.dp == 0) {
        SHARDLM_CHECK(world_size % (d.tp * d.pp) == 0, "invalid parallel layout: tp(", d.tp, ") * pp(", d.pp,
                      ") = ", d.tp * d.pp, " does not divide world size ", world_size);
        d.dp = world_size / (d.tp * d.pp);
    }
    const long prod = long(d.dp) * d.tp * d.pp;
    SHARDLM_CHECK(prod == world_size, "invalid parallel layout: dp(", d.dp, ") * tp(", d.tp, ") * pp(", d.pp,
                  ") = ", prod, " != world size ", world_size);
    return d;
}

Grid Grid::create(const Group& world, GridDims dims) {
    const GridDims d = resolve(dims, world.size());
    const GridCoords c = coords_of(d, world.rank());
    // Every rank calls the three splits in the same order (each is collective over world).
    Group tp = world.split(c.dp + d.dp * c.pp, c.tp);
    Group dp = world.split(c.tp + d.tp * c.pp, c.dp);
    Group pp = world.split(c.tp + d.tp * c.dp, c.pp);
    return Grid(d, world.rank(), std::move(dp), std::move(tp), std::move(pp));
}

Group Grid::tied_embedding_group(const Group& world, int embedding_stage, int head_stage) const {
    const int s = pp_rank();
    const bool ends = embedding_stage != head_stage && (s == embedding_stage || s == head_stage);
    // one colour per (dp, tp) pair of the two stages; colours past them for the ranks on their own
    const int color = ends ? tp_rank() + dims_.tp * dp_rank() : dims_.tp * dims_.dp + world_rank_;
    return world.split(color, s);
}

Grid::Grid(GridDims d, int world_rank, Group dp, Group tp, Group pp)
    : dims_(d), world_rank_(world_rank), coords_(coords_of(d, world_rank)), dp_(std::move(dp)), tp_(std::move(tp)),
      pp_(std::move(pp)) {}

}  // namespace shardlm::comm
