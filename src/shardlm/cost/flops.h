// cost/flops.h: floating-point operations of training, per unit and per token.
//
// A multiply-add counts 2 FLOPs. Forward FLOPs of one block per token at sequence length s:
//   matmul     2 [h (h + 2 g d) + h^2 + k h f]    QKV, attention projection, MLP (k = 2 gpt, 3 llama)
//   attention  4 s h                              Q K^T and P V over the whole s x s square
// The attention count ignores causal masking, as Megatron-LM and PaLM's MFU do (kernels that skip
// the masked half do less work than this counts). For gpt (g d = h, f = 4h) a block is
// 24 h^2 + 4 s h per token: Narayanan et al. 2021's 24 B s h^2 + 4 B s^2 h per layer and batch.
// The head (logits) is 2 h V per token; embedding lookups, norms and softmax count 0.
//
// Training: backward = 2 x forward, so model FLOPs = 3 x forward (MFU counts these). Recomputation
// adds forward work that the hardware does but the model does not need (HFU counts it):
//   full       the forward of every block again
//   selective  the attention core again (Korthikanti et al. 2022: only Q K^T, softmax, P V)
//   flash      (attention kernel) Q K^T again in the backward, whatever the recomputation
// These count the whole s x s square for attention, as the papers' MFU does; a causal flash kernel
// skips the masked tiles, so the planner times it at half (planner/stage_model.cpp).
#pragma once
#include <cstdint>
#include <string>

#include "shardlm/core/enum_names.h"
#include "shardlm/cost/shape.h"

namespace shardlm::cost {

enum class Recompute { None, Selective, Full };
inline constexpr EnumName<Recompute> kRecomputeNames[] = {
    {Recompute::None, "none"}, {Recompute::Selective, "selective"}, {Recompute::Full, "full"}};
constexpr const auto& enum_names(Recompute) { return kRecomputeNames; }
std::string recompute_name(Recompute r);  // "none" | "selective" | "full"
bool recompute_from_name(const std::string& s, Recompute* out);

// How attention's core runs: Flash (fused kernel: tiles, online softmax, no s x s tensor kept; the
// backward recomputes the scores from saved row statistics) or Naive (Q K^T, softmax, dropout and P V
// as separate kernels over the whole s x s square, the probabilities kept for backward).
enum class Attention { Flash, Naive };
inline constexpr EnumName<Attention> kAttentionNames[] = {{Attention::Flash, "flash"}, {Attention::Naive, "naive"}};
constexpr const auto& enum_names(Attention) { return kAttentionNames; }
std::string attention_name(Attention a);  // "flash" | "naive"
bool attention_from_name(const std::string& s, Attention* out);

// How context parallelism's attention reaches the other ranks' keys and values: passed around the ring of
// cp ranks, a block a step, overlapped with the attention tiles (ring attention: Megatron-Core's and
// Transformer Engine's p2p, torchtitan's default), or all gathered once a layer (Llama 3's all-gather).
enum class CpComm { Ring, AllGather };
inline constexpr EnumName<CpComm> kCpCommNames[] = {{CpComm::Ring, "ring"}, {CpComm::AllGather, "allgather"}};
constexpr const auto& enum_names(CpComm) { return kCpCommNames; }

struct BlockFlops {
    double matmul = 0;     // weight matrices
    double attention = 0;  // Q K^T and P V
    double total() const { return matmul + attention; }
};
BlockFlops block_forward_flops_per_token(const ModelShape& m, int seq);
double head_forward_flops_per_token(const ModelShape& m);         // 2 h V
double forward_flops_per_token(const ModelShape& m, int seq);     // l blocks + head
double model_flops_per_token(const ModelShape& m, int seq);       // 3 x forward
// + recomputed forward; flash attention's backward also recomputes Q K^T (selective recomputation is
// then already done: the core keeps nothing to drop)
double hardware_flops_per_token(const ModelShape& m, int seq, Recompute r, Attention a = Attention::Naive);

// Narayanan et al. 2021 (Megatron-LM, the table of seed 002), eq. 3: FLOPs of one iteration with
// full recomputation, counting only the GEMMs: 96 B s l h^2 (1 + s/(6h) + V/(16 l h)).
double megatron_flops_per_step(const ModelShape& m, int64_t batch, int seq);

// Seed 002's end-to-end estimate: time = 8 T P / (N F U) (8 = 2 forward + 4 backward + 2 recomputed
// forward FLOPs per parameter and token). T tokens, P parameters, N GPUs, F peak FLOP/s, U utilisation.
double training_time_s(double tokens, double params, double gpus, double peak_flops, double utilisation);
// The same relation solved for U.
double utilisation_from_time(double tokens, double params, double gpus, double peak_flops, double seconds);

}  // namespace shardlm::cost
