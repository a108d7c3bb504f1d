// data/token_ids.h: a JSON array of token ids, as `shardlm decode` reads it from stdin.
#pragma once
#include <string_view>
#include <vector>

namespace shardlm::data {

// "[15496, 995]" -> {15496, 995}. Integers (and integral floats such as 40.0, which some JSON writers
// produce) in the int32 range; anything else is an error naming the element. Range checks against a
// vocabulary are the tokenizer's (Gpt2Tokenizer::decode).
std::vector<int> parse_token_ids(std::string_view json_text);

}  // namespace shardlm::data
