// core/contention.h: whether this process's threads wait for a CPU they are ready to run on: another
// process busy on the cores (a noisy neighbour), or more threads than cores. The measure is the kernel's
// own (Linux schedstats: /proc/self/task/*/schedstat, the time each thread spent runnable but not running),
// summed over the process's threads and divided by the wall time since the last sample: the number of this
// process's threads waiting for a CPU on average. Sampled at most every kSampleSeconds; cheap to ask.
//
// Why the kernels ask: a short parallel kernel (a LayerNorm, a GELU: tens of microseconds) forks and joins
// its threads, and when one of them is parked by the scheduler the join waits for its next time slice
// (milliseconds). Under contention such kernels run on the calling thread alone (`#pragma omp parallel
// if (!cpu_contended())`); every kernel that does so gives the same bits on any number of threads.
#pragma once

namespace shardlm {

// Threads waiting for a CPU, on average over the last sample window, above which the process counts as
// contended: a tenth of a thread (a quiet machine reads ~0; one busy process on 2 cores beside 2 threads
// reads ~0.6).
inline constexpr double kContendedWaitingThreads = 0.1;
inline constexpr double kSampleSeconds = 0.05;

// The last window's average number of this process's threads waiting for a CPU (0 where the kernel does
// not keep schedstats, or before the first window ends).
double cpu_waiting_threads();

// cpu_waiting_threads() > kContendedWaitingThreads. SHARDLM_CONTENTION=off (or 0) answers false always,
// =on (or 1) true always (tests, benchmarks); unset or auto measures (any other value: a warning, then auto).
bool cpu_contended();

}  // namespace shardlm
