#include "shardlm/core/runtime.h"

#include <omp.h>
#include <pthread.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <string_view>
#include <vector>

namespace shardlm {

void ensure_blas_coretype(int argc, char** argv) {
    if (std::getenv("SHARDLM_NO_REEXEC")) return;
    bool change = false;
    // Debian's OpenBLAS 0.3.21 does not know Zen 4/5 and falls back to generic kernels (8x slower).
    // `--gemm onednn` never calls OpenBLAS (kernels/gemm/gemm.h): nothing to set for it.
    bool onednn_only = false;
    for (int i = 1; i < argc; i++) {
        const std::string_view a = argv[i];
        if (a == "--gemm=onednn" || (a == "--gemm" && i + 1 < argc && std::string_view(argv[i + 1]) == "onednn"))
            onednn_only = true;
    }
    if (!std::getenv("OPENBLAS_CORETYPE") && __builtin_cpu_supports("avx512f") && !onednn_only) {
        setenv("OPENBLAS_CORETYPE", "SkylakeX", 1);
        setenv("SHARDLM_SET_CORETYPE", "SkylakeX", 1);  // ours, not the user's (kernels/machine.h tells them apart)
        change = true;
    }
    // libgomp spins 300,000 times at each barrier before sleeping: with a busy neighbour on one of
    // the cores, the spinning thread steals the time the working one needs. 1000 spins keep the quiet
    // speed and cut the slowdown under one busy process from 2.4x to 1.8x (bench/RESULTS.md).
    if (!std::getenv("GOMP_SPINCOUNT") && !std::getenv("OMP_WAIT_POLICY")) {
        setenv("GOMP_SPINCOUNT", "1000", 1);
        change = true;
    }
    if (!change) return;  // libgomp and OpenBLAS read these at load time: only a re-exec applies them
    setenv("SHARDLM_NO_REEXEC", "1", 1);  // never loop
    // With OMP_PROC_BIND set, libgomp has already bound this (initial) thread to its first place, and
    // the exec'd image would inherit that one place as its whole CPU set: every thread on one core.
    // Give it back the CPUs libgomp's places were made from.
    if (omp_get_proc_bind() != omp_proc_bind_false && omp_get_num_places() > 1) {
        cpu_set_t all;
        CPU_ZERO(&all);
        for (int p = 0; p < omp_get_num_places(); p++) {
            std::vector<int> ids(size_t(omp_get_place_num_procs(p)));
            omp_get_place_proc_ids(p, ids.data());
            for (int id : ids)
                if (id >= 0 && id < CPU_SETSIZE) CPU_SET(id, &all);
        }
        sched_setaffinity(0, sizeof(all), &all);
    }
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
    std::fprintf(stderr, "shardlm: warning: could not re-exec with OPENBLAS_CORETYPE=SkylakeX and "
                         "GOMP_SPINCOUNT=1000; BLAS may run its slow generic kernels\n");
}

void set_threads(int k) {
    if (k > 0) omp_set_num_threads(k);
}

int team_threads() { return omp_in_parallel() ? 1 : std::max(1, omp_get_max_threads()); }

int get_threads() { return omp_get_max_threads(); }

namespace {
cpu_set_t g_process_cpus;   // what the process had before bind_threads
bool g_bound = false;
}  // namespace

bool bind_threads() {
    if (std::getenv("OMP_PROC_BIND")) return false;
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof(set), &set) != 0) return false;
    std::vector<int> cpus;
    for (int c = 0; c < CPU_SETSIZE; c++)
        if (CPU_ISSET(c, &set)) cpus.push_back(c);
    const int n = omp_get_max_threads();
    if (n < 2 || n > int(cpus.size())) return false;
    if (!g_bound) g_process_cpus = set;
    g_bound = true;
    // libgomp keeps the same thread in each team slot from one parallel region to the next
#pragma omp parallel num_threads(n)
    {
        cpu_set_t one;
        CPU_ZERO(&one);
        CPU_SET(cpus[size_t(omp_get_thread_num())], &one);
        pthread_setaffinity_np(pthread_self(), sizeof(one), &one);
    }
    return true;
}

void unbind_this_thread() {
    if (g_bound) pthread_setaffinity_np(pthread_self(), sizeof(g_process_cpus), &g_process_cpus);
}

int process_cpus() {
    if (g_bound) return CPU_COUNT(&g_process_cpus);
    cpu_set_t set;
    return sched_getaffinity(0, sizeof(set), &set) == 0 ? CPU_COUNT(&set) : 0;
}

}  // namespace shardlm
