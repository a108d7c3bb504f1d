// core/runtime.h: process start-up that must happen before anything else runs.
#pragma once

namespace shardlm {

// Debian's OpenBLAS 0.3.21 does not recognise this CPU family and silently runs its generic
// "Prescott" kernels (~8x slower). It reads OPENBLAS_CORETYPE only when the library loads, so if the
// variable is unset and the CPU has AVX-512, set it to SkylakeX; likewise GOMP_SPINCOUNT=1000 (short
// barrier spinning: a busy neighbour process no longer doubles the step), unless GOMP_SPINCOUNT or
// OMP_WAIT_POLICY is set. Then re-exec this same program once. Values the user set are respected.
// With `--gemm onednn` among the arguments OpenBLAS is never called, and OPENBLAS_CORETYPE is not set.
// Call first thing in main(), before MPI_Init.
void ensure_blas_coretype(int argc, char** argv);

// Threads for our OpenMP kernels and for OpenBLAS (same libgomp runtime). k <= 0: leave the default.
void set_threads(int k);
int get_threads();
// The threads a parallel region opened here gets: 1 inside one (no nesting), else the OpenMP default.
int team_threads();

// Binds OpenMP thread i to the i-th CPU this process may run on, when there are 2 or more threads, no
// more than those CPUs, and OMP_PROC_BIND is unset (set, libgomp does what it says; false: no binding).
// Without it, a thread that sleeps at a barrier is woken on its waker's core when another process
// keeps the other one busy, and the two threads then share one core (docs/DESIGN.md: a busy
// neighbour). Returns whether it bound. Call after set_threads, before the threads' first work.
bool bind_threads();
// A helper thread (created by a bound thread, whose single CPU it inherits) takes back every CPU the
// process had before bind_threads.
void unbind_this_thread();
// CPUs the process may run on (as before bind_threads narrowed each thread to one).
int process_cpus();

}  // namespace shardlm
