// train/run_output.cpp: what a run shows and leaves behind: the run directory's config and metrics
// (trimmed on resume), the log line or progress bar of each step, summary.json, and the sample.
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "shardlm/core/check.h"
#include "shardlm/data/tokenizer.h"
#include "shardlm/io/atomic_file.h"
#include "shardlm/model/generate.h"
#include "shardlm/model/weights.h"
#include "shardlm/train/checkpoint.h"
#include "shardlm/train/health.h"
#include "shardlm/train/numerics.h"
#include "shardlm/train/run_dir.h"
#include "shardlm/comm/group.h"
#include "shardlm/core/runtime.h"
#include "shardlm/kernels/machine.h"
#include "shardlm/kernels/gemm/gemm.h"
#include "shardlm/train/trainer.h"

namespace shardlm::train {

namespace fs = std::filesystem;

std::string fmt_duration(double s) {
    char buf[32];
    int t = int(s + 0.5);
    if (t >= 3600) std::snprintf(buf, sizeof(buf), "%dh%02dm", t / 3600, (t / 60) % 60);
    else if (t >= 60) std::snprintf(buf, sizeof(buf), "%dm%02ds", t / 60, t % 60);
    else std::snprintf(buf, sizeof(buf), "%ds", t);
    return buf;
}


namespace {
// {"units": ["embedding", "block 0", ..., "head"], "grad_norm": [...], "update_ratio": [...], "act_rms": [...]}
// (null where not measured: the head writes no stream, a skipped step makes no update)
std::string health_json(const StepStats& s) {
    const std::vector<std::string> names = unit_names(int(s.unit_grad_norm.size()) - 2);
    auto list = [&](const std::vector<double>& v) {
        std::string out = "[";
        for (size_t u = 0; u < names.size(); u++)
            out.append(u ? ", " : "").append(u < v.size() ? json_number(v[u], "%.6g") : std::string("null"));
        return out + "]";
    };
    std::string units = "[";
    for (size_t u = 0; u < names.size(); u++) units.append(u ? ", \"" : "\"").append(names[u]).append("\"");
    return "{\"units\": " + units + "], \"grad_norm\": " + list(s.unit_grad_norm) + ", \"update_ratio\": " +
           list(s.update_ratio) + ", \"act_rms\": " + list(s.act_rms) + "}";
}
}  // namespace

std::string stats_json(const StepStats& s) {
    // NaN and inf are not JSON: a non-finite loss or norm is written as null (and the step is "skipped")
    std::string j = "{\"step\": " + std::to_string(s.step) + ", \"loss\": " + json_number(s.loss) +
                    ", \"grad_norm\": " + json_number(s.grad_norm) + ", \"lr\": " + json_number(s.lr, "%.9g") +
                    ", \"step_ms\": " + json_number(s.step_ms, "%.3f") +
                    ", \"tokens_per_s\": " + json_number(s.tokens_per_s, "%.3f");
    if (s.val_loss >= 0 || std::isnan(s.val_loss)) j += ", \"val_loss\": " + json_number(s.val_loss);
    if (s.loss_scale > 0)  // loss scaling: the scale this step used, and whether it was skipped (overflow)
        j += ", \"loss_scale\": " + json_number(s.loss_scale, "%.9g") + ", \"skipped\": " + (s.skipped ? "true" : "false");
    else if (s.skipped) j += ", \"skipped\": true";
    // sophia: the Hessian estimate was refreshed after this step (false: its pass was not finite)
    if (s.hessian != 0) j += std::string(", \"hessian\": ") + (s.hessian > 0 ? "true" : "false");
    j += ", \"bytes_sent\": " + std::to_string(s.bytes_sent);  // this rank's, in its data-parallel group
    if (s.consensus >= 0) j += ", \"consensus\": " + json_number(s.consensus, "%.6g");
    if (s.aux_loss >= 0) {
        j += ", \"aux_loss\": " + json_number(s.aux_loss) + ", \"z_loss\": " + json_number(s.z_loss) +
             ", \"moe_dropped\": " + json_number(s.moe_dropped, "%.6g") + ", \"moe_load\": [";
        for (size_t i = 0; i < s.moe_load.size(); i++) {
            const StepStats::MoeLoad& l = s.moe_load[i];
            j += std::string(i ? ", " : "") + "{\"layer\": " + std::to_string(l.layer) + ", \"min\": " +
                 json_number(l.min, "%.6g") + ", \"median\": " + json_number(l.median, "%.6g") + ", \"max\": " +
                 json_number(l.max, "%.6g") + ", \"dropped\": " + json_number(l.dropped, "%.6g") +
                 (l.bias_max >= 0 ? ", \"bias_max\": " + json_number(l.bias_max, "%.6g") : std::string()) + "}";
        }
        j += "]";
    }
    if (!s.spike.empty())
        j += ", \"spike\": " + (s.spike_unit >= 0 ? "\"" + unit_names(int(s.unit_grad_norm.size()) - 2)[size_t(s.spike_unit)] + "\""
                                                : std::string("\"\""));
    if (s.health) j += ", \"health\": " + health_json(s);
    return j + "}";
}

namespace {
// Settings that change what a run trains on or how it learns: changing them on --resume makes the
// continuation another experiment (layout settings, --steps, logging and the like may change freely).
const char* const kTrajectoryKeys[] = {"data", "data_order", "seed", "global_batch", "seq", "optimizer", "lr",
                                       "beta1", "beta2", "lr_schedule", "lr_min", "warmup", "weight_decay",
                                       "grad_clip", "precision", "model", "n_layer", "n_head", "n_embd",
                                       "vocab_size", "init"};

// A config.json as this build writes it (an older build's with its older spellings folded: "precision"
// "fp32" + "matmul_precision" "bf16" is "precision" "fp32-bf16-products"), or as it is where this build
// cannot read it.
nlohmann::json normalised_config(const nlohmann::json& j, const std::string& path) {
    try {
        TrainConfig c;
        apply_config_json(c, j, path);
        return config_to_json(c);
    } catch (const std::exception&) {
        return j;
    }
}
}  // namespace

void Trainer::keep_config_history(const std::string& path, const nlohmann::json& now) {
    const nlohmann::json old = nlohmann::json::parse(io::read_file(path), nullptr, false);
    if (!old.is_object()) return;
    const nlohmann::json was = normalised_config(old, path);
    if (was == now) return;
    std::string changed;
    for (const char* k : kTrajectoryKeys)
        if (was.contains(k) && now.contains(k) && was[k] != now[k])
            changed += std::string(changed.empty() ? "" : ", ") + k + " " + was[k].dump() + " -> " + now[k].dump();
    if (!changed.empty())
        std::printf("warning: --resume with other settings than the run's (%s): from step %d on, this run trains "
                    "differently from its first part\n  the earlier settings are kept in %s\n", changed.c_str(),
                    start_step_, (fs::path(path).parent_path() / "config_history.jsonl").c_str());
    // every replaced config.json, with the step from which the new one holds
    const std::string hist = (fs::path(path).parent_path() / "config_history.jsonl").string();
    const std::string line = nlohmann::json{{"replaced_at_step", start_step_}, {"config", old}}.dump() + "\n";
    std::FILE* f = std::fopen(hist.c_str(), "a");
    const bool ok = f && std::fwrite(line.data(), 1, line.size(), f) == line.size();
    if (f) std::fclose(f);
    SHARDLM_CHECK(ok, "cannot append to '", hist, "': ", std::strerror(errno));
}

void Trainer::open_run_dir() {
    if (!is_root()) return;
    std::string metrics = cfg_.output.metrics;
    if (!cfg_.output.out.empty()) {
        fs::create_directories(cfg_.output.out);
        remove_stale_checkpoint_temps(cfg_.output.out);
        const fs::path config = fs::path(cfg_.output.out) / "config.json";
        const nlohmann::json now = config_to_json(cfg_);
        if (cfg_.output.resume && fs::exists(config)) keep_config_history(config.string(), now);
        io::write_file_atomic(config.string(), now.dump(2) + "\n");
        if (metrics.empty()) metrics = (fs::path(cfg_.output.out) / "metrics.jsonl").string();
    }
    if (metrics.empty()) return;
    if (start_step_ > 0 && fs::exists(metrics)) trim_metrics(metrics);
    metrics_path_ = metrics;
    metrics_ = std::fopen(metrics.c_str(), start_step_ > 0 ? "a" : "w");
    SHARDLM_CHECK(metrics_, "cannot write metrics file '", metrics, "': ", std::strerror(errno));
}

namespace {
// "3, 5-7, 9"
std::string step_ranges(const std::vector<int>& steps) {
    std::string out;
    for (size_t i = 0; i < steps.size();) {
        size_t j = i;
        while (j + 1 < steps.size() && steps[j + 1] == steps[j] + 1) j++;
        out.append(out.empty() ? "" : ", ").append(std::to_string(steps[i]));
        if (j > i) out.append("-").append(std::to_string(steps[j]));
        i = j + 1;
    }
    return out;
}
}  // namespace

// Keeps the rows of the steps the checkpoint covers (the killed run's later rows are redone), once each,
// and says what is wrong with them: lines that are not rows (dropped), steps without a row, steps twice.
void Trainer::trim_metrics(const std::string& path) {
    const MetricsFile m = read_metrics_file(path);
    std::vector<int> seen(size_t(start_step_), 0), twice, missing;
    std::string kept;
    for (const auto& [step, line] : m.rows) {
        if (step >= start_step_) continue;
        if (seen[size_t(step)]++) {
            twice.push_back(step);
            continue;
        }
        kept += line + "\n";
    }
    for (int st = 0; st < start_step_; st++)
        if (!seen[size_t(st)]) missing.push_back(st);
    if (!m.bad_lines.empty()) {
        std::string lines;
        for (int l : m.bad_lines) lines.append(lines.empty() ? "" : ", ").append(std::to_string(l));
        std::printf("warning: %s: line%s %s %s not a step's row (not JSON with an integer \"step\"): dropped\n", path.c_str(),
                    m.bad_lines.size() > 1 ? "s" : "", lines.c_str(), m.bad_lines.size() > 1 ? "are" : "is");
    }
    if (!missing.empty())
        std::printf("warning: %s has no row for step%s %s of the %d the checkpoint covers: the run's record has a gap there\n",
                    path.c_str(), missing.size() > 1 ? "s" : "", step_ranges(missing).c_str(), start_step_);
    if (!twice.empty())
        std::printf("warning: %s holds step%s %s more than once: the first row of each is kept\n", path.c_str(),
                    twice.size() > 1 ? "s" : "", step_ranges(twice).c_str());
    io::write_file_atomic(path, kept);
}

void Trainer::log_step(const StepStats& s, double elapsed_s) {
    if (!is_root()) return;
    int done = s.step + 1 - start_step_, left = cfg_.data.last_step() - s.step - 1;
    double eta = done > 0 ? elapsed_s / done * left : 0;
    char val[48] = "";
    if (last_val_ >= 0) std::snprintf(val, sizeof(val), " | val %.4f", last_val_);
    if (tty_) {
        const int width = 24;
        int filled = cfg_.data.steps > 0 ? int(double(s.step + 1) / cfg_.data.steps * width) : width;
        std::string bar(size_t(filled), '#');
        bar.resize(width, '-');
        std::printf("\r\033[K[%s] step %d/%d | loss %.4f%s | %.0f tok/s | ETA %s", bar.c_str(), s.step + 1, cfg_.data.steps,
                    s.loss, val, s.tokens_per_s, fmt_duration(eta).c_str());
        if (left == 0) std::printf("\n");
    } else if ((s.step + 1) % std::max(1, cfg_.output.log_every) == 0 || left == 0 || s.val_loss >= 0) {
        std::printf("step %5d/%d | loss %.6f | grad_norm %.4f | lr %.3e%s | %.1f ms | %.0f tok/s | ETA %s\n", s.step + 1,
                    cfg_.data.steps, s.loss, s.grad_norm, double(s.lr), val, s.step_ms, s.tokens_per_s,
                    fmt_duration(eta).c_str());
    }
    std::fflush(stdout);
}

void Trainer::write_summary(const StepStats& last, double train_s, const std::string& sample) {
    if (cfg_.output.out.empty() || !is_root()) return;
    const bool trained = cfg_.data.last_step() > start_step_;  // (--steps 0: no step, so no loss: null, not 0)
    nlohmann::json j = {{"steps", cfg_.data.last_step()},
                        {"final_loss", trained ? nlohmann::json(last.loss) : nlohmann::json(nullptr)},
                        {"train_time_s", train_s},
                        {"tokens", double(cfg_.data.global_batch) * cfg_.data.seq * (cfg_.data.last_step() - start_step_)}};
    if (last.val_loss >= 0) j["final_val_loss"] = last.val_loss;
    j["train_unigram_entropy"] = unigram_;
    if (cfg_.data.doc_mask) j["doc_mask_skipped"] = doc_stats_.skipped;
    if (val_loader_) j["corpus_unigram_entropy"] = corpus_unigram_;
    if (!sample.empty()) j["sample"] = sample;
    io::write_file_atomic((fs::path(cfg_.output.out) / "summary.json").string(), j.dump(2) + "\n");
}

nlohmann::json Trainer::writer_json() const {
    nlohmann::json w = {{"dp", e_.grid->dp_size()}, {"tp", e_.grid->tp_size()}, {"pp", e_.grid->pp_size()}, {"zero", stage_number(cfg_.parallel.zero)},
            {"virtual_stages", cfg_.parallel.virtual_stages}, {"sequence_parallel", cfg_.parallel.sequence_parallel},
            {"world", e_.grid->world_size()}, {"dp_algo", setting_text(cfg_.dp_algo.algo)},
            // what the per-rank state files hold depends on these too (train/checkpoint.h)
            {"compress", setting_text(cfg_.dp_algo.compress)}, {"error_feedback", setting_text(cfg_.dp_algo_config().error_feedback)},
            {"optimizer", setting_text(cfg_.optim.optimizer)}};
    if (cfg_.dp_algo.compress_embedding) w["compress_embedding"] = setting_text(cfg_.dp_algo.compress_embedding);  // PowerSGD's Q sizes
    if (cfg_.dp_algo.momentum_correction > 0) w["momentum_correction"] = cfg_.dp_algo.momentum_correction;  // a dgc_momentum buffer
    if (e_.grid->cp_size() > 1) w["cp"] = e_.grid->cp_size();  // (absent at 1: the checkpoints of runs before cp still match)
    return w;
}

std::string Trainer::sample_text() {
    // The whole model on rank 0: gathered over data parallelism with one tensor/pipeline rank;
    // otherwise read back from the final checkpoint's pieces.
    const bool whole = e_.grid->tp_size() == 1 && e_.grid->pp_size() == 1;
    AlignedBuffer<float> full;
    std::unique_ptr<model::Layout> layout;
    if (whole) {
        if (!e_.sync->store().whole_master()) {
            full.resize(e_.part->layout().total);
            e_.sync->gather_params(full.data());  // collective
        }
    } else if (cfg_.output.out.empty()) {
        if (is_root()) std::printf("note: no sample: with --tp/--pp it is read from the final checkpoint (give --out)\n");
        return "";
    }
    if (!is_root()) return "";
    const float* kept = e_.sync->store().whole_master();
    const float* params = whole ? (kept ? kept : full.data()) : nullptr;
    if (!whole) {
        layout = std::make_unique<model::Layout>(model::make_gpt2_layout(model_cfg_));
        full.resize(layout->total);
        model::load_hf_weights(latest_checkpoint(cfg_.output.out), model_cfg_, *layout, full.data());
        params = full.data();
    }
    data::Gpt2Tokenizer tok = data::Gpt2Tokenizer::load(data::default_vocab_dir());
    model::Generator gen(model_cfg_, layout ? *layout : e_.part->layout(), params);
    model::SampleOptions so;
    so.max_tokens = cfg_.output.sample_tokens;
    so.temperature = 1.0f;
    so.top_k = 40;
    so.seed = cfg_.runtime.seed;
    std::vector<int> prompt = tok.encode(cfg_.output.sample_prompt);
    if (prompt.empty()) prompt.push_back(tok.eot_id());
    std::vector<int> ids = model::sample_tokens(gen, prompt, so);
    std::string sample = cfg_.output.sample_prompt + tok.decode(ids);
    std::printf("---- sample (%d tokens, top-k 40) ----\n%s\n----\n", cfg_.output.sample_tokens, sample.c_str());
    return sample;
}

namespace {

// How waiting threads wait: the ranks' communication (comm/group.h) and OpenMP's barriers.
std::string wait_policy_text() {
    const comm::WaitMode w = comm::background_wait();
    std::string s = cat("communication ", w == comm::WaitMode::Sleep ? "sleeps" : w == comm::WaitMode::Yield ? "yields" : "spins");
    if (const char* p = std::getenv("OMP_WAIT_POLICY")) s += cat(", OMP_WAIT_POLICY ", p);
    else if (const char* c = std::getenv("GOMP_SPINCOUNT")) s += cat(", OpenMP spins ", c, " before sleeping");
    return s;
}

}  // namespace

void Trainer::print_header() {
    unigram_ = loader_->unigram_entropy();
    if (cfg_.data.doc_mask && is_root()) doc_stats_ = loader_->document_stats(cfg_.data.eot_token);  // printed, summarised
    if (val_loader_) corpus_unigram_ = data::BatchLoader::unigram_entropy({loader_.get(), val_loader_.get()});
    if (is_root()) {
        std::printf("model %s: %.2fM parameters | data %s: %lld tokens, unigram entropy %.3f nats", model_cfg_.name.c_str(),
                    model::count_params(model_cfg_).total / 1e6, cfg_.data.train.c_str(), (long long)loader_->num_tokens(),
                    unigram_);
        if (val_loader_) std::printf(" (train + val: %.3f)", corpus_unigram_);
        std::printf(" | dp %d, tp %d, pp %d, ZeRO-%d", e_.grid->dp_size(), e_.grid->tp_size(), e_.grid->pp_size(), stage_number(cfg_.parallel.zero));
        if (e_.grid->pp_size() > 1)
            std::printf(", %s x %d micro-batches%s", setting_text(cfg_.parallel.schedule).c_str(), e_.micro,
                        cfg_.parallel.virtual_stages > 1 ? (", " + std::to_string(cfg_.parallel.virtual_stages) + " virtual stages").c_str() : "");
        if (cfg_.parallel.sequence_parallel && e_.grid->tp_size() > 1) std::printf(", sequence parallel");
        if (e_.grid->cp_size() > 1)
            std::printf(", cp %d (%s, %d rows of each sequence a rank)", e_.grid->cp_size(),
                        setting_text(cfg_.parallel.cp_comm).c_str(), e_.seq_local);
        const PrecisionPolicy prec = cfg_.precision.resolved();
        if (prec.mixed()) std::printf(" | precision %s", prec.name().c_str());
        else std::printf(" | matmuls %s", prec.bf16_products() ? "bf16" : "fp32");
        if (cfg_.runtime.recompute != cost::Recompute::None) std::printf(" | recompute %s", setting_text(cfg_.runtime.recompute).c_str());
        std::printf("\n");
        if (cfg_.data.doc_mask)
            std::printf("doc mask: %lld documents begin at token %d in %s; attention skips %.1f %% of its rows' causal "
                        "(query, key) pairs (those across a document boundary)\n",
                        (long long)doc_stats_.documents, cfg_.data.eot_token, cfg_.data.train.c_str(), 100.0 * doc_stats_.skipped);
        // what runs: the CPU, its peaks measured now, the GEMM kernels, the threads and how ranks wait
        const int threads = get_threads();
        const kernels::MachineInfo m = kernels::machine_info(threads, 0.1);
        const char* local = std::getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
        std::printf("machine: %s | threads %d per rank (%s, %s) | waits: %s\n", kernels::describe(m, threads).c_str(),
                    threads, e_.part->context().lanes > 1 ? "lanes" : "kernels split",
                    bound_ ? "bound one per CPU" : "unbound", wait_policy_text().c_str());
        for (const std::string& f : kernels::findings(m, threads, local ? std::max(1, std::atoi(local)) : 1, false))
            std::printf("warning: %s\n", f.c_str());
        if (e_.part->matmul_precision() == kernels::MatmulPrecision::bf16 && !__builtin_cpu_supports("avx512bf16"))
            std::printf("note: this CPU has no AVX512_BF16, so oneDNN emulates the bf16 matmuls (slower than fp32)\n"
                        "---> HINT: --matmul-precision fp32\n");
    }
    if (is_root() && cfg_.output.out.empty())
        std::printf("note: no --out: this run saves nothing (no checkpoint, config or summary%s)\n",
                    cfg_.output.metrics.empty() ? ", no metrics" : "");
    std::fflush(stdout);
}

void Trainer::write_metrics(const StepStats& s, const std::string& row) {
    if (!metrics_) return;
    // every write checked: a full disk stops the run (the last checkpoint is intact; a torn last row
    // is dropped when the run resumes)
    const std::string line = row + "\n";
    const bool ok = std::fwrite(line.data(), 1, line.size(), metrics_) == line.size();
    if (!ok || std::fflush(metrics_) != 0) {
        const int err = errno;
        std::fclose(metrics_);
        metrics_ = nullptr;
        fail("cannot write the metrics of step ", s.step + 1, " to '", metrics_path_, "': ", std::strerror(err),
             "\n---> HINT: free space on that disk (or another --metrics), then resume with --resume: the torn row is "
             "dropped and the steps after the last checkpoint are trained again");
    }
}

}  // namespace shardlm::train
