// data/gpt2_pattern.cpp: the reference's pre-tokenisation regex for PCRE2.
//
// The reference (npm gpt-3-encoder 1.1.4) splits text with
//   /'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+/gu
// with JavaScript regex semantics (case-sensitive). tokenizer.cpp runs it in PCRE2 (JIT), so the
// pattern spells out JavaScript's character classes:
//   JS \s = [\t\n\v\f\r \xA0\u1680\u2000-\u200A\u2028\u2029\u202F\u205F\u3000\uFEFF]; PCRE2's \s with
//   UCP also has U+0085 and U+180E and lacks U+FEFF.
//   JS \p{L}/\p{N} follow the Unicode version of Node's ICU (17.0 for Node 20.20 here); PCRE2 10.42 has
//   Unicode 14. The code points that are L/N in Unicode 17 but not in PCRE2's tables are appended
//   below (computed by testing every code point in both; nothing was removed between the versions).
#include "shardlm/data/gpt2_pattern.h"

namespace shardlm::data {

namespace {

constexpr const char* kJsSpace =
    "\\x{09}-\\x{0D}\\x{20}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}\\x{205F}"
    "\\x{3000}\\x{FEFF}";
// \p{L} in Unicode 17 minus \p{L} in PCRE2 10.42 (Unicode 14).
constexpr const char* kLetterExtra =
    "\\x{88F}\\x{C5C}\\x{CDC}\\x{1C89}-\\x{1C8A}\\x{A7CB}-\\x{A7CF}\\x{A7D2}\\x{A7D4}\\x{A7DA}-\\x{A7DC}"
    "\\x{A7F1}\\x{105C0}-\\x{105F3}\\x{10940}-\\x{10959}\\x{10D4A}-\\x{10D65}\\x{10D6F}-\\x{10D85}"
    "\\x{10EC2}-\\x{10EC7}\\x{1123F}-\\x{11240}\\x{11380}-\\x{11389}\\x{1138B}\\x{1138E}"
    "\\x{11390}-\\x{113B5}\\x{113B7}\\x{113D1}\\x{113D3}\\x{11BC0}-\\x{11BE0}\\x{11DB0}-\\x{11DDB}"
    "\\x{11F02}\\x{11F04}-\\x{11F10}\\x{11F12}-\\x{11F33}\\x{1342F}\\x{13441}-\\x{13446}"
    "\\x{13460}-\\x{143FA}\\x{16100}-\\x{1611D}\\x{16D40}-\\x{16D6C}\\x{16EA0}-\\x{16EB8}"
    "\\x{16EBB}-\\x{16ED3}\\x{16FF2}-\\x{16FF3}\\x{187F8}-\\x{187FF}\\x{18CFF}\\x{18D09}-\\x{18D1E}"
    "\\x{18D80}-\\x{18DF2}\\x{1B132}\\x{1B155}\\x{1DF25}-\\x{1DF2A}\\x{1E030}-\\x{1E06D}"
    "\\x{1E4D0}-\\x{1E4EB}\\x{1E5D0}-\\x{1E5ED}\\x{1E5F0}\\x{1E6C0}-\\x{1E6DE}\\x{1E6E0}-\\x{1E6E2}"
    "\\x{1E6E4}-\\x{1E6E5}\\x{1E6E7}-\\x{1E6ED}\\x{1E6F0}-\\x{1E6F4}\\x{1E6FE}-\\x{1E6FF}"
    "\\x{2B739}-\\x{2B73F}\\x{2CEA2}-\\x{2CEAD}\\x{2EBF0}-\\x{2EE5D}\\x{31350}-\\x{33479}";
// \p{N} in Unicode 17 minus \p{N} in PCRE2 10.42.
constexpr const char* kNumberExtra =
    "\\x{10D40}-\\x{10D49}\\x{116D0}-\\x{116E3}\\x{11BF0}-\\x{11BF9}\\x{11DE0}-\\x{11DE9}"
    "\\x{11F50}-\\x{11F59}\\x{16130}-\\x{16139}\\x{16D70}-\\x{16D79}\\x{16FF4}-\\x{16FF6}"
    "\\x{1CCF0}-\\x{1CCF9}\\x{1D2C0}-\\x{1D2D3}\\x{1E4F0}-\\x{1E4F9}\\x{1E5F1}-\\x{1E5FA}";

}  // namespace

std::string gpt2_pattern() {
    const std::string s = kJsSpace;
    const std::string l = std::string("\\p{L}") + kLetterExtra;
    const std::string n = std::string("\\p{N}") + kNumberExtra;
    return "'s|'t|'re|'ve|'m|'ll|'d"
           "| ?[" + l + "]+"
           "| ?[" + n + "]+"
           "| ?[^" + s + l + n + "]+"
           "|[" + s + "]+(?![^" + s + "])"
           "|[" + s + "]+";
}

}  // namespace shardlm::data
