// model/part.h: the part of the model one rank runs: one or more chunks (contiguous ranges of
// compute units: a pipeline stage, or several virtual stages), this rank's tensor-parallel shard of
// their weights, and activation slots for the micro-batches in flight. A chunk is a list of typed
// compute units (compute_unit.h: the embedding, blocks, the head); a pass walks it.
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
#include "shardlm/model/compute_unit.h"
#include "shardlm/model/config.h"
#include "shardlm/model/context_parallel.h"
#include "shardlm/model/head_unit.h"
#include "shardlm/model/lanes.h"
#include "shardlm/model/layout.h"
#include "shardlm/model/param_binding.h"
#include "shardlm/model/tensor_parallel.h"
#include "shardlm/model/units.h"

namespace shardlm::model {

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
        // Context parallelism (model/context_parallel.h): each sequence is cut over this group's ranks
        // and T is a rank's rows of it (every micro-batch's: the whole sequence is T x cp). Null or a
        // group of one: the whole sequence. Attention is then the fused kernel by blocks.
        ContextParallel* cp = nullptr;
        // expert parallelism (model/moe.h): this rank holds 1/ep of every MoE layer's experts, and its
        // tokens reach the others' through this group (null: every expert here)
        ExpertParallel* ep = nullptr;
        CpComm cp_comm = CpComm::Ring;
        // Packed documents: attention stays inside each row's document (forward's doc_start), by the
        // fused kernel by blocks
        bool doc_mask = false;
    };
    // B, T: the largest micro-batch that will be run (T: its rows of a sequence on this rank).
    ModelPart(GptConfig config, Options opt, int B, int T);
    // its units point into it (context, lanes, bindings): it stays where it was built
    ModelPart(const ModelPart&) = delete;
    ModelPart& operator=(const ModelPart&) = delete;

    const GptConfig& config() const { return config_; }
    const Layout& layout() const { return layout_; }
    // The MoE layers' loads and objective terms of this rank's training forwards since the last reset.
    MoeStats& moe_stats() { return moe_stats_; }
    // The choice's bias of every MoE layer (n_layer x E; empty unless MoeConfig::bias_rate > 0): the same on every
    // rank, updated by the trainer from the step's global loads and kept in checkpoints.
    std::vector<float>& expert_bias() { return expert_bias_; }
    // expert parallelism's traffic since the last reset (MoeScratch::exchanged_bytes, count_gathers)
    MoeScratch& moe_traffic() { return scratch_.moe; }
    const MoeScratch& moe_traffic() const { return scratch_.moe; }
    const UnitContext& context() const { return ctx_; }
    // Training-health telemetry (train/health.h): while set (sq and n of n_layer + 2 each), every training
    // forward adds, for each unit that writes the residual stream, the squares of what it wrote and their
    // count at its compute index. Null: off.
    void set_activation_probe(double* sq, double* n) { probe_sq_ = sq, probe_n_ = n; }
    int num_chunks() const { return int(chunks_.size()); }
    int first_unit(int chunk) const { return chunks_[size_t(chunk)].first; }
    int last_unit(int chunk) const { return chunks_[size_t(chunk)].last; }
    bool has_embedding(int chunk) const { return chunks_[size_t(chunk)].has_embedding; }
    bool has_head(int chunk) const { return chunks_[size_t(chunk)].has_head; }
    int blocks(int chunk) const { return chunks_[size_t(chunk)].blocks; }  // transformer blocks of a chunk
    // a chunk's compute units in forward order (compute_unit.h)
    const std::vector<std::unique_ptr<ComputeUnit>>& compute_units(int chunk) const { return chunks_[size_t(chunk)].compute; }
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
    // loss_sum * dloss. doc_start (Options::doc_mask, chunks with blocks): each row's document's first position
    // (B x T), which its attention sees no key before.
    double forward(int chunk, int slot, const int* inputs, const int* targets, int B, int T, float dloss,
                   UnitHooks* hooks = nullptr, const int* doc_start = nullptr);
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
    // Context parallelism: the bytes this rank sends to its cp group per micro-batch (a forward, under
    // full recomputation a second one, and a backward of every block it holds); zero without.
    CpBytes cp_bytes() const;
    const SequenceSplit* sequence_split() const { return split_.get(); }

private:
    struct Chunk {
        int first = 0, last = 0;  // compute units [first, last] of the whole model (0: embedding, n_layer + 1: head)
        std::vector<std::unique_ptr<ComputeUnit>> compute;
        const HeadUnit* head = nullptr;  // the last of compute, if it is the head
        bool has_embedding = false, has_head = false;
        int blocks = 0;
        std::vector<int> units;           // parameter units in forward order
        std::vector<int> backward_units;  // and in the order a backward first uses them (backward_order)
        std::vector<ActivationSlot> slots;
        AlignedBuffer<float> dres;  // (Nl, C)
    };
    void run_backward(int chunk, int slot, UnitHooks* hooks, bool accumulate, Phases phases);
    std::vector<int> backward_order(const Chunk& ch) const;  // the parameter units a backward uses, in order
    // the constructor's parts
    void make_context(const Options& opt, TensorParallel* tp, int B, int T);
    Chunk make_chunk(const Options& opt, size_t c, int B, int T);
    void add_units(Chunk& ch, const UnitEnv& env);
    void size_head_scratch();  // the chunked head's logits tiles: per lane, head_tile_floats (model/units.h)
    bool head_in_part_ = false;
    int maxB_ = 0, maxT_ = 0;
    std::unique_ptr<SequenceSplit> split_;  // context parallelism or document masks only
    bool doc_mask_ = false;
    bool defer_ = false;  // Options::defer_weight_grads

    GptConfig config_;
    Layout layout_;
    ParamUnits ids_;
    std::unique_ptr<ParamBinding> params_;
    Scratch scratch_;
    UnitContext ctx_;
    LaneRunner lanes_;  // how a unit's pass runs on this rank's threads (model/lanes.h)
    SharedActivations shared_;
    MoeStats moe_stats_;
    double *probe_sq_ = nullptr, *probe_n_ = nullptr;  // set_activation_probe
    void probe_stream(const TypedBuffer& y, int B, int T, int compute);
    std::vector<float> expert_bias_;
    std::vector<Chunk> chunks_;
};

}  // namespace shardlm::model
