// train/trace_svg.h: a picture of a --trace timeline (Chrome trace events): one band per rank, one
// row per track (compute, the pipeline's waits, each communication group), a box per event, the
// time axis in milliseconds, and the measured bubble beside the theory in the title.
#pragma once
#include <string>

#include <nlohmann/json_fwd.hpp>

namespace shardlm::train {

// A standalone SVG document of the trace JSON that `train --trace` writes.
std::string trace_svg(const nlohmann::json& trace, int width = 1400);

}  // namespace shardlm::train
