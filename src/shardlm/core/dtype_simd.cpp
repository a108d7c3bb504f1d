// core/dtype_simd.cpp: core/dtype.h's bulk conversions, in the vector form of core/dtype_simd.h.
#include "shardlm/core/dtype_simd.h"

namespace shardlm {

void convert_to_f32(float* dst, const void* src, DType src_type, size_t n) {
    if (src_type == DType::F32) {
        std::memcpy(dst, src, n * 4);
        return;
    }
    // blocks of 4096 values in parallel (exact: both widenings are)
    constexpr size_t kBlock = 4096;
    const long nb = long((n + kBlock - 1) / kBlock);
#pragma omp parallel for schedule(dynamic, 1) if (nb > 1)
    for (long b = 0; b < nb; b++) {
        const size_t i0 = size_t(b) * kBlock, len = std::min(kBlock, n - i0);
        load_row(dst + i0, at(src, src_type, i0), src_type, len);
    }
}

void convert_from_f32(void* dst, DType dst_type, const float* src, size_t n) {
    if (dst_type == DType::F32) {
        std::memcpy(dst, src, n * 4);
        return;
    }
    // blocks of 4096 values in parallel (the bf16 matmuls round every operand through here)
    constexpr size_t kBlock = 4096;
    const long nb = long((n + kBlock - 1) / kBlock);
#pragma omp parallel for schedule(dynamic, 1) if (nb > 1)
    for (long b = 0; b < nb; b++) {
        const size_t i0 = size_t(b) * kBlock, len = std::min(kBlock, n - i0);
        store_row(at(dst, dst_type, i0), dst_type, src + i0, len);
    }
}

}  // namespace shardlm
