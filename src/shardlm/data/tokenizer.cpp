// data/tokenizer.cpp: GPT-2 byte-level BPE, reproducing the npm gpt-3-encoder 1.1.4 Encoder.js exactly.
//
// encode(text) in the reference:
//   1. split the text with /'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+/gu
//      (JavaScript regex semantics, case-sensitive);
//   2. map each piece's UTF-8 bytes to the printable "byte unicode" alphabet (bytes_to_unicode);
//   3. run BPE on the piece: repeatedly take the adjacent pair with the lowest merge rank (ties: the
//      LAST such pair in the word, since the JS keeps the last pair it saw per rank) and merge every
//      occurrence of it left to right, until no pair has a rank or one symbol is left;
//   4. look every symbol up in encoder.json.
// Quirk of step 3: ranks live in a JS object keyed by String([first, second]) = first + "," + second,
// so the pair (`",`, `"`) finds the rank of the merge (`"`, `,"`), both spelling `",,"`. We key ranks
// by that string too (every comma split of a merge's key whose parts are tokens is a mergeable pair),
// which with the GPT-2 vocabulary adds 11 pairs. The tie rule above matters only for such pairs.
//
// The regex runs in PCRE2 (JIT), with JavaScript's character classes spelled out (gpt2_pattern.cpp).
// Invalid UTF-8 is replaced as the WHATWG decoder does (utf8.h).
#include "shardlm/data/tokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>
#include <unordered_map>

#include "shardlm/core/check.h"
#include "shardlm/data/gpt2_pattern.h"
#include "shardlm/data/utf8.h"
#include "shardlm/io/atomic_file.h"

#ifndef SHARDLM_DEFAULT_DATA_DIR
#define SHARDLM_DEFAULT_DATA_DIR "data"
#endif

namespace shardlm::data {

namespace {

constexpr const char* kFetchHint =
    "\n---> HINT: run tools/fetch_assets.sh (it downloads data/gpt2/encoder.json and vocab.bpe), or point "
    "--vocab / $SHARDLM_DATA at a directory that has them";
constexpr std::string_view kEotText = "<|endoftext|>";
constexpr int kEotId = 50256;

bool is_js_space_ascii(unsigned char c) { return c == ' ' || (c >= 0x09 && c <= 0x0D); }

}  // namespace

// ---- merge table: (left id, right id) -> (rank, merged id), open addressing -----------------------
// (In a named namespace, not the anonymous one: Gpt2Tokenizer::Impl holds them, and a unity build, where this
// file is not the compiler's main file, warns about a class with linkage holding anonymous types.)
namespace bpe_detail {

struct MergeTable {
    struct Slot {
        uint64_t key = ~uint64_t(0);
        int32_t rank = 0;
        int32_t merged = 0;
    };
    std::vector<Slot> slots;
    uint64_t mask = 0;

    static uint64_t pack(int a, int b) { return (uint64_t(uint32_t(a)) << 32) | uint32_t(b); }
    static uint64_t hash(uint64_t k) {
        k ^= k >> 33;
        k *= 0xff51afd7ed558ccdULL;
        k ^= k >> 33;
        return k;
    }
    void init(size_t n) {
        size_t cap = 1;
        while (cap < 2 * n + 16) cap <<= 1;
        slots.assign(cap, Slot{});
        mask = cap - 1;
    }
    void put(int a, int b, int rank, int merged) {
        uint64_t k = pack(a, b);
        for (uint64_t h = hash(k) & mask;; h = (h + 1) & mask) {
            if (slots[h].key == k || slots[h].key == ~uint64_t(0)) {
                slots[h] = Slot{k, rank, merged};
                return;
            }
        }
    }
    const Slot* get(int a, int b) const {
        uint64_t k = pack(a, b);
        for (uint64_t h = hash(k) & mask;; h = (h + 1) & mask) {
            if (slots[h].key == k) return &slots[h];
            if (slots[h].key == ~uint64_t(0)) return nullptr;
        }
    }
};

struct StringHash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};

}  // namespace bpe_detail

namespace {

using bpe_detail::MergeTable;
using bpe_detail::StringHash;

std::string read_vocab_file(const std::string& path) {
    SHARDLM_CHECK(std::filesystem::exists(path), "GPT-2 vocabulary file '", path, "' not found", kFetchHint);
    try {
        return io::read_file(path);
    } catch (const std::exception& e) {
        fail("GPT-2 vocabulary file '", path, "': cannot read (", e.what(), ")", kFetchHint);
    }
}

}  // namespace

// ---- the tokenizer --------------------------------------------------------------------------------

struct Gpt2Tokenizer::Impl {
    std::vector<std::string> token_bytes;  // id -> raw bytes
    int byte_token[256] = {};              // byte -> id of its single-byte token
    MergeTable merges;

    pcre2_code* re = nullptr;
    pcre2_match_context* mctx = nullptr;
    pcre2_jit_stack* jit_stack = nullptr;
    pcre2_match_data* md = nullptr;
    bool jit = false;

    // Merge cache: piece bytes -> ids. Bounded: cleared when it grows past kCacheMax entries.
    static constexpr size_t kCacheMax = size_t(1) << 20;
    mutable std::unordered_map<std::string, std::vector<int>, StringHash, std::equal_to<>> cache;
    mutable std::vector<int> syms;  // scratch

    ~Impl() {
        if (md) pcre2_match_data_free(md);
        if (mctx) pcre2_match_context_free(mctx);
        if (jit_stack) pcre2_jit_stack_free(jit_stack);
        if (re) pcre2_code_free(re);
    }

    void compile_regex() {
        const std::string pat = gpt2_pattern();
        int err = 0;
        PCRE2_SIZE off = 0;
        // ANCHORED: the alternatives match every character, so pieces are contiguous and each match
        // starts exactly where the previous one ended.
        re = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pat.data()), pat.size(),
                           PCRE2_UTF | PCRE2_UCP | PCRE2_ANCHORED, &err, &off, nullptr);
        if (!re) {
            PCRE2_UCHAR msg[256];
            pcre2_get_error_message(err, msg, sizeof(msg));
            fail("tokenizer: cannot compile the GPT-2 pattern at offset ", off, ": ",
                 reinterpret_cast<const char*>(msg));
        }
        jit = pcre2_jit_compile(re, PCRE2_JIT_COMPLETE) == 0;
        mctx = pcre2_match_context_create(nullptr);
        if (jit) {
            jit_stack = pcre2_jit_stack_create(32 * 1024, 8 * 1024 * 1024, nullptr);
            if (jit_stack) pcre2_jit_stack_assign(mctx, nullptr, jit_stack);
        }
        md = pcre2_match_data_create_from_pattern(re, nullptr);
        SHARDLM_CHECK(md && mctx, "tokenizer: out of memory creating PCRE2 match data");
    }

    // The reference merge loop on a short word, literally.
    void bpe_short(std::vector<int>& w) const {
        std::vector<int> next;
        next.reserve(w.size());
        while (w.size() >= 2) {
            int best_rank = INT32_MAX;
            size_t best = 0;
            for (size_t i = 0; i + 1 < w.size(); ++i) {
                const MergeTable::Slot* s = merges.get(w[i], w[i + 1]);
                if (s && s->rank <= best_rank) {  // <=: the last pair of the lowest rank
                    best_rank = s->rank;
                    best = i;
                }
            }
            if (best_rank == INT32_MAX) break;
            const int first = w[best], second = w[best + 1];
            const int merged = merges.get(first, second)->merged;
            next.clear();
            for (size_t i = 0; i < w.size();) {
                if (i + 1 < w.size() && w[i] == first && w[i + 1] == second) {
                    next.push_back(merged);
                    i += 2;
                } else {
                    next.push_back(w[i]);
                    i += 1;
                }
            }
            w.swap(next);
        }
    }

    // Same result for long words in O(n log n): a linked list of symbols and an ordered set of the
    // mergeable pairs by (rank, position); positions keep word order because merges only remove nodes.
    void bpe_long(std::vector<int>& w) const {
        const int n = int(w.size());
        std::vector<int> nxt(n), prv(n);
        for (int i = 0; i < n; ++i) {
            nxt[i] = i + 1 < n ? i + 1 : -1;
            prv[i] = i - 1;
        }
        std::vector<int> pair_rank(n, -1);  // rank of the pair starting at node i, -1 if none
        std::set<std::pair<int, int>> pairs;
        auto add = [&](int i) {
            if (i < 0 || nxt[i] < 0) return;
            if (const MergeTable::Slot* s = merges.get(w[i], w[nxt[i]])) {
                pair_rank[i] = s->rank;
                pairs.emplace(s->rank, i);
            }
        };
        auto remove = [&](int i) {
            if (i < 0 || pair_rank[i] < 0) return;
            pairs.erase({pair_rank[i], i});
            pair_rank[i] = -1;
        };
        for (int i = 0; i + 1 < n; ++i) add(i);
        std::vector<char> alive(n, 1);
        std::vector<int> cand;
        while (!pairs.empty()) {
            const int r = pairs.begin()->first;
            auto last = std::prev(pairs.lower_bound({r + 1, INT32_MIN}));
            const int first = w[last->second], second = w[nxt[last->second]];
            const int merged = merges.get(first, second)->merged;
            cand.clear();
            for (auto it = pairs.begin(); it != pairs.end() && it->first == r; ++it) cand.push_back(it->second);
            for (int q : cand) {  // ascending positions: left to right
                if (!alive[q] || nxt[q] < 0 || w[q] != first || w[nxt[q]] != second) continue;
                const int b = nxt[q];
                remove(prv[q]);
                remove(q);
                remove(b);
                w[q] = merged;
                alive[b] = 0;
                nxt[q] = nxt[b];
                if (nxt[b] >= 0) prv[nxt[b]] = q;
                add(prv[q]);
                add(q);
            }
        }
        int out = 0;
        for (int i = 0; i >= 0 && i < n; i = nxt[i]) w[out++] = w[i];
        w.resize(out);
    }

    void encode_piece(std::string_view piece, std::vector<int>& out) const {
        if (piece.size() == 1) {
            out.push_back(byte_token[static_cast<unsigned char>(piece[0])]);
            return;
        }
        if (auto it = cache.find(piece); it != cache.end()) {
            out.insert(out.end(), it->second.begin(), it->second.end());
            return;
        }
        syms.clear();
        for (char c : piece) syms.push_back(byte_token[static_cast<unsigned char>(c)]);
        if (syms.size() <= 64) {
            bpe_short(syms);
        } else {
            bpe_long(syms);
        }
        out.insert(out.end(), syms.begin(), syms.end());
        if (cache.size() >= kCacheMax) cache.clear();
        cache.emplace(std::string(piece), syms);
    }

    // `text` must be valid UTF-8.
    void encode_plain(std::string_view text, std::vector<int>& out) const {
        const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
        size_t pos = 0;
        while (pos < text.size()) {
            // Fast path for the commonest piece: an optional space and a run of ASCII letters that
            // ends at an ASCII character (which cannot continue \p{L}).
            size_t j = pos + (text[pos] == ' ' ? 1 : 0);
            size_t k = j;
            while (k < text.size() && ((text[k] | 0x20) >= 'a' && (text[k] | 0x20) <= 'z')) ++k;
            if (k > j && (k == text.size() || static_cast<unsigned char>(text[k]) < 0x80)) {
                encode_piece(text.substr(pos, k - pos), out);
                pos = k;
                continue;
            }
            int rc = jit ? pcre2_jit_match(re, subject, text.size(), pos, PCRE2_NO_UTF_CHECK, md, mctx)
                         : pcre2_match(re, subject, text.size(), pos, PCRE2_NO_UTF_CHECK, md, mctx);
            if (rc < 0) {
                PCRE2_UCHAR msg[256];
                pcre2_get_error_message(rc, msg, sizeof(msg));
                fail("tokenizer: pre-tokenisation failed at byte ", pos, " of ", text.size(), ": ",
                     reinterpret_cast<const char*>(msg));
            }
            const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
            SHARDLM_CHECK(ov[0] == pos && ov[1] > pos, "tokenizer: internal error: empty piece at byte ", pos);
            encode_piece(text.substr(pos, ov[1] - pos), out);
            pos = ov[1];
        }
    }
};

Gpt2Tokenizer::Gpt2Tokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Gpt2Tokenizer::Gpt2Tokenizer(Gpt2Tokenizer&&) noexcept = default;
Gpt2Tokenizer& Gpt2Tokenizer::operator=(Gpt2Tokenizer&&) noexcept = default;
Gpt2Tokenizer::~Gpt2Tokenizer() = default;

namespace {

// bytes_to_unicode(): printable bytes stand for themselves, the other 68 map to U+0100.. in order.
struct ByteAlphabet {
    uint32_t byte_to_cp[256];
    int cp_to_byte[0x200];
    ByteAlphabet() {
        std::fill(std::begin(cp_to_byte), std::end(cp_to_byte), -1);
        int extra = 0;
        for (int b = 0; b < 256; ++b) {
            bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
            byte_to_cp[b] = printable ? uint32_t(b) : uint32_t(256 + extra++);
            cp_to_byte[byte_to_cp[b]] = b;
        }
    }
};

// A token's text in encoder.json -> its bytes: each code point of the key stands for one byte.
std::string token_key_bytes(const std::string& key, int id, const ByteAlphabet& alpha, const std::string& enc_path) {
    std::string bytes;
    const auto* p = reinterpret_cast<const unsigned char*>(key.data());
    for (size_t i = 0; i < key.size();) {
        uint32_t cp;
        int len;
        if (p[i] < 0x80) {
            cp = p[i];
            len = 1;
        } else if ((p[i] & 0xE0) == 0xC0 && i + 1 < key.size()) {
            cp = ((p[i] & 0x1Fu) << 6) | (p[i + 1] & 0x3Fu);
            len = 2;
        } else {
            cp = 0x200;  // not in the byte alphabet
            len = 1;
        }
        SHARDLM_CHECK(cp < 0x200 && alpha.cp_to_byte[cp] >= 0, "GPT-2 vocabulary file '", enc_path, "': token '", key,
                      "' (id ", id, ") has a character outside the GPT-2 byte alphabet", kFetchHint);
        bytes += char(alpha.cp_to_byte[cp]);
        i += len;
    }
    return bytes;
}

// encoder.json: {"<token in byte-unicode>": id, ...}, ids dense from 0. Fills each id's bytes and returns
// the keys' ids.
std::unordered_map<std::string, int> read_encoder(const std::string& enc_path, const std::string& enc_text,
                                                  const ByteAlphabet& alpha, std::vector<std::string>* token_bytes) {
    nlohmann::json enc;
    try {
        enc = nlohmann::json::parse(enc_text);
    } catch (const std::exception& e) {
        fail("GPT-2 vocabulary file '", enc_path, "': not valid JSON (", e.what(), ")", kFetchHint);
    }
    SHARDLM_CHECK(enc.is_object() && !enc.empty(), "GPT-2 vocabulary file '", enc_path,
                  "': expected a JSON object {token: id}", kFetchHint);
    std::unordered_map<std::string, int> str_to_id;
    str_to_id.reserve(enc.size() * 2);
    token_bytes->assign(enc.size(), std::string());
    std::vector<char> seen(enc.size(), 0);
    for (const auto& [key, val] : enc.items()) {
        SHARDLM_CHECK(val.is_number_integer() && val.get<int64_t>() >= 0 && val.get<int64_t>() < int64_t(enc.size()),
                      "GPT-2 vocabulary file '", enc_path, "': token '", key, "' has id ", val.dump(),
                      ", want an integer in [0, ", enc.size(), ")", kFetchHint);
        const int id = val.get<int>();
        SHARDLM_CHECK(!seen[id], "GPT-2 vocabulary file '", enc_path, "': id ", id, " appears twice", kFetchHint);
        seen[id] = 1;
        (*token_bytes)[id] = token_key_bytes(key, id, alpha, enc_path);
        str_to_id.emplace(key, id);
    }
    SHARDLM_CHECK(enc.size() > size_t(kEotId) && (*token_bytes)[kEotId] == kEotText, "GPT-2 vocabulary file '",
                  enc_path, "': id ", kEotId, " is not <|endoftext|>; this is not the GPT-2 vocabulary", kFetchHint);
    return str_to_id;
}

// vocab.bpe: "#version" line, then one merge "first second" per line; like the reference, the first and the
// last line (empty after the final newline) are not merges. Returns "first,second" -> rank (a later equal
// key wins).
std::unordered_map<std::string, int> read_merge_ranks(const std::string& bpe_path, const std::string& bpe_text,
                                                      const std::unordered_map<std::string, int>& str_to_id) {
    std::vector<std::string_view> lines;
    for (size_t start = 0;;) {
        size_t nl = bpe_text.find('\n', start);
        if (nl == std::string::npos) {
            lines.emplace_back(bpe_text.data() + start, bpe_text.size() - start);
            break;
        }
        lines.emplace_back(bpe_text.data() + start, nl - start);
        start = nl + 1;
    }
    SHARDLM_CHECK(lines.size() >= 2, "GPT-2 vocabulary file '", bpe_path, "': no merges", kFetchHint);
    std::unordered_map<std::string, int> key_rank;
    key_rank.reserve(lines.size() * 2);
    for (size_t li = 1; li + 1 < lines.size(); ++li) {
        std::string_view line = lines[li];
        std::vector<std::string_view> fields;
        for (size_t i = 0; i < line.size();) {
            while (i < line.size() && is_js_space_ascii(static_cast<unsigned char>(line[i]))) ++i;
            size_t j = i;
            while (j < line.size() && !is_js_space_ascii(static_cast<unsigned char>(line[j]))) ++j;
            if (j > i) fields.push_back(line.substr(i, j - i));
            i = j;
        }
        SHARDLM_CHECK(fields.size() == 2, "GPT-2 vocabulary file '", bpe_path, "': line ", li + 1,
                      " is not a merge \"first second\"", kFetchHint);
        for (auto f : fields) {
            SHARDLM_CHECK(str_to_id.count(std::string(f)), "GPT-2 vocabulary file '", bpe_path, "': line ", li + 1,
                          ": '", f, "' is not a token of encoder.json", kFetchHint);
        }
        key_rank[cat(fields[0], ",", fields[1])] = int(li - 1);
    }
    return key_rank;
}

}  // namespace

Gpt2Tokenizer Gpt2Tokenizer::load(const std::string& dir) {
    const std::string enc_path = (std::filesystem::path(dir) / "encoder.json").string();
    const std::string bpe_path = (std::filesystem::path(dir) / "vocab.bpe").string();
    const std::string enc_text = read_vocab_file(enc_path);
    const std::string bpe_text = read_vocab_file(bpe_path);
    auto impl = std::make_unique<Impl>();
    const ByteAlphabet alpha;
    const std::unordered_map<std::string, int> str_to_id = read_encoder(enc_path, enc_text, alpha, &impl->token_bytes);
    for (int b = 0; b < 256; ++b) {
        std::string s;
        append_utf8(s, alpha.byte_to_cp[b]);
        auto it = str_to_id.find(s);
        SHARDLM_CHECK(it != str_to_id.end(), "GPT-2 vocabulary file '", enc_path, "': no token for byte ", b, kFetchHint);
        impl->byte_token[b] = it->second;
    }
    const std::unordered_map<std::string, int> key_rank = read_merge_ranks(bpe_path, bpe_text, str_to_id);
    // Every split of a key at a comma into two tokens is a mergeable pair with that key's rank.
    impl->merges.init(key_rank.size() + 64);
    size_t n_pairs = 0;
    for (const auto& [key, rank] : key_rank) {
        for (size_t c = key.find(','); c != std::string::npos; c = key.find(',', c + 1)) {
            if (c == 0 || c + 1 == key.size()) continue;
            auto a = str_to_id.find(key.substr(0, c));
            auto b = str_to_id.find(key.substr(c + 1));
            if (a == str_to_id.end() || b == str_to_id.end()) continue;
            // A merge whose result is not a token would give `undefined` in the reference; the GPT-2
            // vocabulary has none, and we leave such a pair unmerged.
            auto m = str_to_id.find(key.substr(0, c) + key.substr(c + 1));
            if (m == str_to_id.end()) continue;
            impl->merges.put(a->second, b->second, rank, m->second);
            ++n_pairs;
        }
    }
    SHARDLM_CHECK(n_pairs >= key_rank.size(), "GPT-2 vocabulary file '", bpe_path,
                  "': some merges do not produce a token of encoder.json", kFetchHint);
    impl->compile_regex();
    return Gpt2Tokenizer(std::move(impl));
}

size_t Gpt2Tokenizer::vocab_size() const { return impl_->token_bytes.size(); }

std::string_view Gpt2Tokenizer::token_bytes(int id) const {
    SHARDLM_CHECK(id >= 0 && size_t(id) < impl_->token_bytes.size(), "tokenizer: token id ", id,
                  " is out of range [0, ", impl_->token_bytes.size(), ")");
    return impl_->token_bytes[size_t(id)];
}

void Gpt2Tokenizer::encode_append(std::string_view utf8, std::vector<int>& out, bool allow_special) const {
    std::string fixed;
    if (!whatwg_utf8(utf8, [](const char*, size_t) {})) {
        fixed = sanitize_utf8(utf8);
        utf8 = fixed;
    }
    if (!allow_special) {
        impl_->encode_plain(utf8, out);
        return;
    }
    for (size_t pos = 0;;) {
        size_t hit = utf8.find(kEotText, pos);
        impl_->encode_plain(utf8.substr(pos, hit == std::string_view::npos ? std::string_view::npos : hit - pos), out);
        if (hit == std::string_view::npos) break;
        out.push_back(kEotId);
        pos = hit + kEotText.size();
    }
}

std::vector<int> Gpt2Tokenizer::encode(std::string_view utf8, bool allow_special) const {
    std::vector<int> out;
    out.reserve(utf8.size() / 3 + 4);
    encode_append(utf8, out, allow_special);
    return out;
}

std::string Gpt2Tokenizer::decode(std::span<const int> ids) const {
    std::string bytes;
    for (size_t i = 0; i < ids.size(); ++i) {
        const int id = ids[i];
        SHARDLM_CHECK(id >= 0 && size_t(id) < impl_->token_bytes.size(), "decode: token id ", id, " at position ", i,
                      " is out of range [0, ", impl_->token_bytes.size(), ")");
        bytes += impl_->token_bytes[size_t(id)];
    }
    // TextDecoder("utf-8") with default options: a leading BOM is dropped, invalid bytes -> U+FFFD.
    std::string_view v = bytes;
    if (v.substr(0, 3) == "\xEF\xBB\xBF") v.remove_prefix(3);
    return sanitize_utf8(v);
}

std::string default_vocab_dir() {
    if (const char* d = std::getenv("SHARDLM_DATA"); d && *d) return (std::filesystem::path(d) / "gpt2").string();
    return (std::filesystem::path(SHARDLM_DEFAULT_DATA_DIR) / "gpt2").string();
}

}  // namespace shardlm::data
