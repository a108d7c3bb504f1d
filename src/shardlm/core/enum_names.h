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
#include <cstdint>
#include <optional>
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

// An override of something that has a default elsewhere (a model preset's norm, whether it ties its
// head): unset, or a value. Its text is "" when unset, so a settings file or a flag leaves it out or
// gives one of the value's names.
template <typename T>
struct Override {
    std::optional<T> value;
    explicit operator bool() const { return value.has_value(); }
    const T& operator*() const { return *value; }
    const T* operator->() const { return &*value; }
};

template <NamedEnum E>
std::string setting_text(const Override<E>& o) { return o ? setting_text(*o) : ""; }
template <NamedEnum E>
bool setting_parse(std::string_view s, Override<E>* out) {
    if (s.empty()) return out->value.reset(), true;
    E e;
    if (!setting_parse(s, &e)) return false;
    out->value = e;
    return true;
}
template <NamedEnum E>
std::string setting_choices(const Override<E>*) { return setting_choices(static_cast<const E*>(nullptr)); }

inline std::string setting_text(const Override<bool>& o) { return o ? (*o ? "true" : "false") : ""; }
inline bool setting_parse(std::string_view s, Override<bool>* out) {
    if (s.empty()) return out->value.reset(), true;
    if (s != "true" && s != "false") return false;
    out->value = s == "true";
    return true;
}
inline std::string setting_choices(const Override<bool>*) { return "true or false"; }

// A value whose settings form is an integer from a fixed set (core/zero_stage.h's ZeroStage).
template <typename T>
concept NumberSetting = requires(const T& v, T* p, int64_t n) {
    { setting_number(v) } -> std::convertible_to<int64_t>;
    { setting_from_number(n, p) } -> std::same_as<bool>;
    { setting_choices(p) } -> std::convertible_to<std::string>;
};

}  // namespace shardlm
