// model/part.h: the part of the model one rank runs: one or more chunks (contiguous ranges of
// compute units: a pipeline stage, or several virtual stages), this rank's tensor-parallel shard of
// their weights, and activation slots for the micro-batches in flight.
//
// The model knows nothing of MPI or files: it reads parameters through pointers into a flat buffer
// it is handed (bind), reaches its tensor-parallel group through model::TensorParallel, and tells
// its caller through UnitHooks when each parameter unit is about to be used and when its gradient
// is final, so that the parallel layer can gather parameters or reduce gradients around it. A
// pipeline schedule calls forward(chunk, slot) and backward(chunk, slot) in any order its
// dependencies allow; activations that cross chunk boundaries live in input()/output()/dres().
#pragma once
#include <algorithm>
#include <cstddef>
#include <memory>
#include <utility>
#include <vector>

#include "shardlm/core/aligned_buffer.h"
#include "shardlm/kernels/gemm/gemm.h"
#include "shardlm/model/config.h"
#include "shardlm/model/lanes.h"
#include "shardlm/model/layout.h"
#include "shardlm/model/tensor_parallel.h"
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

class ModelPart {
public:
    struct Options {
        std::vector<std::pair<int, int>> chunks;  // compute units [first, last] per chunk; empty: all
        std::vector<int> slots;                   // activation slots per chunk; empty: 1 each
        TensorParallel* tp = nullptr;             // null: no tensor parallelism
        bool sequence_parallel = false;
        PrecisionPolicy precision;                // what is stored and multiplied in what (core/precision.h)
        Recompute recompute = Recompute::None;
        bool fused_attention = false;             // kernels/flash_attention.h instead of attention.h
        int unit_multiple = 1;                    // make_gpt2_layout's (the data-parallel size)
        int threads = 1;                          // OpenMP threads (attention scratch)
        // lanes (model/units.h): how many threads share each micro-batch by sequences; 1: every
        // kernel over all threads. More than one needs one tensor-parallel rank. A micro-batch of
        // fewer sequences runs that many lanes.
        int lanes = 1;
        // The schedule runs a chunk's W (weight gradients) apart from its B (input gradients): each
        // activation slot keeps what its W needs until backward_weight (zero-bubble pipelines).
        bool defer_weight_grads = false;
    };
    // B, T: the largest micro-batch that will be run.
    ModelPart(GptConfig config, Options opt, int B, int T);

    const GptConfig& config() const { return config_; }
    const Layout& layout() const { return layout_; }
    const UnitContext& context() const { return ctx_; }
    int num_chunks() const { return int(chunks_.size()); }
    int first_unit(int chunk) const { return chunks_[size_t(chunk)].first; }
    int last_unit(int chunk) const { return chunks_[size_t(chunk)].last; }
    bool has_embedding(int chunk) const { return chunks_[size_t(chunk)].has_embedding; }
    bool has_head(int chunk) const { return chunks_[size_t(chunk)].has_head; }
    int blocks(int chunk) const { return chunks_[size_t(chunk)].blocks; }  // transformer blocks of a chunk
    int slots(int chunk) const { return int(chunks_[size_t(chunk)].slots.size()); }
    // Parameter units of a chunk in forward order.
    const std::vector<int>& chunk_units(int chunk) const { return chunks_[size_t(chunk)].units; }

    // Parameters and gradients: flat buffers of layout().total elements owned by the caller; the
    // parameters of the precision's type (fp32, or the 16-bit copy of mixed precision), the
    // gradients always fp32.
    void bind(void* params, float* grads);
    // Points one unit at its own storage (same layout as its range of the flat buffer): ZeRO-3 binds
    // gathered parameters just before a unit runs, ZeRO-2 a temporary gradient buffer. Null keeps.
    void bind_unit(int unit, void* params, float* grads);
    // the parameters bind() is given are of precision().param, the activations of .activation
    const PrecisionPolicy& precision() const { return ctx_.prec; }
    // Sophia's Hessian passes: while on, the head draws each token's label from the model's softmax
    // (kernels/sample_labels.h) with `seed`, and forward's targets are the tokens' keys (>= 0).
    void set_label_sampling(bool on, uint64_t seed = 0);
    bool samples_labels() const { return ctx_.sample_labels; }
    // fp32 storage only: bf16 products (the policy fp32-bf16-products) or fp32 ones
    void set_matmul_precision(kernels::MatmulPrecision p);
    kernels::MatmulPrecision matmul_precision() const { return ctx_.matmul(); }

    // Elements of the activation that crosses a chunk boundary for a B x T micro-batch: (Nl, C); its
    // bytes (the precision's type) and its gradient's (fp32).
    size_t boundary_floats(int B, int T) const { return size_t(ctx_.rows(B * T)) * size_t(config_.n_embd); }
    size_t boundary_bytes(int B, int T) const { return boundary_floats(B, T) * dtype_bytes(ctx_.prec.activation); }
    size_t grad_bytes(int B, int T) const { return boundary_floats(B, T) * sizeof(float); }
    // input: where the previous chunk's output is received (chunks without the embedding).
    void* input(int chunk, int slot);
    const void* output(int chunk, int slot) const;
    // dres (fp32): receives d(output) before backward (chunks without the head); holds d(input) after it.
    float* dres(int chunk) { return chunks_[size_t(chunk)].dres.data(); }

    // Forward of a chunk for the B x T micro-batch in slot. inputs: token ids (the embedding's chunk);
    // targets: the head's chunk computes the loss with them (null: logits only). Returns the sum of
    // the B*T losses (head chunk with targets) or 0. dloss != 0 prepares the backward of
    // loss_sum * dloss.
    double forward(int chunk, int slot, const int* inputs, const int* targets, int B, int T, float dloss,
                   UnitHooks* hooks = nullptr);
    // Backward of the slot's last forward: gradients += (GEMM weights = unless accumulate). Each unit
    // runs its B then its W (units.h), with the hooks around it.
    void backward(int chunk, int slot, UnitHooks* hooks, bool accumulate);
    // The same in two passes, for schedules that defer W (Options::defer_weight_grads): B of every
    // unit (d(input) into dres; no parameter gradient is touched, so no hooks), then later W of every
    // unit in the same order, with the hooks' before_backward/after_backward around each unit's W.
    // The gradients equal backward()'s to the bit. The slot takes no forward between the two.
    void backward_input(int chunk, int slot);
    void backward_weight(int chunk, int slot, UnitHooks* hooks, bool accumulate);
    bool defers_weight_grads() const { return defer_; }

    // The head chunk's logits over this rank's vocabulary rows after a forward without targets
    // ((B*T, Vp/tp)), and the per-row losses after one with targets.
    const float* logits(int chunk, int slot) const;
    const float* losses(int chunk, int slot) const;

    // Saved activations per slot of a chunk (bytes), and everything allocated for activations:
    // all slots, boundary buffers and scratch.
    size_t slot_bytes(int chunk) const;
    size_t activation_bytes() const;
    // What one block keeps for its backward per micro-batch: its input and saved activations
    // (values), and separately the LayerNorm statistics (fp32). -1 if the part holds no block.
    struct BlockBytes {
        long long values = -1, stats = 0;
    };
    BlockBytes block_bytes() const;
    // Buffers that recomputation needs once (not per micro-batch): a block's activations (full) or
    // its probabilities (selective).
    size_t recompute_bytes() const;
    // What B keeps for W (units.h: BlockKeep, HeadKeep) in all: one set, or with deferred W one per
    // slot (these are inside activation_bytes()).
    size_t keep_bytes() const;

private:
    struct Slot {
        AlignedBuffer<int> tokens;               // (N) the embedding's inputs
        std::vector<TypedBuffer> x;              // residual stream (act): x[k] enters the chunk's k-th
                                                 // compute unit; x.back() leaves the chunk
        std::vector<BlockActs> blocks;           // none under full recomputation
        HeadActs head;
        // deferred W only: what each unit's B keeps for its W, and the embedding's d(x0)
        std::vector<BlockKeep> keeps;
        HeadKeep head_keep;
        AlignedBuffer<float> dx0;
        int B = 0, T = 0;
        bool has_grad = false;  // a training forward waits for its backward (B)
        bool has_w = false;     // B ran, W waits
        size_t bytes() const;
        size_t keep_bytes() const;
    };
    // A chunk's compute unit, typed: the embedding (tokens in, x[1] out), a block (x[in] -> x[in + 1])
    // or the head (x[in] -> logits and losses). Forward walks a chunk's list in order, backward in
    // reverse; nothing is found by its index.
    struct ComputeUnit {
        enum class Kind { Embedding, Block, Head };
        Kind kind = Kind::Block;
        int in = 0;      // the slot's x[in] enters it
        int layer = -1;  // Block: its layer
        int block = -1;  // Block: its index among the slot's blocks and keeps
    };
    struct Chunk {
        int first = 0, last = 0;  // compute units [first, last] of the whole model (0: embedding, n_layer + 1: head)
        std::vector<ComputeUnit> compute;
        bool has_embedding = false, has_head = false;
        int blocks = 0;
        std::vector<int> units;  // parameter units in forward order
        std::vector<Slot> slots;
        AlignedBuffer<float> dres;  // (Nl, C)
    };
    BlockWeights block_weights(int l);
    BlockActs& acts(Slot& s, int block);  // the slot's, or under full recomputation the shared one
    BlockKeep& keep(Slot& s, int block) { return defer_ ? s.keeps[size_t(block)] : keep_; }
    HeadKeep& head_keep(Slot& s) { return defer_ ? s.head_keep : head_keep_; }
    void run_backward(int chunk, int slot, UnitHooks* hooks, bool accumulate, Phases phases);
    struct WeightHooks {  // the hooks around W in a backward's unit order (part.cpp)
        ModelPart& part;
        UnitHooks* hooks;
        bool weight, accumulate;
        std::vector<int> order;
        size_t at = 0;
        void before(int unit);
        void after(int unit);
    };
    std::vector<int> backward_order(const Chunk& ch) const;
    // Each kind of compute unit's passes (announce: the forward's hooks before a parameter unit is read).
    template <class Announce>
    void embedding_forward_pass(Slot& s, Announce&& announce);
    template <class Announce>
    void block_forward_pass(Slot& s, const ComputeUnit& u, Announce&& announce);
    template <class Announce>
    double head_forward_pass(const Chunk& ch, Slot& s, const ComputeUnit& u, const int* targets, float dloss,
                             Announce&& announce);
    void head_backward_pass(Chunk& ch, Slot& s, const ComputeUnit& u, Phases phases, WeightHooks& wh);
    void embedding_backward_pass(Chunk& ch, Slot& s, Phases phases, WeightHooks& wh);
    void block_backward_pass(Chunk& ch, Slot& s, const ComputeUnit& u, Phases phases, WeightHooks& wh);
    BlockGrads block_grads(int l) const;
    // Parameter i of unit as bound (matrices: the precision's type), and a vector parameter as fp32
    // (mixed precision: widened into vec_).
    // i is a role (BlockParam, HeadParam, EmbeddingParam); a role the model lacks (a bias of a model
    // without biases, a position table under rotary embeddings) is null.
    const void* param(int unit, int i) const {
        if (!has(unit, i)) return nullptr;
        return static_cast<const char*>(unit_params_[size_t(unit)]) + local_offset(unit, i) * dtype_bytes(ctx_.prec.activation);
    }
    const float* vec(int unit, int i);
    float* grad(int unit, int i) const { return has(unit, i) ? unit_grads_[size_t(unit)] + local_offset(unit, i) : nullptr; }
    // the matrix the head multiplies by: wte (tied: the embedding's or the tied copy) or lm_head
    const void* head_matrix() const {
        return head_wte_unit_ >= 0 ? param(head_wte_unit_, kTable) : param(head_unit_, kLmHead);
    }
    bool has(int unit, int i) const { return unit >= 0 && layout_.units[size_t(unit)].role[i] >= 0; }
    const ParamSpec& spec(int unit, int i) const { return layout_.params[size_t(layout_.units[size_t(unit)].role[i])]; }
    size_t local_offset(int unit, int i) const { return spec(unit, i).offset - layout_.units[size_t(unit)].offset; }
    void zero_accumulated_grads(int unit);
    // the constructor's parts
    void index_units();
    void plan_unit_vectors();
    Chunk make_chunk(const Options& opt, size_t c, int B, int T);
    void allocate_slot(Slot& s, const Chunk& ch, const Options& opt, int B, int T);
    void configure_head();  // the head's buffers for the precision (full logits, or a chunked head)
    void size_head_scratch();  // the chunked head's logits tiles: per lane, head_tile_floats (model/units.h)
    bool head_in_part_ = false;
    int maxB_ = 0, maxT_ = 0;
    LaneRunner lanes_;  // how a unit's pass runs on this rank's threads (model/lanes.h)

    GptConfig config_;
    Layout layout_;
    Scratch scratch_;
    UnitContext ctx_;
    std::vector<Chunk> chunks_;
    std::vector<void*> unit_params_;
    std::vector<float*> unit_grads_;
    AlignedBuffer<float> vec_;            // mixed precision: the unit in use's vectors, fp32
    std::vector<std::vector<size_t>> vec_at_;  // per unit, per parameter: its place in vec_
    BlockActs recompute_acts_;            // full recomputation: one block's, reused
    bool defer_ = false;                  // Options::defer_weight_grads
    BlockKeep keep_;                      // W right after B: one block's and the head's keeps, reused
    HeadKeep head_keep_;
    std::vector<int> block_unit_;   // block l -> its parameter unit, -1 if not here
    int wte_unit_ = -1, wpe_unit_ = -1, head_unit_ = -1;
    // the wte the head reads: the embedding's where they share a chunk, else the tied copy
    int head_wte_unit_ = -1;
    std::vector<std::vector<std::pair<size_t, size_t>>> zero_ranges_;  // per unit, local [begin, end)
};

}  // namespace shardlm::model
