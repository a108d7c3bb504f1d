// data/utf8.cpp: append_utf8 and sanitize_utf8 (data/utf8.h).
#include "shardlm/data/utf8.h"

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

}  // namespace shardlm::data
