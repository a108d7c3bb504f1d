#include "shardlm/comm/grid.h"

#include "shardlm/core/check.h"

namespace shardlm::comm {

GridDims Grid::resolve(GridDims d, int world_size) {
    SHARDLM_CHECK(d.tp >= 1, "invalid parallel layout: tp must be >= 1 (got ", d.tp, ")");
    SHARDLM_CHECK(d.pp >= 1, "invalid parallel layout: pp must be >= 1 (got ", d.pp, ")");
    SHARDLM_CHECK(d.cp >= 1, "invalid parallel layout: cp must be >= 1 (got ", d.cp, ")");
    SHARDLM_CHECK(d.dp >= 0, "invalid parallel layout: dp must be >= 1, or 0 for world size / (",
                  d.cp > 1 ? "cp * " : "", "tp * pp) (got ", d.dp, ")");
    const std::string cp = d.cp > 1 ? cat(" * cp(", d.cp, ")") : std::string();
    const int others = d.cp * d.tp * d.pp;
    if (d.dp == 0) {
        SHARDLM_CHECK(world_size % others == 0, "invalid parallel layout: tp(", d.tp, ") * pp(", d.pp, ")", cp, " = ",
                      others, " does not divide world size ", world_size);
        d.dp = world_size / others;
    }
    SHARDLM_CHECK(d.ep >= 1 && d.dp % d.ep == 0, "invalid parallel layout: ep(", d.ep, ") must divide dp(", d.dp,
                  "): expert parallelism splits the experts over groups of ep data-parallel ranks\n---> HINT: use an "
                  "--ep that divides the data-parallel size");
    const long prod = long(d.dp) * others;
    SHARDLM_CHECK(prod == world_size, "invalid parallel layout: dp(", d.dp, ") * tp(", d.tp, ") * pp(", d.pp, ")", cp,
                  " = ", prod, " != world size ", world_size);
    return d;
}

Grid Grid::create(const Group& world, GridDims dims) {
    const GridDims d = resolve(dims, world.size());
    const GridCoords c = coords_of(d, world.rank());
    // Every rank calls the splits in the same order (each is collective over world). A colour names
    // the coordinates a group's ranks share.
    Groups g{world.split(c.tp + d.tp * (c.cp + d.cp * c.pp), c.dp),  // dp: same tp, cp, pp
             world.split(c.cp + d.cp * (c.dp + d.dp * c.pp), c.tp),  // tp: same cp, dp, pp
             world.split(c.tp + d.tp * (c.cp + d.cp * c.dp), c.pp),  // pp: same tp, cp, dp
             Group::self(), Group::self(), Group::self(), Group::self()};
    if (d.cp > 1) {
        g.cp = world.split(c.tp + d.tp * (c.dp + d.dp * c.pp), c.cp);        // same tp, dp, pp
        g.dp_cp = world.split(c.tp + d.tp * c.pp, c.cp + d.cp * c.dp);      // same tp, pp
    }
    if (d.ep > 1) {
        g.ep = g.dp.split(c.dp / d.ep, c.dp % d.ep);   // within the dp group: consecutive dp ranks
        // the same experts: the dp / ep ranks of the same ep rank, and every cp rank of theirs
        g.edp = (d.cp > 1 ? g.dp_cp : g.dp).split(c.dp % d.ep, c.cp + d.cp * (c.dp / d.ep));
    }
    return Grid(d, world.rank(), std::move(g));
}

Group Grid::tied_embedding_group(const Group& world, int embedding_stage, int head_stage) const {
    const int s = pp_rank();
    const bool ends = embedding_stage != head_stage && (s == embedding_stage || s == head_stage);
    // one colour per (dp, cp, tp) coordinate of the two stages; colours past them for the ranks on their own
    const int color = ends ? tp_rank() + dims_.tp * (cp_rank() + dims_.cp * dp_rank())
                           : dims_.tp * dims_.cp * dims_.dp + world_rank_;
    return world.split(color, s);
}

Grid::Grid(GridDims d, int world_rank, Groups g)
    : dims_(d), world_rank_(world_rank), coords_(coords_of(d, world_rank)), dp_(std::move(g.dp)), tp_(std::move(g.tp)),
      pp_(std::move(g.pp)), cp_(std::move(g.cp)), dp_cp_(std::move(g.dp_cp)), ep_(std::move(g.ep)),
      edp_(std::move(g.edp)) {}

}  // namespace shardlm::comm
