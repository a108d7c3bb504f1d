// core/timer.h: wall-clock seconds.
#pragma once
#include <chrono>

namespace shardlm {

inline double now_s() {
    using namespace std::chrono;
    return duration<double>(steady_clock::now().time_since_epoch()).count();
}

}  // namespace shardlm
