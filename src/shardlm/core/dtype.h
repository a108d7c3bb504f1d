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
// fp16 (IEEE binary16) through the compiler's _Float16 (exact, round to nearest even).
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

// Element i of an array of type t.
inline void* at(void* p, DType t, size_t i) { return static_cast<char*>(p) + i * dtype_bytes(t); }
inline const void* at(const void* p, DType t, size_t i) { return static_cast<const char*>(p) + i * dtype_bytes(t); }

// Convert n elements of type `src_type` at src to fp32 at dst, and back.
void convert_to_f32(float* dst, const void* src, DType src_type, size_t n);
void convert_from_f32(void* dst, DType dst_type, const float* src, size_t n);

}  // namespace shardlm
