// bench/bench_options.h: what the benchmarks share: reading their arguments, and the memory's speed.
#pragma once
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#include "shardlm/core/timer.h"

// s as a whole number in [lo, hi], or nothing (not a number, trailing characters, out of range)
inline std::optional<long> whole_number(const char* s, long lo, long hi) {
    char* end = nullptr;
    const long x = std::strtol(s, &end, 10);
    if (end == s || *end != '\0' || x < lo || x > hi) return std::nullopt;
    return x;
}

// Whether the options come in pairs; if not, says which one has no value (the options: the comment at the top
// of bench/<bench>.cpp) on stderr.
inline bool options_paired(const char* bench, int argc, char** argv) {
    if (argc % 2 == 1) return true;
    std::fprintf(stderr, "%s: %s has no value (the options: the comment at the top of bench/%s.cpp)\n", bench,
                 argv[argc - 1], bench);
    return false;
}

// v as a whole number of at least lo for option k of `bench`, or a message naming the option and the process's
// end (exit 2): atoi had read "--steps 4x" as 4 and "--batch x" as 0
inline int whole_or_exit(const char* bench, const std::string& k, const char* v, int lo) {
    const std::optional<long> x = whole_number(v, lo, 1 << 30);
    if (!x) {
        std::fprintf(stderr, "%s: %s %s: give a whole number of at least %d\n", bench, k.c_str(), v, lo);
        std::exit(2);
    }
    return int(*x);
}

// GB/s of a STREAM triad over 3 x 64 MiB on all threads, best of 5 (a memory-bound kernel's roofline)
inline double triad_gbps() {
    const size_t n = size_t(16) << 20;
    std::vector<float> a(n), b(n, 1.0f), c(n, 2.0f);
    double best = 1e30;
    for (int r = 0; r < 5; r++) {
        const double t0 = shardlm::now_s();
#pragma omp parallel for schedule(static)
        for (size_t i = 0; i < n; i++) a[i] = b[i] + 0.5f * c[i];
        best = std::min(best, shardlm::now_s() - t0);
    }
    return 3.0 * double(n) * sizeof(float) / best / 1e9;
}
