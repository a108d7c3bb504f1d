#include "shardlm/data/token_shard.h"

#include <cstdio>
#include <cstring>
#include <filesystem>

#include "shardlm/core/check.h"
#include "shardlm/io/atomic_file.h"

namespace shardlm::data {

namespace {
constexpr const char* kHint = "\n---> HINT: prepare data with `shardlm tokenize`";
}

std::vector<uint16_t> read_token_shard(const std::string& path) {
    std::error_code ec;
    if (std::filesystem::is_directory(path, ec)) {
        std::string shards;  // the shards inside, as suggestions
        for (const auto& e : std::filesystem::directory_iterator(path, ec))
            if (e.path().extension() == ".bin") shards += (shards.empty() ? "" : ", ") + e.path().string();
        fail("token shard '", path, "' is a directory, not a shard file",
             shards.empty() ? std::string(kHint) : "\n---> HINT: pass one of its shards: " + shards);
    }
    std::FILE* f = std::fopen(path.c_str(), "rb");
    SHARDLM_CHECK(f, "token shard '", path, "': cannot open (", std::strerror(errno), ")", kHint);
    int32_t header[kShardHeaderInts];
    size_t got = std::fread(header, sizeof(int32_t), kShardHeaderInts, f);
    if (got != kShardHeaderInts) {
        std::fclose(f);
        fail("token shard '", path, "': truncated header (", got * 4, " of 1024 bytes)", kHint);
    }
    if (header[0] != kShardMagic) {
        std::fclose(f);
        fail("token shard '", path, "': bad magic ", header[0], " (want ", kShardMagic, ")", kHint);
    }
    if (header[1] != kShardVersion) {
        std::fclose(f);
        fail("token shard '", path, "': unsupported version ", header[1], " (want ", kShardVersion, ")", kHint);
    }
    if (header[2] < 0) {
        std::fclose(f);
        fail("token shard '", path, "': negative token count ", header[2], kHint);
    }
    // Check the count against the file's size before allocating (a damaged header could ask for 4 GiB).
    const long here = std::ftell(f);
    std::fseek(f, 0, SEEK_END);
    const long end = std::ftell(f);
    std::fseek(f, here, SEEK_SET);
    const size_t held = here >= 0 && end >= here ? size_t(end - here) / sizeof(uint16_t) : 0;
    if (held < size_t(header[2])) {
        std::fclose(f);
        fail("token shard '", path, "': truncated: header says ", header[2], " tokens, file holds ", held, kHint);
    }
    std::vector<uint16_t> tokens(static_cast<size_t>(header[2]));
    got = std::fread(tokens.data(), sizeof(uint16_t), tokens.size(), f);
    std::fclose(f);
    SHARDLM_CHECK(got == tokens.size(), "token shard '", path, "': truncated: header says ", tokens.size(),
                  " tokens, file holds ", got, kHint);
    return tokens;
}

void write_token_shard(const std::string& path, std::span<const uint16_t> tokens) {
    SHARDLM_CHECK(tokens.size() <= size_t(INT32_MAX), "token shard '", path, "': too many tokens (",
                  tokens.size(), ") for one shard; split the input");
    int32_t header[kShardHeaderInts] = {};
    header[0] = kShardMagic;
    header[1] = kShardVersion;
    header[2] = int32_t(tokens.size());
    io::AtomicFile out(path);
    out.write(header, sizeof(header));
    out.write(tokens.data(), tokens.size() * sizeof(uint16_t));
    out.commit();
}

}  // namespace shardlm::data
