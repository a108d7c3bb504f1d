// kernels/gemm/backend.h: the GEMM layer's vocabulary, which its face (gemm.h), the tuner (tuner.h) and the
// tap (tap.h) share: the libraries a product can run on, and the two kinds of product.
#pragma once
#include "shardlm/core/enum_names.h"

namespace shardlm::kernels {

enum class GemmBackend { Auto, OneDnn, OpenBlas, Native };
inline constexpr EnumName<GemmBackend> kGemmBackendNames[] = {{GemmBackend::Auto, "auto"},
                                                              {GemmBackend::OneDnn, "onednn"},
                                                              {GemmBackend::OpenBlas, "openblas"},
                                                              {GemmBackend::Native, "native"}};
constexpr const auto& enum_names(GemmBackend) { return kGemmBackendNames; }

// The two kinds of product: fp32 operands, or bf16 (16-bit operands, fp32 accumulation).
enum class GemmKind { Fp32, Bf16 };


// Process-wide; set before the first product (a run's setup). The library default is openblas (the
// kernel tests compare shapes to the bit); `shardlm train` defaults to auto.
void set_gemm_backend(GemmBackend b);
GemmBackend gemm_backend();

// Column blocks per CPU of the machine in a balanced product: 2, or SHARDLM_GEMM_BLOCKS (for measuring)
int gemm_blocks_per_cpu();

}  // namespace shardlm::kernels
