// core/check.h: errors that name the place and the fix.
//   SHARDLM_CHECK(cond, "shard '", path, "': bad magic ", m, " (want 20240520)");
// throws shardlm::Error with the message; `cli/main.cpp` prints it as one line and exits non-zero.
#pragma once
#include <sstream>
#include <stdexcept>
#include <string>

namespace shardlm {

struct Error : std::runtime_error {
    using std::runtime_error::runtime_error;
};

// Concatenate anything streamable: cat("layer ", 3, ": ", 1.5f).
template <typename... Args>
std::string cat(const Args&... args) {
    std::ostringstream os;
    (os << ... << args);
    return os.str();
}

template <typename... Args>
[[noreturn]] void fail(const Args&... args) {
    throw Error(cat(args...));
}

}  // namespace shardlm

#define SHARDLM_CHECK(cond, ...)                       \
    do {                                               \
        if (!(cond)) ::shardlm::fail(__VA_ARGS__);     \
    } while (0)
