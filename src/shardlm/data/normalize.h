// data/normalize.h: optional text clean-up applied before tokenisation (`shardlm tokenize --normalize`).
// The GPT-2 encoder itself stays exact; this only rewrites the corpus text, for corpora whose
// transcription mixes typographic and ASCII punctuation (the State of the Union files switch to
// curly quotes and em dashes in 2017-2021, so the same apostrophe is one token in 1790-2016 text
// and three never-seen byte tokens in the validation speeches).
#pragma once
#include <string>
#include <string_view>
#include <vector>

namespace shardlm::data {

// Names accepted by --normalize: "none" (text unchanged) and "punct".
const std::vector<std::string>& normalizations();

// "punct": typographic punctuation to its ASCII spelling:
//   ‘ ’ ‚ ‛ ′ -> '     “ ” „ ‟ ″ -> "     — ― -> --     ‐ ‑ ‒ – − -> -     … -> ...     NBSP -> space
// Everything else (letters with accents, other symbols, invalid bytes) is copied unchanged.
std::string normalize_text(std::string_view text, std::string_view normalization);

}  // namespace shardlm::data
