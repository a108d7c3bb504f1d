#include "shardlm/train/train_config.h"

#include <charconv>
#include <cmath>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <type_traits>

#include "shardlm/core/check.h"
#include "shardlm/cost/memory.h"
#include "shardlm/kernels/gemm/gemm.h"
#include "shardlm/model/weights.h"

namespace shardlm::train {

optim::OptimConfig OptimiserSettings::config(double tokens_per_step) const {
    optim::OptimConfig o;
    o.kind = optimizer;
    const bool sophia = optimizer == optim::Kind::Sophia;
    o.beta1 = beta1 >= 0 ? beta1 : sophia ? 0.965f : 0.9f;
    o.beta2 = beta2 >= 0 ? beta2 : optimizer == optim::Kind::Lion || sophia ? 0.99f : 0.95f;
    o.eps = eps >= 0 ? eps : optimizer == optim::Kind::Adafactor ? 1e-30f : 1e-8f;
    o.momentum = momentum;
    o.block = optim_block;
    o.code = optim_code;
    o.first_moment = optimizer != optim::Kind::Adafactor || beta1 >= 0;
    o.clip_threshold = clip_threshold;
    o.decay_rate = decay_rate;
    o.relative_step = relative_step;
    o.scale_parameter = scale_parameter;
    o.weight_decay = weight_decay;
    o.rho = rho;
    o.hess_batch = tokens_per_step;
    o.hess_interval = hess_interval;
    return o;
}

optim::OptimConfig TrainConfig::optim_config() const {
    return optim.config(double(data.global_batch) * double(data.seq));
}

namespace {
DType to_wire_dtype(ReduceType t) { return t == ReduceType::BF16 ? DType::BF16 : t == ReduceType::F16 ? DType::F16 : DType::F32; }
}  // namespace

parallel::DpAlgoConfig DpAlgoSettings::resolved(uint64_t seed) const {
    parallel::DpAlgoConfig d;
    d.algo = algo;
    d.local_steps = local_steps;
    d.average_optimizer = average_optimizer;
    d.outer_lr = outer_lr, d.outer_momentum = outer_momentum;
    d.outer_dtype = to_wire_dtype(outer_dtype);
    d.topology = topology;
    d.global_avg_every = global_avg_every;
    if (algo == parallel::DpAlgo::Compressed) {
        if (compress) d.compress = *compress;
        if (compress_embedding) d.compress_embedding = *compress_embedding;
    }
    d.compress_dtype = to_wire_dtype(compress_dtype);
    // auto: error feedback when either compressor is biased
    const bool unbiased = parallel::is_unbiased(d.compress) &&
                          (!d.compress_embedding || parallel::is_unbiased(*d.compress_embedding));
    d.error_feedback = error_feedback != parallel::ErrorFeedback::Auto ? error_feedback
                       : unbiased                                      ? parallel::ErrorFeedback::None
                                                                       : parallel::ErrorFeedback::Ef;
    d.momentum_correction = momentum_correction;
    d.seed = seed;
    return d;
}

parallel::DpAlgoConfig TrainConfig::dp_algo_config() const { return dp_algo.resolved(runtime.seed); }

void DpAlgoSettings::validate() const {
    using parallel::DpAlgo;
    const std::string name = setting_text(algo);
    SHARDLM_CHECK(local_steps >= 1, "--local-steps must be >= 1 (got ", local_steps, ")");
    SHARDLM_CHECK(outer_lr > 0 && std::isfinite(outer_lr), "--outer-lr must be > 0 (got ", outer_lr, ")");
    SHARDLM_CHECK(outer_momentum >= 0 && outer_momentum < 1, "--outer-momentum must be in [0, 1) (got ", outer_momentum, ")");
    SHARDLM_CHECK(global_avg_every >= 0, "--global-avg-every must be >= 0 (0 = never; got ", global_avg_every, ")");
    SHARDLM_CHECK(algo == DpAlgo::Compressed || (!compress_embedding && to_wire_dtype(compress_dtype) == DType::F32),
                  "--compress-embedding and --compress-dtype apply to --dp-algo compressed (got --dp-algo ", name,
                  ")\n---> HINT: --dp-algo compressed --compress powersgd:4 --compress-embedding powersgd:1");
    SHARDLM_CHECK(momentum_correction >= 0 && momentum_correction < 1, "--momentum-correction must be in [0, 1) (0 = off; "
                  "got ", momentum_correction, ")");
    SHARDLM_CHECK(algo == DpAlgo::Compressed || momentum_correction == 0, "--momentum-correction applies to --dp-algo "
                  "compressed with top-k (got --dp-algo ", name, ")\n---> HINT: --dp-algo compressed --compress topk:0.01 "
                  "--error-feedback ef --momentum-correction 0.9 --beta1 0");
    SHARDLM_CHECK(algo == DpAlgo::Compressed || !compress, "--compress ", setting_text(compress), " applies to --dp-algo "
                  "compressed (got --dp-algo ", name, ")\n---> HINT: --dp-algo compressed --compress ", setting_text(compress));
    if (algo == DpAlgo::Compressed) validate_compression();
}


// --dp-algo compressed: the compressors, their error feedback, momentum correction and wire type agree.
void DpAlgoSettings::validate_compression() const {
    SHARDLM_CHECK(bool(compress), "--dp-algo compressed needs --compress\n---> HINT: --compress topk:0.01 (1 % of "
                  "the elements), qsgd:8, randk:0.01, sign, sign:vote or powersgd:4");
    const parallel::DpAlgoConfig d = resolved(0);  // both specs parsed, auto resolved (ef when either is biased)
    const parallel::CompressSpec& c = d.compress;
    const std::string main_text = setting_text(compress), embedding_text = setting_text(compress_embedding);
    const bool with_ef = d.error_feedback == parallel::ErrorFeedback::Ef || d.error_feedback == parallel::ErrorFeedback::Ef21;
    for (const bool embedding : {false, true}) {
        if (embedding && !d.compress_embedding) continue;
        const parallel::CompressSpec& spec = embedding ? *d.compress_embedding : c;
        const std::string& text = embedding ? embedding_text : main_text;
        // none is exact: the error it would carry is 0
        SHARDLM_CHECK(!(with_ef && parallel::is_unbiased(spec) && spec.kind != parallel::CompressKind::None),
                      "--error-feedback ", setting_text(d.error_feedback), error_feedback == parallel::ErrorFeedback::Auto ?
                      " (auto: " + std::string(embedding ? "--compress " : "--compress-embedding ") + "is biased)" : "",
                      embedding ? " with --compress-embedding " :
                      " with --compress ", text, ": error feedback needs a contractive compressor (|C(x) - x| < |x|), "
                      "and ", text, " is unbiased but not contractive (rand-k scales what it keeps by n/k, QSGD's "
                      "rounding variance exceeds |x|^2 on large buckets), so the carried error grows step after step"
                      "\n---> HINT: --error-feedback none (or auto) with ", text, ", or a biased compressor (topk, sign) with ef");
    }
    const bool power = c.kind == parallel::CompressKind::PowerSgd;
    if (momentum_correction > 0) {
        // DGC's masking resets the momentum of what was sent: on a dense compressor (sign, none) that is every
        // element every step, and PowerSGD sends no element of its own
        const bool topk = c.kind == parallel::CompressKind::TopK &&
                          (!d.compress_embedding || d.compress_embedding->kind == parallel::CompressKind::TopK);
        SHARDLM_CHECK(topk && d.error_feedback == parallel::ErrorFeedback::Ef, "--momentum-correction ",
                      momentum_correction, " with --compress ", main_text,
                      embedding_text.empty() ? "" : " --compress-embedding " + embedding_text,
                      " --error-feedback ", setting_text(d.error_feedback), ": Deep Gradient Compression's momentum "
                      "correction accumulates each rank's momentum in the error buffer and resets the elements top-k "
                      "sent; it needs top-k on every tensor and error feedback ef"
                      "\n---> HINT: --compress topk:0.01 --error-feedback ef --momentum-correction 0.9 --beta1 0");
    }
    if (d.compress_embedding) {
        const parallel::CompressKind e = d.compress_embedding->kind;
        SHARDLM_CHECK(!power || e == parallel::CompressKind::PowerSgd || e == parallel::CompressKind::None,
                      "--compress-embedding ", embedding_text, " with --compress ", main_text, ": PowerSGD all-"
                      "reduces its factors and the elements it sends whole, and an elementwise message is all-gathered"
                      "\n---> HINT: --compress-embedding powersgd:R (its own rank) or none (sent whole)");
        SHARDLM_CHECK(power || e != parallel::CompressKind::PowerSgd, "--compress-embedding ", embedding_text,
                      " with --compress ", main_text, ": the elementwise compressors' messages are all-gathered and "
                      "PowerSGD's factors all-reduced: one exchange serves one family\n---> HINT: --compress "
                      "powersgd:R with --compress-embedding powersgd:R2, or an elementwise --compress-embedding "
                      "(topk:F, qsgd:S, ...)");
    }
    SHARDLM_CHECK(power || d.compress_dtype == DType::F32, "--compress-dtype ", setting_text(compress_dtype),
                  " with --compress ", main_text, ": only "
                  "PowerSGD's all-reduced factors take a wire type (the elementwise messages have their own formats)"
                  "\n---> HINT: --compress powersgd:R --compress-dtype bf16, or drop --compress-dtype");
    SHARDLM_CHECK(!(c.kind == parallel::CompressKind::SignVote && error_feedback == parallel::ErrorFeedback::Ef21),
                  "--error-feedback ef21 with --compress sign:vote: EF21's aggregate is the mean of the ranks' "
                  "compressed messages, and a majority vote is not their mean (the estimate would drift)"
                  "\n---> HINT: --compress sign with ef21, or sign:vote with ef");
    SHARDLM_CHECK(!(c.kind == parallel::CompressKind::PowerSgd && error_feedback == parallel::ErrorFeedback::Ef21),
                  "--error-feedback ef21 needs each rank's own compressed message, and PowerSGD sends only the "
                  "all-reduced factors\n---> HINT: --error-feedback ef (Vogels et al.'s) with powersgd");
}

// The mixture-of-experts settings onto c: the architecture's (a preset only), the objective's and capacity's.
void ModelSettings::apply_moe(model::GptConfig& c,
                              const std::function<void(const std::string&, const std::string&)>& knob) const {
    model::MoeConfig& m = c.moe;
    auto set = [&](int v, const char* flag, int* out) {
        if (v) *out = v, knob(flag, std::to_string(v));
    };
    set(n_experts, "n-experts", &m.n_experts);
    set(top_k, "top-k", &m.top_k);
    set(shared_experts, "shared-experts", &m.n_shared);
    set(moe_ffn, "moe-ffn", &m.ffn);
    if (router) m.router = *router, knob("router", setting_text(router));
    if (norm_topk) m.norm_topk = *norm_topk, knob("norm-topk", setting_text(norm_topk));
    if (!moe_layers.empty()) m.layers = moe_layers, knob("moe-layers", moe_layers);
    if (aux_loss_coef >= 0) m.aux_coef = aux_loss_coef;
    if (z_loss_coef >= 0) m.z_coef = z_loss_coef;
    if (capacity_factor >= 0) m.capacity_factor = capacity_factor;
    if (expert_bias_rate >= 0) m.bias_rate = expert_bias_rate;
}

model::GptConfig ModelSettings::config() const {
    if (!init.empty()) {
        model::GptConfig c = model::load_hf_dir_config(init);
        apply_moe(c, [](const std::string&, const std::string&) {});
        c.validate("'" + init + "/config.json' with the mixture-of-experts settings");
        return c;
    }
    model::GptConfig c = model::find_preset(preset);
    if (n_layer || n_head || n_embd || n_ctx || vocab_size) {
        if (vocab_size) c.vocab_size = vocab_size;
        if (n_layer) c.n_layer = n_layer;
        if (n_head) c.n_head = n_head;
        if (n_embd) c.n_embd = n_embd;
        if (n_ctx) c.n_ctx = n_ctx;
        c.name = preset + " (n_layer " + std::to_string(c.n_layer) + ", n_head " + std::to_string(c.n_head) +
                 ", n_embd " + std::to_string(c.n_embd) + ", n_ctx " + std::to_string(c.n_ctx) +
                 (vocab_size ? ", vocab_size " + std::to_string(c.vocab_size) : "") + ")";
    }
    std::string knobs;  // what was overridden, for the name
    auto knob = [&](const std::string& flag, const std::string& value) { knobs += ", " + flag + " " + value; };
    auto apply = [&]<class T>(const Override<T>& o, const char* flag, T* out) {
        if (!o) return;
        *out = *o;
        knob(flag, setting_text(o));
    };
    apply(norm, "norm", &c.norm);
    apply(position, "position", &c.position);
    apply(mlp, "mlp", &c.mlp);
    apply(bias, "bias", &c.bias);
    apply(tie_embeddings, "tie-embeddings", &c.tie_embeddings);
    apply(qk_norm, "qk-norm", &c.qk_norm);
    if (n_kv_head) c.n_kv_head = n_kv_head, knob("n-kv-head", std::to_string(n_kv_head));
    if (ffn_hidden) c.ffn_hidden = ffn_hidden, knob("ffn-hidden", std::to_string(ffn_hidden));
    if (rope_theta > 0) c.rope_theta = rope_theta, knob("rope-theta", std::to_string(rope_theta));
    if (rms_norm_eps > 0) c.ln_eps = rms_norm_eps, knob("rms-norm-eps", std::to_string(rms_norm_eps));
    apply_moe(c, knob);
    if (!knobs.empty()) {
        if (c.name.back() == ')') c.name.pop_back(), c.name += knobs + ")";
        else c.name = preset + " (" + knobs.substr(2) + ")";
    }
    c.validate("--model " + preset + " with the shape and architecture overrides");
    return c;
}

void TrainConfig::fold_aliases() {
    Override<kernels::MatmulPrecision>& alias = precision.matmul_precision;
    if (!alias) return;
    const kernels::MatmulPrecision m = *alias;
    alias = {};
    if (m == kernels::MatmulPrecision::fp32) return;
    PrecisionPolicy& p = precision.policy;
    SHARDLM_CHECK(!p.mixed(), "--matmul-precision ", setting_text(m), " applies to fp32 training; with --precision ",
                  p.name(), " every product is 16-bit already\n---> HINT: drop --matmul-precision");
    p.products = DType::BF16;  // fp32-bf16-products
}

PrecisionPolicy PrecisionSettings::resolved() const {
    PrecisionPolicy p = policy;
    if (reduce_dtype == ReduceType::BF16) p.reduce = DType::BF16;
    if (reduce_dtype == ReduceType::F16) p.reduce = DType::F16;
    return p;
}

void fail_setting(const std::string& where, std::string_view text, const std::string& choices) {
    fail(where, " '", text, "' is not known\n---> HINT: use ", choices);
}

void fail_setting(const std::string& where, std::string_view text, const std::string& problem, const std::string& choices) {
    fail(where, " '", text, "': ", problem, "\n---> HINT: use ", choices);
}

void fail_number_setting(const std::string& where, int64_t n, const std::string& choices) {
    fail(where, " must be ", choices, " (got ", n, ")");
}

// Exactly one of a preset or an HF directory; shape and architecture overrides only on a preset.
void ModelSettings::validate() const {
    SHARDLM_CHECK(init.empty() != preset.empty(), "give exactly one of --init DIR or --model PRESET");
    SHARDLM_CHECK(n_layer >= 0 && n_head >= 0 && n_embd >= 0 && n_ctx >= 0 && vocab_size >= 0,
                  "--n-layer, --n-head, --n-embd, --n-ctx and --vocab-size must be >= 0 (0 = the preset's value)");
    SHARDLM_CHECK(init.empty() || (!norm && !position && !mlp && !bias && !tie_embeddings && !qk_norm && n_kv_head == 0 &&
                                   ffn_hidden == 0 && rope_theta == 0 && rms_norm_eps == 0),
                  "--norm/--position/--mlp/--bias/--tie-embeddings/--qk-norm/--n-kv-head/--ffn-hidden/--rope-theta/",
                  "--rms-norm-eps change a --model preset; with --init the architecture comes from '", init,
                  "/config.json'\n---> HINT: drop them, or use --model");
    SHARDLM_CHECK(n_kv_head >= 0 && ffn_hidden >= 0 && rope_theta >= 0 && rms_norm_eps >= 0,
                  "--n-kv-head, --ffn-hidden, --rope-theta and --rms-norm-eps must be >= 0 (0 = the preset's)");
    SHARDLM_CHECK(init.empty() || (n_experts == 0 && top_k == 0 && shared_experts == 0 && moe_ffn == 0 && !router &&
                                   !norm_topk && moe_layers.empty()),
                  "--n-experts/--top-k/--shared-experts/--moe-ffn/--router/--norm-topk/--moe-layers change a --model "
                  "preset; with --init the experts come from '", init, "/config.json'\n---> HINT: drop them, or use --model");
    SHARDLM_CHECK(n_experts >= 0 && top_k >= 0 && shared_experts >= 0 && moe_ffn >= 0,
                  "--n-experts, --top-k, --shared-experts and --moe-ffn must be >= 0 (0 = the preset's)");
    SHARDLM_CHECK(init.empty() || (n_layer == 0 && n_head == 0 && n_embd == 0 && n_ctx == 0 && vocab_size == 0),
                  "--n-layer/--n-head/--n-embd/--n-ctx/--vocab-size reshape a --model preset; with --init the shape comes from '",
                  init, "/config.json'\n---> HINT: drop them, or use --model");
}

// The data, the batch and the schedule's length.
void DataSettings::validate() const {
    SHARDLM_CHECK(!train.empty(), "--data FILE is required\n---> HINT: prepare a token shard with `shardlm tokenize`");
    SHARDLM_CHECK(steps >= 0, "--steps must be >= 0 (got ", steps, ")");
    SHARDLM_CHECK(stop_after >= 0 && stop_after <= steps, "--stop-after must be between 0 (off) and --steps (", steps,
                  "), got ", stop_after);
    SHARDLM_CHECK(seq > 0, "--seq must be > 0 (got ", seq, ")");
    SHARDLM_CHECK(micro_batch > 0, "--micro-batch must be > 0 (got ", micro_batch, ")");
    SHARDLM_CHECK(global_batch > 0 && global_batch % micro_batch == 0, "--global-batch (", global_batch,
                  ") must be a positive multiple of --micro-batch (", micro_batch, ")");
}

// The optimiser, its schedule and the settings each optimiser takes.
void OptimiserSettings::validate() const {
    SHARDLM_CHECK(lr >= 0 && std::isfinite(lr), "--lr must be a finite number >= 0 (got ", lr, ")");
    SHARDLM_CHECK(lr_min >= 0 && lr_min <= lr, "--lr-min ", lr_min, " must be in [0, --lr ", lr,
                  "]: the cosine and linear schedules decay from --lr down to --lr-min\n---> HINT: --lr-min ", lr / 10,
                  " (a tenth of --lr) is common");
    SHARDLM_CHECK(weight_decay >= 0 && std::isfinite(weight_decay), "--weight-decay must be >= 0 (got ", weight_decay,
                  "): a negative decay pushes the weights away from zero\n---> HINT: 0 (off) or e.g. 0.1");
    SHARDLM_CHECK(grad_clip >= 0, "--grad-clip must be >= 0 (0 = off; got ", grad_clip, ")");
    SHARDLM_CHECK(beta1 == -1.0f || (beta1 >= 0 && beta1 < 1), "--beta1 must be in [0, 1) (got ", beta1,
                  ")\n---> HINT: -1 (the default) takes the optimiser's own");
    SHARDLM_CHECK(beta2 == -1.0f || (beta2 >= 0 && beta2 < 1), "--beta2 must be in [0, 1) (got ", beta2,
                  ")\n---> HINT: -1 (the default) takes the optimiser's own");
    SHARDLM_CHECK(eps == -1.0f || eps > 0, "--eps must be > 0 (got ", eps,
                  ")\n---> HINT: -1 (the default) takes the optimiser's own");
    const bool adafactor = optimizer == optim::Kind::Adafactor;
    SHARDLM_CHECK(!adafactor || beta2 == -1.0f, "--beta2 does not apply to --optimizer adafactor: its second moment decays "
                  "with beta2_t = 1 - t^decay_rate\n---> HINT: drop --beta2 (--beta2 -1 over a --config that sets it, "
                  "as configs/sotu.json does), or set --decay-rate (default -0.8)");
    SHARDLM_CHECK(adafactor || (!relative_step && !scale_parameter),
                  "--relative-step and --scale-parameter apply to --optimizer adafactor only");
    SHARDLM_CHECK(!relative_step || lr_schedule == optim::LrKind::Constant,
                  "--relative-step replaces --lr and its schedule by min(1e-2, 1/sqrt(t))\n---> HINT: drop --lr-schedule ",
                  setting_text(lr_schedule), ", or --relative-step");
    SHARDLM_CHECK(decay_rate >= -1.0f && decay_rate < 0.0f, "--decay-rate must be in [-1, 0) (got ", decay_rate,
                  ")\n---> HINT: -0.8 (the default, the paper's)");
    SHARDLM_CHECK(rho > 0 && std::isfinite(rho), "--rho must be > 0 (got ", rho, ")\n---> HINT: 0.04, the authors' default");
    SHARDLM_CHECK(hess_interval >= 1, "--hess-interval must be >= 1 step (got ", hess_interval, ")\n---> HINT: 10, the "
                  "authors' default");
    SHARDLM_CHECK(optimizer != optim::Kind::Sophia || eps == -1.0f, "--eps does not apply to --optimizer sophia: its "
                  "denominator rho B h + 1e-15 has the authors' fixed 1e-15\n---> HINT: drop --eps");
    SHARDLM_CHECK(clip_threshold >= 0 && std::isfinite(clip_threshold), "--clip-threshold must be >= 0 (0 = off; got ",
                  clip_threshold, ")");
    SHARDLM_CHECK(optim_block >= 16 && optim_block <= (1 << 20), "--optim-block must be in [16, 1048576] elements (got ",
                  optim_block, ")\n---> HINT: 2048 (the default) or another power of two, e.g. 256 or 4096");
    SHARDLM_CHECK(warmup >= 0, "--warmup must be >= 0 (got ", warmup, ")");
}

// The number formats and the loss scale.
void PrecisionSettings::validate() const {
    SHARDLM_CHECK(!matmul_precision, "--matmul-precision is folded into --precision when the settings are read "
                  "(TrainConfig::fold_aliases)\n---> HINT: use --precision fp32-bf16-products");
    SHARDLM_CHECK(scale_window > 0, "--scale-window must be > 0 (got ", scale_window, ")");
}

// Validation, checkpoints, the run directory and the sample.
void OutputSettings::validate() const {
    SHARDLM_CHECK(val_every >= 0 && val_batches >= 0, "--val-every and --val-batches must be >= 0");
    SHARDLM_CHECK(ckpt_every >= 0, "--ckpt-every must be >= 0 (got ", ckpt_every, ")");
    SHARDLM_CHECK(ckpt_every_seconds >= 0 && std::isfinite(ckpt_every_seconds),
                  "--ckpt-every-seconds must be >= 0 (0 = off; got ", ckpt_every_seconds, ")");
    SHARDLM_CHECK(keep_ckpts >= 1, "--keep-ckpts must be >= 1 (got ", keep_ckpts, ")");
    SHARDLM_CHECK(mem_ckpt_every >= 0, "--mem-ckpt-every must be >= 0 (0 = off; got ", mem_ckpt_every, ")");
    SHARDLM_CHECK(mem_ckpt_every == 0 || !out.empty(), "--mem-ckpt-every needs --out RUN_DIR (the run a restart continues)");
    SHARDLM_CHECK(!resume || !out.empty(), "--resume needs --out RUN_DIR (the run to continue)");
    SHARDLM_CHECK(sample_tokens >= 0, "--sample-tokens must be >= 0 (got ", sample_tokens, ")");
    SHARDLM_CHECK(!(resume && overwrite), "give one of --resume (continue the run in --out) and --overwrite (replace it)");
}

// The parallel layout.
void ParallelSettings::validate() const {
    SHARDLM_CHECK(dp >= 0, "--dp must be >= 0 (got ", dp, ")");
    SHARDLM_CHECK(tp >= 1, "--tp must be >= 1 (got ", tp, ")");
    SHARDLM_CHECK(pp >= 1, "--pp must be >= 1 (got ", pp, ")");
    SHARDLM_CHECK(cp >= 1, "--cp must be >= 1 (got ", cp, ")");
    SHARDLM_CHECK(virtual_stages >= 1, "--virtual-stages must be >= 1 (got ", virtual_stages, ")");
    SHARDLM_CHECK(virtual_stages == 1 || schedule == cost::Schedule::Interleaved ||
                      (schedule == cost::Schedule::ZeroBubbleV && virtual_stages == 2),
                  "--virtual-stages ", virtual_stages, " needs --schedule interleaved (zbv implies 2)");
    SHARDLM_CHECK(bucket_mb > 0, "--bucket-mb must be > 0 (got ", bucket_mb, ")");
}

// Threads.
void RuntimeSettings::validate() const {
    SHARDLM_CHECK(threads >= 0, "--threads must be >= 0 (got ", threads, ")");
}

// Loss spikes, replica checks and timeouts.
void ReliabilitySettings::validate() const {
    SHARDLM_CHECK(spike_sigma >= 0 && spike_window >= 2, "--spike-sigma must be >= 0 (0 = off) and --spike-window >= 2");
    SHARDLM_CHECK(health_every >= 0, "--health-every must be >= 0 (0 = off; got ", health_every, ")");
    SHARDLM_CHECK(on_spike == OnSpike::Warn || spike_sigma > 0, "--on-spike skip needs a spike test: --spike-sigma > 0");
    SHARDLM_CHECK(check_replicas >= 0, "--check-replicas must be >= 0 (0 = off; got ", check_replicas, ")");
    SHARDLM_CHECK(comm_timeout >= 0, "--comm-timeout must be >= 0 seconds (0 = off; got ", comm_timeout, ")");
}

// The settings of different sections that must agree.
void TrainConfig::validate_across() const {
    const bool adafactor = optim.optimizer == optim::Kind::Adafactor;
    const int tp = parallel.tp, seq = data.seq, global_batch = data.global_batch;
    const ZeroStage zero = parallel.zero;
    const optim::Kind optimizer = optim.optimizer;
    const parallel::DpAlgo dp = dp_algo.algo;
    const std::string algo = setting_text(dp);
    SHARDLM_CHECK(!adafactor || tp == 1, "--optimizer adafactor needs --tp 1 (got --tp ", tp,
                  "): its row and column statistics are sums over whole matrices, and a tensor-parallel rank holds a "
                  "shard of each\n---> HINT: use data parallelism (--dp, any --zero) and pipeline stages with adafactor, "
                  "or --optimizer adamw with --tp");
    SHARDLM_CHECK(optimizer != optim::Kind::Sophia || int64_t(global_batch) * seq < (int64_t(1) << 31),
                  "--optimizer sophia samples a label per token of the step, numbered within the step: global_batch x "
                  "seq (", int64_t(global_batch) * seq, ") must be below 2^31");
    SHARDLM_CHECK(runtime.thread_split != ThreadSplit::Batch || tp <= 1, "--thread-split batch runs whole sequences on each thread and "
                  "needs --tp 1 (got --tp ", tp, ")\n---> HINT: use --thread-split kernel (or auto) with tensor parallelism");
    const int z = stage_number(zero);
    SHARDLM_CHECK(!parallel::replicas_differ(dp) || zero == ZeroStage::Replicate, "--dp-algo ", algo, " keeps a replica per data-parallel "
                  "rank that differs from the others between synchronisations, and --zero ", z, " shards one replica "
                  "over those ranks\n---> HINT: --zero 0 with --dp-algo ", algo, " (or --dp-algo compressed with --zero 1)");
    SHARDLM_CHECK(dp == parallel::DpAlgo::AllReduce || !shards_gradients(zero), "--dp-algo ", algo, " with --zero ", z, ": ZeRO-", z,
                  " keeps only this rank's slices of the reduced gradient, and a rank's error feedback, compressor and "
                  "local step need its whole gradient\n---> HINT: --zero 1 (optimiser state sharded) or 0");
    SHARDLM_CHECK(dp == parallel::DpAlgo::AllReduce || optimizer != optim::Kind::Sophia, "--optimizer sophia with --dp-algo ",
                  algo, ": its Hessian pass reduces gradients by the all-reduce\n---> HINT: --dp-algo allreduce");
    validate_context_parallel();
    SHARDLM_CHECK(parallel.ep >= 1, "--ep must be >= 1 (got ", parallel.ep, ")");
    SHARDLM_CHECK(parallel.ep == 1 || dp == parallel::DpAlgo::AllReduce, "--ep ", parallel.ep, " with --dp-algo ", algo,
                  ": the experts' replicas are the dp / ep ranks that hold them, and the algorithm's replicas are all dp "
                  "ranks\n---> HINT: --dp-algo allreduce with --ep");
    SHARDLM_CHECK(!data.doc_mask || runtime.attention == AttentionKernel::Fused, "--doc-mask with --attention materialized: "
                  "document masks are the fused kernel's (by blocks)\n---> HINT: --attention fused");
    SHARDLM_CHECK(!data.doc_mask || runtime.thread_split != ThreadSplit::Batch, "--doc-mask with --thread-split batch: "
                  "attention inside documents runs on all threads, one lane\n---> HINT: --thread-split kernel (or auto)");
}

// --cp with the rest: whole chunks of each sequence, one replica per cp group.
void TrainConfig::validate_context_parallel() const {
    const int cp = parallel.cp;
    if (cp == 1) return;
    (void)model::SequenceSplit(data.seq, cp);  // --seq a multiple of 2 cp
    SHARDLM_CHECK(dp_algo.algo == parallel::DpAlgo::AllReduce, "--cp ", cp, " with --dp-algo ", setting_text(dp_algo.algo),
                  ": the ranks of a cp group hold one replica (each computes the gradient of its slice of the same "
                  "sequences), so their gradients are summed every step\n---> HINT: --dp-algo allreduce with --cp");
    SHARDLM_CHECK(runtime.attention == AttentionKernel::Fused, "--cp ", cp, " with --attention materialized: context "
                  "parallelism's attention is the fused kernel by blocks (no T x T probabilities)\n---> HINT: --attention fused");
    SHARDLM_CHECK(runtime.thread_split != ThreadSplit::Batch, "--thread-split batch with --cp ", cp, ": every layer's "
                  "attention exchanges keys and values with the other cp ranks, so one lane runs the batch\n---> HINT: "
                  "--thread-split kernel (or auto)");
}

void TrainConfig::validate() const {
    model.validate();
    data.validate();
    optim.validate();
    output.validate();
    parallel.validate();
    dp_algo.validate();
    precision.validate();
    runtime.validate();
    reliability.validate();
    validate_across();
}

size_t edit_distance(const std::string& a, const std::string& b) {
    std::vector<size_t> prev(b.size() + 1), cur(b.size() + 1);
    for (size_t j = 0; j <= b.size(); j++) prev[j] = j;
    for (size_t i = 1; i <= a.size(); i++) {
        cur[0] = i;
        for (size_t j = 1; j <= b.size(); j++)
            cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (a[i - 1] != b[j - 1])});
        std::swap(prev, cur);
    }
    return prev[b.size()];
}

nlohmann::json config_to_json(const TrainConfig& c) {
    nlohmann::json j = nlohmann::json::object();
    for_each_field(c, [&](const char* key, const auto& v, const char*) {
        using T = std::decay_t<decltype(v)>;
        if constexpr (TextSetting<T>) j[key] = setting_text(v);
        else if constexpr (NumberSetting<T>) j[key] = setting_number(v);
        else j[key] = v;
    });
    return j;
}

namespace {

template <typename T>
const char* type_name() {
    if constexpr (TextSetting<T>) return "a string";
    if constexpr (NumberSetting<T>) return "an integer";
    if constexpr (std::is_same_v<T, bool>) return "true or false";
    else if constexpr (std::is_integral_v<T>) return "an integer";
    else if constexpr (std::is_floating_point_v<T>) return "a number";
    else return "a string";
}

template <typename T>
void assign(T& dst, const nlohmann::json& v, const std::string& source, const std::string& key) {
    if constexpr (TextSetting<T>) {
        SHARDLM_CHECK(v.is_string(), source, ": key '", key, "' must be a string: ", setting_choices(&dst), " (got ",
                      v.dump(), ")");
        parse_setting(source + ": key '" + key + "':", v.get<std::string>(), &dst);
        return;
    } else if constexpr (NumberSetting<T>) {
        SHARDLM_CHECK(v.is_number_integer(), source, ": key '", key, "' must be an integer: ", setting_choices(&dst),
                      " (got ", v.dump(), ")");
        parse_number_setting(source + ": key '" + key + "'", v.get<int64_t>(), &dst);
        return;
    }
    bool ok;
    if constexpr (std::is_same_v<T, bool>) ok = v.is_boolean();
    else if constexpr (std::is_integral_v<T>) ok = v.is_number_integer() && (std::is_signed_v<T> || v.get<int64_t>() >= 0);
    else if constexpr (std::is_floating_point_v<T>) ok = v.is_number();
    else ok = v.is_string();
    SHARDLM_CHECK(ok, source, ": key '", key, "' must be ", type_name<T>(), " (got ", v.dump(), ")");
    if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
        if constexpr (std::is_signed_v<T>) {
            int64_t x = v.get<int64_t>();
            SHARDLM_CHECK(x >= std::numeric_limits<T>::min() && x <= std::numeric_limits<T>::max(), source, ": key '",
                          key, "' is out of range (", x, ")");
        }
    }
    if constexpr (!TextSetting<T> && !NumberSetting<T>) dst = v.get<T>();
}

}  // namespace

void apply_config_keys(TrainConfig& c, const nlohmann::json& j, const std::string& source) {
    SHARDLM_CHECK(j.is_object(), source, ": expected a JSON object of training settings");
    for (auto it = j.begin(); it != j.end(); ++it) {
        const std::string& key = it.key();
        bool found = false;
        std::string best;
        size_t best_d = SIZE_MAX;
        for_each_input(c, [&](const char* name, auto& ref, const char*) {
            if (key == name) {
                assign(ref, it.value(), source, key);
                found = true;
            }
            size_t d = edit_distance(key, name);
            if (d < best_d) best_d = d, best = name;
        });
        if (!found) {
            std::string dashed = key;
            for (auto& ch : dashed) ch = ch == '-' ? '_' : ch;
            if (dashed != key) best = dashed;
            fail(source, ": unknown key '", key, "'\n---> HINT: did you mean '", best,
                 "'? (`shardlm train --help` lists every key as a flag)");
        }
    }
}

void apply_config_json(TrainConfig& c, const nlohmann::json& j, const std::string& source) {
    apply_config_keys(c, j, source);
    c.fold_aliases();
}


}  // namespace shardlm::train

namespace shardlm::train {

namespace {

// A setting's value in the words a user would write it: a float in its shortest text that reads back as that
// float (what config.json's doubles hide), an integer as an integer.
template <typename T>
std::string value_text(const T& v) {
    if constexpr (TextSetting<T>) return setting_text(v);
    else if constexpr (NumberSetting<T>) return std::to_string(setting_number(v));
    else if constexpr (std::is_same_v<T, bool>) return v ? "true" : "false";
    else if constexpr (std::is_floating_point_v<T>) {
        char buf[32];
        const auto r = std::to_chars(buf, buf + sizeof buf, v);
        return std::string(buf, r.ptr);
    } else if constexpr (std::is_integral_v<T>) return std::to_string(v);
    else return std::string(v);
}

// What the settings left to a default resolve to: the model's shape and knobs from its preset (or HF
// directory), the optimiser's own betas and epsilon, and the run-time defaults in words.
std::map<std::string, std::string> resolved_defaults(const TrainConfig& c) {
    std::map<std::string, std::string> r;
    try {
        const model::GptConfig m = c.model.config();
        const bool rope = m.position == model::Position::Rope;
        r = {{"n_layer", value_text(m.n_layer)}, {"n_head", value_text(m.n_head)}, {"n_embd", value_text(m.n_embd)},
             {"n_ctx", value_text(m.n_ctx)}, {"vocab_size", value_text(m.vocab_size)}, {"norm", value_text(m.norm)},
             {"position", value_text(m.position)}, {"mlp", value_text(m.mlp)}, {"bias", value_text(m.bias)},
             {"tie_embeddings", value_text(m.tie_embeddings)}, {"qk_norm", value_text(m.qk_norm)},
             {"n_kv_head", value_text(m.kv_heads())},
             {"ffn_hidden", value_text(m.ffn())}, {"rope_theta", rope ? value_text(m.rope_theta) : "none (learned positions)"},
             {"rms_norm_eps", value_text(m.ln_eps)}, {"n_experts", value_text(m.moe.n_experts)},
             {"top_k", value_text(m.moe.top_k)}, {"shared_experts", value_text(m.moe.n_shared)},
             {"moe_ffn", value_text(m.expert_ffn())}, {"router", value_text(m.moe.router)},
             {"norm_topk", value_text(m.moe.norm_topk)}, {"moe_layers", m.moe.layers},
             {"aux_loss_coef", value_text(m.moe.aux_coef)}, {"z_loss_coef", value_text(m.moe.z_coef)},
             {"capacity_factor", value_text(m.moe.capacity_factor)}, {"expert_bias_rate", value_text(m.moe.bias_rate)}};
    } catch (const std::exception&) {  // an HF directory no longer there: its shape is unknown here
    }
    const optim::OptimConfig o = c.optim_config();
    r["beta1"] = c.optim.optimizer == optim::Kind::Adafactor ? "(no first moment)" : value_text(o.beta1);
    r["beta2"] = value_text(o.beta2), r["eps"] = value_text(o.eps);
    r["dp"] = "world size / (tp x pp)";
    r["threads"] = "every CPU the process may use";
    r["val_batches"] = "the whole validation shard";
    r["stop_after"] = value_text(c.data.steps);
    r["reduce_dtype"] = "fp32 (the gradients')";
    r["loss_scale"] = setting_text(c.precision.policy) == "fp16" ? "dynamic" : "off";
    r["metrics"] = c.output.out.empty() ? "(none)" : c.output.out + "/metrics.jsonl";
    r["flight_dir"] = c.output.out.empty() ? "(none)" : c.output.out + "/flight";
    return r;
}

// Whether a setting holds the value that means "the default" (0, -1 or empty where its help says so).
template <typename T>
bool is_default_sentinel(const char* key, const T& v) {
    static const std::set<std::string> zero = {"n_layer", "n_head", "n_embd", "n_ctx", "vocab_size", "n_kv_head", "ffn_hidden",
                                               "rope_theta", "rms_norm_eps", "dp", "threads", "val_batches",
                                               "stop_after", "n_experts", "top_k", "shared_experts", "moe_ffn"};
    if constexpr (TextSetting<T> || std::is_same_v<T, std::string>) return value_text(v).empty();
    else if constexpr (std::is_same_v<T, bool>) return false;
    else if constexpr (std::is_arithmetic_v<T>) return (zero.count(key) && v == 0) || (v == T(-1) && std::is_signed_v<T>);
    else return false;
}

}  // namespace

std::vector<SettingText> settings_text(const TrainConfig& c) {
    const std::map<std::string, std::string> defaults = resolved_defaults(c);
    std::vector<SettingText> out;
    for_each_field(c, [&](const char* key, const auto& v, const char*) {
        SettingText s{key, value_text(v)};
        const auto d = defaults.find(key);
        if (d != defaults.end() && is_default_sentinel(key, v)) s.text = d->second, s.resolved = true;
        out.push_back(std::move(s));
    });
    return out;
}

}  // namespace shardlm::train
