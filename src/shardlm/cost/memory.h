// cost/memory.h: bytes of model states (parameters, gradients, optimiser) and of activations.
//
// Model states per parameter, Adam (ZeRO paper, Rajbhandari et al. 2020, K = 12; seeds 000/001/002):
//   fp32                     params 4, grads 4, optimiser 8 (m, v)            = 16
//   mixed 16-bit (bf16/fp16) params 2, grads 2, optimiser 12 (fp32 master, m, v) = 16 ("2 + 2 + K")
//   mixed, fp32 gradient copy params 2, grads 2, optimiser 16 (+ fp32 grads)     = 20 (seed 001: 1B -> 20 GB)
//   pure 16-bit              params 2, grads 2, optimiser 4 (16-bit m, v)      = 8  (seed 000: 10B -> 80 GB)
// ZeRO over dp ranks: stage >= 1 divides the optimiser state by dp, >= 2 also the gradients, 3 also
// the parameters. ZeRO paper, 7.5B on 64 GPUs: 120, 31.4, 16.6, 1.9 GB for stages 0-3.
//
// Activations a block keeps for backward (Korthikanti et al. 2022, "Reducing Activation Recomputation
// in Large Transformer Models", sec. 4), counted tensor by tensor so that GQA, SwiGLU, no-dropout and
// fp32 follow from the same list. For gpt in 16-bit it is their s b h (34 + 5 a s / h) bytes:
//   kept on every tensor-parallel rank (split t ways only with sequence parallelism):
//     2 norm inputs, the QKV input, the MLP input (s b h values each); 2 dropout masks (s b h bytes)
//   split t ways: Q (s b h), K and V (s b g d each), the projection input (s b h), the MLP's inner
//     activations (gpt: GELU input and output, 2 s b f; llama: gate, up and their product, 3 s b f)
//   the attention core, split t ways, dropped by selective recomputation: softmax output (a s^2 b),
//     gpt also the attention dropout's output (a s^2 b) and mask (a s^2 b bytes)
// Values take value_bytes (2 for 16-bit, 4 for fp32), masks 1 byte. Full recomputation keeps only the
// block input (s b h values; / t with sequence parallelism). With tensor parallel t that gives
// Korthikanti's s b h (10 + 24/t + 5 a s/(h t)), with sequence parallelism s b h (34/t + 5 a s/(h t)),
// selective + sequence parallel s b h 34/t, full 2 s b h. Context parallelism cp cuts s to s/cp (the
// attention core keeps (s/cp) x s scores).
#pragma once
#include <cstdint>
#include <string>

#include "shardlm/core/enum_names.h"
#include <string>
#include <string_view>

#include "shardlm/cost/flops.h"
#include "shardlm/cost/shape.h"

namespace shardlm::cost {

struct StateBytes {
    double params = 0, grads = 0, optimizer = 0;  // bytes per parameter; optimizer includes a master copy
    double total() const { return params + grads + optimizer; }
};
inline constexpr StateBytes kAdamFp32{4, 4, 8};
inline constexpr StateBytes kAdamMixed{2, 2, 12};
inline constexpr StateBytes kAdamMixedFp32Grads{2, 2, 16};
inline constexpr StateBytes kAdamPure16{2, 2, 4};

// Bytes of optimiser state per parameter (fp32 state; the engine's optim::Optimizer, by its
// `--optimizer` name): sgd 0; momentum, adagrad, lion 4 (one buffer); adam, adamw, radam 8 (two);
// adam8bit 2 + 8 / block (one byte each for m and v, an fp32 absmax per block of each; tensors under
// 4096 elements stay fp32: a fraction of a model); adafactor 0 (a row and a column per matrix; 4 more
// with a first moment). -1 for a name it does not know.
double optimizer_state_bytes(std::string_view optimizer, int block = 2048);

struct ModelStateBytes {
    double params = 0, grads = 0, optimizer = 0;
    double total() const { return params + grads + optimizer; }
};
// numel parameters held by this rank before ZeRO (already divided by tensor and pipeline parallelism).
ModelStateBytes model_state_bytes(double numel, StateBytes per_param, int zero_stage, int dp);

// The ZeRO communication buffers (parallel/zero.cpp allocates exactly these): stages 2-3 keep
// three unit slots, one for the embedding (used at both ends of the step) and two for any other unit
// (the one in use and the next, prefetched or still reducing). Stage 3 gathers parameters into them
// (param_bytes per element), or, gathering per chunk (the zero-bubble schedules' Unshard actions),
// into one buffer per chunk: at most all of the rank's parameters at once; stages 2-3 reduce
// gradients through them: the unit's gradient and this
// rank's slice (grad_bytes per element; the engine's are fp32), plus copies of both in the reduction's
// type when it is narrower (reduce_bytes < grad_bytes). Stages 0-1 with a narrower reduction stage
// the whole gradient in that type.
struct ZeroBufferSpec {
    double embedding_numel = 0;  // this rank's embedding unit (or tied copy); 0 if it holds none
    double largest_unit = 0;     // its largest other unit (a block, positions, the head)
    double total_numel = 0;      // all its parameters
    int dp = 1;
    int zero_stage = 0;
    double param_bytes = 4;   // of the model's parameters (2 for a 16-bit copy)
    double grad_bytes = 4;    // of the gradients
    double reduce_bytes = 4;  // of the gradient reduction
    bool gathered_per_chunk = false;  // stage 3: whole chunks gathered (Unshard actions), not slots
};
double zero_buffer_bytes(const ZeroBufferSpec& z);
// The part of zero_buffer_bytes that holds gradients (stages 2-3: the unit's gradient, this rank's slice
// and their narrower copies; stages 0-1: the staged narrower gradient), which exists only while the
// backward runs; the rest is ZeRO-3's gathered parameters.
double zero_gradient_buffer_bytes(const ZeroBufferSpec& z);

struct ActivationSpec {
    int64_t micro_batch = 1;  // b, sequences
    int seq = 0;              // s, tokens per sequence (before context parallelism)
    int tp = 1;
    int cp = 1;
    int ep = 1;  // expert parallelism: the experts' rows also kept on the side that received them
    bool sequence_parallel = false;
    Recompute recompute = Recompute::None;
    double value_bytes = 2;  // 2: bf16/fp16 activations, 4: fp32
    // Flash: the attention core keeps no s x s tensor, only its fp32 row statistics (a s b x 4 bytes,
    // split t ways), and selective recomputation has nothing more to drop. Naive: Korthikanti's.
    Attention attention = Attention::Naive;
    // Selective recomputation with flash attention, PyTorch's way (torchtitan's "op" policy): the
    // block's input, the attention kernel's outputs and every other GEMM output (the 1st, 3rd, ... in
    // forward order) are kept, all else recomputed (every_other_gemm_saved_bytes). Off: element-wise
    // (op_selective_recomputed_bytes).
    bool every_other_gemm = false;
    // The linear layers keep their inputs for the weight gradient in FP8, one byte a value (Transformer
    // Engine's Linear, LayerNormLinear and LayerNormMLP with fp8 save the cast input, inputmat_t, not the
    // 16-bit one): the QKV, projection, MLP and MLP-down inputs. torchao's float8 keeps 16-bit ones.
    bool fp8_linear_inputs = false;
    // Under expert parallelism the side that receives the experts' rows holds room for every ep rank's
    // N k rows, not the balanced N k: this engine sizes those buffers before the all-to-all tells how
    // many come (model/moe.h, MoeActs: dropless, any routing fits). The GPU frameworks allocate what came.
    bool expert_rows_for_every_rank = false;
};
// Bytes one block keeps for its backward, for one micro-batch, on one rank.
double block_activation_bytes(const ModelShape& m, const ActivationSpec& a);
// Selective recomputation with flash attention (whose core keeps nothing to drop) is op-level, as
// PyTorch's selective activation checkpointing (torchtitan's "op" policy) does it: the GEMMs' outputs
// are kept, the cheap element-wise results are recomputed: the two norms' outputs and the MLP
// activation's output. These are the bytes it drops (block_activation_bytes leaves them out).
double op_selective_recomputed_bytes(const ModelShape& m, const ActivationSpec& a);
// torchtitan's op-level selective checkpointing (torchtitan/models/llama/parallelize_llama.py @ 9dec370,
// `_custom_policy`: "Saves output of all compute ops, except every second mm", the count restarting in
// each block; its save list is aten.mm, the SDPA kernels, reduce_scatter and float8's abs/max): the
// block's input, the outputs of its odd-numbered GEMMs in forward order (LLaMA: wq, wv, w1, w2 of wq,
// wk, wv, wo, w1, w3, w2; GPT: QKV and the MLP's first of QKV, proj, fc, fc-proj), the attention output
// and its row statistics, and under sequence parallelism the two reduce-scatters' outputs. A
// row-parallel GEMM's output is its full-width partial sum.
double every_other_gemm_saved_bytes(const ModelShape& m, const ActivationSpec& a);
// The forward GEMM FLOPs per token that rule drops and the backward redoes (the even-numbered GEMMs)
double every_other_gemm_recomputed_flops_per_token(const ModelShape& m, int tp);
// Bytes the attention core alone keeps (the part selective recomputation drops), same conventions;
// with flash attention its row statistics.
double attention_core_activation_bytes(const ModelShape& m, const ActivationSpec& a);

// Seed 002's statement for a whole model without recomputation: b l (2 s^2 a + 14 s h) values
// (GPT-3 175B, b = 1, s = 2048, 4-byte values: 444 GB).
double activation_bytes_seed002(const ModelShape& m, int64_t batch, int seq, double value_bytes = 4);

// Pipeline schedules (the one enum of the concept: schedule/schedule.h builds them as data). The
// interleaved 1F1B of Narayanan et al. 2021 is OneFOneB's order over virtual stages; the zero-bubble
// ones (Qi et al. 2023) run the weight gradients (W) apart from the input gradients (B).
enum class Schedule { GPipe, OneFOneB, Interleaved, ZeroBubbleH1, ZeroBubbleV };
inline constexpr EnumName<Schedule> kScheduleNames[] = {{Schedule::GPipe, "gpipe"},
                                                        {Schedule::OneFOneB, "1f1b"},
                                                        {Schedule::Interleaved, "interleaved"},
                                                        {Schedule::ZeroBubbleH1, "zb-h1"},
                                                        {Schedule::ZeroBubbleV, "zbv"}};
constexpr const auto& enum_names(Schedule) { return kScheduleNames; }
// One of the names above; throws a clear error otherwise.
Schedule parse_schedule(const std::string& name);
const char* schedule_name(Schedule s);
// Micro-batch chunks whose activations pipeline stage `stage` (0 = first) holds at its peak; a chunk
// is 1/virtual_stages of the stage's layers. GPipe: all m (forwards before backwards). 1F1B:
// min(p - stage, m). ZB-H1: min(p, m) (a micro-batch's activations live until its deferred W).
// ZBV: two chunks per stage (virtual_stages 2), at most 2p of them (1F1B's peak). Interleaved (Megatron's warm-up): min(m v, 2 (p - stage - 1) + (v - 1) p + 1);
// on stage 0 that is L (1 + (p - 1)/(p v)) layers' worth, Korthikanti's eq. for interleaving.
int64_t in_flight_chunks(Schedule s, int stage, int pp, int virtual_stages, int64_t micro_batches);

}  // namespace shardlm::cost
