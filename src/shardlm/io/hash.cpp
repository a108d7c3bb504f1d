#include "shardlm/io/hash.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <vector>

#include "shardlm/core/check.h"

namespace shardlm::io {

namespace {

constexpr uint64_t P1 = 0x9E3779B185EBCA87ull, P2 = 0xC2B2AE3D27D4EB4Full, P3 = 0x165667B19E3779F9ull,
                   P4 = 0x85EBCA77C2B2AE63ull, P5 = 0x27D4EB2F165667C5ull;

inline uint64_t rotl(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }
inline uint64_t read64(const unsigned char* p) {
    uint64_t v;
    std::memcpy(&v, p, 8);  // little-endian hosts only (x86-64, as everything here)
    return v;
}
inline uint32_t read32(const unsigned char* p) {
    uint32_t v;
    std::memcpy(&v, p, 4);
    return v;
}
inline uint64_t round(uint64_t acc, uint64_t lane) { return rotl(acc + lane * P2, 31) * P1; }
inline uint64_t merge(uint64_t acc, uint64_t v) { return (acc ^ round(0, v)) * P1 + P4; }

}  // namespace

Xxh64::Xxh64(uint64_t seed) : v_{seed + P1 + P2, seed + P2, seed, seed - P1}, seed_(seed) {}

void Xxh64::update(const void* data, size_t bytes) {
    const auto* p = static_cast<const unsigned char*>(data);
    total_ += bytes;
    if (buffered_ + bytes < 32) {
        if (bytes) std::memcpy(buf_ + buffered_, p, bytes);
        buffered_ += bytes;
        return;
    }
    if (buffered_) {
        const size_t take = 32 - buffered_;
        std::memcpy(buf_ + buffered_, p, take);
        for (int i = 0; i < 4; i++) v_[i] = round(v_[i], read64(buf_ + 8 * i));
        p += take;
        bytes -= take;
        buffered_ = 0;
    }
    uint64_t a = v_[0], b = v_[1], c = v_[2], d = v_[3];
    for (; bytes >= 32; p += 32, bytes -= 32) {
        a = round(a, read64(p));
        b = round(b, read64(p + 8));
        c = round(c, read64(p + 16));
        d = round(d, read64(p + 24));
    }
    v_[0] = a, v_[1] = b, v_[2] = c, v_[3] = d;
    if (bytes) std::memcpy(buf_, p, bytes);
    buffered_ = bytes;
}

uint64_t Xxh64::digest() const {
    uint64_t h;
    if (total_ >= 32) {
        h = rotl(v_[0], 1) + rotl(v_[1], 7) + rotl(v_[2], 12) + rotl(v_[3], 18);
        for (uint64_t v : v_) h = merge(h, v);
    } else {
        h = seed_ + P5;
    }
    h += total_;
    const unsigned char* p = buf_;
    size_t n = buffered_;
    for (; n >= 8; p += 8, n -= 8) h = rotl(h ^ round(0, read64(p)), 27) * P1 + P4;
    if (n >= 4) {
        h = rotl(h ^ (uint64_t(read32(p)) * P1), 23) * P2 + P3;
        p += 4;
        n -= 4;
    }
    for (; n > 0; p++, n--) h = rotl(h ^ (uint64_t(*p) * P5), 11) * P1;
    h ^= h >> 33;
    h *= P2;
    h ^= h >> 29;
    h *= P3;
    h ^= h >> 32;
    return h;
}

uint64_t xxh64(const void* data, size_t bytes, uint64_t seed) {
    Xxh64 h(seed);
    h.update(data, bytes);
    return h.digest();
}

uint64_t xxh64_file(const std::string& path) {
    std::FILE* f = std::fopen(path.c_str(), "rb");
    SHARDLM_CHECK(f, "cannot read '", path, "' to check its checksum: ", std::strerror(errno));
    Xxh64 h;
    std::vector<unsigned char> buf(size_t(1) << 20);
    size_t n;
    while ((n = std::fread(buf.data(), 1, buf.size(), f)) > 0) h.update(buf.data(), n);
    const bool err = std::ferror(f);
    std::fclose(f);
    SHARDLM_CHECK(!err, "reading '", path, "' to check its checksum failed");
    return h.digest();
}

std::string file_fingerprint(const std::string& path) {
    std::FILE* f = std::fopen(path.c_str(), "rb");
    if (!f) return "missing";
    std::fseek(f, 0, SEEK_END);
    const long size = std::ftell(f);
    constexpr long kBlock = 4096, kBlocks = 16;
    Xxh64 h;
    std::vector<unsigned char> buf(static_cast<size_t>(kBlock));
    for (long b = 0; b < kBlocks && size > 0; b++) {
        const long at = size <= kBlock * kBlocks ? b * kBlock : (size - kBlock) / (kBlocks - 1) * b;
        if (at >= size) break;
        std::fseek(f, at, SEEK_SET);
        const size_t n = std::fread(buf.data(), 1, buf.size(), f);
        h.update(buf.data(), n);
    }
    std::fclose(f);
    return std::to_string(size) + " bytes, sample " + hex64(h.digest());
}

std::string hex64(uint64_t h) {
    char buf[17];
    std::snprintf(buf, sizeof(buf), "%016llx", static_cast<unsigned long long>(h));
    return buf;
}

bool parse_hex64(const std::string& s, uint64_t* out) {
    if (s.size() != 16) return false;
    uint64_t v = 0;
    for (char c : s) {
        int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
        if (d < 0) return false;
        v = v << 4 | uint64_t(d);
    }
    *out = v;
    return true;
}

}  // namespace shardlm::io
