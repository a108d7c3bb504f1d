// model/layout.h: the layout table of one rank's flat parameter buffer.
//
// The model is a sequence of compute units: the embedding (0), the blocks (1..L) and the head
// (L+1: final LayerNorm, LM head tied to wte, loss). A rank holds a part of it: the compute units of
// its pipeline stage(s), each parameter as this rank's tensor-parallel shard. Parameters are grouped
// into *parameter units*, each a contiguous, 64-byte aligned range of the flat buffer: the unit of
// ZeRO sharding, of DP buckets and of ZeRO-3 gathering. Gradients, optimiser state and ZeRO slices
// use the same offsets, so every consumer (optimiser, checkpoint, DP buckets, reports) reads this one
// table instead of magic indices.
//
// Parameter units, in buffer order:
//   "wte"    the token embedding [Vp/tp, C] (vocabulary-parallel): read by the embedding and by the
//            tied head. A chunk that holds the head but not the embedding holds a copy ("wte",
//            tied_copy) whose gradient is summed with the embedding's, so both stay equal: the last
//            stage's with the first stage's, or (ZBV, whose first rank holds both ends of the model
//            in two chunks) on the same rank.
//   "wpe"    the position embedding [n_ctx, C] (replicated across tensor-parallel ranks)
//   "h.<l>"  block l: ln_1, c_attn (column-parallel, heads split), c_proj (row-parallel), ln_2, c_fc
//            (column-parallel), mlp.c_proj (row-parallel); LayerNorms and row-parallel biases are
//            replicated. A mixture-of-experts layer (config.h: MoeConfig) has its router (replicated) and
//            its experts (each cut as the dense MLP is) in place of the MLP, and its shared experts as an MLP
//   "head"   ln_f (replicated), and an untied model's lm_head [Vp/tp, C] (vocabulary-parallel)
// Names are HF GPT-2's when every architecture knob is GPT-2's, else HF LLaMA's (config.h: Family):
// model.embed_tokens, model.layers.<l>.{input_layernorm, self_attn.{q,k,v,o}_proj,
// post_attention_layernorm, mlp.{gate,up,down}_proj}, model.norm, lm_head. A LLaMA block's q, k and v
// (and gate and up) are separate tensors (column-parallel each: a rank holds whole heads and whole
// key/value heads) packed one after the other, so they read as one fused [q | k | v] matrix (and
// [gate | up]): one GEMM, as GPT-2's c_attn.
// wte is a unit of its own so that its ZeRO slices line up between the first stage and the last
// stage's tied copy (the gradient sum between them then runs on matching slices).
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "shardlm/model/config.h"

namespace shardlm::model {

// How a parameter is initialised (weights.h): zeros, ones (norm gains), N(0, 0.02), or N(0, 0.02 /
// sqrt(2 n_layer)) for the projections onto the residual stream.
enum class Init { Zero, One, Normal, ResidNormal };

struct ParamSpec {
    std::string name;                 // HF GPT-2 name, e.g. "transformer.h.0.attn.c_attn.weight"
    std::vector<int64_t> shape;       // this rank's internal shape; Linear weights are [out, in]
    std::vector<int64_t> full_shape;  // internal shape of the whole tensor (all tensor-parallel ranks)
    size_t offset = 0;                // elements, from the start of the flat buffer
    size_t numel = 0;                 // product of shape
    bool decay = false;               // weight decay applies (2-D tensors: matrices and embeddings)
    bool hf_transposed = false;       // HF Conv1D stores this weight as [in, out]
    int64_t hf_rows = -1;             // if >= 0, only full rows < hf_rows are real (padded vocabulary)
    // Tensor parallelism: full_shape[tp_axis] is cut into tp_size equal parts, rank tp_rank holds one.
    // tp_parts > 1: the axis is tp_parts blocks (c_attn's q | k | v) and each block is cut alike.
    int tp_axis = -1;  // -1: replicated on every tensor-parallel rank
    int tp_parts = 1;
    int tp_rank = 0, tp_size = 1;
    bool tied_copy = false;  // the last pipeline stage's copy of wte: never saved, gradient summed
    // A GEMM writes this gradient (= on a step's first micro-batch, += after): it is never zeroed.
    bool gemm_written = false;
    // Right after the previous parameter, one tensor with it as the units read them (a fused matrix's or
    // vector's next block: q | k | v, gate | up, the q and k norms' gains); a role names the run's first.
    bool packed = false;
    Init init = Init::Zero;

    std::vector<int64_t> hf_shape() const;  // HF shape of the whole tensor (true vocabulary)
    size_t hf_numel() const;                // elements of hf_shape()
    bool replicated() const { return tp_axis < 0 || tp_size == 1; }
    // Whether this rank's copy counts for sums over the model (gradient norm, parameter counts):
    // replicated tensors count on tensor-parallel rank 0 only; tied copies never.
    bool counted() const { return !tied_copy && (tp_axis >= 0 || tp_rank == 0); }
};

// The compute units of a model of n_layer blocks, numbered as a pipeline split counts them (0: the
// embedding, 1 + l: block l, n_layer + 1: the head): what number cu is, and which block.
enum class ComputeKind { Embedding, Block, Head };
inline int head_compute_unit(int n_layer) { return n_layer + 1; }
inline ComputeKind compute_kind(int n_layer, int cu) {
    return cu == 0 ? ComputeKind::Embedding : cu == head_compute_unit(n_layer) ? ComputeKind::Head : ComputeKind::Block;
}
inline int compute_layer(int cu) { return cu - 1; }  // a block's layer
inline int block_compute_unit(int layer) { return layer + 1; }

// Experts: an MoE layer's experts held here (expert parallelism: 1/ep of them), a unit of their own after
// the block's, since their gradients are reduced over another group (the ranks holding the same experts).
enum class UnitKind { TokenEmbedding, PositionEmbedding, Block, Head, Experts };

inline constexpr int kMaxRoles = 16;

struct Unit {
    std::string name;  // "wte", "wpe", "h.0", ..., "head" (for people: code tells units by kind)
    UnitKind kind = UnitKind::Block;
    int block = -1;    // Block: its index l
    int compute = 0;   // the compute unit that owns it: 0 embedding, 1 + l block l, L + 1 head
    size_t offset = 0, numel = 0;
    int first_param = 0, num_params = 0;  // index range into Layout::params
    // role (BlockParam, HeadParam, EmbeddingParam) -> index into Layout::params, -1 if the model has
    // none (no biases, no lm_head when tied); a fused role (kQkvW: q, k, v) names its first tensor
    int role[kMaxRoles] = {-1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1};
};

struct Layout {
    std::vector<ParamSpec> params;
    std::vector<Unit> units;
    size_t total = 0;  // elements in the flat buffer, including alignment padding
    int n_layer = 0;   // of the whole model (a pipeline stage holds only some of its blocks)
    int first_expert = 0, local_experts = 0;  // the experts each MoE layer's Experts unit holds
    const ParamSpec* find(const std::string& name) const;
    int unit_index(const std::string& name) const;  // -1 if absent
    // An Experts unit's distance from one expert's first matrix to the next's (elements; 0 with one expert)
    size_t expert_stride(int unit) const;
    int unit_of(UnitKind kind) const;  // the first unit of a kind (the token embedding: one), -1 if absent
};

// The roles of a unit's parameters: a block's, the head's, and the embeddings' (one tensor). kQkvW is
// the fused [q | k | v] (GPT-2's c_attn, or LLaMA's q, k, v packed), kFcW the MLP's first matrix
// (c_fc, up_proj, or [gate | up] packed for SwiGLU), kFcProjW its second (down_proj). A mixture-of-experts
// layer's router [E, C] is kRouterW; kExpertFcW and kExpertProjW name expert 0's two matrices (Mixtral's
// w1 | w3 packed, and w2), and expert e's lie e times the distance between expert 0's and expert 1's
// further on; its shared experts (if any) are the dense MLP's roles. kQkNormW: the q and k norms' gains packed
// (GptConfig::qk_norm: OLMoE's q_norm, then k_norm).
enum BlockParam : int {
    kLn1W, kLn1B, kQkvW, kQkvB, kAttnProjW, kAttnProjB, kLn2W, kLn2B, kFcW, kFcB, kFcProjW, kFcProjB,
    kRouterW, kExpertFcW, kExpertProjW, kQkNormW, kNumBlockParams
};
enum HeadParam : int { kLnfW, kLnfB, kLmHead };
enum EmbeddingParam : int { kTable };  // wte [Vp/tp, C], wpe [n_ctx, C], the tied copy

// Which part of the model a rank's layout holds.
// A chunk that holds the head but not the embedding brings a tied copy of wte.
struct LayoutSpec {
    // Compute units [first, last] of each model chunk this rank holds (one per virtual pipeline
    // stage, in order); empty: the whole model.
    std::vector<std::pair<int, int>> chunks;
    int tp_size = 1, tp_rank = 0;
    int ep_size = 1, ep_rank = 0;  // expert parallelism: this rank holds experts [ep_rank E / ep, (ep_rank + 1) E / ep)
    int unit_multiple = 1;  // every unit is padded to a multiple of 16 * unit_multiple floats, so
                            // that it splits into unit_multiple equal, 64-byte aligned ZeRO slices
};

// One process, the whole model: LayoutSpec{} with unit_multiple.
Layout make_gpt2_layout(const GptConfig& c, int unit_multiple = 1);
Layout make_gpt2_layout(const GptConfig& c, const LayoutSpec& spec);

// Parameter counts from the layout the engine trains (true vocabulary; a tied head counted once).
struct ParamCount {
    int64_t embedding = 0;  // wte (V x C) + wpe (n_ctx x C, learned positions)
    int64_t blocks = 0;     // all transformer blocks
    int64_t per_block = 0;
    int64_t final_norm = 0;
    int64_t head = 0;       // an untied lm_head (V x C)
    int64_t total = 0;
    // a mixture of experts: the routed experts' parameters (counted in blocks), and what one token passes
    // through (the total less the experts it is not sent to: top_k of n_experts in each MoE layer)
    int64_t experts = 0;
    int64_t active = 0;
};
ParamCount count_params(const GptConfig& c);

}  // namespace shardlm::model
