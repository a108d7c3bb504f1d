// parallel/stages.h: cutting the model's compute units (0 embedding, 1..L blocks, L+1 head) into
// contiguous pipeline chunks.
#pragma once
#include <string>
#include <utility>
#include <vector>

#include "shardlm/model/config.h"

namespace shardlm::parallel {

// Training FLOPs per token of compute unit u (forward + backward = 3 x forward): what balancing
// divides. Blocks 3 (24 C^2 + 4 T C), the head 3 (2 C Vp), the embedding ~0.
double unit_flops_per_token(const model::GptConfig& c, int seq, int unit);

// [first, last] compute units of each of `chunks` model chunks, in order. split: blocks per chunk
// ("3,3,3,3", chunks entries summing to n_layer; the embedding joins the first chunk, the head the
// last) or empty: balanced by cost (the largest chunk's FLOPs as small as possible).
std::vector<std::pair<int, int>> split_stages(const model::GptConfig& c, int seq, int chunks, const std::string& split);

}  // namespace shardlm::parallel
