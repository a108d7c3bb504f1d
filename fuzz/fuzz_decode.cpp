// libFuzzer target: `shardlm decode`'s input: a JSON array of token ids (data/token_ids.h) decoded
// with the GPT-2 tokenizer. Refusals are shardlm::Error; the text of accepted ids is valid UTF-8.
#include <cstdint>
#include <string>

#include "shardlm/core/check.h"
#include "shardlm/data/token_ids.h"
#include "shardlm/data/tokenizer.h"
#include "shardlm/data/utf8.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    static const shardlm::data::Gpt2Tokenizer tok = shardlm::data::Gpt2Tokenizer::load(shardlm::data::default_vocab_dir());
    try {
        const std::vector<int> ids = shardlm::data::parse_token_ids(std::string_view(reinterpret_cast<const char*>(data), size));
        const std::string text = tok.decode(ids);
        if (shardlm::data::sanitize_utf8(text) != text) __builtin_trap();  // decode returns valid UTF-8
    } catch (const shardlm::Error&) {
    }
    return 0;
}
