// data/utf8.h: the UTF-8 helpers of the tokenizer: encoding a code point, and the WHATWG UTF-8
// decoder's treatment of invalid bytes (one U+FFFD per maximal invalid subsequence, as
// TextDecoder and Node.js do), which the GPT-2 reference applies to both encode and decode.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace shardlm::data {

// Appends the UTF-8 encoding of code point cp to out.
void append_utf8(std::string& out, uint32_t cp);

// WHATWG UTF-8 decoder (https://encoding.spec.whatwg.org/#utf-8-decoder). Calls emit(ptr, len) for
// each run of valid bytes and emit(nullptr, 0) for each U+FFFD. Returns true when all bytes were valid.
template <typename Emit>
bool whatwg_utf8(std::string_view in, Emit&& emit) {
    const auto* p = reinterpret_cast<const unsigned char*>(in.data());
    const size_t n = in.size();
    bool valid = true;
    size_t run = 0;  // start of the current run of valid bytes
    size_t i = 0;
    while (i < n) {
        unsigned b = p[i];
        if (b < 0x80) {
            ++i;
            continue;
        }
        int need;
        unsigned lower = 0x80, upper = 0xBF;
        if (b >= 0xC2 && b <= 0xDF) {
            need = 1;
        } else if (b >= 0xE0 && b <= 0xEF) {
            need = 2;
            if (b == 0xE0) lower = 0xA0;
            if (b == 0xED) upper = 0x9F;
        } else if (b >= 0xF0 && b <= 0xF4) {
            need = 3;
            if (b == 0xF0) lower = 0x90;
            if (b == 0xF4) upper = 0x8F;
        } else {
            need = -1;  // never starts a sequence
        }
        size_t j = i + 1;
        int seen = 0;
        if (need > 0) {
            while (seen < need && j < n && p[j] >= lower && p[j] <= upper) {
                lower = 0x80;
                upper = 0xBF;
                ++j;
                ++seen;
            }
        }
        if (need > 0 && seen == need) {
            i = j;
            continue;
        }
        // Invalid: the maximal subsequence [i, j) becomes one U+FFFD; p[j] is looked at afresh.
        valid = false;
        if (i > run) emit(in.data() + run, i - run);
        emit(nullptr, 0);
        i = j;
        run = j;
    }
    if (!valid && n > run) emit(in.data() + run, n - run);
    return valid;
}

// Replace invalid UTF-8 with U+FFFD, one per maximal invalid subsequence (WHATWG "decode" without
// BOM handling). Returns the input unchanged when it is valid.
std::string sanitize_utf8(std::string_view bytes);

// Why `bytes` is not text, or "" if it is: a NUL byte (no text format has one), or more than 1 % of
// the bytes being control characters (other than tab, newlines, form feed, escape) or invalid UTF-8
// (a binary file, or text in a legacy encoding). `tokenize` refuses such files instead of turning
// them into token soup.
std::string binary_reason(std::string_view bytes);

}  // namespace shardlm::data
