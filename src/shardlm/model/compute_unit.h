// model/compute_unit.h: a chunk of a model part is a list of typed compute units (the embedding, a
// transformer block, the head: embedding_unit.h, block_unit.h, head_unit.h), each behind one interface:
// a forward, and a backward in two phases, B (input gradients) and W (weight gradients), run apart or
// together. Forward walks a chunk's list in order, backward in reverse; nothing is found by its index.
// A unit keeps its own saved activations per activation slot; the slot (ActivationSlot) holds the
// residual stream between the units. A new kind of unit is one class of this interface.
#pragma once
#include <cstddef>
#include <vector>

#include "shardlm/core/aligned_buffer.h"
#include "shardlm/model/config.h"
#include "shardlm/model/lanes.h"
#include "shardlm/model/param_binding.h"
#include "shardlm/model/units.h"

namespace shardlm::model {

// Called around each parameter unit (index into Layout::units). Defaults do nothing.
// A pass (the forward or the backward of one chunk for one micro-batch) starts with begin_pass.
// Forward: before_forward(u, next) for each unit in order (next: the unit after it in this pass,
// -1 at the end). Backward: before_backward(u, next) before a unit's parameters or gradient storage
// are used, after_backward(u) once its gradient is final for the micro-batch. The head reads and
// writes the tied wte: with the embedding on the same rank the head's backward writes wte's gradient
// first and it is final only after the embedding's backward; a last pipeline stage's tied copy is
// final after the head.
struct UnitHooks {
    virtual ~UnitHooks() = default;
    // micro: index of this micro-batch among the step's passes of this chunk in this direction;
    // count: how many there are.
    virtual void begin_pass(int chunk, bool forward, int micro, int count) {}
    virtual void before_forward(int unit, int next) {}
    virtual void before_backward(int unit, int next) {}
    virtual void after_backward(int unit) {}
};

// One micro-batch's place in a chunk: the residual stream between its units (x[k] enters the chunk's
// k-th unit, x.back() leaves the chunk), in the activations' type, and where its passes stand.
struct ActivationSlot {
    std::vector<TypedBuffer> x;
    std::vector<int> doc_start;  // document masks: each row's document's first position (B x T)
    int B = 0, T = 0;
    bool has_grad = false;  // a training forward waits for its backward (B)
    bool has_w = false;     // B ran, W waits
    size_t bytes() const;
};

// The forward's hooks: before_forward for every parameter unit of the chunk in order, up to the one a
// compute unit is about to read (each once).
class ForwardHooks {
public:
    ForwardHooks(UnitHooks* hooks, const std::vector<int>& order) : hooks_(hooks), order_(order) {}
    void before(int unit);

private:
    UnitHooks* hooks_;
    const std::vector<int>& order_;
    size_t at_ = 0;
};

// The backward's hooks, around W only (where parameter gradients are written): before(unit) announces
// every parameter unit up to `unit` in the backward's order (with the next one, to prefetch) and zeroes
// its gradient unless accumulating; after(unit): its gradient is final.
class WeightHooks {
public:
    WeightHooks(ParamBinding& params, UnitHooks* hooks, bool weight, bool accumulate, const std::vector<int>& order)
        : params_(params), hooks_(hooks), weight_(weight), accumulate_(accumulate), order_(order) {}
    void before(int unit);
    void after(int unit);
    bool accumulate() const { return accumulate_; }

private:
    ParamBinding& params_;
    UnitHooks* hooks_;
    bool weight_, accumulate_;
    const std::vector<int>& order_;
    size_t at_ = 0;
};

struct ForwardPass {
    ActivationSlot& s;
    int slot;            // its index among the chunk's slots
    int B, T;            // the micro-batch (s.B, s.T once its inputs are checked)
    const int* tokens;   // the embedding's inputs
    const int* targets;  // the head's: null computes logits only
    float dloss;         // != 0: the head prepares the backward of loss_sum * dloss
    ForwardHooks& hooks;
};

struct BackwardPass {
    ActivationSlot& s;
    int slot;
    float* dres;  // (Nl, C) fp32: d(unit output) on entry, d(unit input) on return (B)
    Phases phases;
    WeightHooks& hooks;
    bool input() const { return phases != Phases::Weight; }
    bool weight() const { return phases != Phases::Input; }
};

// The buffers all of a part's units share: its tensor-parallel scratch, one block's activations under
// full recomputation, and the keeps of a backward whose W follows its B.
struct SharedActivations {
    BlockActs recompute;  // full recomputation: one block's, reused
    BlockKeep keep;       // W right after B: one block's and the head's keeps, reused
    HeadKeep head_keep;
};

// What every unit of a part reads: the part's configuration, context and lanes, the bound parameters
// and which parameter unit is which, and the shared buffers.
struct UnitEnv {
    const GptConfig* config = nullptr;
    UnitContext* ctx = nullptr;
    LaneRunner* lanes = nullptr;
    ParamBinding* params = nullptr;
    const ParamUnits* ids = nullptr;
    SharedActivations* shared = nullptr;
    bool defer = false;  // W runs apart from B: each slot keeps what its W reads
    int B = 0, T = 0;    // the largest micro-batch
    int slots = 1;
    MoeStats* moe_stats = nullptr;  // what the training forwards of MoE layers add to
    const float* expert_bias = nullptr;  // (n_layer, E): the choice's bias of every MoE layer (null: none)
};

// A unit's buffers per activation slot: saved activations (values and fp32 statistics) and what its
// B keeps for a deferred W.
struct SlotBytes {
    size_t values = 0, stats = 0, keep = 0;
    size_t total() const { return values + stats + keep; }
};

class ComputeUnit {
public:
    using Kind = ComputeKind;
    ComputeUnit(Kind kind, int in, const UnitEnv& env) : kind_(kind), in_(in), env_(env) {}
    virtual ~ComputeUnit() = default;
    ComputeUnit(const ComputeUnit&) = delete;
    ComputeUnit& operator=(const ComputeUnit&) = delete;

    Kind kind() const { return kind_; }
    int in() const { return in_; }  // the slot's x[in] enters it (the embedding: tokens)
    // whether x[in] is the residual stream (not the embedding's tokens), and x[in + 1] (not the head's loss)
    virtual bool reads_stream() const { return true; }
    virtual bool writes_stream() const { return true; }
    // its compute index (model::Unit::compute): 0 the embedding, 1 + l block l, n_layer + 1 the head
    virtual int compute_index() const = 0;

    // Throws a clear error for inputs it cannot take (a token or target outside the vocabulary); every
    // unit of a chunk is asked before any runs.
    virtual void check_inputs(const ForwardPass& p) const {}
    // x[in] -> x[in + 1] (the head: the loss sum with targets, else 0)
    virtual double forward(ForwardPass& p) = 0;
    // The backward's phases (p.phases): B (input gradients into p.dres, no parameter gradient touched),
    // W (parameter gradients, with p.hooks around them), or both. W reads only what B kept, so it may
    // run any time before the slot's next forward; its sums run in the same order whenever it runs.
    virtual void backward(BackwardPass& p) = 0;
    // the parameter units its backward uses, in the order it first uses them (appended)
    virtual void backward_units(std::vector<int>& order) const = 0;
    virtual SlotBytes bytes(int slot) const = 0;
    // the products' precision changed (fp32 storage: bf16 or fp32 products): buffers that follow it
    virtual void products_changed() {}

protected:
    const Kind kind_;
    const int in_;
    const UnitEnv env_;
};

}  // namespace shardlm::model
