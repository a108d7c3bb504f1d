// core/enum_names.h: an enum's names as one table, for printing and parsing.
//   constexpr EnumName<Recompute> kRecomputeNames[] = {{Recompute::None, "none"}, {Recompute::Full, "full"}};
//   enum_name(kRecomputeNames, r)              -> "none"   ("?" if the value is not in the table)
//   enum_from_name(kRecomputeNames, "full", &r) -> true, r = Recompute::Full
#pragma once
#include <string>
#include <string_view>

namespace shardlm {

template <typename E>
struct EnumName {
    E value;
    const char* name;
};

template <typename E, size_t N>
std::string enum_name(const EnumName<E> (&table)[N], E value) {
    for (const auto& e : table)
        if (e.value == value) return e.name;
    return "?";
}

template <typename E, size_t N>
bool enum_from_name(const EnumName<E> (&table)[N], std::string_view name, E* out) {
    for (const auto& e : table)
        if (name == e.name) {
            *out = e.value;
            return true;
        }
    return false;
}

}  // namespace shardlm
