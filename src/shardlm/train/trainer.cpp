#include "shardlm/train/trainer.h"

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <cstdio>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <thread>
#include <nlohmann/json.hpp>

#include "shardlm/comm/flight.h"
#include "shardlm/core/check.h"
#include "shardlm/core/runtime.h"
#include "shardlm/core/timer.h"
#include "shardlm/core/trace.h"
#include "shardlm/data/token_shard.h"
#include "shardlm/kernels/gemm/gemm.h"
#include "shardlm/kernels/optimizer_kernels.h"
#include "shardlm/model/weights.h"
#include "shardlm/parallel/stages.h"
#include "shardlm/train/checkpoint.h"
#include "shardlm/train/engine.h"
#include "shardlm/train/fault_injection.h"
#include "shardlm/train/memory_check.h"
#include "shardlm/train/numerics.h"
#include "shardlm/train/rank_check.h"
#include "shardlm/train/rank_text.h"
#include "shardlm/train/run_dir.h"
#include "shardlm/train/stop_signal.h"

namespace shardlm::train {

namespace fs = std::filesystem;

namespace {

std::unique_ptr<data::BatchLoader> make_loader(const std::string& path, const TrainConfig& cfg,
                                               const model::GptConfig& mc, data::Order order) {
    auto l = std::make_unique<data::BatchLoader>(data::read_token_shard(path), cfg.data.seq, order, cfg.runtime.seed, path);
    int mx = l->max_token();
    SHARDLM_CHECK(mx < mc.vocab_size, "token shard '", path, "' holds token id ", mx, " but the model's vocab_size is ",
                  mc.vocab_size, "\n---> HINT: tokenize with the model's tokenizer, or use a larger vocabulary");
    return l;
}

}  // namespace

Trainer::Trainer(TrainConfig cfg) : own_world_(std::make_unique<comm::Group>(comm::Group::self())), cfg_(std::move(cfg)) {
    init(*own_world_);
}

Trainer::Trainer(TrainConfig cfg, comm::Group& world) : cfg_(std::move(cfg)) { init(world); }

void Trainer::init(comm::Group& world) {
    world_ = &world;
    cfg_.validate();
    if (world.name().empty()) world.set_name("world");
    check_same_config(world, cfg_);  // before any collective the ranks could issue differently
    comm::set_timeout(cfg_.reliability.comm_timeout);
    comm::set_collectives(cfg_.runtime.collectives);
    kernels::set_gemm_backend(cfg_.runtime.gemm);
    start_flight_recorder(cfg_, world);
    set_threads(cfg_.runtime.threads);
    bound_ = bind_threads();
    model_cfg_ = cfg_.model.config();
    spikes_ = std::make_unique<SpikeWatch>(cfg_.reliability.spike_sigma, cfg_.reliability.spike_window, model_cfg_.n_layer);
    loader_ = make_loader(cfg_.data.train, cfg_, model_cfg_, cfg_.data.data_order);
    if (loader_->num_rows() < cfg_.data.global_batch && world.rank() == 0)
        std::printf("warning: %s holds %lld rows of %d tokens, fewer than one global batch (%d rows): every step "
                    "trains on some rows twice\n---> HINT: more data, or a smaller --global-batch or --seq\n",
                    cfg_.data.train.c_str(), (long long)loader_->num_rows(), cfg_.data.seq, cfg_.data.global_batch);
    if (!cfg_.data.val_data.empty()) val_loader_ = make_loader(cfg_.data.val_data, cfg_, model_cfg_, data::Order::Sequential);
    e_ = build_engine(cfg_, model_cfg_, world);
    world.set_name("world");
    scaler_ = optim::LossScaler(cfg_.precision.loss_scale_mode(), cfg_.precision.scale_window);
    run_locks_ = claim_run_dir(cfg_, world);
    if (!cfg_.output.out.empty()) open_memory_checkpoints();
    load_or_init();
    lr_schedule_ = {cfg_.optim.lr_schedule, cfg_.optim.lr, cfg_.optim.lr_min, cfg_.optim.warmup, cfg_.data.steps};
    // A progress bar on a terminal; plain lines otherwise. Under mpirun, stdout is a pseudo-terminal
    // of mpirun's even when mpirun's own output goes to a file, so multi-process runs log lines.
    // (one rank under mpirun too: `shardlm launch` reads the output, and after restarts one rank may be left)
    tty_ = is_root() && ::isatty(STDOUT_FILENO) && world.size() == 1 && !std::getenv("OMPI_COMM_WORLD_SIZE");
}

// The stores of --mem-ckpt-every (train/memory_checkpoint.h): each rank's copy goes to its next data-parallel
// replica (else the next rank) when that is on another host. A fresh start clears what earlier runs of --out left.
void Trainer::open_memory_checkpoints() {
    const comm::GridDims& d = e_.grid->dims();
    std::vector<int> next(size_t(world_->size()));
    for (int r = 0; r < world_->size(); r++) {
        comm::GridCoords c = comm::Grid::coords_of(d, r);
        c.dp = (c.dp + 1) % d.dp;
        next[size_t(r)] = d.dp > 1 ? comm::Grid::rank_of(d, c) : (r + 1) % world_->size();
    }
    mem_ckpt_ = std::make_unique<MemoryCheckpoints>(cfg_, *world_, next);
    if (!cfg_.output.resume) mem_ckpt_->clear(/*earlier_runs=*/true);
    if (is_root() && cfg_.output.mem_ckpt_every > 0 && e_.sync->replicas_differ())
        std::printf("note: --mem-ckpt-every %d with --dp-algo %s: each checkpoint kept in memory holds the replicas' mean, as a "
                    "disk checkpoint does (an all-reduce of the parameters and optimiser state each time)\n",
                    cfg_.output.mem_ckpt_every, setting_text(cfg_.dp_algo.algo).c_str());
}

void Trainer::load_or_init() {
    const model::Layout& layout = e_.part->layout();
    if (cfg_.output.resume && resume_from_memory()) return;
    if (cfg_.output.resume && resume_from_checkpoint()) {
        load_rank_state();
        e_.sync->params_loaded(/*start_algorithm=*/false);  // mixed precision: the 16-bit copy from the fp32 master
        return;
    }
    if (cfg_.model.init.empty()) {
        for (auto& [range, storage] : e_.sync->store().param_storage()) model::init_gpt2_weights(storage, layout, range, cfg_.runtime.seed);
    } else {
        check_checkpoint_files(cfg_.model.init, world_);  // a checkpoint given as weights: its checksums
        model::PieceStore store;  // an HF directory or a checkpoint: this rank reads only its pieces
        for (const std::string& f : model::model_files(cfg_.model.init)) store.add_file(f);
        model::check_model_tensors(store, model_cfg_, cfg_.model.init);
        for (auto& [range, storage] : e_.sync->store().param_storage()) store.load(storage, layout, range);
    }
    e_.sync->params_loaded();  // a dp algorithm's start, and mixed precision's 16-bit copy
}

// The checkpoint kept in memory (train/memory_checkpoint.h), if it is newer than the newest on disk.
bool Trainer::resume_from_memory() {
    if (!mem_ckpt_) return false;
    const double t0 = now_s();
    const std::string on_disk = latest_checkpoint(cfg_.output.out);
    int at_least = on_disk.empty() ? 1 : checkpoint_step(on_disk) + 1;
    world_->broadcast_bytes(&at_least, sizeof at_least, 0);  // rank 0's view of the disk, for every rank
    MemoryRecovery r = mem_ckpt_->recover(at_least);
    if (r.step < 0) return false;
    load_resumed(r.dir);
    load_rank_state();
    e_.sync->params_loaded(/*start_algorithm=*/false);
    mem_ckpt_->release(r);
    resumed_from_.clear();  // (gone with the assembled directory)
    if (is_root())
        std::printf("resuming from memory: step %d of %d (%.1f MB from the hosts' own memory, %.1f MB over MPI from other hosts; "
                    "newest on disk: %s) in %.2f s\n",
                    start_step_, cfg_.data.steps, r.local_mb, r.mpi_mb,
                    on_disk.empty() ? "none" : fs::path(on_disk).filename().string().c_str(), now_s() - t0);
    return true;
}

// Loads the checkpoint in dir (whose files the caller checked) and the run's state it records: the step, the loss
// scale, the expert bias; checks that resuming there keeps the run's records.
void Trainer::load_resumed(const std::string& dir) {
    nlohmann::json meta = load_checkpoint(dir, model_cfg_, e_.part->layout(), e_.sync->store(), *e_.optimizer);
    resumed_from_ = dir;
    start_step_ = meta["step"];
    if (meta.contains("loss_scaler"))
        scaler_.restore(meta["loss_scaler"].value("scale", 1.0f), meta["loss_scaler"].value("clean_steps", 0));
    restore_expert_bias(meta, dir);
    SHARDLM_CHECK(start_step_ <= cfg_.data.steps, "--steps ", cfg_.data.steps, " is below the step of the checkpoint to resume (",
                  start_step_, ", ", dir, "): resuming would train a negative number of steps",
                  "\n---> HINT: --steps ", start_step_, " or more (the run's own --steps is in ", cfg_.output.out,
                  "/config.json)");
    check_resume_keeps_records(cfg_, start_step_);
    nothing_to_do_ = start_step_ >= cfg_.data.last_step();
}

bool Trainer::resume_from_checkpoint() {
    // the newest checkpoint whose files match their checksums; damaged ones are set aside
    const std::vector<std::string> all = checkpoints_newest_first(cfg_.output.out);
    for (size_t i = 0; i < all.size(); i++) {
        const std::string problem = verify_checkpoint(all[i], world_);  // the same answer on every rank
        if (!problem.empty()) {
            if (is_root()) {
                fs::rename(all[i], all[i] + ".damaged");
                std::printf("warning: checkpoint %s is damaged: %s\n  set aside as %s.damaged; %s\n", all[i].c_str(),
                            problem.c_str(), all[i].c_str(),
                            i + 1 < all.size() ? "falling back to the previous checkpoint" : "no older checkpoint");
            }
            continue;
        }
        load_resumed(all[i]);
        if (is_root())
            std::printf("resuming from %s%s (step %d of %d)\n", all[i].c_str(),
                        i > 0 ? ", the newest good checkpoint" : "", start_step_, cfg_.data.steps);
        return true;
    }
    SHARDLM_CHECK(all.empty(), "every checkpoint in ", cfg_.output.out, " is damaged (set aside as *.damaged)",
                  "\n---> HINT: start afresh with --overwrite, or repair the files");
    // A run whose checkpoints were all set aside earlier: starting at step 0 would throw it away (and
    // rewrite metrics.jsonl), as a scheduler's retry of the same command would.
    std::string damaged;
    if (fs::is_directory(cfg_.output.out))
        for (const auto& e : fs::directory_iterator(cfg_.output.out))
            if (e.is_directory() && e.path().extension() == ".damaged") damaged += (damaged.empty() ? "" : ", ") + e.path().filename().string();
    SHARDLM_CHECK(damaged.empty(), "--resume: ", cfg_.output.out, " holds no good checkpoint, only damaged ones set aside earlier (",
                  damaged, "): resuming would start again from step 0 and rewrite the run's metrics",
                  "\n---> HINT: --overwrite to start afresh, or repair a checkpoint and rename it back (drop .damaged)");
    check_resume_keeps_records(cfg_, 0);
    if (is_root()) std::printf("no checkpoint in %s yet: starting from step 0\n", cfg_.output.out.c_str());
    return false;
}

OwnedTensors Trainer::owned(bool with_grads) {
    OwnedTensors o;
    o.layout = &e_.part->layout();
    parallel::ParamStore& store = e_.sync->store();
    o.ranges = store.owned_ranges();
    o.params = store.owned_params();
    if (with_grads) o.grads = store.owned_grads();
    return o;
}

Trainer::~Trainer() {
    if (metrics_) std::fclose(metrics_);
}

bool Trainer::holds_head() const { return e_.part->has_head(e_.part->num_chunks() - 1); }

// A batch of micro-batches as this rank runs them, from `read` (row j of micro-batch i: T inputs and targets):
// whole rows, or under context parallelism this rank's positions of each; with document masks each row's
// document starts too (from the whole row: a document may begin on another rank's chunk).
parallel::PipelineExecutor::Batch Trainer::make_batch(std::function<int(int)> rows, RowReader read) {
    parallel::PipelineExecutor::Batch batch;
    batch.rows = rows;
    batch.fill = [this, rows, read](int i, int* inputs, int* targets) {
        const int* pos = e_.part->context().positions();
        const size_t L = size_t(e_.seq_local);
        for (int j = 0; j < rows(i); j++) {
            if (!pos) {
                read(i, j, inputs + j * L, targets + j * L);
                continue;
            }
            read(i, j, whole_row(0), whole_row(1));
            for (size_t k = 0; k < L; k++)
                inputs[j * L + k] = whole_row(0)[pos[k]], targets[j * L + k] = whole_row(1)[pos[k]];
        }
    };
    if (cfg_.data.doc_mask)
        batch.doc_starts = [this, rows, read](int i, int* starts) {
            const int* pos = e_.part->context().positions();
            const size_t L = size_t(e_.seq_local);
            for (int j = 0; j < rows(i); j++) {
                read(i, j, whole_row(0), whole_row(1));
                data::document_starts(whole_row(0), cfg_.data.seq, cfg_.data.eot_token, whole_row(2));
                for (size_t k = 0; k < L; k++) starts[j * L + k] = whole_row(2)[pos ? size_t(pos[k]) : k];
            }
        };
    return batch;
}

int* Trainer::whole_row(int which) {
    std::vector<int>& v = row_buffers_[size_t(which)];
    v.resize(size_t(cfg_.data.seq));
    return v.data();
}

// The step's rows on this data-parallel rank: rows [r G/dp, (r+1) G/dp) of global batch `step`, in
// micro-batches. label_keys: each target is the token's place in the global batch instead (Sophia's
// sampled labels, kernels/sample_labels.h).
parallel::PipelineExecutor::Batch Trainer::step_batch(int step, bool label_keys) {
    const int G = cfg_.data.global_batch, M = cfg_.data.micro_batch, T = cfg_.data.seq;
    const int row0 = e_.grid->dp_rank() * (G / e_.grid->dp_size());
    return make_batch([M](int) { return M; }, [this, step, G, M, T, row0, label_keys](int i, int j, int* in, int* t) {
        const int row = row0 + i * M + j;
        loader_->fill(step, G, row, in, t);
        if (label_keys)
            for (int k = 0; k < T; k++) t[k] = row * T + k;
    });
}

void Trainer::reset_step_counters() {
    comm::Grid& g = *e_.grid;
    for (comm::Group* x : {&g.dp(), &g.tp(), &g.pp(), &g.cp(), &g.dp_cp(), &g.ep(), &g.edp(), world_}) x->reset_stats();
    if (e_.dp_metrics) e_.dp_metrics->reset_stats();
    e_.sync->begin_step();
    e_.part->moe_stats().reset();
    e_.part->moe_traffic().exchanged_bytes = e_.part->moe_traffic().count_gathers = 0;
}

StepStats Trainer::train_step(int step) {
    if (faults_) faults_->before_step(step);
    const double t0 = now_s();
    reset_step_counters();
    StepStats s;
    s.step = step;
    s.lr = lr_schedule_.at(step);
    double clip_norm = 0;  // the norm the clipping reads: the global one, or this replica's own
    auto reduce = [&](const parallel::PipelineExecutor::Result& r) {
        e_.sync->reduce(step, scaler_.scale(), *world_);
        if (faults_) faults_->on_reduced_grads(step, owned(true));
        clip_norm = sum_over_world(s, r);
    };
    auto update = [&] { update_or_skip(s, clip_norm); };
    // the global mean (summing over ranks gives the full gradient), times the loss scale; where each
    // replica steps on its own gradient (--dp-algo other than allreduce), its own rows' mean
    const float dloss = scaler_.scale() / float(cfg_.data.global_batch * cfg_.data.seq) * e_.sync->local_mean_factor();
    s.health = health_due(step);
    if (s.health) {  // every unit's output, over this step's training forwards
        act_sq_.assign(size_t(model_cfg_.n_layer + 2), 0.0), act_n_.assign(size_t(model_cfg_.n_layer + 2), 0.0);
        e_.part->set_activation_probe(act_sq_.data(), act_n_.data());
    }
    const parallel::PipelineExecutor::Result r =
        e_.exec->run(e_.schedule, step_batch(step), cfg_.data.micro_batch, e_.seq_local, dloss, reduce, update);
    e_.part->set_activation_probe(nullptr, nullptr);
    if (!s.skipped && e_.optimizer->hessian_due(step)) s.hessian = hessian_pass(step) ? 1 : -1;
    s.bytes_sent = e_.grid->dp_cp().stats().total_bytes_sent();
    if (e_.sync->replicas_differ() && cfg_.dp_algo.consensus_every > 0 && (step + 1) % cfg_.dp_algo.consensus_every == 0)
        s.consensus = consensus();
    if (faults_) faults_->after_update(step, owned(false));
    s.bubble = r.bubble();
    s.step_ms = (now_s() - t0) * 1e3;
    s.tokens_per_s = double(cfg_.data.global_batch) * cfg_.data.seq / (s.step_ms / 1e3);
    return s;
}

// The loss (ranks holding the head, once per tensor-parallel group), the squared gradient norm (every
// rank's share; each replica's in a slot of its own where replicas differ) and the stop signals,
// summed over the world in one message: every rank sees a NaN, an overflow, or a signal any rank got,
// at the same step. Returns the norm the clipping reads.
double Trainer::sum_over_world(StepStats& s, const parallel::PipelineExecutor::Result& r) {
    const int sig = poll_stop();
    const std::vector<double>& moe = e_.part->moe_stats().sums();
    const size_t moe_at = size_t(kStepSums + e_.sync->replica_slots()), units = size_t(model_cfg_.n_layer + 2);
    const size_t unit_at = moe_at + moe.size(), act_at = unit_at + units;  // each unit's gradient, its outputs' squares
    std::vector<double> sums(world_sums(s.health), 0.0);
    sums[2] = double(sig), sums[3] = sig ? 1.0 : 0.0;
    e_.sync->put_norm_sq(sums[1], sums.data() + kStepSums, sums.data() + unit_at);
    if (s.health)
        for (size_t u = 0; u < units; u++) sums[act_at + u] = act_sq_[u], sums[act_at + units + u] = act_n_[u];
    if (holds_head() && e_.grid->tp_rank() == 0)
        for (double x : r.loss_sum) sums[0] += x;
    // each MoE layer's statistics once: a tensor-parallel group routes alike, a cp group's ranks hold its sums
    if (e_.grid->tp_rank() == 0 && e_.grid->cp_rank() == 0) std::copy(moe.begin(), moe.end(), sums.begin() + long(moe_at));
    world_->all_reduce_sum(sums.data(), sums.size());
    moe_step_stats(s, sums.data() + moe_at);
    unit_stats(s, sums.data() + unit_at, s.health ? sums.data() + act_at : nullptr);
    const parallel::GradNormsSq norms = e_.sync->norms_sq(sums[1], sums.data() + kStepSums);
    s.loss = sums[0] / (double(cfg_.data.global_batch) * cfg_.data.seq);  // the losses of G rows of T tokens
    s.grad_norm = std::sqrt(norms.reported) / scaler_.scale();
    s.stop_signal = sums[3] > 0 ? int(sums[2] / sums[3] + 0.5) : 0;
    // With loss scaling, non-finite gradients under a finite loss are an overflow: the scaler
    // skips the step (and a dynamic scale halves). Anything else non-finite is divergence.
    s.nonfinite = !std::isfinite(s.loss) || (!scaler_.enabled() && !std::isfinite(s.grad_norm));
    return std::sqrt(norms.clip) / scaler_.scale();
}

// DeepSeek-V3's auxiliary-loss-free balancing: layer l's choice bias moves by the rate towards the mean load, from
// the step's loads summed over the world (the same on every rank), and its largest magnitude is logged.
void Trainer::update_expert_bias(int l, const double* load, StepStats::MoeLoad& logged) {
    std::vector<float>& bias = e_.part->expert_bias();
    if (bias.empty()) return;
    const int E = model_cfg_.moe.n_experts;
    const float rate = model_cfg_.moe.bias_rate;
    double mean = 0;
    for (int e = 0; e < E; e++) mean += load[e] / E;
    float* b = bias.data() + size_t(l) * size_t(E);
    for (int e = 0; e < E; e++) {
        b[e] += load[e] < mean ? rate : load[e] > mean ? -rate : 0.0f;
        logged.bias_max = std::max(logged.bias_max, double(std::fabs(b[e])));
    }
}

void Trainer::restore_expert_bias(const nlohmann::json& meta, const std::string& dir) {
    std::vector<float>& bias = e_.part->expert_bias();
    if (bias.empty() || !meta.contains("expert_bias")) return;
    const std::vector<float> saved = meta["expert_bias"].get<std::vector<float>>();
    SHARDLM_CHECK(saved.size() == bias.size(), dir, "/meta.json: field 'expert_bias' holds ", saved.size(),
                  " values, this model's MoE layers ", bias.size(), "\n---> HINT: resume with the model the checkpoint was trained with");
    bias = saved;
}

// The step's expert loads and objective terms from their sums over the world (model/moe.h: MoeStats).
void Trainer::moe_step_stats(StepStats& s, const double* sums) {
    if (!model_cfg_.has_moe()) return;
    const int E = model_cfg_.moe.n_experts, per = E + model::MoeStats::kExtra;
    double aux = 0, z = 0, dropped = 0, choices = 0;
    int layers = 0;
    s.moe_load.clear();
    for (int l = 0; l < model_cfg_.n_layer; l++) {
        const double* x = sums + size_t(l) * size_t(per);
        const double micro = x[E + 3];
        if (micro == 0) continue;  // a dense layer (or one no rank ran)
        std::vector<double> load(x, x + E);
        const double total = std::accumulate(load.begin(), load.end(), 0.0);
        std::sort(load.begin(), load.end());
        s.moe_load.push_back({l, load.front() / total, (load[size_t(E - 1) / 2] + load[size_t(E) / 2]) / 2 / total,
                              load.back() / total, x[E] / total});
        aux += x[E + 1] / micro, z += x[E + 2] / micro, dropped += x[E], choices += total, layers++;
        update_expert_bias(l, x, s.moe_load.back());
    }
    if (layers == 0) return;
    s.aux_loss = aux / layers, s.z_loss = z / layers, s.moe_dropped = dropped / choices;
}

void Trainer::update_or_skip(StepStats& s, double clip_norm) {
    const float used = scaler_.scale();
    if (scaler_.enabled()) s.loss_scale = used;
    // --on-nan stop and skip alike: no update on any rank; loss scaling: every rank sees the same
    // norm, so every rank skips (or not) together
    if (s.nonfinite || !scaler_.update(std::isfinite(s.grad_norm))) {
        s.skipped = true;
        e_.sync->skip(*e_.optimizer, s.step, /*overflow=*/!s.nonfinite);
        return;
    }
    // a spike (the world's sums: every rank decides alike), and with --on-spike skip no update
    const SpikeWatch::Verdict spike = spikes_->check(s.step, s.loss, s.grad_norm, s.unit_grad_norm);
    if (spike.spike) {
        s.spike = spike.message + (cfg_.reliability.on_spike == OnSpike::Skip ? ": the update is skipped (--on-spike skip)" : "");
        s.spike_unit = spike.unit;
        if (cfg_.reliability.on_spike == OnSpike::Skip) {
            s.skipped = true;
            e_.sync->skip(*e_.optimizer, s.step, /*overflow=*/false);
            return;
        }
    }
    // torch.nn.utils.clip_grad_norm_: scale by min(1, max_norm / (norm + 1e-6)); the optimiser
    // applies the scale (and undoes the loss scale) as it reads each gradient.
    float grad_scale = 1.0f;
    if (cfg_.optim.grad_clip > 0) grad_scale = std::min(1.0f, float(cfg_.optim.grad_clip / (clip_norm + 1e-6)));
    if (s.health) update_probe_.before(e_.sync->store());
    e_.sync->step(*e_.optimizer, s.lr, grad_scale / used, s.step, /*touched_after=*/faults_ != nullptr);
    if (s.health) measure_update(s);
}

size_t Trainer::world_sums(bool health) const {
    const size_t units = size_t(model_cfg_.n_layer + 2);
    return size_t(kStepSums + e_.sync->replica_slots()) + e_.part->moe_stats().sums().size() + units * (health ? 3 : 1);
}

// Each unit's gradient norm (the world's sum of its squares; a replica's own where replicas differ: their
// mean), and on a health step the RMS of its outputs.
void Trainer::unit_stats(StepStats& s, const double* grad_sq, const double* act) {
    const size_t units = size_t(model_cfg_.n_layer + 2);
    const double replicas = e_.sync->replicas_differ() ? double(e_.grid->dp_size()) : 1.0;
    s.unit_grad_norm.resize(units);
    for (size_t u = 0; u < units; u++) s.unit_grad_norm[u] = std::sqrt(grad_sq[u] / replicas) / scaler_.scale();
    if (!act) return;
    s.act_rms.resize(units);
    for (size_t u = 0; u < units; u++) s.act_rms[u] = act[units + u] > 0 ? std::sqrt(act[u] / act[units + u]) : NAN;
}

// ||update|| / ||parameters before it|| per unit, summed over the world (each rank its counted slices).
void Trainer::measure_update(StepStats& s) {
    const size_t units = size_t(model_cfg_.n_layer + 2);
    std::vector<double> sums(2 * units, 0.0);
    update_probe_.after(e_.sync->store(), sums.data(), sums.data() + units);
    world_->all_reduce_sum(sums.data(), sums.size());
    s.update_ratio.resize(units);
    for (size_t u = 0; u < units; u++) s.update_ratio[u] = sums[units + u] > 0 ? std::sqrt(sums[u] / sums[units + u]) : NAN;
}

double Trainer::evaluate() {
    SHARDLM_CHECK(val_loader_, "evaluate() without --val-data");
    const int M = cfg_.data.micro_batch, T = cfg_.data.seq, dp = e_.grid->dp_size();
    // val_batches = 0: every row of the validation shard once (the last batch may be short)
    const int64_t rows = cfg_.output.val_batches > 0 ? int64_t(cfg_.output.val_batches) * M : val_loader_->num_rows();
    const int64_t batches = (rows + M - 1) / M;
    // Every data-parallel rank runs the same number of forwards (ZeRO-3 gathers inside them are
    // collective); a rank left without a batch in the last round recomputes batch 0 and does not count it.
    const int rounds = int((batches + dp - 1) / dp);
    auto mine = [&](int round) { return int64_t(round) * dp + e_.grid->dp_rank(); };
    auto batch_of = [&](int round) { return mine(round) < batches ? mine(round) : 0; };
    const parallel::PipelineExecutor::Batch batch =
        make_batch([&](int round) { return int(std::min<int64_t>(M, rows - batch_of(round) * M)); },
                   [&](int round, int j, int* in, int* t) { val_loader_->fill_row(batch_of(round) * M + j, in, t); });
    schedule::Schedule fwd = schedule::make_forward_schedule(e_.grid->pp_size(), rounds, e_.schedule.virtual_stages,
                                                             e_.schedule.placement);
    e_.sync->prepare(fwd);
    const parallel::PipelineExecutor::Result r = e_.exec->run(fwd, batch, M, e_.seq_local, 0.0f);
    double sum = 0;  // loss summed over every token of the counted rows
    if (holds_head() && e_.grid->tp_rank() == 0)
        for (int i = 0; i < rounds; i++)
            if (mine(i) < batches) sum += r.loss_sum[size_t(i)];
    world_->all_reduce_sum(&sum, 1);
    return sum / (double(rows) * T);
}

int Trainer::run() {
    if (nothing_to_do_) {
        if (is_root())
            std::printf("the run in %s is at step %d, %s %d: nothing to train\n---> HINT: %s\n", cfg_.output.out.c_str(),
                        start_step_, cfg_.data.stop_after > 0 ? "--stop-after" : "its --steps", cfg_.data.last_step(),
                        cfg_.data.stop_after > 0 ? "--stop-after 0 (or a later step) trains on to --steps"
                                            : "raise --steps to train further");
        return 0;
    }
    open_run_dir();
    print_header();
    StopSignals signals;  // SIGINT/SIGTERM: finish the step, checkpoint, return
    const double t_start = now_s();
    StepStats last;
    double bubble_mean = 0;
    int status = 0, done = start_step_;
    double t_last_ckpt = now_s();  // --ckpt-every-seconds counts from here (rank 0's clock decides)
    for (int step = start_step_; step < cfg_.data.last_step(); step++) {
        const bool final = step + 1 == cfg_.data.last_step();
        if (final && !cfg_.output.trace.empty()) trace::enable(true);  // the timeline of the last step
        StepStats s = train_step(step);
        if (final) trace::enable(false);
        if (final) bubble_mean = report_last_step(s);
        if (s.nonfinite && !on_nonfinite(s)) {
            status = 1;
            break;
        }
        if (!s.spike.empty() && is_root()) std::printf("%s\n", s.spike.c_str());
        if (val_loader_ && !s.skipped && ((cfg_.output.val_every > 0 && (step + 1) % cfg_.output.val_every == 0) || final)) {
            s.val_loss = evaluate();
            last_val_ = s.val_loss;
        }
        const std::string row = stats_json(s);
        if (!s.nonfinite) write_metrics(s, row);
        comm::flight::set_last_step(row);
        log_step(s, now_s() - t_start);
        if (cfg_.reliability.check_replicas > 0 && (step + 1) % cfg_.reliability.check_replicas == 0)
            check_replicas(*world_, *e_.grid, e_.part->layout(), e_.sync->store().whole_master(), step + 1,
                           e_.sync->replicas_differ());
        done = step + 1;
        last = s;
        if (!checkpoint_if_due(s, final, t_last_ckpt)) {
            status = 1;
            break;
        }
        if (s.stop_signal) {
            status = 128 + s.stop_signal;
            if (is_root())
                std::printf("interrupted by %s after step %d of %d: %s\n", signal_name(s.stop_signal), step + 1, cfg_.data.steps,
                            cfg_.output.out.empty() ? "no --out, so nothing was saved"
                                             : "checkpoint saved; continue with the same command and --resume");
            break;
        }
    }
    if (async_ckpt_.pending()) publish_async_checkpoint(true);  // (a stop for non-finite values: the earlier one)
    return finish_run(status, done, last, bubble_mean, now_s() - t_start);
}

// The last step's reports: every rank's memory and communication report printed by rank 0 in order
// (mpirun would interleave their output), the pipeline bubble's mean over ranks (returned), the trace.
double Trainer::report_last_step(const StepStats& s) {
    if (cfg_.output.memory_report || cfg_.output.comm_report) {
        const std::string rep = (cfg_.output.memory_report ? memory_report() : "") + (cfg_.output.comm_report ? comm_report() : "");
        const std::vector<std::string> all = gather_text(*world_, rep);
        if (is_root()) {
            for (const std::string& r : all) std::printf("%s", r.c_str());
            std::fflush(stdout);
        }
    }
    double bubble_mean = 0;
    if (e_.grid->pp_size() > 1) {
        double b = s.bubble;
        world_->all_reduce_sum(&b, 1);
        bubble_mean = b / world_->size();
    }
    if (!cfg_.output.trace.empty()) write_trace(bubble_mean);
    return bubble_mean;
}

// A checkpoint after step s when one is due: every --ckpt-every steps, every --ckpt-every-seconds
// (rank 0's clock), at the run's end and on a stop signal (those two written before returning, the
// others in the background with --async-ckpt). False: the parameters are not finite, nothing written.
bool Trainer::checkpoint_if_due(const StepStats& s, bool final, double& t_last_ckpt) {
    const int steps_done = s.step + 1;
    // memory first: a disk checkpoint that fails (a full disk) ends the run with this step kept
    if (mem_ckpt_ && mem_ckpt_->enabled() && cfg_.output.mem_ckpt_every > 0 && steps_done % cfg_.output.mem_ckpt_every == 0 && !final)
        save_memory_checkpoint(steps_done);
    if (async_ckpt_.pending()) publish_async_checkpoint(false);
    bool due = (cfg_.output.ckpt_every > 0 && steps_done % cfg_.output.ckpt_every == 0) || final || s.stop_signal;
    if (!due && cfg_.output.ckpt_every_seconds > 0 && !cfg_.output.out.empty()) {
        float late = is_root() && now_s() - t_last_ckpt >= cfg_.output.ckpt_every_seconds ? 1.0f : 0.0f;
        world_->broadcast(&late, 1, 0);
        due = late != 0;
    }
    if (cfg_.output.out.empty() || !due) return true;
    if (!save_finite_checkpoint(steps_done, cfg_.output.async_ckpt && !final && !s.stop_signal)) return false;
    t_last_ckpt = now_s();
    return true;
}

// The run's end: what it trained, the final validation loss, the pipeline bubble beside its theory,
// the GEMM choices, the sample and summary.json (status 0), or just the count (a stop).
int Trainer::finish_run(int status, int done, const StepStats& last, double bubble_mean, double train_s) {
    if (status != 0) {
        if (is_root()) std::printf("trained %d steps in %s\n", done - start_step_, fmt_duration(train_s).c_str());
        std::fflush(stdout);
        return status;
    }
    if (is_root() && last.val_loss >= 0) std::printf("final validation loss %.4f\n", last.val_loss);
    if (is_root() && e_.grid->pp_size() > 1 && cfg_.data.last_step() > start_step_)
        std::printf("pipeline bubble (last step, mean over ranks): measured %.3f, theory %s = %.3f\n", bubble_mean,
                    schedule::bubble_theory_formula(e_.schedule.kind),
                    schedule::bubble_fraction_theory(e_.schedule.kind, e_.grid->pp_size(), e_.micro, e_.schedule.virtual_stages));
    if (is_root()) std::printf("trained %d steps in %s\n", cfg_.data.last_step() - start_step_, fmt_duration(train_s).c_str());
    if (is_root()) std::printf("GEMMs: %s\n", kernels::gemm_summary().c_str());  // what --gemm chose
    std::string sample = cfg_.output.sample_tokens > 0 ? sample_text() : "";
    write_summary(last, train_s, sample);
    if (mem_ckpt_ && cfg_.data.last_step() == cfg_.data.steps) mem_ckpt_->clear();  // the run is whole on disk
    return 0;
}

bool Trainer::on_nonfinite(StepStats& s) {
    const NonFiniteReport rep = find_nonfinite(*world_, owned(true), std::isfinite(s.loss));
    const bool go_on = cfg_.reliability.on_nan == OnNan::Skip && !rep.params;
    write_metrics(s, stats_json(s));
    if (is_root()) {
        std::fprintf(go_on ? stdout : stderr, "%s: step %d: non-finite loss (%g) or gradient norm (%g); %s\n",
                     go_on ? "warning" : "error", s.step + 1, s.loss, s.grad_norm, rep.message.c_str());
        if (go_on) std::printf("  --on-nan skip: no optimiser update on any rank at this step\n");
        else
            std::fprintf(stderr, "  stopped without an update and without a checkpoint%s\n---> HINT: %s\n",
                         cfg_.output.out.empty() ? "" : (" (the last one in " + cfg_.output.out + " is finite)").c_str(),
                         rep.params ? "the parameters themselves are non-finite: resume from the last checkpoint with a lower --lr"
                                    : "a lower --lr, --grad-clip 1.0, or --on-nan skip to skip such steps");
        std::fflush(stdout);
        std::fflush(stderr);
    }
    return go_on;
}

void Trainer::publish_async_checkpoint(bool wait) {
    if (const int step = async_ckpt_.poll(*world_, wait, faults_.get()); step > 0 && faults_) faults_->after_checkpoint(step);
}

// A checkpoint kept in memory and on the partner (train/memory_checkpoint.h), what save_checkpoint writes.
void Trainer::save_memory_checkpoint(int steps_done) {
    std::vector<AlignedBuffer<float>> replica;
    const std::vector<RankTensor> rank = checkpoint_rank_tensors(replica);
    std::unique_ptr<PendingCheckpoint> p = snapshot_state(steps_done, cfg_, model_cfg_, e_.part->layout(), e_.sync->store(),
                                                          *e_.optimizer, *world_, writer_json(), checkpoint_extra(), rank);
    restore_replica(replica);
    mem_ckpt_->save(*p);
}

nlohmann::json Trainer::checkpoint_extra() const {
    nlohmann::json extra = nlohmann::json::object();
    if (scaler_.enabled()) extra["loss_scaler"] = {{"scale", scaler_.scale()}, {"clean_steps", scaler_.clean_steps()}};
    if (!e_.part->expert_bias().empty()) extra["expert_bias"] = e_.part->expert_bias();
    return extra;
}

bool Trainer::save_finite_checkpoint(int steps_done, bool background) {
    if (!params_finite(*world_, owned(false))) {
        const NonFiniteReport rep = find_nonfinite(*world_, owned(false), true);
        if (is_root())
            std::fprintf(stderr, "error: after step %d the parameters are non-finite (%s): no checkpoint is written\n"
                                 "---> HINT: a lower --lr or --grad-clip 1.0\n", steps_done, rep.message.c_str());
        return false;
    }
    const nlohmann::json extra = checkpoint_extra();
    if (async_ckpt_.pending()) publish_async_checkpoint(true);  // one in flight at a time, in order
    std::vector<AlignedBuffer<float>> replica;  // where replicas differ: this rank's own, while the mean is written
    const std::vector<RankTensor> rank = checkpoint_rank_tensors(replica);
    if (background) {
        async_ckpt_.start(snapshot_checkpoint(cfg_.output.out, steps_done, cfg_, model_cfg_, e_.part->layout(), e_.sync->store(),
                                              *e_.optimizer, cfg_.output.keep_ckpts, *world_, writer_json(), extra, rank));
        restore_replica(replica);
        return true;
    }
    save_checkpoint(cfg_.output.out, steps_done, cfg_, model_cfg_, e_.part->layout(), e_.sync->store(), *e_.optimizer, cfg_.output.keep_ckpts, *world_,
                    writer_json(), extra, faults_.get(), rank);
    restore_replica(replica);
    if (faults_) faults_->after_checkpoint(steps_done);
    return true;
}

}  // namespace shardlm::train
