// core/precision.h: the precision policy of a run, one value (like FSDP2's MixedPrecisionPolicy):
// what each kind of tensor is stored in, and what the products multiply.
//
//   name                  param  activation  products  grad  reduce     master
//   fp32                  fp32   fp32        fp32      fp32  fp32       fp32
//   fp32-bf16-products    fp32   fp32        bf16      fp32  fp32       fp32   (torch's 'medium' matmul precision)
//   bf16                  bf16   bf16        bf16      fp32  fp32|bf16  fp32
//   fp16                  fp16   fp16        fp16      fp32  fp32|fp16  fp32
//
// param is the copy of the parameters the units read (the 16-bit copy in mixed precision, refreshed
// from the master after every step); gradients stay fp32 (Megatron's main_grad: micro-batches
// accumulate without loss); reduce is the gradients' type on the wire (--reduce-dtype); products
// always accumulate in fp32. fp16 products are widened to fp32 for sgemm (no AVX512_FP16 here).
#pragma once
#include <string>
#include <string_view>

#include "shardlm/core/dtype.h"

namespace shardlm {

struct PrecisionPolicy {
    DType param = DType::F32;
    DType activation = DType::F32;
    DType products = DType::F32;
    DType grad = DType::F32;
    DType reduce = DType::F32;
    DType master = DType::F32;

    bool mixed() const { return activation != DType::F32; }  // 16-bit storage of activations and parameters
    bool bf16_products() const { return products == DType::BF16; }
    // bf16 products on fp32 storage: every operand rounded to bf16 as it is multiplied
    bool rounds_fp32_products() const { return activation == DType::F32 && products == DType::BF16; }
    std::string name() const;  // "fp32", "fp32-bf16-products", "bf16", "fp16"
};

// The policy of a name of the table above (reduce: the gradients', fp32); false for another name.
bool precision_policy_from_name(std::string_view name, PrecisionPolicy* out);
// As a setting (core/enum_names.h): its name, parsed by the table above.
inline std::string setting_text(const PrecisionPolicy& p) { return p.name(); }
inline bool setting_parse(std::string_view s, PrecisionPolicy* out) { return precision_policy_from_name(s, out); }
inline std::string setting_choices(const PrecisionPolicy*) { return "fp32, bf16, fp16 or fp32-bf16-products"; }

}  // namespace shardlm
