// train/checkpoint.h: checkpoints that resume bit-exact and load under any layout.
//
// RUN_DIR/ckpt_<step, 8 digits>/ holds
//   meta.json        format version, completed steps, model and training config, optimiser
//                    hyper-parameters and step count, data position, RNG seed, the writer's layout
//                    (dp, tp, pp, ZeRO stage, virtual stages) and the list of tensor files
//   config.json      HF GPT-2 config
//   model.rank<r>-of-<n>.safetensors      the pieces of the parameters rank r owns (model/pieces.h):
//                    HF GPT-2 names and HF shapes (Conv1D weights [in, out], true vocabulary); a whole
//                    tensor is named as in HF, a piece "<name>[r0:r1,c0:c1]" (1-D: "[r0:r1]")
//   optimizer.rank<r>-of-<n>.safetensors  the same pieces of the optimiser state, "<state>/<name>[box]"
//   state.rank<r>-of-<n>.safetensors      (only with a data-parallel algorithm that keeps state per rank,
//                    parallel/dp_algo.h) this rank's own flat tensors: where replicas differ its replica's
//                    parameters and optimiser state ("params", "optimizer/<state>"), and the algorithm's
//                    buffers (error feedback, DiLoCo's anchor and momentum, PowerSGD's Q). They resume in
//                    the layout that wrote them (load_rank_tensors); another layout starts them afresh.
// Every element is written once, by the rank that owns it: each data-parallel rank writes its ZeRO
// slice of every unit (at every ZeRO stage: replicas are written once), replicated tensors come from
// tensor-parallel rank 0 only, and the last pipeline stage's tied copy of wte is never written. No rank
// gathers the model or the optimiser state. Loading intersects the pieces a rank needs with the
// pieces stored, so any layout (dp, tp, pp, ZeRO stage) resumes any other; `shardlm export`
// assembles an HF directory from a checkpoint, and --init / generate read one directly.
// It is written as a hidden temporary directory, every file fsynced, then renamed into place; older
// checkpoints are removed only after that, so a kill at any moment leaves the previous one intact.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "shardlm/comm/group.h"
#include "shardlm/io/safetensors.h"
#include "shardlm/model/config.h"
#include "shardlm/model/layout.h"
#include "shardlm/optim/optimizer.h"
#include "shardlm/parallel/param_store.h"
#include "shardlm/train/fault_injection.h"
#include "shardlm/train/train_config.h"

namespace shardlm::train {

inline constexpr int kCheckpointVersion = 4;  // 4: meta.json "checksums"; 3 (none) still loads

// One of this rank's own flat tensors (not a piece of the model): see state.rank<r>-of-<n> above.
struct RankTensor {
    std::string name;
    float* data;
    size_t n;
};

// Writes RUN_DIR/ckpt_<step>/ and keeps the newest `keep` complete checkpoints. Returns its path.
// Collective over `world` (every rank writes its own pieces). writer: the layout, for meta.json;
// extra: more top-level keys of meta.json (the loss scaler's state); faults: the tests' (or null).
std::string save_checkpoint(const std::string& run_dir, int step, const TrainConfig& cfg, const model::GptConfig& mc,
                            const model::Layout& layout, const parallel::ParamStore& store, optim::Optimizer& opt,
                            int keep, comm::Group& world, const nlohmann::json& writer,
                            const nlohmann::json& extra = nlohmann::json::object(), FaultInjector* faults = nullptr,
                            const std::vector<RankTensor>& rank_tensors = {});

// The same in three phases, so that the files can be written while training goes on (--async-ckpt):
//   snapshot_checkpoint (collective): creates the hidden temporary directory and copies this rank's
//     pieces into memory (and, on rank 0, meta.json's contents): the state at `step`, however the
//     parameters change afterwards;
//   write() (this rank, any thread): writes this rank's two files into the temporary directory and
//     their checksums, then frees the copy;
//   commit() (collective, after every rank's write()): meta.json with every checksum, then the
//     rename into place and the pruning to `keep`. A kill before the rename leaves the previous
//     checkpoint intact, as with save_checkpoint.
class PendingCheckpoint {
public:
    int step() const { return step_; }
    size_t bytes() const;  // this rank's snapshot
    void write();
    std::string commit(comm::Group& world, FaultInjector* faults = nullptr);

    // The parts, for a checkpoint kept elsewhere (train/memory_checkpoint.h): this rank's file names;
    // take_files gives their contents (and frees the copy) instead of write(); either keeps their
    // checksums (sums(): "<file> <xxh64>\n" lines); rank 0's meta.json with every rank's sums, and
    // config.json's text.
    std::vector<std::string> file_names() const;
    std::vector<std::pair<std::string, std::string>> take_files();  // (name, bytes)
    const std::string& sums() const { return sums_; }
    std::string meta_json(const std::vector<std::string>& all_sums) const;
    const std::string& hf_config() const { return hf_config_; }

private:
    void write_files(const std::string& dir);
    friend std::unique_ptr<PendingCheckpoint> snapshot_checkpoint(const std::string&, int, const TrainConfig&,
                                                                  const model::GptConfig&, const model::Layout&,
                                                                  const parallel::ParamStore&, optim::Optimizer&, int,
                                                                  comm::Group&, const nlohmann::json&, const nlohmann::json&,
                                                                  const std::vector<RankTensor>&);
    friend std::unique_ptr<PendingCheckpoint> snapshot_state(int, const TrainConfig&, const model::GptConfig&,
                                                             const model::Layout&, const parallel::ParamStore&, optim::Optimizer&,
                                                             comm::Group&, const nlohmann::json&, const nlohmann::json&,
                                                             const std::vector<RankTensor>&);
    PendingCheckpoint() = default;
    std::string run_dir_, final_dir_, tmp_, sums_, hf_config_;
    int step_ = 0, keep_ = 1, rank_ = 0, n_ = 1;
    io::SafetensorsWriter model_, optimizer_, state_;
    bool has_state_ = false;
    nlohmann::json meta_;  // rank 0
};
std::unique_ptr<PendingCheckpoint> snapshot_checkpoint(const std::string& run_dir, int step, const TrainConfig& cfg,
                                                       const model::GptConfig& mc, const model::Layout& layout,
                                                       const parallel::ParamStore& store, optim::Optimizer& opt, int keep,
                                                       comm::Group& world, const nlohmann::json& writer,
                                                       const nlohmann::json& extra = nlohmann::json::object(),
                                                       const std::vector<RankTensor>& rank_tensors = {});

// snapshot_checkpoint's copy without a directory (collective): for a checkpoint kept in memory.
std::unique_ptr<PendingCheckpoint> snapshot_state(int step, const TrainConfig& cfg, const model::GptConfig& mc,
                                                  const model::Layout& layout, const parallel::ParamStore& store,
                                                  optim::Optimizer& opt, comm::Group& world, const nlohmann::json& writer,
                                                  const nlohmann::json& extra = nlohmann::json::object(),
                                                  const std::vector<RankTensor>& rank_tensors = {});

// The directories shardlm writes into a run directory, by their exact names: a checkpoint
// "ckpt_<8 digits>", its temporary ".ckpt_<8 digits>.tmp.<digits>" and one set aside as damaged
// "ckpt_<8 digits>.damaged". Anything else (a user's "ckpt_backup") is not shardlm's.
enum class CheckpointDir { None, Complete, Temporary, Damaged };
CheckpointDir checkpoint_dir_kind(const std::string& name);

// Removes hidden temporary checkpoint directories left by a killed run.
void remove_stale_checkpoint_temps(const std::string& run_dir);

// The newest complete checkpoint directory in RUN_DIR, or "" if there is none.
std::string latest_checkpoint(const std::string& run_dir);

// A checkpoint directory's name: "ckpt_<step, 8 digits>".
std::string checkpoint_name(int step);
// The step of a checkpoint directory's name (ckpt_<8 digits>); 0 for "".
int checkpoint_step(const std::string& dir);

// Complete checkpoint directories in RUN_DIR, newest first.
std::vector<std::string> checkpoints_newest_first(const std::string& run_dir);

// The newest checkpoint in RUN_DIR whose files match their checksums (verify_checkpoint), for the readers
// that take a run directory (generate); "" if none. What is wrong with each newer one (verify_checkpoint's
// answer, naming the file) is appended to *damaged (nothing is renamed: a reader leaves the run as it is).
std::string newest_good_checkpoint(const std::string& run_dir, std::vector<std::string>* damaged);

// The files a checkpoint's meta.json (read from path) lists: the model, optimizer and state files and
// config.json, each with its recorded xxh64 ("" in a version 3 checkpoint).
std::vector<std::pair<std::string, std::string>> checkpoint_files(const nlohmann::json& meta, const std::string& path);

// Checks that meta.json reads and that every file it lists exists and has the XXH64 recorded there.
// Returns "" or what is wrong, naming the file. With g: collective, the files are split between g's
// ranks and every rank gets the same answer. A version 3 checkpoint (no checksums) only needs its files.
std::string verify_checkpoint(const std::string& dir, comm::Group* g = nullptr);
// For readers of a checkpoint as weights (--init, export, generate): if dir is a checkpoint
// (meta.json), throws verify_checkpoint's finding. An HF directory passes.
void check_checkpoint_files(const std::string& dir, comm::Group* g = nullptr);

// Loads this rank's parameters (into dp's storage) and optimiser state; checks that the
// checkpoint's model and optimiser match. Returns meta.json (its "step" is the number of completed
// steps).
// Throws, naming every key that differs and the flags that keep them, unless the checkpoint in dir (its
// meta.json read into meta) holds the model mc describes (model/architecture.h).
void check_same_architecture(const std::string& dir, const nlohmann::json& meta, const model::GptConfig& mc);

nlohmann::json load_checkpoint(const std::string& dir, const model::GptConfig& mc, const model::Layout& layout,
                               parallel::ParamStore& store, optim::Optimizer& opt);

// This rank's own tensors (state.rank<r>-of-<n>) into targets, if the checkpoint has them and was
// written by this layout (writer: this run's, as meta.json's "writer"); else returns false and says why.
bool load_rank_tensors(const std::string& dir, const nlohmann::json& writer, int rank,
                       const std::vector<RankTensor>& targets, std::string* why);

// Reads meta.json of a checkpoint, with clear errors.
nlohmann::json read_checkpoint_meta(const std::string& dir);

}  // namespace shardlm::train
