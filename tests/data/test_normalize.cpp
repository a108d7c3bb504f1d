// Text normalization for `shardlm tokenize --normalize`.
#include <gtest/gtest.h>

#include <string>

#include "shardlm/core/check.h"
#include "shardlm/data/normalize.h"

using shardlm::data::normalize_text;

TEST(Normalize, NoneKeepsBytes) {
    const std::string s = "It\xE2\x80\x99s \xE2\x80\x9C" "fine\xE2\x80\x9D \xFF\xC3";
    EXPECT_EQ(normalize_text(s, "none"), s);
}

TEST(Normalize, PunctMapsTypographyToAscii) {
    // ’ “ ” — – ‑ … NBSP ‘ ″
    const std::string in =
        "I\xE2\x80\x99m \xE2\x80\x9Chere\xE2\x80\x9D\xE2\x80\x94now\xE2\x80\x93then non\xE2\x80\x91stop"
        "\xE2\x80\xA6 a\xC2\xA0" "b \xE2\x80\x98q\xE2\x80\x99 6\xE2\x80\xB3";
    EXPECT_EQ(normalize_text(in, "punct"), "I'm \"here\"--now-then non-stop... a b 'q' 6\"");
}

TEST(Normalize, PunctKeepsOtherTextAndInvalidBytes) {
    // accented letters, other U+20xx symbols (euro sign), CJK, emoji, a truncated E2 sequence and a lone byte
    const std::string in = "caf\xC3\xA9 \xE2\x82\xAC \xE4\xB8\xAD \xF0\x9F\x98\x80 \xC2\xB0 \xFF x\xE2\x80";
    EXPECT_EQ(normalize_text(in, "punct"), in);
}

TEST(Normalize, UnknownNameIsAnError) {
    EXPECT_THROW(normalize_text("x", "nfkc"), shardlm::Error);
}
