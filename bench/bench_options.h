// bench/bench_options.h: what the benchmarks share to read their arguments.
#pragma once
#include <cstdio>
#include <cstdlib>
#include <optional>

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
