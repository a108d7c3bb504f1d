#include "shardlm/planner/policy.h"

#include <algorithm>

#include "shardlm/core/check.h"
#include "shardlm/core/enum_names.h"

namespace shardlm::planner {

namespace {
constexpr EnumName<Framework> kFrameworkNames[] = {
    {Framework::Megatron, "megatron"}, {Framework::MegatronDeepspeed, "megatron-deepspeed"},
    {Framework::MegatronCore, "megatron-core"}, {Framework::Pytorch, "pytorch"}, {Framework::Shardlm, "shardlm"}};
}  // namespace

std::string framework_name(Framework f) { return enum_name(kFrameworkNames, f); }
bool framework_from_name(const std::string& s, Framework* out) { return enum_from_name(kFrameworkNames, s, out); }

Framework default_framework(const Cluster& c, const Policy& p) {
    if (c.threads_per_rank > 0) return Framework::Shardlm;
    if (p.zero_stage == 3) return Framework::Pytorch;
    return generation(c) == "hopper" ? Framework::MegatronCore : Framework::Megatron;
}

std::string default_framework_reason(const Cluster& c, const Policy& p) {
    if (c.threads_per_rank > 0) return "a calibrated CPU cluster runs this engine";
    if (p.zero_stage == 3) return "ZeRO-3 is FSDP (PyTorch's or DeepSpeed's): the pytorch style";
    return generation(c) == "hopper" ? "Megatron on Hopper GPUs is Megatron-Core with Transformer Engine"
                                     : "Megatron on Ampere GPUs is Megatron-LM";
}

cost::Attention default_attention(Framework f) {
    return f == Framework::Megatron || f == Framework::MegatronDeepspeed ? cost::Attention::Naive : cost::Attention::Flash;
}

bool default_grad_accum_fp32(Framework f, Precision prec) {
    const bool megatron = f == Framework::Megatron || f == Framework::MegatronDeepspeed || f == Framework::MegatronCore;
    return megatron && (prec == Precision::Bf16 || prec == Precision::Fp8);
}

Policy with_defaults(const Cluster& c, Policy p, const OpenChoices& open) {
    if (open.framework) p.framework = default_framework(c, p);
    if (open.attention) p.attention = default_attention(p.framework);
    if (open.grad_accum_fp32) p.grad_accum_fp32 = default_grad_accum_fp32(p.framework, p.precision);
    return p;
}

double logits_bytes(const Policy& p) {
    switch (p.framework) {
        case Framework::Shardlm: return 4;  // fp32 logits, the gradient written in place
        case Framework::Pytorch:
            // torchtitan's loss, cross_entropy(pred.flatten(0, 1).float(), labels), after `del pred`:
            // compiled (build_cross_entropy_loss under --training.compile; docs/composability.md "On
            // upcasting the final output to fp32": the casts fuse into the loss), Inductor keeps the
            // bf16 logits and writes their bf16 gradient: 2 + 2. Eager, ATen's log_softmax saves its
            // fp32 output and its backward holds that, the incoming fp32 gradient and the fp32 input
            // gradient: 4 + 4 + 4. Under tensor parallelism torchtitan's loss_parallel runs PyTorch's
            // vocabulary-sharded version (torch/distributed/tensor/parallel/loss.py), whose backward
            // (grad_input + torch.exp(x)) * grad_output holds four fp32 logits at once: 16.
            if (p.compile == Compile::BlocksAndLoss) return 4;
            return p.tp > 1 ? 16 : 12;
        default: return 6;  // bf16 logits and the fused cross-entropy's fp32 softmax
    }
}

std::string describe(const Policy& p) {
    return cat("tp=", p.tp, " pp=", p.pp, " dp=", p.dp, " cp=", p.cp, " v=", p.virtual_stages, " mb=", p.micro_batch,
               " zero=", p.zero_stage, " recompute=", cost::recompute_name(p.recompute),
               " sp=", p.sequence_parallel ? "on" : "off", " ", precision_name(p.precision),
               p.schedule == cost::Schedule::ZeroBubbleH1 || p.schedule == cost::Schedule::ZeroBubbleV
                   ? cat(" ", cost::schedule_name(p.schedule))
                   : std::string(),
               p.attention == cost::Attention::Naive ? " naive-attention" : "",
               p.cp > 1 && p.cp_comm == cost::CpComm::Ring ? " cp-ring" : "",
               p.ep > 1 ? cat(" ep=", p.ep) : std::string(),
               p.framework == Framework::Megatron ? std::string() : cat(" ", framework_name(p.framework)),
               p.compile == Compile::None ? "" : " compile=" + enum_name(kCompileNames, p.compile));
}

int64_t micro_batches(const Job& job, const Policy& p) { return job.global_batch / (int64_t(p.dp) * p.micro_batch); }

namespace {

std::string check_ranges(const Policy& p) {
    if (p.tp < 1 || p.pp < 1 || p.cp < 1) return cat("tp, pp and cp must be >= 1 (got ", p.tp, ", ", p.pp, ", ", p.cp, ")");
    if (p.dp < 0) return cat("dp must be >= 1, or 0 to derive it (got ", p.dp, ")");
    if (p.zero_stage < 0 || p.zero_stage > 3) return cat("zero_stage must be 0, 1, 2 or 3 (got ", p.zero_stage, ")");
    if (p.micro_batch < 1) return cat("micro_batch must be >= 1 (got ", p.micro_batch, ")");
    if (p.virtual_stages < 1) return cat("virtual_stages must be >= 1 (got ", p.virtual_stages, ")");
    if (p.schedule == cost::Schedule::GPipe) return "the planner models 1f1b, interleaved, zb-h1 and zbv (not gpipe)";
    if (p.schedule == cost::Schedule::ZeroBubbleH1 && p.virtual_stages != 1)
        return cat("zb-h1 runs one chunk per stage: virtual_stages must be 1 (got ", p.virtual_stages, ")");
    if (p.schedule == cost::Schedule::ZeroBubbleV && p.virtual_stages != 2)
        return cat("zbv runs two chunks per stage in a V: virtual_stages must be 2 (got ", p.virtual_stages, ")");
    if (p.schedule == cost::Schedule::ZeroBubbleV && p.pp < 2) return "zbv needs pp >= 2";
    if ((p.schedule == cost::Schedule::ZeroBubbleH1 || p.schedule == cost::Schedule::ZeroBubbleV) &&
        p.recompute == cost::Recompute::Full)
        return "zb-h1 and zbv defer the weight gradients W, which need the block's activations; full recomputation "
               "keeps only its input (the engine refuses it): recompute none or selective";
    return "";
}

std::string check_grid(const Cluster& c, Policy& p) {
    // in double first: tp, pp and cp may each be anything an input file holds
    if (double(p.tp) * p.pp * p.cp * std::max(p.dp, 1) > c.num_gpus)
        return cat("dp*tp*pp*cp = ", double(p.tp) * p.pp * p.cp * std::max(p.dp, 1), " exceeds the cluster's ", c.num_gpus,
                   " GPUs (tp*pp*cp must divide the GPUs)");
    const int64_t model_par = int64_t(p.tp) * p.pp * p.cp;
    if (p.dp == 0) {
        if (c.num_gpus % model_par != 0)
            return cat("tp*pp*cp = ", model_par, " does not divide the cluster's ", c.num_gpus, " GPUs");
        p.dp = int(c.num_gpus / model_par);
    }
    if (model_par * p.dp != c.num_gpus)
        return cat("dp*tp*pp*cp = ", model_par * p.dp, " but the cluster has ", c.num_gpus,
                   " GPUs (leave dp out to use them all)");
    return "";
}

std::string check_model_split(const cost::ModelShape& m, const Job& job, const Policy& p) {
    if (m.heads % p.tp != 0) return cat("tp=", p.tp, " does not divide the ", m.heads, " attention heads");
    if (m.kv_heads % p.tp != 0) return cat("tp=", p.tp, " does not divide the ", m.kv_heads, " KV heads");
    if (m.ffn_hidden % p.tp != 0) return cat("tp=", p.tp, " does not divide ffn_hidden ", m.ffn_hidden);
    if (m.moe() && m.expert_ffn % p.tp != 0) return cat("tp=", p.tp, " does not divide expert_ffn ", m.expert_ffn);
    const int64_t chunks = int64_t(p.pp) * p.virtual_stages;
    if (chunks > m.layers) return cat("pp*virtual_stages = ", chunks, " exceeds the ", m.layers, " layers");
    if (p.virtual_stages > 1 && p.pp == 1) return "virtual_stages > 1 interleaves pipeline stages: it needs pp > 1";
    if (job.seq % p.cp != 0) return cat("cp=", p.cp, " does not divide the sequence of ", job.seq, " tokens");
    if (p.ep < 1 || (p.ep > 1 && !m.moe())) return cat("ep=", p.ep, ": expert parallelism needs a mixture of experts");
    if (m.moe() && (p.dp % p.ep != 0 || m.experts % p.ep != 0))
        return cat("ep=", p.ep, " must divide dp (", p.dp, ") and the ", m.experts, " experts");
    if (p.sequence_parallel && p.tp > 1 && (job.seq / p.cp) % p.tp != 0)
        return cat("sequence parallelism splits the ", job.seq / p.cp, " tokens of a sequence (per cp rank) ", p.tp,
                   " ways: tp must divide them");
    return "";
}

std::string check_batch(const Job& job, const Policy& p) {
    if (p.micro_batch > job.global_batch)
        return cat("micro_batch ", p.micro_batch, " is larger than the global batch of ", job.global_batch, " sequences");
    const int64_t per_step = int64_t(p.dp) * p.micro_batch;
    if (job.global_batch % per_step != 0)
        return cat("global batch ", job.global_batch, " is not a multiple of dp*micro_batch = ", p.dp, "*", p.micro_batch,
                   " = ", per_step);
    const int64_t m = job.global_batch / per_step;
    if (p.virtual_stages > 1 && m % p.pp != 0)
        return cat("the interleaved schedule needs the micro-batches per step (", m, ") to be a multiple of pp (", p.pp,
                   ")");
    return "";
}

}  // namespace

std::string resolve_policy(const cost::ModelShape& m, const Cluster& c, const Job& job, Policy& p) {
    if (job.global_batch < 1 || job.seq < 1) return "global batch and sequence length must be >= 1";
    if (std::string r = check_ranges(p); !r.empty()) return r;
    if (std::string r = check_grid(c, p); !r.empty()) return r;
    if (p.precision == Precision::Fp8 && !(c.gpu.peak_tflops_fp8 > 0))
        return cat("precision fp8 needs FP8 tensor cores: the ", c.gpu.name,
                   " has none (peak_tflops_fp8 0); use bf16, a GPU with FP8 (H100-SXM, H200), or set peak_tflops_fp8 in "
                   "the cluster file");
    if (std::string r = check_model_split(m, job, p); !r.empty()) return r;
    return check_batch(job, p);
}

}  // namespace shardlm::planner
