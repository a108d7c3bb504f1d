// core/profile.h: time, FLOPs and bytes per kernel, for a step's profile against each kernel's roofline
// (bench_train_step --profile; issue 25 item 1).
//
// The kernels open a Scope at their public entry points with what they compute and move; only the
// outermost scope of a thread counts (a kernel that calls another is counted once, as itself). Off
// (the default) a Scope costs one relaxed atomic load. Each thread adds to its own table; take() sums
// them, so call it while no kernel runs (between steps). Under lanes two threads run kernels at once:
// their seconds add up to more than the wall time, so each call inside a parallel region also counts
// its seconds divided by the region's threads (Totals::wall).
#pragma once
#include <map>
#include <string>

namespace shardlm::profile {

void enable(bool on);
bool enabled();
// Products by shape (bench_train_step --profile 2): the matmul kernels' scopes give way (kernel() returns
// null for them) and each GEMM counts under its own shape's name (shape()), so one product's speed in the
// step shows beside the others'. Only while enabled.
void set_by_shape(bool on);
bool by_shape();
// a matmul kernel's scope name: itself, or null (no scope) while products count by shape
inline const char* kernel(const char* name) { return by_shape() ? nullptr : name; }
// "<kind> <layouts> MxNxK" (for example "fp32 NT 256x2304x768", or with the operands' types "bf16 bb>f NN
// 1024x768x3072": A, B > C, f fp32, b bf16), kept for the run; null unless by_shape()
const char* shape(const char* kind, char a_layout, char b_layout, int M, int N, int K);

struct Totals {
    double seconds = 0;  // as the threads spent them (lanes: added over the threads running at once)
    double wall = 0;     // the share of the step's wall time: a call inside a parallel region (a lane)
                         // counts 1 / (threads of the region) of its seconds
    double flops = 0, bytes = 0;
    long calls = 0;
};

class Scope {
public:
    // name: a string literal or shape()'s (kept by pointer; null: no scope); flops and bytes: what this
    // call computes and moves
    Scope(const char* name, double flops, double bytes);
    ~Scope();
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

private:
    void* table_ = nullptr;       // this thread's table (null: profiling off)
    const char* name_ = nullptr;  // null: not recording (off, or nested in another scope)
    double flops_ = 0, bytes_ = 0, t0_ = 0, share_ = 1;
};

// Every kernel's totals since the last take(), summed over threads; the tables are emptied.
std::map<std::string, Totals> take();

}  // namespace shardlm::profile
