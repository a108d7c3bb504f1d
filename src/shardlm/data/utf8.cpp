// data/utf8.cpp: append_utf8 and sanitize_utf8 (data/utf8.h).
#include "shardlm/data/utf8.h"

#include <cstdio>

namespace shardlm::data {

namespace {
constexpr std::string_view kReplacement = "\xEF\xBF\xBD";  // U+FFFD
}  // namespace

void append_utf8(std::string& out, uint32_t cp) {
    if (cp < 0x80) {
        out += char(cp);
    } else if (cp < 0x800) {
        out += char(0xC0 | (cp >> 6));
        out += char(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
        out += char(0xE0 | (cp >> 12));
        out += char(0x80 | ((cp >> 6) & 0x3F));
        out += char(0x80 | (cp & 0x3F));
    } else {
        out += char(0xF0 | (cp >> 18));
        out += char(0x80 | ((cp >> 12) & 0x3F));
        out += char(0x80 | ((cp >> 6) & 0x3F));
        out += char(0x80 | (cp & 0x3F));
    }
}

std::string sanitize_utf8(std::string_view bytes) {
    std::string out;
    bool valid = whatwg_utf8(bytes, [&](const char* p, size_t n) {
        if (p) {
            out.append(p, n);
        } else {
            out += kReplacement;
        }
    });
    if (valid) return std::string(bytes);
    return out;
}

std::string binary_reason(std::string_view bytes) {
    const size_t nul = bytes.find('\0');
    if (nul != std::string_view::npos) return "it holds a NUL byte (at offset " + std::to_string(nul) + ")";
    size_t odd = 0;
    for (unsigned char c : bytes)
        if ((c < 0x20 && c != '\t' && c != '\n' && c != '\r' && c != '\f' && c != 0x1b) || c == 0x7f) odd++;
    size_t invalid = 0;
    whatwg_utf8(bytes, [&](const char* p, size_t) {
        if (!p) invalid++;
    });
    const size_t bad = odd + invalid;
    if (bytes.empty() || bad * 100 <= bytes.size()) return "";
    char buf[160];
    std::snprintf(buf, sizeof(buf), "%.1f %% of its bytes are control characters or invalid UTF-8",
                  100.0 * double(bad) / double(bytes.size()));
    return buf;
}

}  // namespace shardlm::data
