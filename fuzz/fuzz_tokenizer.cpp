// libFuzzer target: the GPT-2 BPE tokenizer (data/tokenizer.h) on arbitrary bytes. Every id is in
// the vocabulary, and decoding gives back the input as the reference's TextDecoder reads it (invalid
// UTF-8 replaced by U+FFFD, a leading byte-order mark dropped): BPE loses nothing.
#include <cstdint>
#include <string>

#include "shardlm/core/check.h"
#include "shardlm/data/tokenizer.h"
#include "shardlm/data/utf8.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    static const shardlm::data::Gpt2Tokenizer tok = shardlm::data::Gpt2Tokenizer::load(shardlm::data::default_vocab_dir());
    const std::string text(reinterpret_cast<const char*>(data), size);
    const std::vector<int> ids = tok.encode(text);
    for (int id : ids)
        if (id < 0 || size_t(id) >= tok.vocab_size()) __builtin_trap();
    std::string want = shardlm::data::sanitize_utf8(text);
    if (want.rfind("\xEF\xBB\xBF", 0) == 0) want.erase(0, 3);
    if (tok.decode(ids) != want) __builtin_trap();
    (void)tok.encode(text, /*allow_special=*/true);
    return 0;
}
