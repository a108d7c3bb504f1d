#include "shardlm/core/dtype.h"

#include <algorithm>

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

}  // namespace shardlm
