// fuzz/fuzz_input.h: helpers shared by the libFuzzer targets.
#pragma once
#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

namespace shardlm::fuzz {

// The input as a file the readers can open (and mmap) by path: an in-memory file (memfd), rewritten
// for every input, named /proc/self/fd/<fd>.
inline std::string as_file(const uint8_t* data, size_t size) {
    static const int fd = memfd_create("shardlm-fuzz", 0);
    if (fd < 0) std::abort();
    if (ftruncate(fd, 0) != 0) std::abort();
    for (size_t off = 0; off < size;) {
        const ssize_t n = pwrite(fd, data + off, size - off, off_t(off));
        if (n <= 0) std::abort();
        off += size_t(n);
    }
    return "/proc/self/fd/" + std::to_string(fd);
}

}  // namespace shardlm::fuzz
