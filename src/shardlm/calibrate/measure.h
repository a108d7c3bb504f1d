// calibrate/measure.h: calibrate's measurements, for its own files. Every figure is timed the one way
// `timed` says; compute.cpp measures what a rank computes (the peak loops, the products as a step issues
// them), calibrate.cpp the memory, the links and the process, and puts them together (calibrate.h).
#pragma once
#include <functional>

#include "shardlm/calibrate/calibrate.h"

namespace shardlm::calibrate::detail {

// Whose time a measurement is: the slowest rank's, every rank running it (what a step waits for); rank 0's
// own, every rank running it; rank 0's while the others wait asleep in the barriers.
enum class Timing { Slowest, Own, Alone };

// Seconds per call of fn on this rank, calls repeated until min_seconds have passed, best of `rounds` such
// rounds, as `timing` says (Alone: the others' answer is 0). Every rank must call it.
double timed(comm::Group& world, double min_seconds, const std::function<void()>& fn, int rounds = 3,
             Timing timing = Timing::Slowest);

// The fp32 FMA, AVX512_BF16 and AMX peaks per rank into c, each the better of this and any earlier reading
// (calibrate reads them before and after the products: a slow spell of the machine lowers one, not both).
void measure_peaks(comm::Group& world, Calibration& c);

// The products into c: gemm (26 shapes), lanes_gemm (more than one thread), alone_gemm and alone_speedup
// (more than one rank); c.ranks and c.threads set.
void measure_gemms(comm::Group& world, const Options& o, Calibration& c);

}  // namespace shardlm::calibrate::detail
