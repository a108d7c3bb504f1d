// core/enum_names.h: an enum's names as one table, for printing and parsing.
//   constexpr EnumName<Recompute> kRecomputeNames[] = {{Recompute::None, "none"}, {Recompute::Full, "full"}};
//   enum_name(kRecomputeNames, r)              -> "none"   ("?" if the value is not in the table)
//   enum_from_name(kRecomputeNames, "full", &r) -> true, r = Recompute::Full
//   names_list(kRecomputeNames)                -> "none or full"
//
// A setting: an enum whose namespace declares `constexpr const auto& enum_names(E) { return kTable; }`
// (found by argument-dependent lookup) is a NamedEnum, and then setting_text / setting_parse /
// setting_choices work on it; a non-enum setting type (core/precision.h's PrecisionPolicy,
// optim/loss_scaler.h's LossScale) declares the same three functions in namespace shardlm. Settings
// tables (train/train_config.h) read and print every such field through these three, once.
#pragma once
#include <concepts>
#include <string>
#include <string_view>
#include <type_traits>

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

// "a, b or c" (the names that print as something: an empty name is the default and left out)
template <typename E, size_t N>
std::string names_list(const EnumName<E> (&table)[N]) {
    std::string out;
    size_t shown = 0, total = 0;
    for (const auto& e : table) total += *e.name != '\0';
    for (const auto& e : table) {
        if (*e.name == '\0') continue;
        if (shown) out += shown + 1 == total ? " or " : ", ";
        out += e.name;
        shown++;
    }
    return out;
}

template <typename E>
concept NamedEnum = std::is_enum_v<E> && requires(E e) { enum_names(e); };

template <NamedEnum E>
std::string setting_text(E v) { return enum_name(enum_names(E{}), v); }
template <NamedEnum E>
bool setting_parse(std::string_view s, E* out) { return enum_from_name(enum_names(E{}), s, out); }
template <NamedEnum E>
std::string setting_choices(const E*) { return names_list(enum_names(E{})); }

// A value that has a text form and a fixed set of them (a NamedEnum, or a type with the three).
template <typename T>
concept TextSetting = requires(const T& v, T* p, std::string_view s) {
    { setting_text(v) } -> std::convertible_to<std::string>;
    { setting_parse(s, p) } -> std::same_as<bool>;
    { setting_choices(p) } -> std::convertible_to<std::string>;
};

}  // namespace shardlm
