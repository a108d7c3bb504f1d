// train/rank_text.h: text from every rank, in rank order, on rank 0 (mpirun would interleave the
// ranks' own output mid-line), or on every rank (for decisions all ranks must take alike).
#pragma once
#include <string>
#include <vector>

#include "shardlm/comm/group.h"

namespace shardlm::train {

// Collective over g: rank 0 gets every rank's text in rank order; the others get an empty list.
std::vector<std::string> gather_text(comm::Group& g, const std::string& mine);
// Collective over g: every rank gets every rank's text in rank order.
std::vector<std::string> all_gather_text(comm::Group& g, const std::string& mine);

}  // namespace shardlm::train
