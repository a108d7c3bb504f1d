// train/train_config.h: everything `shardlm train` can be told, in sections (the model, the data, the
// optimiser, the output, the parallel layout, the data-parallel algorithm, the precision, the runtime,
// reliability). Each field is a key of the JSON config file (configs/*.json) and, with '_' -> '-', a
// command-line flag; flags override the file. The keys are flat: a section is how the code reads them.
// Every setting is held typed and parsed once, where it is read (flag or JSON key): a name from a fixed
// set as its enum (its names in one table beside its type, core/enum_names.h), the precision policy,
// the loss scale, a compressor (parallel/compress.h), a pipeline split (parallel/stages.h); an override
// of a preset is an Override<T> (unset: the preset's); the ZeRO stage a ZeroStage, written as its number.
// Nothing below compares strings.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "shardlm/comm/group.h"
#include "shardlm/core/enum_names.h"
#include "shardlm/core/precision.h"
#include "shardlm/core/zero_stage.h"
#include "shardlm/cost/memory.h"
#include "shardlm/data/loader.h"
#include "shardlm/kernels/gemm/gemm.h"
#include "shardlm/model/config.h"
#include "shardlm/model/context_parallel.h"
#include "shardlm/optim/loss_scaler.h"
#include "shardlm/optim/optimizer.h"
#include "shardlm/parallel/dp_algo_config.h"
#include "shardlm/parallel/stages.h"

namespace shardlm::train {

// How a rank's threads share a micro-batch (model/units.h: lanes).
enum class ThreadSplit { Auto, Batch, Kernel };
inline constexpr EnumName<ThreadSplit> kThreadSplitNames[] = {
    {ThreadSplit::Auto, "auto"}, {ThreadSplit::Batch, "batch"}, {ThreadSplit::Kernel, "kernel"}};
constexpr const auto& enum_names(ThreadSplit) { return kThreadSplitNames; }

// The attention kernel (kernels/flash_attention.h or kernels/attention.h).
enum class AttentionKernel { Fused, Materialized };
inline constexpr EnumName<AttentionKernel> kAttentionKernelNames[] = {{AttentionKernel::Fused, "fused"},
                                                                      {AttentionKernel::Materialized, "materialized"}};
constexpr const auto& enum_names(AttentionKernel) { return kAttentionKernelNames; }

// What a non-finite loss or gradient does (train/numerics.h).
enum class OnNan { Stop, Skip };
inline constexpr EnumName<OnNan> kOnNanNames[] = {{OnNan::Stop, "stop"}, {OnNan::Skip, "skip"}};
constexpr const auto& enum_names(OnNan) { return kOnNanNames; }
enum class OnSpike { Warn, Skip };
inline constexpr EnumName<OnSpike> kOnSpikeNames[] = {{OnSpike::Warn, "warn"}, {OnSpike::Skip, "skip"}};
constexpr const auto& enum_names(OnSpike) { return kOnSpikeNames; }

// The gradients' type on the wire: Default is the gradients' own (fp32).
enum class ReduceType { Default, F32, BF16, F16 };
inline constexpr EnumName<ReduceType> kReduceTypeNames[] = {
    {ReduceType::Default, ""}, {ReduceType::F32, "fp32"}, {ReduceType::BF16, "bf16"}, {ReduceType::F16, "fp16"}};
constexpr const auto& enum_names(ReduceType) { return kReduceTypeNames; }

// Parses `text` into a named setting, or fails naming `where` (a flag, or a file and its key), the
// text and the names that are known.
[[noreturn]] void fail_setting(const std::string& where, std::string_view text, const std::string& choices);
[[noreturn]] void fail_setting(const std::string& where, std::string_view text, const std::string& problem,
                               const std::string& choices);
// A setting type may say why a text is not one of its values (setting_problem: a compressor's rank
// out of range), which the failure then names.
template <TextSetting T>
void parse_setting(const std::string& where, std::string_view text, T* out) {
    if (setting_parse(text, out)) return;
    if constexpr (requires { setting_problem(text, out); })
        fail_setting(where, text, setting_problem(text, out), setting_choices(out));
    fail_setting(where, text, setting_choices(out));
}
[[noreturn]] void fail_number_setting(const std::string& where, int64_t n, const std::string& choices);
template <NumberSetting T>
void parse_number_setting(const std::string& where, int64_t n, T* out) {
    if (!setting_from_number(n, out)) fail_number_setting(where, n, setting_choices(out));
}

// The model: exactly one of init (an HF directory) or preset (key "model"), and the overrides of the
// preset's shape and architecture (0 / unset: the preset's; model/config.h).
struct ModelSettings {
    std::string init;
    std::string preset;
    int n_layer = 0, n_head = 0, n_embd = 0, n_ctx = 0, vocab_size = 0;
    Override<model::Norm> norm;
    Override<model::Position> position;
    Override<model::Mlp> mlp;
    Override<bool> bias, tie_embeddings, qk_norm;
    int n_kv_head = 0, ffn_hidden = 0;
    float rope_theta = 0.0f, rms_norm_eps = 0.0f;
    // mixture of experts (model/moe.h): the architecture's overrides (0 / unset: the preset's), and the
    // objective's and capacity's settings, which apply to --init too (< 0: the model's)
    int n_experts = 0, top_k = 0, shared_experts = 0, moe_ffn = 0;
    Override<model::Router> router;
    Override<bool> norm_topk;
    std::string moe_layers;
    float aux_loss_coef = -1.0f, z_loss_coef = -1.0f, capacity_factor = -1.0f, expert_bias_rate = -1.0f;
    void apply_moe(model::GptConfig& c, const std::function<void(const std::string&, const std::string&)>& knob) const;
    // The model to build: the HF directory's config (init) or the preset with the overrides.
    model::GptConfig config() const;
    void validate() const;  // throws a clear error for values out of range (as every section's validate())
};

// The token shards and the schedule's length.
struct DataSettings {
    std::string train;     // key "data": the shard trained on
    std::string val_data;
    data::Order data_order = data::Order::Sequential;
    int seq = 64;
    int global_batch = 8;
    int micro_batch = 8;
    int steps = 10;
    int stop_after = 0;  // stop this process after this step of the schedule (0: at steps); resumable
    bool doc_mask = false;  // packed documents: attention stays inside each document
    int eot_token = 50256;  // the token that begins each document (GPT-2's <|endoftext|>)
    // The step this process trains to: stop_after, else steps (the schedule runs over steps either way).
    int last_step() const { return stop_after > 0 ? stop_after : steps; }
    void validate() const;
};

// The optimiser and its learning-rate schedule.
struct OptimiserSettings {
    optim::Kind optimizer = optim::Kind::AdamW;
    float lr = 3e-4f;
    optim::LrKind lr_schedule = optim::LrKind::Constant;
    int warmup = 0;
    float lr_min = 0.0f;
    float weight_decay = 0.0f;
    float beta1 = -1.0f, beta2 = -1.0f;  // -1: the optimiser's own (TrainConfig::optim_config())
    float eps = -1.0f;  // -1: the optimiser's own (1e-8; adafactor's eps1 1e-30)
    float momentum = 0.9f;
    int optim_block = 2048;                              // adam8bit: elements per quantisation block
    optim::QuantCode optim_code = optim::QuantCode::Dynamic;  // adam8bit
    float clip_threshold = 1.0f, decay_rate = -0.8f;     // adafactor
    bool relative_step = false, scale_parameter = false; // adafactor
    float rho = 0.04f;                                   // sophia: the clip's rho
    int hess_interval = 10;                              // sophia: steps between Hessian estimates
    float grad_clip = 0.0f;  // 0 = off
    // With the chosen optimiser's defaults where beta1/beta2/eps are -1; Sophia's batch is tokens_per_step.
    optim::OptimConfig config(double tokens_per_step) const;
    void validate() const;
};

// What a run writes: validation, the run directory, checkpoints, metrics, reports, the sample.
struct OutputSettings {
    int val_every = 0;       // 0 = only at the end (if val_data is set)
    int val_batches = 8;     // micro-batches of val_data rows per evaluation (0 = the whole shard)
    std::string out;         // run directory: metrics, checkpoints, config, report
    int ckpt_every = 0;      // 0 = only at the end (if out is set)
    float ckpt_every_seconds = 0;  // also checkpoint when this many seconds passed since the last (0 = off)
    bool async_ckpt = false; // write checkpoints from a snapshot in memory on a background thread
    bool resume = false;     // continue from the latest complete checkpoint in out
    bool overwrite = false;  // train into an out that holds another run, replacing it
    int keep_ckpts = 2;      // complete checkpoints kept in out
    int mem_ckpt_every = 0;  // also keep a checkpoint in memory and on a replica every N steps (0 = off)
    std::string mem_ckpt_dir = "/dev/shm";  // where: node-local memory (train/memory_checkpoint.h)
    int log_every = 10;      // plain log line every N steps when stdout is not a TTY
    int sample_tokens = 0;   // after training, print a sample of this many tokens (needs the GPT-2 vocab)
    std::string sample_prompt = "\n";
    std::string metrics;     // JSONL file, one object per optimiser step (default: out/metrics.jsonl)
    std::string trace;       // Chrome trace / Perfetto timeline file (empty: none)
    bool memory_report = false;
    bool comm_report = false;
    void validate() const;
};

// The parallel layout and ZeRO.
struct ParallelSettings {
    int dp = 0;              // data-parallel size; 0 = world size / (cp * tp * pp)
    int tp = 1;              // tensor-parallel size (Megatron)
    int pp = 1;              // pipeline stages
    int cp = 1;              // context-parallel size: each sequence split over cp ranks
    int ep = 1;              // expert-parallel size: the experts split over groups of ep dp ranks (divides dp)
    model::CpComm cp_comm = model::CpComm::Ring;  // how attention reaches the other ranks' keys and values
    cost::Schedule schedule = cost::Schedule::OneFOneB;
    int virtual_stages = 1;  // model chunks per pipeline rank (interleaved)
    parallel::StageSplit pp_split;  // blocks per model chunk, e.g. 3,3,3,3 (empty: balanced by cost)
    bool sequence_parallel = false;
    ZeroStage zero = ZeroStage::Replicate;  // core/zero_stage.h
    float bucket_mb = 25.0f; // gradient all-reduce bucket (ZeRO-0)
    void validate() const;
};

// How the data-parallel replicas synchronise (parallel/dp_algo.h): every step, or less often, or less.
struct DpAlgoSettings {
    parallel::DpAlgo algo = parallel::DpAlgo::AllReduce;  // key "dp_algo"
    int local_steps = 4;              // local-sgd, diloco: H
    bool average_optimizer = false;   // local-sgd, diloco: average the optimiser state with the parameters
    float outer_lr = 0.7f, outer_momentum = 0.9f;  // diloco
    ReduceType outer_dtype = ReduceType::Default;  // diloco: the delta on the wire (default fp32)
    parallel::Topology topology = parallel::Topology::Ring;  // gossip
    int global_avg_every = 0;         // gossip
    Override<parallel::CompressSpec> compress;            // compressed: topk:F | randk:F | qsgd:S | sign | sign:vote | powersgd:R
    Override<parallel::CompressSpec> compress_embedding;  // compressed: the vocabulary's matrices by this compressor (unset: compress)
    ReduceType compress_dtype = ReduceType::Default;  // compressed, powersgd: the factors on the wire (default fp32)
    parallel::ErrorFeedback error_feedback = parallel::ErrorFeedback::Auto;  // compressed
    float momentum_correction = 0.0f; // compressed, top-k + ef: DGC's momentum correction (0 = off)
    int consensus_every = 1;          // local-sgd, diloco, gossip: measure the consensus distance every N steps
    // The algorithm's settings, error feedback resolved (auto: ef when either compressor is biased); seed:
    // the compressors' randomness.
    parallel::DpAlgoConfig resolved(uint64_t seed) const;
    void validate() const;
    void validate_compression() const;  // validate()'s part for --dp-algo compressed
};

// What is stored, multiplied and reduced in what, and the loss scale.
struct PrecisionSettings {
    PrecisionPolicy policy;  // key "precision": fp32 | bf16 | fp16 | fp32-bf16-products
    // read, never written: the older spelling --matmul-precision bf16 of fp32-bf16-products, folded into
    // policy by fold_aliases() once the settings are read (alias_fields)
    Override<kernels::MatmulPrecision> matmul_precision;
    ReduceType reduce_dtype = ReduceType::Default;
    optim::LossScale loss_scale;  // Default: dynamic for fp16, off otherwise
    int scale_window = 1000;      // clean steps before a dynamic loss scale doubles
    // The policy with reduce_dtype (core/precision.h).
    PrecisionPolicy resolved() const;
    // The loss scaler's mode: loss_scale, or by default dynamic for fp16 and none otherwise.
    optim::LossScale loss_scale_mode() const {
        return loss_scale.mode != optim::LossScale::Mode::Default ? loss_scale
               : policy.activation == DType::F16                  ? optim::LossScale::dynamic()
                                                                   : optim::LossScale{};
    }
    void validate() const;
};

// How the step runs on a rank: seed, threads, kernels and libraries.
struct RuntimeSettings {
    uint64_t seed = 1337;
    int threads = 0;      // 0 = OpenMP default
    ThreadSplit thread_split = ThreadSplit::Auto;
    cost::Recompute recompute = cost::Recompute::None;
    AttentionKernel attention = AttentionKernel::Fused;
    comm::CollectivesBackend collectives = comm::CollectivesBackend::Ring;
    kernels::GemmBackend gemm = kernels::GemmBackend::Auto;
    void validate() const;
};

// What a failure does (train/numerics.h, train/rank_check.h, comm/flight.h).
struct ReliabilitySettings {
    OnNan on_nan = OnNan::Stop;
    float spike_sigma = 6.0f;     // a spike: the loss or gradient norm above mean + spike_sigma x sigma of the window (0 = off)
    int spike_window = 50;        // steps of that window
    OnSpike on_spike = OnSpike::Warn;  // skip: no update at a spike's step, on every rank
    int health_every = 10;        // per-unit update ratios and activation RMS every N steps (train/health.h; 0 = off)
    int check_replicas = 0;       // every N steps compare replicated parameters across ranks (0 = off)
    float comm_timeout = 0.0f;    // seconds a collective may wait before the job ends with a message (0 = off)
    std::string flight_dir;       // flight recorder dumps; empty: <out>/flight, none without out
    void validate() const;
};

// Everything `shardlm train` can be told, by section. The keys (flags, config.json) are flat: the
// field tables below name each member's key.
struct TrainConfig {
    ModelSettings model;
    DataSettings data;
    OptimiserSettings optim;
    OutputSettings output;
    ParallelSettings parallel;
    DpAlgoSettings dp_algo;
    PrecisionSettings precision;
    RuntimeSettings runtime;
    ReliabilitySettings reliability;

    // The optimiser's settings (OptimiserSettings::config over the step's tokens).
    optim::OptimConfig optim_config() const;
    // The data-parallel algorithm's settings with the run's seed (DpAlgoSettings::resolved).
    parallel::DpAlgoConfig dp_algo_config() const;
    // Folds the keys read under an older spelling (alias_fields) into the settings they spell, and
    // unsets them: --matmul-precision bf16 makes the fp32 policy fp32-bf16-products (refused with a
    // 16-bit policy, whose products are 16-bit already).
    void fold_aliases();
    // Throws a clear error for values out of range or settings that do not go together: each section's
    // validate(), then the settings of different sections that must agree (validate_across).
    void validate() const;
    void validate_across() const;
    void validate_context_parallel() const;  // validate_across's part for --cp
};

// The model: a preset or an HF directory, and the overrides of its shape and architecture. (ModelSettings)
template <typename S, typename F>
void model_fields(S& c, F&& f) {
    f("init", c.init, "HF GPT-2 directory (config.json + model.safetensors) to start from");
    f("model", c.preset, "Model preset to initialise randomly (see `shardlm info --list`)");
    f("n_layer", c.n_layer, "Override the preset's number of blocks (0 = the preset's)");
    f("n_head", c.n_head, "Override the preset's attention heads (0 = the preset's)");
    f("n_embd", c.n_embd, "Override the preset's width C (0 = the preset's)");
    f("n_ctx", c.n_ctx, "Override the preset's context length (0 = the preset's)");
    f("vocab_size", c.vocab_size, "Override the preset's vocabulary (0 = the preset's; token ids must stay below it)");
    f("norm", c.norm, "Override the preset's norm");
    f("position", c.position, "Override the preset's positions (learned: a table; rope: rotary embeddings)");
    f("mlp", c.mlp, "Override the preset's MLP");
    f("bias", c.bias, "Override whether linear layers and LayerNorms have biases");
    f("tie_embeddings", c.tie_embeddings, "Override whether the LM head is tied to the token embedding");
    f("qk_norm", c.qk_norm, "Override whether the queries and keys are RMS-normalised over all heads before the rotary "
                            "embeddings (OLMoE's q_norm and k_norm)");
    f("n_kv_head", c.n_kv_head, "Override the key/value heads (grouped-query attention; must divide n_head; 0 = the preset's)");
    f("ffn_hidden", c.ffn_hidden, "Override the MLP's inner size (0 = the preset's: 4 C for gelu, 8C/3 rounded up to 256 for swiglu)");
    f("rope_theta", c.rope_theta, "Override the rotary embeddings' base (0 = the preset's)");
    f("rms_norm_eps", c.rms_norm_eps, "Override the norm's epsilon (0 = the preset's)");
    f("n_experts", c.n_experts, "Mixture of experts: experts in each MoE layer (0 = the preset's; a dense preset has none)");
    f("top_k", c.top_k, "Mixture of experts: experts each token is sent to (0 = the preset's, 2 by default)");
    f("shared_experts", c.shared_experts, "Mixture of experts: shared experts every token passes (DeepSeek-MoE; 0 = the preset's)");
    f("moe_ffn", c.moe_ffn, "Mixture of experts: an expert's inner width (0 = the preset's, else the MLP's)");
    f("router", c.router, "Mixture of experts: the router's probabilities (softmax: Mixtral, OLMoE; sigmoid: DeepSeek-V3)");
    f("norm_topk", c.norm_topk, "Mixture of experts: renormalise a token's k gate weights to sum to 1");
    f("moe_layers", c.moe_layers, "Mixture of experts: which layers (all, every:K for layers 0, K, 2K..., or a list such as 1,3)");
    f("aux_loss_coef", c.aux_loss_coef, "Mixture of experts: the load-balancing loss's coefficient, per MoE layer and micro-batch "
      "(-1 = the model's: 0.01, or config.json's router_aux_loss_coef)");
    f("z_loss_coef", c.z_loss_coef, "Mixture of experts: the router z-loss's coefficient (-1 = the model's: 0, off)");
    f("capacity_factor", c.capacity_factor, "Mixture of experts: each expert takes at most ceil(F k N / E) of a micro-batch's N "
      "tokens, dropping the choices of lowest router probability (-1 = the model's; 0 = dropless)");
    f("expert_bias_rate", c.expert_bias_rate, "Mixture of experts: auxiliary-loss-free balancing (DeepSeek-V3): each expert's "
      "choice bias moves by this much a step towards the mean load (-1 = the model's; 0 = off)");
}

// The data and the schedule's length. (DataSettings)
template <typename S, typename F>
void data_fields(S& c, F&& f) {
    f("data", c.train, "Token shard (llm.c format) to train on");
    f("val_data", c.val_data, "Token shard for validation");
    f("data_order", c.data_order, "Order of the training rows");
    f("seq", c.seq, "Sequence length T");
    f("global_batch", c.global_batch, "Rows per optimiser step (G)");
    f("micro_batch", c.micro_batch, "Rows per forward/backward (M; G % M == 0)");
    f("steps", c.steps, "Total optimiser steps");
    f("stop_after", c.stop_after, "Stop after this many steps of the --steps schedule, checkpointed; --resume with --stop-after 0 trains on (0 = at --steps)");
    f("doc_mask", c.doc_mask, "Packed documents: attention stays inside each document (each begins at --eot-token), "
      "in one process and under --cp; the run header says how many (query, key) pairs it skips");
    f("eot_token", c.eot_token, "The token that begins each packed document (--doc-mask; GPT-2's <|endoftext|> 50256)");
}

// The optimiser and its learning-rate schedule. (OptimiserSettings)
template <typename S, typename F>
void optimiser_fields(S& c, F&& f) {
    f("optimizer", c.optimizer, "Optimiser");
    f("lr", c.lr, "Peak learning rate");
    f("lr_schedule", c.lr_schedule,
      "Learning-rate schedule (cosine or linear: linear warm-up, then a cosine or linear decay to lr_min)");
    f("warmup", c.warmup, "Warm-up steps (cosine and linear schedules)");
    f("lr_min", c.lr_min, "Final learning rate (cosine and linear schedules)");
    f("weight_decay", c.weight_decay, "Weight decay on matrices and embeddings");
    f("beta1", c.beta1,
      "beta1 of adam, adamw, radam, lion, adam8bit, adafactor, sophia (-1: the optimiser's default, 0.9; sophia 0.965; "
      "adafactor: no first moment)");
    f("beta2", c.beta2, "beta2 of adam, adamw, radam, lion, adam8bit, sophia (the Hessian estimate's EMA) (-1: the optimiser's default, "
      "0.95; lion and sophia 0.99)");
    f("eps", c.eps,
      "epsilon of adam, adamw, radam, adam8bit, and adafactor's eps1 (added to g^2) (-1: the optimiser's default, 1e-8; "
      "adafactor 1e-30)");
    f("momentum", c.momentum, "SGD momentum");
    f("optim_block", c.optim_block,
      "adam8bit: elements per quantisation block of m and v (one fp32 absmax each; a ZeRO slice boundary "
      "inside a block makes two blocks of it); tensors under 4096 elements keep fp32 state");
    f("optim_code", c.optim_code,
      "adam8bit: the 8-bit code of m (signed) and v (unsigned): dynamic (bitsandbytes' dynamic tree) or linear");
    f("clip_threshold", c.clip_threshold,
      "adafactor: divide the update by max(1, RMS(update) / this) (update clipping; 0 = off)");
    f("decay_rate", c.decay_rate, "adafactor: the second moment's decay beta2_t = 1 - t^decay_rate, in [-1, 0)");
    f("relative_step", c.relative_step,
      "adafactor: step size min(1e-2, 1/sqrt(t)) instead of --lr (needs --lr-schedule constant)");
    f("scale_parameter", c.scale_parameter, "adafactor: multiply the step size by max(1e-3, RMS of the parameter)");
    f("rho", c.rho,
      "sophia: the update is lr sign(m) min(|m| / (rho B h + 1e-15), 1), B = global_batch x seq tokens (the authors' "
      "default 0.04)");
    f("hess_interval", c.hess_interval,
      "sophia: every N steps one more forward/backward of the step's batch on labels sampled from the model refreshes "
      "the diagonal Hessian estimate h (Gauss-Newton-Bartlett)");
    f("grad_clip", c.grad_clip, "Clip the global gradient norm to this (0 = off)");
}

// Validation, the run directory, checkpoints, metrics, reports and the sample. (OutputSettings)
template <typename S, typename F>
void output_fields(S& c, F&& f) {
    f("val_every", c.val_every, "Validate every N steps (0 = only at the end)");
    f("val_batches", c.val_batches, "Micro-batches of validation rows per evaluation (0 = the whole shard)");
    f("out", c.out, "Run directory: metrics, checkpoints, config, report");
    f("ckpt_every", c.ckpt_every, "Checkpoint every N steps (0 = only at the end)");
    f("ckpt_every_seconds", c.ckpt_every_seconds,
      "Also checkpoint at the end of the first step that is this many seconds after the last checkpoint (0 = off)");
    f("async_ckpt", c.async_ckpt,
      "Copy the checkpoint's tensors into memory and write them on a background thread while training goes on");
    f("resume", c.resume, "Continue from the latest complete checkpoint in --out");
    f("overwrite", c.overwrite, "Train into an --out that holds another run, deleting that run's files");
    f("keep_ckpts", c.keep_ckpts, "Complete checkpoints to keep");
    f("mem_ckpt_every", c.mem_ckpt_every,
      "Also keep a checkpoint in node-local memory and on the next data-parallel replica every N steps (0 = off; launch "
      "sets 1): a restart after a lost rank resumes from it, losing at most the step it was in");
    f("mem_ckpt_dir", c.mem_ckpt_dir, "Node-local memory for --mem-ckpt-every (a tmpfs)");
    f("log_every", c.log_every, "Log line every N steps when not on a TTY");
    f("sample_tokens", c.sample_tokens, "Print a sample of N tokens after training (0 = off)");
    f("sample_prompt", c.sample_prompt, "Prompt for that sample");
    f("metrics", c.metrics, "Metrics JSONL file (default: <out>/metrics.jsonl)");
    f("trace", c.trace, "Write a Chrome trace / Perfetto timeline of the last step to this JSON file");
    f("memory_report", c.memory_report, "Print each rank's allocated bytes beside the ZeRO formulas (after the last step)");
    f("comm_report", c.comm_report, "Print each rank's bytes sent in the last step beside the ring formulas, and how much was hidden");
}

// The parallel layout and ZeRO. (ParallelSettings)
template <typename S, typename F>
void parallel_fields(S& c, F&& f) {
    f("dp", c.dp, "Data-parallel ranks (0 = world size / (cp x tp x pp))");
    f("tp", c.tp, "Tensor-parallel ranks (Megatron: attention heads, MLP and vocabulary split)");
    f("pp", c.pp, "Pipeline stages");
    f("cp", c.cp, "Context-parallel ranks: each sequence cut into 2 cp chunks, rank r keeping chunks r and 2cp-1-r "
      "(load-balanced for causal attention); --seq must be a multiple of 2 cp");
    f("ep", c.ep, "Expert-parallel ranks: every MoE layer's experts split over groups of ep data-parallel ranks "
      "(ep divides dp), tokens sent to their experts and back by all-to-all; the experts' gradients are summed "
      "(and ZeRO slices them) over the dp / ep ranks that hold the same experts");
    f("cp_comm", c.cp_comm, "Context parallelism's keys and values: ring (passed around the cp ranks, overlapped with "
      "the attention tiles) | allgather (gathered once a layer)");
    f("schedule", c.schedule, "Pipeline schedule (zb-h1, zbv: zero-bubble, weight gradients deferred)");
    f("virtual_stages", c.virtual_stages, "Model chunks per pipeline rank (interleaved schedule)");
    f("pp_split", c.pp_split, "Blocks per pipeline chunk (default: balanced by cost)");
    f("sequence_parallel", c.sequence_parallel,
      "Split LayerNorm/residual regions along the sequence over the tensor-parallel ranks (all-gather and reduce-scatter instead of all-reduce)");
    f("zero", c.zero, "ZeRO stage (0 replicate, 1 shard optimiser state, 2 + gradients, 3 + parameters: FSDP)");
    f("bucket_mb", c.bucket_mb, "Gradient all-reduce bucket size in MiB (ZeRO-0)");
}

// The data-parallel algorithm. (DpAlgoSettings)
template <typename S, typename F>
void dp_algo_fields(S& c, F&& f) {
    f("dp_algo", c.algo,
      "Data-parallel algorithm: allreduce (every step) | local-sgd (average every --local-steps) | diloco (outer Nesterov "
      "step every --local-steps) | gossip (neighbours on --topology) | compressed (--compress, --error-feedback)");
    f("local_steps", c.local_steps, "local-sgd, diloco: H, the local steps between synchronisations");
    f("average_optimizer", c.average_optimizer, "local-sgd, diloco: also average the optimiser's state every H steps");
    f("outer_lr", c.outer_lr, "diloco: the outer SGD's learning rate");
    f("outer_momentum", c.outer_momentum, "diloco: the outer SGD's Nesterov momentum");
    f("outer_dtype", c.outer_dtype, "diloco: the averaged delta's type on the wire: fp32 | bf16 | fp16 (default fp32)");
    f("topology", c.topology, "gossip: ring | torus | exp (peers at distance 2^k) | one-peer-exp (one peer per step)");
    f("global_avg_every", c.global_avg_every, "gossip: a global average every K steps instead of the neighbours' (0 = never)");
    f("compress", c.compress,
      "compressed: topk:F | randk:F (a fraction F of the elements) | qsgd:S (S levels) | sign (scaled) | sign:vote "
      "(majority vote) | powersgd:R (rank R)");
    f("compress_embedding", c.compress_embedding,
      "compressed: the vocabulary's matrices (the token embedding and the LM head: a row per token) by this compressor "
      "instead of --compress (same forms; with powersgd: powersgd:R or none, sent whole)");
    f("compress_dtype", c.compress_dtype,
      "compressed, powersgd: the all-reduced factors' type on the wire: fp32 | bf16 | fp16 (default fp32; every hop "
      "adds in fp32 and rounds, error feedback carries the rounding)");
    f("error_feedback", c.error_feedback,
      "compressed: auto (ef for the biased compressors topk, sign, sign:vote, powersgd; none for the unbiased randk, qsgd) "
      "| none | ef (error feedback) | ef21 (EF21)");
    f("momentum_correction", c.momentum_correction,
      "compressed, topk with ef: Deep Gradient Compression's momentum correction m in [0, 1) (0 = off): each rank "
      "accumulates its own momentum u <- m u + g and compresses u + e; what it sends leaves u (momentum factor "
      "masking). The momentum is applied before the exchange: give the optimiser none of its own (--beta1 0)");
    f("consensus_every", c.consensus_every,
      "local-sgd, diloco, gossip: write the replicas' consensus distance to metrics.jsonl every N steps (an all-reduce "
      "of the parameters not counted in bytes_sent; 0 = never)");
}

// Number formats and the loss scale. (PrecisionSettings)
template <typename S, typename F>
void precision_fields(S& c, F&& f) {
    f("precision", c.policy,
      "fp32 | bf16 | fp16 | fp32-bf16-products: the precision policy. bf16/fp16: mixed precision: 16-bit activations and parameter copy, 16-bit products with fp32 accumulation, fp32 master weights, optimiser state and gradients; fp32-bf16-products: fp32 storage, bf16 products");
    f("reduce_dtype", c.reduce_dtype, "Type of the gradient reduction (default: the gradients', fp32)");
    f("loss_scale", c.loss_scale, "Loss scaling (default: dynamic with --precision fp16, off otherwise)");
    f("scale_window", c.scale_window, "Clean steps before a dynamic loss scale doubles");
}

// How the step runs: seed, threads, kernels and libraries. (RuntimeSettings)
template <typename S, typename F>
void runtime_fields(S& c, F&& f) {
    f("seed", c.seed, "Random seed (init and data order)");
    f("threads", c.threads, "OpenMP/BLAS threads (0 = all cores)");
    f("thread_split", c.thread_split,
      "How a rank's threads share a micro-batch: batch (each thread runs whole sequences through every layer, meeting twice per block: robust when cores are shared) | kernel (every kernel split over all threads) | auto (batch with --tp 1 when the micro-batch makes at least two groups of ~256 rows per thread, else kernel)");
    f("recompute", c.recompute,
      "Activation recomputation: none | full (keep each block's input, re-run it in backward) | selective (recompute the attention probabilities; nothing with --attention fused, which keeps none)");
    f("attention", c.attention,
      "fused (FlashAttention-2's tiles and online softmax: each query row's log-sum-exp kept, O(T C) memory a sequence) | "
      "materialized (the (B, heads, T, T) probabilities kept for backward)");
    f("collectives", c.collectives,
      "ring (ours: deterministic sums, exact byte accounting, progress thread) | mpi (MPI_Allreduce, "
      "MPI_Reduce_scatter, MPI_Allgather: a cluster's tuned MPI serves; sums to rounding of the ring's)");
    f("gemm", c.gemm,
      "auto (per shape and precision, the fastest of shardlm's native kernels (AVX-512 or AVX2), OpenBLAS and oneDNN, timed once "
      "and cached per CPU model) | onednn (every product on oneDNN: no OPENBLAS_CORETYPE re-exec) | openblas (every "
      "product on OpenBLAS, bf16 operands widened to fp32) | native (every product on the native kernels, where the "
      "build has them)");
}

// What a failure does: non-finite values, spikes, replica checks, timeouts. (ReliabilitySettings)
template <typename S, typename F>
void reliability_fields(S& c, F&& f) {
    f("on_nan", c.on_nan,
      "stop | skip: a non-finite loss or gradient stops the run (naming the tensor), or skips that step's update on every rank");
    f("spike_sigma", c.spike_sigma, "A spike: the loss or the gradient norm above the window's mean + this many standard "
      "deviations; it is named with the unit whose gradient norm rose most (0 = off)");
    f("spike_window", c.spike_window, "Steps in the spike window");
    f("on_spike", c.on_spike, "warn | skip: at a spike, warn, or also skip that step's update on every rank");
    f("health_every", c.health_every, "Every N steps, each unit's update-to-parameter ratio and output RMS into metrics.jsonl's "
      "\"health\" (its gradient norm every step; 0 = off)");
    f("check_replicas", c.check_replicas,
      "Every N steps, compare hashes of the replicated parameters across data- and tensor-parallel ranks (0 = off)");
    f("comm_timeout", c.comm_timeout,
      "Seconds a collective may wait for the other ranks before the job ends naming it (0 = wait forever)");
    f("flight_dir", c.flight_dir,
      "Where each rank dumps its last communication operations on a failure, SIGUSR1 or SIGTERM "
      "(default: <out>/flight; read them with `shardlm report --flight DIR`)");
}

// The field table, section by section: name, a reference to the member, and its help text. Used by the CLI (flags),
// the JSON config reader, meta.json and config.json.
template <typename Cfg, typename F>
void for_each_field(Cfg& c, F&& f) {
    model_fields(c.model, f);
    data_fields(c.data, f);
    optimiser_fields(c.optim, f);
    output_fields(c.output, f);
    parallel_fields(c.parallel, f);
    dp_algo_fields(c.dp_algo, f);
    precision_fields(c.precision, f);
    runtime_fields(c.runtime, f);
    reliability_fields(c.reliability, f);
}

// Keys read (flags and JSON) but never written: older spellings of a setting, which fold_aliases()
// folds into it (config.json of a run before the fold still loads).
template <typename Cfg, typename F>
void alias_fields(Cfg& c, F&& f) {
    f("matmul_precision", c.precision.matmul_precision,
      "Older spelling: --matmul-precision bf16 is --precision fp32-bf16-products (operands of the linear layers' "
      "products rounded to bf16, fp32 accumulation; fp32 storage only)");
}

// Every key a reader accepts: the settings and the older spellings.
template <typename Cfg, typename F>
void for_each_input(Cfg& c, F&& f) {
    for_each_field(c, f);
    alias_fields(c, f);
}

nlohmann::json config_to_json(const TrainConfig& c);

// One setting as a user reads it (report.html): a number in its shortest text that reads back (0.99, not
// 0.9900000095367432), and a value left to a default ("0 = the preset's", "-1: the optimiser's") shown as
// the value it resolves to, with `resolved` set; a default the run decides at start (its world size, its
// cores) is named in words.
struct SettingText {
    std::string key, text;
    bool resolved = false;
};
std::vector<SettingText> settings_text(const TrainConfig& c);
// Applies the keys of a JSON object to c, older spellings as read (apply_config_keys), then folded
// (fold_aliases). Unknown keys and wrong types are errors that name `source`, the key, and the closest
// valid key or the expected type. A reader that merges more sources (flags over a file) applies the keys
// of each and folds once, at the end.
void apply_config_json(TrainConfig& c, const nlohmann::json& j, const std::string& source);
void apply_config_keys(TrainConfig& c, const nlohmann::json& j, const std::string& source);
// Levenshtein distance, for "did you mean" suggestions.
size_t edit_distance(const std::string& a, const std::string& b);

}  // namespace shardlm::train
