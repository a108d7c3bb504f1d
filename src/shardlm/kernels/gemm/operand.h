// kernels/gemm/operand.h: an operand of a product as the native kernels, the tap and the tuner read it.
#pragma once
#include "shardlm/core/dtype.h"

namespace shardlm::kernels::native {

// op(X) as the kernels read it: element (r, c) at data[r * rs + c * cs], of type t (F32, or BF16 for
// gemm_bf16).
struct Operand {
    const void* data;
    DType t;
    long rs, cs;
};

}  // namespace shardlm::kernels::native
