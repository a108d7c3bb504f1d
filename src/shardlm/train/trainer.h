// train/trainer.h: the training loop of one rank: the process grid (dp x tp x pp), this rank's part
// of the model, data parallelism / ZeRO, the pipeline schedule of a step and its executor, global-norm
// clipping, the optimiser step, validation, metrics, progress, checkpoints and resume.
#pragma once
#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "shardlm/comm/grid.h"
#include "shardlm/data/loader.h"
#include "shardlm/model/part.h"
#include "shardlm/optim/loss_scaler.h"
#include "shardlm/optim/optimizer.h"
#include "shardlm/parallel/grad_sync.h"
#include "shardlm/parallel/pipeline.h"
#include "shardlm/schedule/schedule.h"
#include "shardlm/parallel/tensor_parallel.h"
#include "shardlm/train/async_checkpoint.h"
#include "shardlm/train/checkpoint.h"
#include "shardlm/train/engine.h"
#include "shardlm/train/fault_injection.h"
#include "shardlm/train/health.h"
#include "shardlm/train/memory_checkpoint.h"
#include "shardlm/train/numerics.h"
#include "shardlm/train/run_dir.h"
#include "shardlm/train/train_config.h"

namespace shardlm::train {

struct StepStats {
    int step = 0;
    double loss = 0;       // mean over the G*T targets, before the update
    double grad_norm = 0;  // global L2 norm before clipping
    float lr = 0;
    double step_ms = 0;
    double tokens_per_s = 0;
    double val_loss = -1;  // < 0: not measured at this step
    double bubble = 0;     // this rank's idle fraction of the pipeline passes
    double loss_scale = 0;   // the scale this step's backward used (0: no loss scaling)
    bool nonfinite = false;  // the loss or the gradient norm is NaN/inf (the same on every rank)
    bool skipped = false;    // no optimiser update at this step (non-finite, or a loss-scale overflow)
    int stop_signal = 0;     // SIGINT/SIGTERM reached some rank before this step's reduction
    int hessian = 0;         // sophia: 1 the Hessian estimate was refreshed after this step, -1 its pass was not finite
    uint64_t bytes_sent = 0; // bytes this rank sent in its data-parallel group during the step
    double consensus = -1;   // replicas that differ: mean_i ||x_i - x_bar|| / ||x_bar|| after the step (< 0: not measured)
    // mixture of experts (model/moe.h), over the step's global batch: the mean over MoE layers of the
    // balance loss E sum_i f_i P_i (1: balanced) and of the z-loss (mean squared log-sum-exp), the share
    // of choices the capacity dropped, and each MoE layer's expert loads as shares of its choices
    struct MoeLoad {
        int layer = 0;
        double min = 0, median = 0, max = 0, dropped = 0;
        double bias_max = -1;  // the choice bias's largest magnitude after the step (< 0: no bias)
    };
    double aux_loss = -1, z_loss = -1, moe_dropped = -1;  // < 0: a dense model
    std::vector<MoeLoad> moe_load;
    // training health (train/health.h), per compute unit (embedding, blocks, head): the gradient norm every
    // step; on --health-every steps also the update-to-parameter ratio and the output RMS (health true)
    std::vector<double> unit_grad_norm, update_ratio, act_rms;
    bool health = false;
    std::string spike;    // a spike's warning, naming the unit ("" without one)
    int spike_unit = -1;  // the unit it names (-1: none)
};

class Trainer {
public:
    // Doubles of the step's one world all-reduce: loss, squared gradient norm, stop signals, signalled ranks.
    static constexpr int kStepSums = 4;

    // world: all ranks of this run (comm::Group::self() for one process). The grid is dp x tp x pp
    // over it; each data-parallel replica computes rows [r G/dp, (r+1) G/dp) of every global batch.
    Trainer(TrainConfig cfg, comm::Group& world);
    explicit Trainer(TrainConfig cfg);  // one process
    ~Trainer();

    StepStats train_step(int step);  // one optimiser step on global batch `step` (collective)
    double evaluate();               // mean validation loss over val_batches micro-batches (collective)
    bool hessian_pass(int step);     // sophia: refresh the Hessian estimate on step's batch (collective)
    double consensus();              // the replicas' consensus distance (collective)
    // Steps [start, cfg.steps) with everything around them. Returns the exit status: 0, 1 after a
    // non-finite step (--on-nan stop), 128 + signal after SIGINT/SIGTERM (a checkpoint was written).
    int run();

    const model::GptConfig& model_config() const { return model_cfg_; }
    model::ModelPart& part() { return *e_.part; }
    parallel::GradSync& grad_sync() { return *e_.sync; }
    optim::Optimizer& optimizer() { return *e_.optimizer; }
    const TrainConfig& config() const { return cfg_; }
    const comm::Grid& grid() const { return *e_.grid; }
    int start_step() const { return start_step_; }
    // Faults to inject (tests only: train/fault_injection.h); none by default.
    void set_faults(std::unique_ptr<FaultInjector> f) { faults_ = std::move(f); }
    // This rank's node's stores of checkpoints kept in memory ("" without --out): what a lost node loses.
    std::string node_memory() const { return mem_ckpt_ ? mem_ckpt_->host_dir() : ""; }
    bool is_root() const { return e_.grid->world_rank() == 0; }

private:
    void init(comm::Group& world);
    // the step, cut where it reads: its rows, the counters at zero, the one world sum, the update
    parallel::PipelineExecutor::Batch step_batch(int step, bool label_keys = false);
    using RowReader = std::function<void(int micro, int j, int* inputs, int* targets)>;
    parallel::PipelineExecutor::Batch make_batch(std::function<int(int)> rows, RowReader read);
    int* whole_row(int which);  // a buffer of --seq ints: 0 inputs, 1 targets, 2 document starts
    void reset_step_counters();
    void moe_step_stats(StepStats& s, const double* sums);
    void update_expert_bias(int layer, const double* load, StepStats::MoeLoad& logged);
    void restore_expert_bias(const nlohmann::json& meta, const std::string& dir);
    void dp_comm_rows(std::string& out) const;
    double sum_over_world(StepStats& s, const parallel::PipelineExecutor::Result& r);
    void update_or_skip(StepStats& s, double clip_norm);
    void load_or_init();
    void open_memory_checkpoints();
    bool resume_from_memory();      // loads the checkpoint kept in memory if it is newer than the disk's; false if not
    bool resume_from_checkpoint();  // loads the newest good checkpoint of --out; false if there is none
    void load_resumed(const std::string& dir);
    void save_memory_checkpoint(int steps_done);
    nlohmann::json checkpoint_extra() const;  // meta.json's keys beyond the model: the loss scale, the expert bias
    // the data-parallel algorithm's per-rank state (train/checkpoint.h: state.rank<r>-of-<n>): what a
    // checkpoint keeps, and its load from the checkpoint resumed (afresh if another layout wrote it)
    std::vector<RankTensor> rank_tensors();
    void load_rank_state();
    // For a checkpoint (collective): where replicas differ, the shared model and optimiser pieces hold
    // the replicas' mean (one model: what export, generate and a resume in another layout read), so the
    // parameters and optimiser state are averaged in place, and the rank tensors point at copies of this
    // rank's own (kept in `replica`); restore_replica puts them back after the snapshot.
    std::vector<RankTensor> checkpoint_rank_tensors(std::vector<AlignedBuffer<float>>& replica);
    void restore_replica(std::vector<AlignedBuffer<float>>& replica);
    void open_run_dir();
    void trim_metrics(const std::string& path);
    void print_header();
    void write_metrics(const StepStats& s, const std::string& row);  // row: stats_json(s)
    bool on_nonfinite(StepStats& s);           // reports a non-finite step; whether training goes on
    double report_last_step(const StepStats& s);
    bool checkpoint_if_due(const StepStats& s, bool final, double& t_last_ckpt);
    int finish_run(int status, int done, const StepStats& last, double bubble_mean, double train_s);
    // refuses (false) if a parameter is non-finite; background: written by async_ckpt_'s thread
    bool save_finite_checkpoint(int steps_done, bool background = false);
    void publish_async_checkpoint(bool wait);
    // --resume: the run's config.json replaced by `now`: warns about changed training settings and
    // appends the old one to config_history.jsonl
    void keep_config_history(const std::string& path, const nlohmann::json& now);
    OwnedTensors owned(bool with_grads);      // what this rank's optimiser owns
    void log_step(const StepStats& s, double elapsed_s);
    void write_summary(const StepStats& last, double train_s, const std::string& sample);
    bool holds_head() const;
    std::string memory_report() const;
    std::string block_activation_report() const;  // memory_report's line of one block's activations
    std::string comm_report() const;
    void write_trace(double bubble_mean);
    std::string sample_text();
    nlohmann::json writer_json() const;

    std::unique_ptr<FaultInjector> faults_;
    RunDirLocks run_locks_;
    // training health (train/health.h): the update's probe, the activations' sums (n_layer + 2 each), spikes
    UpdateProbe update_probe_;
    std::vector<double> act_sq_, act_n_;
    std::unique_ptr<SpikeWatch> spikes_;
    bool health_due(int step) const { return cfg_.reliability.health_every > 0 && (step + 1) % cfg_.reliability.health_every == 0; }
    size_t world_sums(bool health) const;  // doubles of the step's world all-reduce
    void unit_stats(StepStats& s, const double* grad_sq, const double* act);
    void measure_update(StepStats& s);  // one job per run directory (train/run_lock.h), held while the trainer lives
    std::unique_ptr<comm::Group> own_world_;  // the self group of the one-process constructor
    comm::Group* world_ = nullptr;
    TrainConfig cfg_;
    model::GptConfig model_cfg_;
    Engine e_;  // the grid, the schedule, this rank's part, DP/TP, executor, optimiser (train/engine.h)
    std::unique_ptr<data::BatchLoader> loader_, val_loader_;
    optim::LrSchedule lr_schedule_;
    optim::LossScaler scaler_{optim::LossScale{}, 1000};
    std::FILE* metrics_ = nullptr;
    std::string metrics_path_;
    AsyncCheckpoint async_ckpt_;  // --async-ckpt: the checkpoint being written in the background
    std::unique_ptr<MemoryCheckpoints> mem_ckpt_;  // --mem-ckpt-every (and a resume's search of memory)
    int start_step_ = 0;
    std::string resumed_from_;    // the checkpoint resumed, if any
    bool nothing_to_do_ = false;  // resumed at exactly --steps
    bool tty_ = false;
    double last_val_ = -1;
    double unigram_ = 0;          // of the training shard
    double corpus_unigram_ = 0;   // of training + validation shards
    data::DocumentStats doc_stats_;  // --doc-mask: of the training shard
    std::vector<int> row_buffers_[3];  // whole_row's
    bool bound_ = false;  // bind_threads bound one thread per CPU (the run header says so)
};

std::string stats_json(const StepStats& s);  // one metrics.jsonl line (null for non-finite values)
std::string fmt_duration(double s);          // "1h02m", "3m05s", "42s"

}  // namespace shardlm::train
