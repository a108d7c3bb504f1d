// schedule/schedule_orders.h (internal): the compute order of each schedule kind, per rank: which
// pass of which (micro-batch, local chunk) comes next. schedule.cpp turns an order into actions (the
// sends and receives around each pass) and proves it with simulate().
#pragma once
#include <vector>

#include "shardlm/cost/memory.h"

namespace shardlm::schedule::detail {

using ScheduleKind = cost::Schedule;

// A pass of one chunk on one micro-batch: forward, backward (B and W together), or B or W alone.
enum class Pass { F, BW, B, W };
struct Compute {
    Pass pass;
    int micro, chunk;
};

// Rank s's order for GPipe, 1F1B, interleaved and ZB-H1 (and the forward-only orders of evaluation,
// ZBV's included); empty for ZBV's training step, whose ranks are ordered together:
std::vector<Compute> compute_order(ScheduleKind kind, int p, int m, int v, int s, bool forward_only);
// ZBV, every rank: (a) the list scheduler, (b) the paper's handcrafted pattern (schedule_orders.cpp).
std::vector<std::vector<Compute>> v_orders(int p, int m);
std::vector<std::vector<Compute>> v_orders_handcrafted(int p, int m);

}  // namespace shardlm::schedule::detail
