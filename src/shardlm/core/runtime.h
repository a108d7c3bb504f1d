// core/runtime.h: process start-up that must happen before anything else runs.
#pragma once

namespace shardlm {

// Debian's OpenBLAS 0.3.21 does not recognise this CPU family and silently runs its generic
// "Prescott" kernels (~8x slower). It reads OPENBLAS_CORETYPE only when the library loads, so if the
// variable is unset and the CPU has AVX-512, set it to SkylakeX; likewise GOMP_SPINCOUNT=1000 (short
// barrier spinning: a busy neighbour process no longer doubles the step), unless GOMP_SPINCOUNT or
// OMP_WAIT_POLICY is set. Then re-exec this same program once. Values the user set are respected.
// Call first thing in main(), before MPI_Init.
void ensure_blas_coretype(int argc, char** argv);

// Threads for our OpenMP kernels and for OpenBLAS (same libgomp runtime). k <= 0: leave the default.
void set_threads(int k);
int get_threads();

}  // namespace shardlm
