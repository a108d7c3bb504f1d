// bench/bench_options.h: what the benchmarks that take `--name value` options share.
#pragma once
#include <cstdio>

// Whether the options come in pairs; if not, says which one has no value (the options: the comment at the top
// of bench/<bench>.cpp) on stderr.
inline bool options_paired(const char* bench, int argc, char** argv) {
    if (argc % 2 == 1) return true;
    std::fprintf(stderr, "%s: %s has no value (the options: the comment at the top of bench/%s.cpp)\n", bench,
                 argv[argc - 1], bench);
    return false;
}
