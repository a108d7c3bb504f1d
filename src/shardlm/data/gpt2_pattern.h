// data/gpt2_pattern.h: the GPT-2 pre-tokenisation regex, spelled for PCRE2 with JavaScript's
// character classes (gpt2_pattern.cpp explains the differences it makes up for).
#pragma once
#include <string>

namespace shardlm::data {

// /'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+/ with JS \s, \p{L}
// and \p{N} written out; compile it with PCRE2_UTF | PCRE2_UCP.
std::string gpt2_pattern();

}  // namespace shardlm::data
