// model/unit_ops.h: what the units' implementations (units.cpp, block.cpp, head.cpp) share, and
// nothing else includes: linear layers at the context's precision with the Megatron conjugate
// operators around them, and the lanes' work sharing (units.h).
#pragma once
#include <algorithm>
#include <initializer_list>

#include "shardlm/model/units.h"

namespace shardlm::model::detail {

// out (N, OC) = in (N, K) @ W (OC, K)^T + b: fp32 activations through kernels::matmul_forward at the
// context's precision (out += with accumulate); stored activations and the 16-bit weight copy
// through the mixed-precision overload (out as out_t).
void linear(const UnitContext& u, void* out, DType out_t, const void* in, const void* W, const float* b, int N, int K,
            int OC, bool accumulate = false);
// Its backward (kernels::matmul_backward); with bf16 products, dout16 (N, OC; null: the thread's scratch)
// receives dout rounded to bf16 as the products read it, for the weight gradient's later product.
void linear_backward(const UnitContext& u, float* dinp, float* dW, float* db, const float* dout, const void* in,
                     const void* W, int N, int K, int OC, bool acc, uint16_t* dout16 = nullptr);
// The input of a column-parallel linear: x itself (f: identity forward), or under sequence
// parallelism its all-gather into scratch (forward all-gather; backward reduce-scatter). x is of
// type t (an activation, or an fp32 gradient).
const void* gather_input(const UnitContext& u, const void* x_local, int N, DType t);
// The input gradient of a column-parallel linear, partial over the group in scratch.dln (N, C):
// f's backward all-reduce, or under sequence parallelism a reduce-scatter to this rank's rows.
// Returns where the (Nl, C) result is.
const float* reduce_input_grad(const UnitContext& u, int N);
// out (Nl, C) = resid + b + in (N, K) @ W (C, K)^T: a row-parallel linear onto the residual stream.
// g: the partial products (in `partial`, (N, C) fp32) are all-reduced (or reduce-scattered to this
// rank's rows under sequence parallelism) and the bias added once, after the reduction. fp32 on one
// rank keeps the one-process order: out = (resid + b) + in @ W^T in one GEMM.
void row_parallel_residual(const UnitContext& u, void* out, float* partial, const void* in, const void* W,
                           const float* b, const void* resid, int N, int K);
// Its second half: out (Nl, C) = resid + b + the reduction of partial (N, C) fp32 over the group.
void reduce_onto_residual(const UnitContext& u, void* out, float* partial, const float* b, const void* resid, int N);
// d(output) of a row-parallel linear as its GEMMs need it, into dst: the full (N, C) gradient (g's
// backward is the identity: a copy; under sequence parallelism the conjugate all-gather of this
// rank's rows).
void row_parallel_dout(const UnitContext& u, float* dst, const float* dres, int N);

// The model's norm (LayerNorm or RMSNorm, config.h) over Nl rows of C: out (act) from x (act), the
// statistics kept (mean: LayerNorm only); its input gradient (+=) and its parameters' (+=, columns
// [c0, c1) over all rows). b, db: null without biases (and always for RMSNorm).
void norm_forward(const UnitContext& u, void* out, float* mean, float* rstd, const void* x, const float* w,
                  const float* b, int Nl);
void norm_backward_input(const UnitContext& u, float* dx, const float* dout, const void* x, const float* w,
                         const float* mean, const float* rstd, int Nl);
void norm_backward_params(const UnitContext& u, float* dw, float* db, const float* dout, const void* x,
                          const float* mean, const float* rstd, int Nl, int c0, int c1);
// rows r .. of a per-row statistic (null when the model keeps none: RMSNorm's mean)
inline float* stat_rows(AlignedBuffer<float>& b, size_t r) { return b.size() ? b.data() + r : nullptr; }
inline const float* stat_rows(const AlignedBuffer<float>& b, size_t r) { return b.size() ? b.data() + r : nullptr; }

// ---- lanes ----------------------------------------------------------------------------------------

struct Span {
    int begin, count;
};

enum Phase { kRowPhase = 0, kOutputPhase = 1 };

// The items of one phase of a unit: with one lane all of them, in order; with more, each lane takes
// the next one left until none is (LaneWork).
class Items {
public:
    Items(const UnitContext& u, Phase phase, int count) : u_(u), phase_(phase), count_(count) {}
    bool next(int* i) {
        *i = u_.lanes > 1 ? u_.work->next[phase_].fetch_add(1, std::memory_order_relaxed) : local_++;
        return *i < count_;
    }

private:
    const UnitContext& u_;
    Phase phase_;
    int count_, local_ = 0;
};

// The row phase's items: groups of sequences of a B x T micro-batch. One lane: all B at once. More:
// groups of about 256 rows (SHARDLM_LANE_ROWS), at least one per lane; fewer rows would cost more in
// packing each GEMM's weights than the finer balance gains.
struct Groups {
    int size, count;
    Span operator()(int i, int B) const { return {i * size, std::min(size, B - i * size)}; }
};
Groups sequence_groups(int B, int T, int lanes);
inline Groups sequence_groups(const UnitContext& u, int B, int T) { return sequence_groups(B, T, u.lanes); }

// The output phase's items: tasks (weight gradients, LayerNorm parameter gradients) over n output
// rows or columns each, in blocks of cost::weight_block_rows (max(512, n / 16) rows, multiples of 16, the
// last one shorter; at most 16 a task), whatever the lanes and threads: a product's shape, so its library
// (--gemm auto's choice per shape) and its bits, do not depend on them (one thread runs the blocks in
// turn). Under tensor parallelism (one lane) whole tasks. (512, not 256, since the native GEMMs: an item
// packs its B (the unit's input, all rows) again, and with 256-row items that packing was an eighth of
// the weight gradients; bf16 GPT-2 at 4 x 256 5 % faster.)
// Item i is found by arithmetic over at most kMaxTasks tasks: nothing is allocated in the step.
struct OutputItem {
    int task, begin, end;
};
class OutputItems {
public:
    static constexpr int kMaxTasks = 12;
    OutputItems(const UnitContext& u, const int* sizes, int n_tasks);
    int count() const { return count_; }
    OutputItem operator[](int i) const;

private:
    int tasks_ = 0, count_ = 0;
    int size_[kMaxTasks] = {}, block_[kMaxTasks] = {}, first_[kMaxTasks] = {};  // first_: index of its item 0
};

// The W phase of a unit kind as a table: each task computes one parameter's gradient (or a
// LayerNorm's pair) over `outputs` output rows, a block [begin, end) of them at a time, from Args
// (what the unit's B kept). run_weight_tasks hands the blocks of every task to the lanes.
template <class Args>
struct WeightTask {
    const char* name;
    int (*outputs)(const UnitContext& u, const Args& a);  // 0: the task has nothing to do here
    void (*run)(const UnitContext& u, const Args& a, int begin, int end);
};

template <class Args, int K>
void run_weight_tasks(const UnitContext& u, const WeightTask<Args> (&tasks)[K], const Args& args) {
    int sizes[K];
    for (int k = 0; k < K; k++) sizes[k] = tasks[k].outputs(u, args);
    const OutputItems out(u, sizes, K);
    Items items(u, kOutputPhase, out.count());
    for (int i; items.next(&i);) {
        const OutputItem it = out[i];
        tasks[it.task].run(u, args, it.begin, it.end);
    }
}

// Every lane has finished the row phase (a no-op with one lane).
inline void lane_barrier(const UnitContext& u) {
    if (u.lanes > 1) {
#pragma omp barrier
    }
}

}  // namespace shardlm::model::detail
