#include "shardlm/core/dtype.h"

#include "shardlm/core/dtype_simd.h"

namespace shardlm {

std::string_view dtype_name(DType t) {
    switch (t) {
        case DType::F32: return "F32";
        case DType::BF16: return "BF16";
        case DType::F16: return "F16";
    }
    return "?";
}

bool dtype_from_name(std::string_view s, DType* out) {
    if (s == "F32") *out = DType::F32;
    else if (s == "BF16") *out = DType::BF16;
    else if (s == "F16") *out = DType::F16;
    else return false;
    return true;
}

void convert_to_f32(float* dst, const void* src, DType src_type, size_t n) {
    if (src_type == DType::F32) {
        std::memcpy(dst, src, n * 4);
        return;
    }
    const uint16_t* s = static_cast<const uint16_t*>(src);
    if (src_type == DType::BF16)
        for (size_t i = 0; i < n; i++) dst[i] = bf16_to_f32(s[i]);
    else
        for (size_t i = 0; i < n; i++) dst[i] = f16_to_f32(s[i]);
}

void convert_from_f32(void* dst, DType dst_type, const float* src, size_t n) {
    if (dst_type == DType::F32) {
        std::memcpy(dst, src, n * 4);
        return;
    }
    uint16_t* d = static_cast<uint16_t*>(dst);
    if (dst_type == DType::BF16) {
        // 16 at a time (the bf16 matmuls round every operand through here), the tail one by one
        const long nv = long(n / 16);
#pragma omp parallel for schedule(static)
        for (long v = 0; v < nv; v++)
            _mm256_storeu_si256(reinterpret_cast<__m256i*>(d + v * 16), f32x16_to_bf16(_mm512_loadu_ps(src + v * 16)));
        for (size_t i = size_t(nv) * 16; i < n; i++) d[i] = f32_to_bf16(src[i]);
    } else
        for (size_t i = 0; i < n; i++) d[i] = f32_to_f16(src[i]);
}

}  // namespace shardlm
