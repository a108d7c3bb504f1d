// core/format.h: printf into a std::string of whatever length the text needs.
#pragma once
#include <string>

namespace shardlm {

std::string format(const char* f, ...) __attribute__((format(printf, 1, 2)));

}  // namespace shardlm
