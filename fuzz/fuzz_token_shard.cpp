// libFuzzer target: the llm.c token-shard reader (data/token_shard.h) and the batch loader built on
// a shard (data/loader.h) on arbitrary bytes: accept or refuse with shardlm::Error, nothing else.
#include <cstdint>

#include "fuzz_input.h"
#include "shardlm/core/check.h"
#include "shardlm/data/loader.h"
#include "shardlm/data/token_shard.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const std::string path = shardlm::fuzz::as_file(data, size);
    try {
        std::vector<uint16_t> tokens = shardlm::data::read_token_shard(path);
        shardlm::data::BatchLoader loader(std::move(tokens), 4, shardlm::data::Order::Random, 1, path);
        int inputs[4], targets[4];
        loader.fill(0, 2, 1, inputs, targets);
        (void)loader.max_token();
    } catch (const shardlm::Error&) {
    }
    return 0;
}
