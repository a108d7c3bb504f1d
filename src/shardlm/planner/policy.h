// planner/policy.h: a parallel training policy, and whether it is consistent with a model and cluster.
//
// Ranks are laid out tp fastest, then cp, then dp, then pp (Megatron's order): a tensor-parallel group
// is tp consecutive ranks, a data-parallel group strides over tp*cp, a pipeline boundary crosses
// tp*cp*dp ranks. The step runs global_batch sequences: every (dp, cp) replica of the pipeline runs
// micro_batches = global_batch / (dp * micro_batch) micro-batches of micro_batch sequences.
#pragma once
#include <cstdint>
#include <string>

#include "shardlm/core/enum_names.h"
#include "shardlm/cost/flops.h"
#include "shardlm/cost/memory.h"
#include "shardlm/cost/shape.h"
#include "shardlm/planner/hardware.h"

namespace shardlm::planner {

// The software a run uses, as far as its cost differs (docs/PLANNER.md "Framework styles"):
//   megatron       Megatron-LM as of Narayanan et al. 2021: fused kernels, the vocabulary-parallel
//                  fused cross-entropy (bf16 logits and their fp32 softmax: 6 bytes a logit); tensor-
//                  and pipeline-parallel transfers exposed
//   megatron-deepspeed  Megatron-DeepSpeed (BLOOM): the same, with DeepSpeed's pipeline engine and bf16
//                  optimiser, which keeps every parameter's 16-bit gradient beside the fp32 accumulation
//   megatron-core  Megatron-Core / NeMo (2023 on): as megatron, plus Transformer Engine's or cuDNN's
//                  fused attention and FP8, tensor-parallel communication overlapped with the GEMMs
//                  (--tp-comm-overlap) and the interleaved schedule's transfers with compute
//                  (--overlap-p2p-comm)
//   pytorch   PyTorch FSDP-style runs (torchtitan, llm-foundry): FlashAttention-2 / SDPA, torchao's
//             float8, bf16 logits upcast to fp32 in the loss, gradients reduced in fp32
//   shardlm   this engine (CPU): fp32 logits (4 bytes), resident memory as calibrate measures it
enum class Framework { Megatron, MegatronDeepspeed, MegatronCore, Pytorch, Shardlm };
std::string framework_name(Framework f);
bool framework_from_name(const std::string& s, Framework* out);

// What torch.compile covers in a PyTorch-style run (docs/PLANNER.md, `compile`): none (eager),
// each transformer block (torchtitan's apply_compile; no memory rule: not told apart from eager), or
// the blocks and the loss function (torchtitan's build_cross_entropy_loss, April 2025 on).
enum class Compile { None, Blocks, BlocksAndLoss };
inline constexpr EnumName<Compile> kCompileNames[] = {
    {Compile::None, "none"}, {Compile::Blocks, "blocks"}, {Compile::BlocksAndLoss, "blocks_and_loss"}};
constexpr const auto& enum_names(Compile) { return kCompileNames; }

struct Policy {
    int tp = 1;
    int pp = 1;
    int dp = 0;  // 0: num_gpus / (tp * pp * cp)
    int cp = 1;  // context parallelism: the sequence split cp ways
    int ep = 1;  // expert parallelism (a mixture of experts): the experts split over groups of ep dp ranks
    // how attention reaches the other cp ranks' keys and values (cost/flops.h); all-gather: the model the
    // published runs were fitted with (Llama 3's); ring: this engine's default, Megatron-Core's p2p
    cost::CpComm cp_comm = cost::CpComm::AllGather;
    int zero_stage = 0;
    int64_t micro_batch = 1;  // sequences
    int virtual_stages = 1;   // > 1: interleaved 1F1B, each stage holds this many model chunks
    // OneFOneB (Interleaved with virtual_stages > 1), or the zero-bubble ZeroBubbleH1 (v = 1) and
    // ZeroBubbleV (v = 2, two chunks per stage in a V): schedule/schedule.h
    cost::Schedule schedule = cost::Schedule::OneFOneB;
    cost::Recompute recompute = cost::Recompute::None;
    bool sequence_parallel = false;
    Precision precision = Precision::Bf16;
    cost::Attention attention = cost::Attention::Flash;  // the attention kernel (cost/flops.h)
    // 16-bit runs: the gradients accumulate (and are reduced) in an fp32 buffer, 4 bytes a parameter in
    // place of 2 (Megatron's main_grad, DeepSpeed's bf16 optimiser); false: 16-bit gradients (FSDP's)
    bool grad_accum_fp32 = false;
    Framework framework = Framework::Megatron;
    Compile compile = Compile::None;
};
// What a policy file leaves to the planner: a key it does not name (the micro-batch, the framework) or
// names as null (a published case's unstated micro-batch, virtual stages, recomputation, sequence
// parallelism). The planner takes the framework such a policy runs with (default_framework) and, for
// the rest, the fastest choice that fits with everything named pinned (search.h, evaluate_request).
struct OpenChoices {
    bool micro_batch = false, virtual_stages = false, recompute = false, sequence_parallel = false;
    bool framework = false, attention = false, grad_accum_fp32 = false;  // the framework's defaults
    bool any_searched() const { return micro_batch || virtual_stages || recompute || sequence_parallel; }
};
struct PolicyRequest {
    Policy policy;  // what was named; the open fields hold their plain defaults
    OpenChoices open;
};

// The software a policy is run with when it names none (docs/PLANNER.md "The framework a policy names
// none of"): ZeRO-3 without a framework is FSDP, PyTorch's or DeepSpeed's (torchtitan, llm-foundry,
// DeepSpeed: eager PyTorch with library kernels): the pytorch style; Megatron's own stack did not shard
// parameters before Megatron-FSDP (2025). Otherwise Megatron: on Hopper (H100, H200) as Megatron-Core
// with Transformer Engine (the stack NVIDIA ships for them, 2023 on), on Ampere as Megatron-LM;
// calibrate's CPU clusters run this engine.
Framework default_framework(const Cluster& c, const Policy& p);
// Why default_framework chose what it did, one clause ("ZeRO-3 is FSDP: PyTorch style").
std::string default_framework_reason(const Cluster& c, const Policy& p);
// The attention kernel a framework runs unless told otherwise: Megatron-LM and Megatron-DeepSpeed the
// fused scale-mask-softmax over the materialised scores (naive; --use-flash-attn was opt-in), the
// others a flash kernel (Transformer Engine / cuDNN, SDPA, this engine's fused attention).
cost::Attention default_attention(Framework f);
// Whether a framework accumulates and reduces 16-bit runs' gradients in fp32 unless told otherwise:
// the Megatron styles in bf16 (and FP8, which runs with --bf16) do (megatron/training/arguments.py:
// "bfloat16 requires gradient accumulation and all-reduce to be done in fp32", unless
// --grad-reduce-in-bf16); fp16 runs and the others do not.
bool default_grad_accum_fp32(Framework f, Precision prec);
// p with its framework-dependent fields that `open` leaves to the planner filled in, in order: the
// framework (default_framework), then its attention kernel and gradient accumulation.
Policy with_defaults(const Cluster& c, Policy p, const OpenChoices& open);

// "tp=8 pp=16 dp=8 cp=1 v=3 mb=1 zero=1 recompute=selective sp=on bf16" (+ " naive-attention")
std::string describe(const Policy& p);
// Bytes one logit takes at the loss's peak, on the last stage (docs/PLANNER.md "The loss"): megatron
// styles 6, this engine 4; PyTorch style 12 eager, 16 under tensor parallelism (the loss-parallel
// cross-entropy), 4 with a compiled loss.
double logits_bytes(const Policy& p);

struct Job {
    int64_t global_batch = 0;  // sequences per step
    int seq = 0;               // tokens per sequence
    // Bytes of optimiser state per parameter beside any fp32 master copy: Adam's m and v 8; `plan
    // --optimizer` sets another optimiser's (optim::Optimizer::state_bytes_per_param).
    double optimizer_state = 8;
    // Sophia: one more forward and backward every this many steps (its Hessian estimate); 0: none.
    int hessian_interval = 0;
};

// Checks the policy against the model, cluster and job; fills p.dp when it is 0. Returns "" if
// consistent, else the reason (names the numbers and the rule). Never throws.
std::string resolve_policy(const cost::ModelShape& m, const Cluster& c, const Job& job, Policy& p);
// Micro-batches per step of a resolved policy.
int64_t micro_batches(const Job& job, const Policy& p);

// What a policy costs, by part (planner/evaluate.h fills them).
struct MemoryBreakdown {  // bytes on one GPU
    double params = 0, grads = 0, optimizer = 0, activations = 0, buffers = 0;
    double total() const { return params + grads + optimizer + activations + buffers; }
};

struct TimeBreakdown {  // seconds per step
    double compute = 0, tp_comm = 0, cp_comm = 0, pp_bubble = 0, pp_comm = 0, dp_comm = 0, optimizer = 0;
    double ep_comm = 0;  // a mixture of experts' all-to-alls (dispatch and combine, forward and backward)
    double total() const { return compute + tp_comm + cp_comm + ep_comm + pp_bubble + pp_comm + dp_comm + optimizer; }
};

}  // namespace shardlm::planner
