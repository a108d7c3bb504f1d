// kernels/gemm/tap.h: every product the engine issues, seen as it enters the GEMM layer (tests/model's
// ProductLibraries records a training step's products and replays each on every library).
#pragma once
#include <functional>

#include "shardlm/core/dtype.h"
#include "shardlm/kernels/gemm/native.h"

namespace shardlm::kernels {

// Where a product entered: sgemm_balanced (fp32), sgemm_tile (fp32, one call on the calling thread), one of
// attention's tiles on a B packed into panels of nr columns (fp32, native::gemm_packed), gemm_mixed (bf16
// products).
enum class ProductPath { Balanced, Tile, Packed, Mixed };
struct ProductCall {
    ProductPath path = ProductPath::Balanced;
    int M = 0, N = 0, K = 0;
    native::Operand a{}, b{};  // op(A) (M x K) and op(B) (K x N) as the product reads them
    float alpha = 1, beta = 0;  // C = alpha op(A) op(B) + beta C (Mixed: alpha 1, beta 1 when it accumulates)
    void* c = nullptr;          // C: F32, or (Mixed) c_t, rows ldc elements apart
    DType c_t = DType::F32;
    long ldc = 0;
    const float* bias = nullptr;  // Mixed: an fp32 bias(N) added (null: none)
    int nr = 0;                   // Packed: the panels' width
};
// Called with each product before it runs, from the thread that runs it (lanes call it at once); empty:
// none (the default: one relaxed load per product). Set it while no product runs (tests/model's
// ProductLibraries records every product of a training step and replays it on each library).
using ProductTap = std::function<void(const ProductCall&)>;
void set_product_tap(ProductTap tap);
void tap_product(const ProductCall& call);  // the entry points' call (a no-op without a tap)

}  // namespace shardlm::kernels
