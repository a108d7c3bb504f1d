// cost/shape.h: the shape of a decoder-only transformer and its parameter count per unit.
//
// cost/ is the one cost model of shardlm: parameter, FLOP, memory and communication counts as pure
// functions of plain structs (no MPI, no model classes, no allocation). The planner predicts with
// it; the engine's memory and communication reports are to compare against it, so prediction and
// measurement read the same formulas.
//
// A model is a sequence of units (DESIGN.md): the embedding, `layers` identical blocks, the final
// norm and the output head. Two architectures:
//   gpt   (GPT-2/3, Megatron-LM's GPT): learned positions, LayerNorm, biases, GELU MLP of ffn_hidden
//         (4h by default), dropout, head tied to the embedding.
//   llama (LLaMA, Llama-2/3): RoPE (no position table), RMSNorm, no biases, SwiGLU MLP whose inner
//         size is ffn_hidden (three matrices), no dropout, untied head; kv_heads < heads is GQA.
//
// Shape letters in comments: l layers, h hidden, a heads, d = h/a head dim, g kv_heads, f ffn_hidden,
// V vocab, s sequence, b micro-batch (sequences), t tensor-parallel size.
#pragma once
#include <cstdint>
#include <string>

namespace shardlm::cost {

enum class Arch { Gpt, Llama };

struct ModelShape {
    std::string name = "custom";
    int layers = 0;
    int hidden = 0;
    int heads = 0;
    int kv_heads = 0;    // = heads without grouped-query attention
    int ffn_hidden = 0;  // the MLP's inner size
    int vocab = 0;       // the true vocabulary (no padding)
    int seq_len = 0;     // training sequence length (and the gpt position table's size)
    Arch arch = Arch::Gpt;
    bool tied_embeddings = true;    // the head reuses the embedding matrix (gpt)
    bool learned_positions = true;  // a (seq_len x h) position table (gpt)
    bool biases = true;             // linear layers and norms have biases (gpt)
    bool dropout = true;            // dropout after attention probabilities, projections (gpt)
    // a mixture of experts in every block (experts 0: dense): `experts` MLPs of expert_ffn, `top_k` of them
    // chosen per token by a router (h x experts, replicated), beside `shared_experts` MLPs every token passes
    int experts = 0, top_k = 0, expert_ffn = 0, shared_experts = 0;
    bool qk_norm = false;  // OLMoE's norms of the queries and keys: h + kv_dim gains a block, cut by heads
    bool moe() const { return experts > 0; }

    int head_dim() const { return heads > 0 ? hidden / heads : 0; }  // 0 for a shape check_shape rejects
    int64_t kv_dim() const { return int64_t(kv_heads) * head_dim(); }  // g*d: width of K (and of V)
};

// GPT-2/3 and Megatron-LM's GPT: ffn 4h, kv_heads = heads, the gpt flags above.
ModelShape gpt_shape(std::string name, int layers, int hidden, int heads, int vocab, int seq_len);
// LLaMA family: RMSNorm, SwiGLU(ffn_hidden), no biases, no dropout, untied head.
ModelShape llama_shape(std::string name, int layers, int hidden, int heads, int kv_heads, int ffn_hidden,
                       int vocab, int seq_len);
// LLaMA's default MLP size: 8h/3 rounded up to a multiple of 256 (LLaMA 7B: 11008).
int llama_default_ffn(int hidden);

std::string arch_name(Arch a);  // "gpt" | "llama"
bool arch_from_name(const std::string& s, Arch* out);

// Empty if the shape is usable, else what is wrong (e.g. "hidden (100) is not a multiple of heads (3)").
std::string check_shape(const ModelShape& m);

// Parameters of each unit (elements; true vocabulary).
struct UnitParams {
    int64_t embedding = 0;   // V h (+ seq_len h learned positions)
    int64_t block = 0;       // one transformer block
    int64_t final_norm = 0;  // 2h (LayerNorm) or h (RMSNorm)
    int64_t head = 0;        // V h if untied, 0 if tied to the embedding
    int64_t total(int layers) const { return embedding + int64_t(layers) * block + final_norm + head; }
};
UnitParams unit_params(const ModelShape& m);
int64_t total_params(const ModelShape& m);
// A mixture of experts: one block's routed experts (their matrices, split by tensor parallelism, 1/ep of them
// on each expert-parallel rank), and the parameters one token passes through (the total less the experts it
// is not sent to). Dense: 0 and total_params.
int64_t expert_params_per_block(const ModelShape& m);
int64_t active_params(const ModelShape& m);
// Parameters of one block that tensor parallelism splits t ways (the matrices and their column biases);
// the rest (norms, row-parallel biases) is replicated on every tensor-parallel rank.
int64_t block_params_split(const ModelShape& m);

// Lanes (docs/DESIGN.md, model/: "Lanes"): a rank's threads run whole groups of sequences through
// single-threaded kernels. A micro-batch of B sequences of T tokens splits into groups of
// clamp(ceil(rows / T), 1, ceil(B / lanes)) sequences (rows: about 256); the engine takes lanes (its
// --thread-split auto) when tensor parallelism is off and there are at least two groups per thread.
struct LaneGroups {
    int size = 0, count = 0;  // sequences per group, groups
};
LaneGroups lane_groups(int B, int T, int lanes, int rows = 256);
bool runs_lanes(int B, int T, int threads, int tp);
// A weight gradient of n output rows is computed over all the micro-batch's rows a block of output rows at a
// time (the W phase, model/unit_ops.h): blocks of max(min_rows, n / 16) rows, a multiple of 16, the last
// shorter; under tensor parallelism the whole gradient at once. calibrate times its products so.
int weight_block_rows(int n, int tp, int min_rows = 512);

// Seed 002's estimate 12 l h^2 + 2 V h (blocks without their small terms, embedding and an untied head).
int64_t estimate_params_12lh2_2vh(const ModelShape& m);

}  // namespace shardlm::cost
