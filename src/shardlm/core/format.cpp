#include "shardlm/core/format.h"

#include <cstdarg>
#include <cstdio>

namespace shardlm {

std::string format(const char* f, ...) {
    va_list a, b;
    va_start(a, f);
    va_copy(b, a);
    char small[256];
    const int n = std::vsnprintf(small, sizeof(small), f, a);
    va_end(a);
    std::string s;
    if (n < 0) {
        va_end(b);
        return s;
    }
    if (size_t(n) < sizeof(small)) {
        s.assign(small, size_t(n));
    } else {
        s.resize(size_t(n));
        std::vsnprintf(s.data(), size_t(n) + 1, f, b);
    }
    va_end(b);
    return s;
}

}  // namespace shardlm
