// parallel/stages.h: cutting the model's compute units (0 embedding, 1..L blocks, L+1 head) into
// contiguous pipeline chunks.
#pragma once
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "shardlm/model/config.h"

namespace shardlm::parallel {

// Training FLOPs per token of compute unit u (forward + backward = 3 x forward): what balancing
// divides. Blocks 3 (24 C^2 + 4 T C), the head 3 (2 C Vp), the embedding ~0.
double unit_flops_per_token(const model::GptConfig& c, int seq, int unit);

// --pp-split: transformer blocks per model chunk, written "3,3,3,3" (empty: balanced by cost); a
// TextSetting (core/enum_names.h).
struct StageSplit {
    std::vector<int> blocks;
    bool empty() const { return blocks.empty(); }
    void clear() { blocks.clear(); }
};
std::string setting_text(const StageSplit& s);
bool setting_parse(std::string_view text, StageSplit* out);
std::string setting_problem(std::string_view text, const StageSplit*);  // why a text is not one
std::string setting_choices(const StageSplit*);

// [first, last] compute units of each of `chunks` model chunks, in order. split: blocks per chunk
// (chunks entries summing to n_layer; the embedding joins the first chunk, the head the last) or
// empty: balanced by cost (the largest chunk's FLOPs as small as possible).
std::vector<std::pair<int, int>> split_stages(const model::GptConfig& c, int seq, int chunks, const StageSplit& split = {});

}  // namespace shardlm::parallel
