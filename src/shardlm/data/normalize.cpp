#include "shardlm/data/normalize.h"

#include <algorithm>
#include <cstdint>

#include "shardlm/core/check.h"

namespace shardlm::data {

namespace {

// ASCII replacement of a code point under "punct", or nullptr to keep it.
const char* punct_replacement(uint32_t cp) {
    switch (cp) {
        case 0x00A0: return " ";
        case 0x2018: case 0x2019: case 0x201A: case 0x201B: case 0x2032: return "'";
        case 0x201C: case 0x201D: case 0x201E: case 0x201F: case 0x2033: return "\"";
        case 0x2014: case 0x2015: return "--";
        case 0x2010: case 0x2011: case 0x2012: case 0x2013: case 0x2212: return "-";
        case 0x2026: return "...";
        default: return nullptr;
    }
}

}  // namespace

const std::vector<std::string>& normalizations() {
    static const std::vector<std::string> names = {"none", "punct"};
    return names;
}

std::string normalize_text(std::string_view text, std::string_view normalization) {
    const auto& names = normalizations();
    SHARDLM_CHECK(std::find(names.begin(), names.end(), normalization) != names.end(), "unknown text normalization '",
                  std::string(normalization), "'\n---> HINT: use none or punct");
    if (normalization == "none") return std::string(text);
    std::string out;
    out.reserve(text.size());
    const auto* p = reinterpret_cast<const unsigned char*>(text.data());
    const size_t n = text.size();
    size_t i = 0;
    while (i < n) {
        // Every replaced code point is 2 or 3 bytes of well-formed UTF-8 (U+00A0, U+2010..U+2212);
        // anything else, valid or not, is copied byte by byte.
        uint32_t cp = 0;
        size_t len = 0;
        if (p[i] == 0xC2 && i + 1 < n && p[i + 1] == 0xA0) {
            cp = 0xA0, len = 2;
        } else if (p[i] == 0xE2 && i + 2 < n && (p[i + 1] & 0xC0) == 0x80 && (p[i + 2] & 0xC0) == 0x80) {
            cp = (uint32_t(p[i] & 0x0F) << 12) | (uint32_t(p[i + 1] & 0x3F) << 6) | uint32_t(p[i + 2] & 0x3F);
            len = 3;
        }
        const char* r = len ? punct_replacement(cp) : nullptr;
        if (r) {
            out += r;
            i += len;
        } else {
            out += char(p[i]);
            ++i;
        }
    }
    return out;
}

}  // namespace shardlm::data
