#include "shardlm/core/precision.h"

namespace shardlm {

std::string PrecisionPolicy::name() const {
    if (activation == DType::BF16) return "bf16";
    if (activation == DType::F16) return "fp16";
    return products == DType::BF16 ? "fp32-bf16-products" : "fp32";
}

bool precision_policy_from_name(std::string_view name, PrecisionPolicy* out) {
    PrecisionPolicy p;
    if (name == "bf16" || name == "fp16") {
        const DType t = name == "bf16" ? DType::BF16 : DType::F16;
        p.param = p.activation = p.products = t;
    } else if (name == "fp32-bf16-products") {
        p.products = DType::BF16;
    } else if (name != "fp32") {
        return false;
    }
    *out = p;
    return true;
}

}  // namespace shardlm
