#include "shardlm/train/trainer.h"

#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "shardlm/core/check.h"
#include "shardlm/core/runtime.h"
#include "shardlm/core/timer.h"
#include "shardlm/core/trace.h"
#include "shardlm/data/token_shard.h"
#include "shardlm/data/tokenizer.h"
#include "shardlm/io/atomic_file.h"
#include "shardlm/kernels/matmul.h"
#include "shardlm/model/generate.h"
#include "shardlm/model/weights.h"
#include "shardlm/parallel/stages.h"
#include "shardlm/train/checkpoint.h"
#include "shardlm/train/rank_text.h"

namespace shardlm::train {

namespace fs = std::filesystem;

namespace {

std::unique_ptr<data::BatchLoader> make_loader(const std::string& path, const TrainConfig& cfg,
                                               const model::GptConfig& mc, const std::string& order) {
    auto l = std::make_unique<data::BatchLoader>(data::read_token_shard(path), cfg.seq, order, cfg.seed, path);
    int mx = l->max_token();
    SHARDLM_CHECK(mx < mc.vocab_size, "token shard '", path, "' holds token id ", mx, " but the model's vocab_size is ",
                  mc.vocab_size, "\n---> HINT: tokenize with the model's tokenizer, or use a larger vocabulary");
    return l;
}

// "fp32" | "bf16" | "fp16" (validated by TrainConfig)
DType dtype_of(const std::string& name) { return name == "bf16" ? DType::BF16 : name == "fp16" ? DType::F16 : DType::F32; }

std::string fmt_duration(double s) {
    char buf[32];
    int t = int(s + 0.5);
    if (t >= 3600) std::snprintf(buf, sizeof(buf), "%dh%02dm", t / 3600, (t / 60) % 60);
    else if (t >= 60) std::snprintf(buf, sizeof(buf), "%dm%02ds", t / 60, t % 60);
    else std::snprintf(buf, sizeof(buf), "%ds", t);
    return buf;
}

}  // namespace

Trainer::Trainer(TrainConfig cfg) : own_world_(std::make_unique<comm::Group>(comm::Group::self())), cfg_(std::move(cfg)) {
    init(*own_world_);
}

Trainer::Trainer(TrainConfig cfg, comm::Group& world) : cfg_(std::move(cfg)) { init(world); }

void Trainer::init(comm::Group& world) {
    world_ = &world;
    cfg_.validate();
    set_threads(cfg_.threads);
    grid_ = std::make_unique<comm::Grid>(comm::Grid::create(world, {cfg_.dp, cfg_.tp, cfg_.pp}));
    world.set_name("world");
    grid_->dp().set_name("dp");
    grid_->tp().set_name("tp");
    grid_->pp().set_name("pp");
    const int dp = grid_->dp_size(), tp = grid_->tp_size(), pp = grid_->pp_size();
    SHARDLM_CHECK(cfg_.global_batch % (dp * cfg_.micro_batch) == 0, "--global-batch (", cfg_.global_batch,
                  ") must be a multiple of dp (", dp, ") x --micro-batch (", cfg_.micro_batch,
                  "): each data-parallel rank runs whole micro-batches of its G/dp rows");
    micro_ = cfg_.global_batch / (dp * cfg_.micro_batch);
    model_cfg_ = cfg_.model_config();
    SHARDLM_CHECK(cfg_.seq <= model_cfg_.n_ctx, "--seq ", cfg_.seq, " exceeds the model's context length n_ctx = ",
                  model_cfg_.n_ctx, "\n---> HINT: use --seq <= ", model_cfg_.n_ctx);
    SHARDLM_CHECK(model_cfg_.n_head % tp == 0, "--tp ", tp, " must divide the number of attention heads (",
                  model_cfg_.n_head, "): each tensor-parallel rank computes whole heads");
    loader_ = make_loader(cfg_.data, cfg_, model_cfg_, cfg_.data_order);
    if (!cfg_.val_data.empty()) val_loader_ = make_loader(cfg_.val_data, cfg_, model_cfg_, "sequential");

    // the pipeline: which model chunks this rank holds, and the step's schedule
    const int v = cfg_.virtual_stages;
    schedule_ = parallel::make_schedule(parallel::parse_schedule(cfg_.schedule), pp, micro_, v);
    all_chunks_ = parallel::split_stages(model_cfg_, cfg_.seq, pp * v, cfg_.pp_split);
    model::ModelPart::Options po;
    for (int c = 0; c < v; c++) po.chunks.push_back(all_chunks_[size_t(c * pp + grid_->pp_rank())]);
    po.slots = schedule_.slots(grid_->pp_rank());
    tp_ = std::make_unique<parallel::GroupTensorParallel>(grid_->tp());
    po.tp = tp_.get();
    po.sequence_parallel = cfg_.sequence_parallel;
    po.precision = dtype_of(cfg_.precision);
    po.recompute = model::parse_recompute(cfg_.recompute);
    po.unit_multiple = dp;
    po.threads = get_threads();
    part_ = std::make_unique<model::ModelPart>(model_cfg_, po, cfg_.micro_batch, cfg_.seq);
    kernels::MatmulPrecision precision;
    kernels::matmul_precision_from_name(cfg_.matmul_precision, &precision);  // validated above
    part_->set_matmul_precision(precision);

    dp_ = std::make_unique<parallel::DataParallel>(grid_->dp(), *part_, cfg_.zero, cfg_.bucket_mb, pp == 1,
                                                   cfg_.reduce_dtype.empty() ? DType::F32 : dtype_of(cfg_.reduce_dtype));
    scaler_ = optim::LossScaler(cfg_.loss_scale.empty() ? (cfg_.precision == "fp16" ? "dynamic" : "") : cfg_.loss_scale,
                                cfg_.scale_window);
    if (cfg_.sequence_parallel && tp > 1) {
        comm::Group* tpg = &grid_->tp();
        const model::Layout* layout = &part_->layout();
        dp_->set_pre_reduce([tpg, layout](int unit, float* grad) { parallel::sync_replicated_grads(*tpg, *layout, unit, grad); });
    }
    if (pp > 1) {  // the tied embedding: its first and last stage (same dp and tp coordinates)
        const int s = grid_->pp_rank();
        const bool ends = s == 0 || s == pp - 1;
        const int color = ends ? grid_->tp_rank() + tp * grid_->dp_rank() : tp * dp + grid_->world_rank();
        embedding_group_ = std::make_unique<comm::Group>(world.split(color, s));
        embedding_group_->set_name("embedding");
    }
    exec_ = std::make_unique<parallel::PipelineExecutor>(*part_, grid_->pp(), *dp_);
    optimizer_ = std::make_unique<optim::Optimizer>(cfg_.optim_config(), part_->layout(), dp_->owned_ranges());
    load_or_init();
    lr_schedule_ = {optim::parse_lr_kind(cfg_.lr_schedule), cfg_.lr, cfg_.lr_min, cfg_.warmup, cfg_.steps};
    // A progress bar on a terminal; plain lines otherwise. Under mpirun, stdout is a pseudo-terminal
    // of mpirun's even when mpirun's own output goes to a file, so multi-process runs log lines.
    tty_ = is_root() && ::isatty(STDOUT_FILENO) && world.size() == 1;
}

void Trainer::load_or_init() {
    const model::Layout& layout = part_->layout();
    std::string ckpt = cfg_.resume ? latest_checkpoint(cfg_.out) : "";
    if (!ckpt.empty()) {
        nlohmann::json meta = load_checkpoint(ckpt, model_cfg_, layout, *dp_, *optimizer_);
        start_step_ = meta["step"];
        if (meta.contains("loss_scaler"))
            scaler_.restore(meta["loss_scaler"].value("scale", 1.0f), meta["loss_scaler"].value("clean_steps", 0));
        if (is_root()) std::printf("resuming from %s (step %d of %d)\n", ckpt.c_str(), start_step_, cfg_.steps);
    } else {
        if (cfg_.resume && is_root()) std::printf("no checkpoint in %s yet: starting from step 0\n", cfg_.out.c_str());
        if (cfg_.init.empty()) {
            for (auto& [range, storage] : dp_->param_storage()) model::init_gpt2_weights(storage, layout, range, cfg_.seed);
        } else {
            model::PieceStore store;  // an HF directory or a checkpoint: this rank reads only its pieces
            for (const std::string& f : model::model_files(cfg_.init)) store.add_file(f);
            model::check_model_tensors(store, model_cfg_, cfg_.init);
            for (auto& [range, storage] : dp_->param_storage()) store.load(storage, layout, range);
        }
    }
    dp_->params_loaded();  // mixed precision: the 16-bit copy from the fp32 master weights
}

Trainer::~Trainer() {
    if (metrics_) std::fclose(metrics_);
}

bool Trainer::holds_head() const { return part_->has_head(part_->num_chunks() - 1); }

StepStats Trainer::train_step(int step) {
    double t0 = now_s();
    const int G = cfg_.global_batch, M = cfg_.micro_batch, T = cfg_.seq;
    const int dp = grid_->dp_size(), row0 = grid_->dp_rank() * (G / dp);
    // the global mean (summing over ranks gives the full gradient), times the loss scale
    const float dloss = scaler_.scale() / float(G * T);
    for (comm::Group* g : {&grid_->dp(), &grid_->tp(), &grid_->pp(), world_}) g->reset_stats();
    if (embedding_group_) embedding_group_->reset_stats();
    dp_->reset_exposed();
    auto batch = [&](int i, int* inputs, int* targets) {
        for (int j = 0; j < M; j++)
            loader_->fill(step, G, row0 + i * M + j, inputs + size_t(j) * T, targets + size_t(j) * T);
        return M;
    };
    StepStats s;
    s.step = step;
    s.lr = lr_schedule_.at(step);
    auto reduce = [&](const parallel::PipelineExecutor::Result& r) {
        dp_->finish_step();
        if (embedding_group_) dp_->sum_tied_grads(*embedding_group_);
        // Fault injection for the loss-scaling tests: "STEP:RANK" makes that rank's gradient overflow.
        if (const char* k = std::getenv("SHARDLM_TEST_INF_GRAD")) {
            int at_step = -1, at_rank = -1;
            if (std::sscanf(k, "%d:%d", &at_step, &at_rank) == 2 && at_step == step && at_rank == grid_->world_rank())
                const_cast<float*>(dp_->owned_grads().front())[0] = INFINITY;
        }
        // the loss (ranks holding the head, once per tensor-parallel group) and the squared gradient
        // norm (every rank's share), summed over the world in one message
        double sums[2] = {0.0, dp_->grad_norm_sq_local()};
        if (holds_head() && grid_->tp_rank() == 0)
            for (double x : r.loss_sum) sums[0] += x;
        world_->all_reduce_sum(sums, 2);
        s.loss = sums[0] / (double(G) * T);  // the losses of G rows of T tokens
        s.grad_norm = std::sqrt(sums[1]) / scaler_.scale();
    };
    auto update = [&] {
        // loss scaling: every rank sees the same norm, so every rank skips (or not) together
        const float used = scaler_.scale();
        if (scaler_.enabled()) s.loss_scale = used;
        if (!scaler_.update(std::isfinite(s.grad_norm))) {
            s.skipped = true;
            return;
        }
        // torch.nn.utils.clip_grad_norm_: scale by min(1, max_norm / (norm + 1e-6)); the optimiser
        // applies the scale (and undoes the loss scale) as it reads each gradient.
        float grad_scale = 1.0f;
        if (cfg_.grad_clip > 0) grad_scale = std::min(1.0f, float(cfg_.grad_clip / (s.grad_norm + 1e-6)));
        optimizer_->step(dp_->owned_params(), dp_->owned_grads(), s.lr, grad_scale / used);
        dp_->after_step();
    };
    const parallel::PipelineExecutor::Result r = exec_->run(schedule_, batch, M, T, dloss, reduce, update);
    s.bubble = r.bubble();
    s.step_ms = (now_s() - t0) * 1e3;
    s.tokens_per_s = double(G) * T / (s.step_ms / 1e3);
    return s;
}

double Trainer::evaluate() {
    SHARDLM_CHECK(val_loader_, "evaluate() without --val-data");
    const int M = cfg_.micro_batch, T = cfg_.seq, dp = grid_->dp_size();
    // val_batches = 0: every row of the validation shard once (the last batch may be short)
    const int64_t rows = cfg_.val_batches > 0 ? int64_t(cfg_.val_batches) * M : val_loader_->num_rows();
    const int64_t batches = (rows + M - 1) / M;
    // Every data-parallel rank runs the same number of forwards (ZeRO-3 gathers inside them are
    // collective); a rank left without a batch in the last round recomputes batch 0 and does not count it.
    const int rounds = int((batches + dp - 1) / dp);
    auto mine = [&](int round) { return int64_t(round) * dp + grid_->dp_rank(); };
    auto batch = [&](int round, int* inputs, int* targets) {
        const int64_t b = mine(round) < batches ? mine(round) : 0;
        const int n = int(std::min<int64_t>(M, rows - b * M));
        for (int j = 0; j < n; j++)
            val_loader_->fill_row(b * M + j, inputs + size_t(j) * T, targets + size_t(j) * T);
        return n;
    };
    const parallel::Schedule fwd = parallel::make_forward_schedule(grid_->pp_size(), rounds, cfg_.virtual_stages);
    const parallel::PipelineExecutor::Result r = exec_->run(fwd, batch, M, T, 0.0f);
    double sum = 0;  // loss summed over every token of the counted rows
    if (holds_head() && grid_->tp_rank() == 0)
        for (int i = 0; i < rounds; i++)
            if (mine(i) < batches) sum += r.loss_sum[size_t(i)];
    world_->all_reduce_sum(&sum, 1);
    return sum / (double(rows) * T);
}

std::string stats_json(const StepStats& s) {
    // JSON has no inf or NaN: a non-finite value (a skipped fp16 step's gradient norm) is null
    auto num = [](double v) {
        if (!std::isfinite(v)) return std::string("null");
        char b[32];
        std::snprintf(b, sizeof(b), "%.17g", v);
        return std::string(b);
    };
    char buf[256];
    std::snprintf(buf, sizeof(buf), "\"lr\": %.9g, \"step_ms\": %.3f, \"tokens_per_s\": %.3f", double(s.lr), s.step_ms,
                  s.tokens_per_s);
    std::string out = "{\"step\": " + std::to_string(s.step) + ", \"loss\": " + num(s.loss) +
                      ", \"grad_norm\": " + num(s.grad_norm) + ", " + buf;
    if (s.val_loss >= 0) out += ", \"val_loss\": " + num(s.val_loss);
    if (s.loss_scale > 0) {
        std::snprintf(buf, sizeof(buf), ", \"loss_scale\": %.9g, \"skipped\": %s", s.loss_scale, s.skipped ? "true" : "false");
        out += buf;
    }
    return out + "}";
}

void Trainer::open_run_dir() {
    if (!is_root()) return;
    std::string metrics = cfg_.metrics;
    if (!cfg_.out.empty()) {
        fs::create_directories(cfg_.out);
        remove_stale_checkpoint_temps(cfg_.out);
        io::write_file_atomic((fs::path(cfg_.out) / "config.json").string(), config_to_json(cfg_).dump(2) + "\n");
        if (metrics.empty()) metrics = (fs::path(cfg_.out) / "metrics.jsonl").string();
    }
    if (metrics.empty()) return;
    if (start_step_ > 0 && fs::exists(metrics)) {
        // Keep the rows of the steps the checkpoint covers; the killed run's later rows are redone.
        std::ifstream in(metrics);
        std::string line, kept;
        while (std::getline(in, line)) {
            if (line.empty()) continue;
            auto j = nlohmann::json::parse(line, nullptr, false);
            if (!j.is_discarded() && j.contains("step") && j["step"].is_number_integer() && j["step"] < start_step_)
                kept += line + "\n";
        }
        io::write_file_atomic(metrics, kept);
    }
    metrics_ = std::fopen(metrics.c_str(), start_step_ > 0 ? "a" : "w");
    SHARDLM_CHECK(metrics_, "cannot write metrics file '", metrics, "': ", std::strerror(errno));
}

void Trainer::log_step(const StepStats& s, double elapsed_s) {
    if (!is_root()) return;
    int done = s.step + 1 - start_step_, left = cfg_.steps - s.step - 1;
    double eta = done > 0 ? elapsed_s / done * left : 0;
    char val[48] = "";
    if (last_val_ >= 0) std::snprintf(val, sizeof(val), " | val %.4f", last_val_);
    if (tty_) {
        const int width = 24;
        int filled = cfg_.steps > 0 ? int(double(s.step + 1) / cfg_.steps * width) : width;
        std::string bar(size_t(filled), '#');
        bar.resize(width, '-');
        std::printf("\r\033[K[%s] step %d/%d | loss %.4f%s | %.0f tok/s | ETA %s", bar.c_str(), s.step + 1, cfg_.steps,
                    s.loss, val, s.tokens_per_s, fmt_duration(eta).c_str());
        if (left == 0) std::printf("\n");
    } else if ((s.step + 1) % std::max(1, cfg_.log_every) == 0 || left == 0 || s.val_loss >= 0) {
        std::printf("step %5d/%d | loss %.6f | grad_norm %.4f | lr %.3e%s | %.1f ms | %.0f tok/s | ETA %s\n", s.step + 1,
                    cfg_.steps, s.loss, s.grad_norm, double(s.lr), val, s.step_ms, s.tokens_per_s,
                    fmt_duration(eta).c_str());
    }
    std::fflush(stdout);
}

void Trainer::write_summary(const StepStats& last, double train_s, const std::string& sample) {
    if (cfg_.out.empty() || !is_root()) return;
    nlohmann::json j = {{"steps", cfg_.steps},
                        {"final_loss", last.loss},
                        {"train_time_s", train_s},
                        {"tokens", double(cfg_.global_batch) * cfg_.seq * (cfg_.steps - start_step_)}};
    if (last.val_loss >= 0) j["final_val_loss"] = last.val_loss;
    j["train_unigram_entropy"] = unigram_;
    if (val_loader_) j["corpus_unigram_entropy"] = corpus_unigram_;
    if (!sample.empty()) j["sample"] = sample;
    io::write_file_atomic((fs::path(cfg_.out) / "summary.json").string(), j.dump(2) + "\n");
}

nlohmann::json Trainer::writer_json() const {
    return {{"dp", grid_->dp_size()}, {"tp", grid_->tp_size()}, {"pp", grid_->pp_size()}, {"zero", cfg_.zero},
            {"virtual_stages", cfg_.virtual_stages}, {"sequence_parallel", cfg_.sequence_parallel},
            {"world", grid_->world_size()}};
}

std::string Trainer::sample_text() {
    // The whole model on rank 0: gathered over data parallelism with one tensor/pipeline rank;
    // otherwise read back from the final checkpoint's pieces.
    const bool whole = grid_->tp_size() == 1 && grid_->pp_size() == 1;
    AlignedBuffer<float> full;
    std::unique_ptr<model::Layout> layout;
    if (whole) {
        if (!dp_->full_params()) {
            full.resize(part_->layout().total);
            dp_->gather_params(full.data());  // collective
        }
    } else if (cfg_.out.empty()) {
        if (is_root()) std::printf("note: no sample: with --tp/--pp it is read from the final checkpoint (give --out)\n");
        return "";
    }
    if (!is_root()) return "";
    const float* params = whole ? (dp_->full_params() ? dp_->full_params() : full.data()) : nullptr;
    if (!whole) {
        layout = std::make_unique<model::Layout>(model::make_gpt2_layout(model_cfg_));
        full.resize(layout->total);
        model::load_hf_weights(latest_checkpoint(cfg_.out), model_cfg_, *layout, full.data());
        params = full.data();
    }
    data::Gpt2Tokenizer tok = data::Gpt2Tokenizer::load(data::default_vocab_dir());
    model::Generator gen(model_cfg_, layout ? *layout : part_->layout(), params);
    model::SampleOptions so;
    so.max_tokens = cfg_.sample_tokens;
    so.temperature = 1.0f;
    so.top_k = 40;
    so.seed = cfg_.seed;
    std::vector<int> prompt = tok.encode(cfg_.sample_prompt);
    if (prompt.empty()) prompt.push_back(tok.eot_id());
    std::vector<int> ids = model::sample_tokens(gen, prompt, so);
    std::string sample = cfg_.sample_prompt + tok.decode(ids);
    std::printf("---- sample (%d tokens, top-k 40) ----\n%s\n----\n", cfg_.sample_tokens, sample.c_str());
    return sample;
}

void Trainer::run() {
    open_run_dir();
    unigram_ = loader_->unigram_entropy();
    if (val_loader_) corpus_unigram_ = data::BatchLoader::unigram_entropy({loader_.get(), val_loader_.get()});
    if (is_root()) {
        std::printf("model %s: %.2fM parameters | data %s: %lld tokens, unigram entropy %.3f nats", model_cfg_.name.c_str(),
                    model::count_params(model_cfg_).total / 1e6, cfg_.data.c_str(), (long long)loader_->num_tokens(),
                    unigram_);
        if (val_loader_) std::printf(" (train + val: %.3f)", corpus_unigram_);
        std::printf(" | dp %d, tp %d, pp %d, ZeRO-%d", grid_->dp_size(), grid_->tp_size(), grid_->pp_size(), cfg_.zero);
        if (grid_->pp_size() > 1)
            std::printf(", %s x %d micro-batches%s", cfg_.schedule.c_str(), micro_,
                        cfg_.virtual_stages > 1 ? (", " + std::to_string(cfg_.virtual_stages) + " virtual stages").c_str() : "");
        if (cfg_.sequence_parallel && grid_->tp_size() > 1) std::printf(", sequence parallel");
        if (cfg_.precision != "fp32") std::printf(" | precision %s", cfg_.precision.c_str());
        else std::printf(" | matmuls %s", cfg_.matmul_precision.c_str());
        if (cfg_.recompute != "none") std::printf(" | recompute %s", cfg_.recompute.c_str());
        std::printf("\n");
        if (part_->matmul_precision() == kernels::MatmulPrecision::bf16 && !__builtin_cpu_supports("avx512bf16"))
            std::printf("note: this CPU has no AVX512_BF16, so oneDNN emulates the bf16 matmuls (slower than fp32)\n"
                        "---> HINT: --matmul-precision fp32\n");
    }
    const double t_start = now_s();
    StepStats last;
    double bubble_mean = 0;
    for (int step = start_step_; step < cfg_.steps; step++) {
        const bool final = step + 1 == cfg_.steps;
        if (final && !cfg_.trace.empty()) trace::enable(true);  // the timeline of the last step
        StepStats s = train_step(step);
        if (final) trace::enable(false);
        if ((cfg_.memory_report || cfg_.comm_report) && final) {
            // rank 0 prints every rank's report in order (mpirun would interleave their output)
            const std::string rep = (cfg_.memory_report ? memory_report() : "") + (cfg_.comm_report ? comm_report() : "");
            const std::vector<std::string> all = gather_text(*world_, rep);
            if (is_root()) {
                for (const std::string& r : all) std::printf("%s", r.c_str());
                std::fflush(stdout);
            }
        }
        if (final && grid_->pp_size() > 1) {
            double b = s.bubble;
            world_->all_reduce_sum(&b, 1);
            bubble_mean = b / world_->size();
        }
        if (final && !cfg_.trace.empty()) write_trace(bubble_mean);
        if (val_loader_ && ((cfg_.val_every > 0 && (step + 1) % cfg_.val_every == 0) || final)) {
            s.val_loss = evaluate();
            last_val_ = s.val_loss;
        }
        if (metrics_) {
            std::fprintf(metrics_, "%s\n", stats_json(s).c_str());
            std::fflush(metrics_);
        }
        log_step(s, now_s() - t_start);
        if (!cfg_.out.empty() && ((cfg_.ckpt_every > 0 && (step + 1) % cfg_.ckpt_every == 0) || final)) {
            nlohmann::json extra = nlohmann::json::object();
            if (scaler_.enabled())
                extra["loss_scaler"] = {{"scale", scaler_.scale()}, {"clean_steps", scaler_.clean_steps()}};
            save_checkpoint(cfg_.out, step + 1, cfg_, model_cfg_, part_->layout(), *dp_, *optimizer_, cfg_.keep_ckpts,
                            *world_, writer_json(), extra);
            // Fault injection for the resume tests: die by SIGKILL right after this checkpoint.
            if (const char* k = std::getenv("SHARDLM_TEST_KILL_AFTER_CKPT"); k && std::atoi(k) == step + 1)
                std::raise(SIGKILL);
        }
        last = s;
    }
    const double train_s = now_s() - t_start;
    if (is_root() && last.val_loss >= 0) std::printf("final validation loss %.4f\n", last.val_loss);
    if (is_root() && grid_->pp_size() > 1 && cfg_.steps > start_step_)
        std::printf("pipeline bubble (last step, mean over ranks): measured %.3f, theory (p-1)/(v m + p-1) = %.3f\n",
                    bubble_mean, parallel::bubble_fraction_theory(grid_->pp_size(), micro_, cfg_.virtual_stages));
    if (is_root()) std::printf("trained %d steps in %s\n", cfg_.steps - start_step_, fmt_duration(train_s).c_str());
    std::string sample = cfg_.sample_tokens > 0 ? sample_text() : "";
    write_summary(last, train_s, sample);
}

}  // namespace shardlm::train
