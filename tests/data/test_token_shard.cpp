// Token shards in the llm.c format: round trip and the errors for broken files.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "shardlm/core/check.h"
#include "shardlm/data/token_shard.h"
#include "shardlm/io/atomic_file.h"

namespace fs = std::filesystem;
using namespace shardlm::data;

namespace {

class TokenShard : public ::testing::Test {
protected:
    void SetUp() override {
        dir_ = fs::temp_directory_path() /
               ("shardlm_test_shard_" + std::to_string(::getpid()) + "_" +
                ::testing::UnitTest::GetInstance()->current_test_info()->name());
        fs::remove_all(dir_);
        fs::create_directories(dir_);
    }
    void TearDown() override { fs::remove_all(dir_); }
    std::string path(const std::string& name) const { return (dir_ / name).string(); }

    static void write_raw(const std::string& p, const void* data, size_t bytes) {
        std::FILE* f = std::fopen(p.c_str(), "wb");
        ASSERT_TRUE(f);
        if (bytes) {
            ASSERT_EQ(std::fwrite(data, 1, bytes, f), bytes);
        }
        std::fclose(f);
    }
    static std::vector<int32_t> header(int32_t magic, int32_t version, int32_t count) {
        std::vector<int32_t> h(kShardHeaderInts, 0);
        h[0] = magic;
        h[1] = version;
        h[2] = count;
        return h;
    }
    // Expect read_token_shard(p) to throw an Error whose message names the file and contains `what`.
    static void expect_error(const std::string& p, const std::string& what) {
        try {
            read_token_shard(p);
            FAIL() << "expected an error reading " << p;
        } catch (const shardlm::Error& e) {
            const std::string msg = e.what();
            EXPECT_NE(msg.find(p), std::string::npos) << msg;
            EXPECT_NE(msg.find(what), std::string::npos) << msg;
        }
    }

    fs::path dir_;
};

}  // namespace

TEST_F(TokenShard, RoundTrip) {
    std::vector<uint16_t> tokens = {50256, 0, 1, 65535, 40, 1101, 12345};
    for (int i = 0; i < 10000; ++i) tokens.push_back(uint16_t(i * 31 % 50257));
    write_token_shard(path("a.bin"), tokens);
    EXPECT_EQ(read_token_shard(path("a.bin")), tokens);
    EXPECT_EQ(fs::file_size(path("a.bin")), 1024 + 2 * tokens.size());
    // No temp files left behind.
    size_t n = 0;
    for ([[maybe_unused]] const auto& e : fs::directory_iterator(dir_)) ++n;
    EXPECT_EQ(n, 1u);
}

TEST_F(TokenShard, HeaderIsLlmcFormat) {
    const std::vector<uint16_t> tokens = {7, 8, 9};
    write_token_shard(path("h.bin"), tokens);
    const std::string bytes = shardlm::io::read_file(path("h.bin"));
    ASSERT_EQ(bytes.size(), 1024u + 6u);
    const auto* h = reinterpret_cast<const int32_t*>(bytes.data());
    EXPECT_EQ(h[0], 20240520);
    EXPECT_EQ(h[1], 1);
    EXPECT_EQ(h[2], 3);
    for (size_t i = 3; i < kShardHeaderInts; ++i) EXPECT_EQ(h[i], 0) << i;
    const auto* t = reinterpret_cast<const uint16_t*>(bytes.data() + 1024);
    EXPECT_EQ(t[0], 7);
    EXPECT_EQ(t[2], 9);
}

TEST_F(TokenShard, EmptyShard) {
    write_token_shard(path("e.bin"), std::vector<uint16_t>{});
    EXPECT_TRUE(read_token_shard(path("e.bin")).empty());
}

TEST_F(TokenShard, OverwriteReplacesAtomically) {
    write_token_shard(path("o.bin"), std::vector<uint16_t>{1, 2, 3});
    write_token_shard(path("o.bin"), std::vector<uint16_t>{4});
    EXPECT_EQ(read_token_shard(path("o.bin")), std::vector<uint16_t>{4});
}

TEST_F(TokenShard, MissingFile) { expect_error(path("nope.bin"), "cannot open"); }

TEST_F(TokenShard, BadMagic) {
    auto h = header(12345, kShardVersion, 0);
    write_raw(path("m.bin"), h.data(), h.size() * 4);
    expect_error(path("m.bin"), "bad magic 12345");
}

TEST_F(TokenShard, BadVersion) {
    auto h = header(kShardMagic, 7, 0);
    write_raw(path("v.bin"), h.data(), h.size() * 4);
    expect_error(path("v.bin"), "version 7");
}

TEST_F(TokenShard, NegativeCount) {
    auto h = header(kShardMagic, kShardVersion, -5);
    write_raw(path("n.bin"), h.data(), h.size() * 4);
    expect_error(path("n.bin"), "negative token count");
}

TEST_F(TokenShard, TruncatedHeader) {
    auto h = header(kShardMagic, kShardVersion, 0);
    write_raw(path("th.bin"), h.data(), 100);
    expect_error(path("th.bin"), "truncated header");
    write_raw(path("empty.bin"), nullptr, 0);
    expect_error(path("empty.bin"), "truncated header");
}

// Found by fuzz_token_shard: a count of a billion tokens in a small file was allocated (2 GiB) before
// the read found the file short. The count is now checked against the file's size first (the error is
// the same either way; the allocation is what fuzz_token_shard's seed fuzz/corpus/token_shard/huge_count
// catches, under the fuzzer's memory limit).
TEST_F(TokenShard, HugeCountInASmallFileIsRefusedBeforeAllocating) {
    auto h = header(kShardMagic, kShardVersion, 0x4000000a);
    write_raw(path("huge.bin"), h.data(), h.size() * 4);
    expect_error(path("huge.bin"), "header says 1073741834 tokens, file holds 0");
}

TEST_F(TokenShard, TruncatedBody) {
    auto h = header(kShardMagic, kShardVersion, 10);
    std::string bytes(reinterpret_cast<const char*>(h.data()), h.size() * 4);
    bytes += std::string(5 * 2, '\x01');  // 5 of the 10 tokens
    write_raw(path("tb.bin"), bytes.data(), bytes.size());
    expect_error(path("tb.bin"), "truncated");
    try {
        read_token_shard(path("tb.bin"));
    } catch (const shardlm::Error& e) {
        EXPECT_NE(std::string(e.what()).find("10 tokens"), std::string::npos) << e.what();
    }
}

TEST_F(TokenShard, ErrorsCarryAHint) {
    auto h = header(1, kShardVersion, 0);
    write_raw(path("hint.bin"), h.data(), h.size() * 4);
    expect_error(path("hint.bin"), "---> HINT:");
}
