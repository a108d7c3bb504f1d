// XXH64 against the reference implementation's digests (libxxhash 0.8.1, computed once and pasted
// here), whole and streamed in every split, and of a file.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "shardlm/io/atomic_file.h"
#include "shardlm/io/hash.h"

namespace {

using shardlm::io::xxh64;

std::string pattern() {
    std::string s;
    for (int k = 0; k < 3; k++)
        for (int i = 0; i < 256; i++) s += char(i);
    return s + "xyz";  // 771 bytes: whole stripes, 8-, 4- and 1-byte tails
}

TEST(Xxh64, ReferenceDigests) {
    EXPECT_EQ(xxh64(""), 0xef46db3751d8e999ull);
    EXPECT_EQ(xxh64("a"), 0xd24ec4f1a98c6e5bull);
    EXPECT_EQ(xxh64("abc"), 0x44bc2cf5ad770999ull);
    EXPECT_EQ(xxh64("Nobody inspects the spammish repetition"), 0xfbcea83c8a378bf1ull);
    EXPECT_EQ(xxh64("0123456789abcdef0123456789abcde", 7), 0x9bfbacf6829bf320ull);
    EXPECT_EQ(xxh64("0123456789abcdef0123456789abcdef"), 0x642a94958e71e6c5ull);
    EXPECT_EQ(xxh64(pattern()), 0xe921a1b45bd779f8ull);
    EXPECT_EQ(xxh64(pattern(), 12345), 0x6b1b5d671fb93b43ull);
}

TEST(Xxh64, StreamingEqualsOneShot) {
    const std::string s = pattern();
    for (size_t a = 0; a <= s.size(); a += 7)
        for (size_t b = a; b <= s.size(); b += 31) {
            shardlm::io::Xxh64 h(12345);
            h.update(s.data(), a);
            h.update(s.data() + a, b - a);
            h.update(s.data() + b, s.size() - b);
            ASSERT_EQ(h.digest(), 0x6b1b5d671fb93b43ull) << a << " " << b;
        }
}

TEST(Xxh64, FileAndHex) {
    const auto p = std::filesystem::temp_directory_path() / ("shardlm_hash_" + std::to_string(::getpid()));
    std::string big;
    for (int i = 0; i < 3000; i++) big += pattern();  // > 1 MiB: several read chunks
    shardlm::io::write_file_atomic(p.string(), big);
    EXPECT_EQ(shardlm::io::xxh64_file(p.string()), xxh64(big));
    std::filesystem::remove(p);
    EXPECT_EQ(shardlm::io::hex64(0x0123456789abcdefull), "0123456789abcdef");
    uint64_t v = 0;
    EXPECT_TRUE(shardlm::io::parse_hex64("fbcea83c8a378bf1", &v));
    EXPECT_EQ(v, 0xfbcea83c8a378bf1ull);
    EXPECT_FALSE(shardlm::io::parse_hex64("fbcea83c8a378bf", &v));
    EXPECT_FALSE(shardlm::io::parse_hex64("fbcea83c8a378bfG", &v));
}

}  // namespace
