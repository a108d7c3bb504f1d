// core/dtype.h: the element types shardlm stores and converts: fp32, bf16, fp16.
#pragma once
#include <cstdint>
#include <cstring>
#include <string_view>

namespace shardlm {

enum class DType : uint8_t { F32, BF16, F16 };

inline size_t dtype_bytes(DType t) { return t == DType::F32 ? 4 : 2; }
// safetensors spelling: "F32", "BF16", "F16".
std::string_view dtype_name(DType t);
bool dtype_from_name(std::string_view s, DType* out);

// bf16: the top 16 bits of an fp32, rounded to nearest even (NaN stays NaN).
inline uint16_t f32_to_bf16(float f) {
    uint32_t u;
    std::memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 0x40);  // quiet NaN
    u += 0x7fffu + ((u >> 16) & 1u);
    return uint16_t(u >> 16);
}
inline float bf16_to_f32(uint16_t h) {
    uint32_t u = uint32_t(h) << 16;
    float f;
    std::memcpy(&f, &u, 4);
    return f;
}
// fp16 (IEEE binary16) in software: round to nearest even, subnormals, inf and NaN (quiet) kept.
// Equal to the compiler's _Float16 conversions (tests/core compare every half and many floats);
// used where the compiler has no _Float16 (clang 14 on x86, the fuzzing build).
inline uint16_t f32_to_f16_soft(float f) {
    uint32_t u;
    std::memcpy(&u, &f, 4);
    const uint32_t sign = (u >> 16) & 0x8000u, a = u & 0x7fffffffu;
    if (a > 0x7f800000u) return uint16_t(sign | 0x7e00u | ((a >> 13) & 0x3ffu));  // NaN, quieted
    if (a >= 0x477ff000u) return uint16_t(sign | 0x7c00u);  // rounds to >= 65520: inf
    if (a < 0x38800000u) {  // below the smallest normal half 2^-14: a subnormal half (or zero)
        if (a < 0x33000000u) return uint16_t(sign);  // <= 2^-25: rounds to zero (ties to even)
        const uint32_t e = a >> 23, m = (a & 0x7fffffu) | 0x800000u;
        const uint32_t sh = 126 - e;  // m * 2^(e-150) in units of 2^-24 (14 <= sh <= 24)
        const uint32_t q = m >> sh, rem = m & ((1u << sh) - 1u), half = 1u << (sh - 1);
        return uint16_t(sign | (q + (rem > half || (rem == half && (q & 1u)))));
    }
    const uint32_t r = a + 0xfffu + ((a >> 13) & 1u) - 0x38000000u;  // rebias 127 -> 15, round
    return uint16_t(sign | (r >> 13));
}
inline float f16_to_f32_soft(uint16_t h) {
    const uint32_t sign = uint32_t(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
    uint32_t u;
    if (e == 0x1f) u = sign | 0x7f800000u | (m << 13);
    else if (e != 0) u = sign | ((e + 112) << 23) | (m << 13);
    else if (m == 0) u = sign;
    else {  // subnormal half: normalise
        int k = 0;
        uint32_t mm = m;
        while (!(mm & 0x400u)) { mm <<= 1; k++; }
        u = sign | (uint32_t(113 - k) << 23) | ((mm & 0x3ffu) << 13);
    }
    float f;
    std::memcpy(&f, &u, 4);
    return f;
}
#if defined(__FLT16_MAX__)
// through the compiler's _Float16 (exact, round to nearest even; F16C instructions when enabled)
inline uint16_t f32_to_f16(float f) {
    _Float16 h = static_cast<_Float16>(f);
    uint16_t u;
    std::memcpy(&u, &h, 2);
    return u;
}
inline float f16_to_f32(uint16_t u) {
    _Float16 h;
    std::memcpy(&h, &u, 2);
    return static_cast<float>(h);
}
#else
inline uint16_t f32_to_f16(float f) { return f32_to_f16_soft(f); }
inline float f16_to_f32(uint16_t u) { return f16_to_f32_soft(u); }
#endif

// Element i of an array of type t.
inline void* at(void* p, DType t, size_t i) { return static_cast<char*>(p) + i * dtype_bytes(t); }
inline const void* at(const void* p, DType t, size_t i) { return static_cast<const char*>(p) + i * dtype_bytes(t); }

// Convert n elements of type `src_type` at src to fp32 at dst, and back.
void convert_to_f32(float* dst, const void* src, DType src_type, size_t n);  // (vector code: dtype_simd.cpp)
void convert_from_f32(void* dst, DType dst_type, const float* src, size_t n);

}  // namespace shardlm
