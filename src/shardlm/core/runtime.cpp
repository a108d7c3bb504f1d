#include "shardlm/core/runtime.h"

#include <omp.h>
#include <unistd.h>

#include <climits>
#include <cstdio>
#include <cstdlib>

namespace shardlm {

void ensure_blas_coretype(int argc, char** argv) {
    if (std::getenv("OPENBLAS_CORETYPE")) return;
    if (std::getenv("SHARDLM_NO_REEXEC")) return;
    if (!__builtin_cpu_supports("avx512f")) return;
    setenv("OPENBLAS_CORETYPE", "SkylakeX", 1);
    setenv("SHARDLM_NO_REEXEC", "1", 1);  // never loop
    // Exec the binary by its real path, not /proc/self/exe: the kernel names a process after the
    // file it execs, so the latter shows up as `exe` in ps and top. argv (and so argv[0]) is kept.
    char self[PATH_MAX];
    const ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
    if (n > 0) {
        self[n] = '\0';
        execv(self, argv);
    }
    execv("/proc/self/exe", argv);  // the path could not be read (or was deleted): still re-exec
    // exec failed: carry on with whatever kernels OpenBLAS picked.
    std::fprintf(stderr, "shardlm: warning: could not re-exec with OPENBLAS_CORETYPE=SkylakeX; "
                         "BLAS may run its slow generic kernels\n");
    (void)argc;
}

void set_threads(int k) {
    if (k > 0) omp_set_num_threads(k);
}

int get_threads() { return omp_get_max_threads(); }

}  // namespace shardlm
