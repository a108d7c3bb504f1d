// data/token_shard.h: token shards in the llm.c / nanoGPT format, so data prepared for those projects
// trains here and ours trains there.
//   header: 256 x int32 little-endian: [0] magic 20240520, [1] version 1, [2] token count, rest 0
//   body:   token count x uint16 tokens
#pragma once
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace shardlm::data {

inline constexpr int32_t kShardMagic = 20240520;
inline constexpr int32_t kShardVersion = 1;
inline constexpr size_t kShardHeaderInts = 256;

// Reads a whole shard; errors name the file and the fix (bad magic, version, truncated body).
std::vector<uint16_t> read_token_shard(const std::string& path);
// Writes atomically (temp file, fsync, rename). Every token must be < 65536.
void write_token_shard(const std::string& path, std::span<const uint16_t> tokens);

}  // namespace shardlm::data
