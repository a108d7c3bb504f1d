// The GPT-2 tokenizer against the reference JS encoder (fixtures from
// tools/reference/make_tokenizer_fixtures.js) and on the whole State of the Union corpus.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "shardlm/core/check.h"
#include "shardlm/data/tokenizer.h"
#include "shardlm/io/atomic_file.h"

namespace fs = std::filesystem;
using shardlm::data::Gpt2Tokenizer;

namespace {

const std::string kSource = SHARDLM_SOURCE_DIR;
const std::string kFixtures = kSource + "/tests/fixtures/tokenizer";

// Loaded once. A missing vocabulary is a test failure, not a skip.
const Gpt2Tokenizer* tokenizer(std::string* error) {
    static std::string err;
    static const Gpt2Tokenizer* tok = [] () -> const Gpt2Tokenizer* {
        try {
            return new Gpt2Tokenizer(Gpt2Tokenizer::load(shardlm::data::default_vocab_dir()));
        } catch (const std::exception& e) {
            err = std::string(e.what()) +
                  "\n(the tokenizer tests need the GPT-2 vocabulary: run tools/fetch_assets.sh from the repo root)";
            return nullptr;
        }
    }();
    *error = err;
    return tok;
}

#define REQUIRE_TOKENIZER(var)                      \
    std::string var##_error;                        \
    const Gpt2Tokenizer* var##_ptr = tokenizer(&var##_error); \
    ASSERT_NE(var##_ptr, nullptr) << var##_error;   \
    const Gpt2Tokenizer& var = *var##_ptr

nlohmann::json load_fixture(const std::string& name) {
    return nlohmann::json::parse(shardlm::io::read_file(kFixtures + "/" + name));
}

std::string show(const std::string& s) {
    std::string j = nlohmann::json(s).dump(-1, ' ', true, nlohmann::json::error_handler_t::replace);
    if (j.size() > 160) j = j.substr(0, 160) + "...";
    return j;
}

std::vector<int> concat(std::initializer_list<std::vector<int>> parts) {
    std::vector<int> out;
    for (const auto& p : parts) out.insert(out.end(), p.begin(), p.end());
    return out;
}

}  // namespace

TEST(Tokenizer, VocabularyShape) {
    REQUIRE_TOKENIZER(tok);
    EXPECT_EQ(tok.vocab_size(), 50257u);
    EXPECT_EQ(tok.eot_id(), 50256);
    EXPECT_EQ(tok.token_bytes(50256), "<|endoftext|>");
    EXPECT_EQ(tok.token_bytes(220), " ");
    EXPECT_EQ(tok.token_bytes(198), "\n");
}

TEST(Tokenizer, MatchesReferenceEncoder) {
    REQUIRE_TOKENIZER(tok);
    const nlohmann::json cases = load_fixture("cases.json");
    ASSERT_GT(cases.size(), 100u);
    int bad = 0;
    for (size_t i = 0; i < cases.size(); ++i) {
        const std::string text = cases[i]["text"].get<std::string>();
        const std::vector<int> want = cases[i]["ids"].get<std::vector<int>>();
        const std::vector<int> got = tok.encode(text);
        EXPECT_EQ(got, want) << "case " << i << " text " << show(text);
        bad += got != want;
        const std::string decoded = cases[i].value("decoded", text);
        EXPECT_EQ(tok.decode(want), decoded) << "case " << i << " text " << show(text);
        ASSERT_LT(bad, 10) << "too many mismatches";
    }
}

TEST(Tokenizer, EncodeIsStableWithWarmCache) {
    REQUIRE_TOKENIZER(tok);
    const nlohmann::json cases = load_fixture("cases.json");
    for (size_t i = 0; i < cases.size(); i += 7) {
        const std::string text = cases[i]["text"].get<std::string>();
        EXPECT_EQ(tok.encode(text), cases[i]["ids"].get<std::vector<int>>()) << "case " << i;
    }
}

TEST(Tokenizer, DecodeMatchesReferenceOnInvalidUtf8) {
    REQUIRE_TOKENIZER(tok);
    const nlohmann::json cases = load_fixture("decode_cases.json");
    ASSERT_GT(cases.size(), 20u);
    for (size_t i = 0; i < cases.size(); ++i) {
        const std::vector<int> ids = cases[i]["ids"].get<std::vector<int>>();
        EXPECT_EQ(tok.decode(ids), cases[i]["text"].get<std::string>()) << "decode case " << i;
    }
}

TEST(Tokenizer, DecodeReplacementRules) {
    REQUIRE_TOKENIZER(tok);
    auto bytes_ids = [&](std::initializer_list<unsigned> bytes) {
        // Single-byte tokens: encode of each byte alone is not possible for >= 0x80, so look them up.
        std::vector<int> ids;
        for (unsigned b : bytes) {
            for (int id = 0; id < int(tok.vocab_size()); ++id) {
                if (tok.token_bytes(id).size() == 1 && static_cast<unsigned char>(tok.token_bytes(id)[0]) == b) {
                    ids.push_back(id);
                    break;
                }
            }
        }
        return ids;
    };
    const std::string fffd = "\xEF\xBF\xBD";
    EXPECT_EQ(tok.decode(bytes_ids({0x80})), fffd);
    EXPECT_EQ(tok.decode(bytes_ids({0xF0, 0x9F})), fffd);                 // maximal subpart: one
    EXPECT_EQ(tok.decode(bytes_ids({0xE0, 0x80})), fffd + fffd);          // E0 80 is not a subpart
    EXPECT_EQ(tok.decode(bytes_ids({0xED, 0xA0, 0x80})), fffd + fffd + fffd);
    EXPECT_EQ(tok.decode(bytes_ids({0xF0, 0x9F, 0x41})), fffd + "A");
    EXPECT_EQ(tok.decode(bytes_ids({0xEF, 0xBB, 0xBF, 0x41})), "A");      // leading BOM dropped
    EXPECT_EQ(tok.decode(bytes_ids({0x41, 0xEF, 0xBB, 0xBF})), "A\xEF\xBB\xBF");
    EXPECT_EQ(tok.decode(std::vector<int>{}), "");
}

TEST(Tokenizer, DecodeRejectsOutOfRangeIds) {
    REQUIRE_TOKENIZER(tok);
    try {
        tok.decode(std::vector<int>{40, 50257});
        FAIL() << "expected an error";
    } catch (const shardlm::Error& e) {
        EXPECT_NE(std::string(e.what()).find("50257"), std::string::npos) << e.what();
        EXPECT_NE(std::string(e.what()).find("position 1"), std::string::npos) << e.what();
    }
    EXPECT_THROW(tok.decode(std::vector<int>{-1}), shardlm::Error);
}

TEST(Tokenizer, AllowSpecial) {
    REQUIRE_TOKENIZER(tok);
    const int eot = tok.eot_id();
    EXPECT_EQ(tok.encode("<|endoftext|>", true), std::vector<int>{eot});
    EXPECT_NE(tok.encode("<|endoftext|>", false), std::vector<int>{eot});
    EXPECT_GT(tok.encode("<|endoftext|>", false).size(), 1u);  // plain text: several tokens
    EXPECT_EQ(tok.encode("a<|endoftext|>b", true), concat({tok.encode("a"), {eot}, tok.encode("b")}));
    EXPECT_EQ(tok.encode("Hello <|endoftext|> world", true),
              concat({tok.encode("Hello "), {eot}, tok.encode(" world")}));
    EXPECT_EQ(tok.encode("<|endoftext|><|endoftext|>x", true), concat({{eot, eot}, tok.encode("x")}));
    EXPECT_EQ(tok.encode("x<|endoftext|>", true), concat({tok.encode("x"), {eot}}));
    EXPECT_EQ(tok.encode("<|endoftext", true), tok.encode("<|endoftext"));
    EXPECT_EQ(tok.encode("no special here", true), tok.encode("no special here"));
    EXPECT_EQ(tok.decode(std::vector<int>{eot}), "<|endoftext|>");
    const std::string text = "one<|endoftext|>two";
    EXPECT_EQ(tok.decode(tok.encode(text, true)), text);
    EXPECT_EQ(tok.decode(tok.encode(text, false)), text);
}

TEST(Tokenizer, InvalidUtf8InputIsReplacedLikeNode) {
    REQUIRE_TOKENIZER(tok);
    // Node reads bytes as a string with U+FFFD per maximal invalid subsequence; so do we.
    EXPECT_EQ(tok.encode("a\xFF" "b"), tok.encode("a\xEF\xBF\xBD" "b"));
    EXPECT_EQ(tok.encode("x\xF0\x9F y"), tok.encode("x\xEF\xBF\xBD y"));
    EXPECT_EQ(tok.encode("\xED\xA0\x80"), tok.encode("\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD"));
    EXPECT_EQ(shardlm::data::sanitize_utf8("ok \xC3\xA9"), "ok \xC3\xA9");
    EXPECT_EQ(shardlm::data::sanitize_utf8("\xC3"), "\xEF\xBF\xBD");
    EXPECT_EQ(shardlm::data::sanitize_utf8("\xF4\x90\x80\x80"), "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");
    EXPECT_EQ(shardlm::data::sanitize_utf8(std::string("a\0b", 3)), std::string("a\0b", 3));
}

TEST(Tokenizer, EmbeddedNulAndLongRuns) {
    REQUIRE_TOKENIZER(tok);
    const std::string nul("a\0b", 3);
    EXPECT_EQ(tok.decode(tok.encode(nul)), nul);
    // Long pieces take the O(n log n) merge path; they must still round-trip and be stable.
    std::string spaces(100000, ' ');
    EXPECT_EQ(tok.decode(tok.encode(spaces + "x")), spaces + "x");
    std::string word;
    for (int i = 0; i < 50000; ++i) word += char('a' + (i * 7 + i / 13) % 26);
    const auto ids = tok.encode(word);
    EXPECT_EQ(tok.decode(ids), word);
    EXPECT_LT(ids.size(), word.size());
}

TEST(Tokenizer, LoadErrorsNameTheFileAndTheFix) {
    const std::string dir = (fs::temp_directory_path() / "shardlm_test_no_vocab").string();
    fs::create_directories(dir);
    try {
        Gpt2Tokenizer::load(dir);
        FAIL() << "expected an error";
    } catch (const shardlm::Error& e) {
        const std::string msg = e.what();
        EXPECT_NE(msg.find(dir + "/encoder.json"), std::string::npos) << msg;
        EXPECT_NE(msg.find("tools/fetch_assets.sh"), std::string::npos) << msg;
    }
    fs::remove_all(dir);
}

TEST(Tokenizer, DefaultVocabDirHonoursSHARDLM_DATA) {
    const char* old = std::getenv("SHARDLM_DATA");
    std::string saved = old ? old : "";
    setenv("SHARDLM_DATA", "/some/where", 1);
    EXPECT_EQ(shardlm::data::default_vocab_dir(), "/some/where/gpt2");
    if (old) {
        setenv("SHARDLM_DATA", saved.c_str(), 1);
    } else {
        unsetenv("SHARDLM_DATA");
        EXPECT_EQ(shardlm::data::default_vocab_dir(), kSource + "/data/gpt2");
    }
}

TEST(Tokenizer, RoundTripsTheSotuCorpus) {
    REQUIRE_TOKENIZER(tok);
    const fs::path raw = fs::path(shardlm::data::default_vocab_dir()).parent_path() / "sotu" / "raw";
    if (!fs::is_directory(raw)) GTEST_SKIP() << raw << " not present (tools/fetch_assets.sh fetches it)";
    std::vector<fs::path> files;
    for (const auto& e : fs::directory_iterator(raw)) {
        if (e.path().extension() == ".txt") files.push_back(e.path());
    }
    std::sort(files.begin(), files.end());
    ASSERT_FALSE(files.empty());
    size_t tokens = 0, bytes = 0;
    for (const auto& f : files) {
        const std::string text = shardlm::io::read_file(f.string());
        const std::vector<int> ids = tok.encode(text);
        ASSERT_EQ(tok.decode(ids), text) << f;
        tokens += ids.size();
        bytes += text.size();
    }
    // English prose: about 4.5 bytes per GPT-2 token.
    EXPECT_GT(double(bytes) / double(tokens), 3.5);
    EXPECT_LT(double(bytes) / double(tokens), 6.0);
}
