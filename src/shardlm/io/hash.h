// io/hash.h: XXH64 (xxHash, 64-bit; Yann Collet's specification), for checkpoint checksums and for
// comparing configurations and replicated parameters across ranks. Our own implementation of the
// published algorithm: the digests equal the reference's (tests/io/test_hash.cpp holds its vectors).
// ~10 GB/s on one core, so hashing a checkpoint costs far less than writing it.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace shardlm::io {

// Streaming XXH64: update() any number of times, then digest() (which does not reset the state).
class Xxh64 {
public:
    explicit Xxh64(uint64_t seed = 0);
    void update(const void* data, size_t bytes);
    uint64_t digest() const;

private:
    uint64_t v_[4];
    uint64_t seed_;
    uint64_t total_ = 0;
    unsigned char buf_[32];
    size_t buffered_ = 0;
};

uint64_t xxh64(const void* data, size_t bytes, uint64_t seed);  // seed required: no ("text", 7) ambiguity
inline uint64_t xxh64(std::string_view s, uint64_t seed = 0) { return xxh64(s.data(), s.size(), seed); }
// The XXH64 of a whole file (read in 1 MiB chunks); errors name the file.
uint64_t xxh64_file(const std::string& path);
// What identifies a file's contents cheaply: "<size> bytes, sample <hex>", the XXH64 of 16 blocks of 4 KiB
// spread evenly over it (the whole file when it is smaller); "missing" when it cannot be read.
std::string file_fingerprint(const std::string& path);
// 16 lower-case hex digits, and back (false if s is not that).
std::string hex64(uint64_t h);
bool parse_hex64(const std::string& s, uint64_t* out);

}  // namespace shardlm::io
