#include "shardlm/train/checkpoint.h"

#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <map>
#include <csignal>
#include <cstdlib>
#include <cstdio>
#include <filesystem>
#include <vector>

#include "shardlm/core/check.h"
#include "shardlm/core/format.h"
#include "shardlm/io/atomic_file.h"
#include "shardlm/io/hash.h"
#include "shardlm/io/json_file.h"
#include "shardlm/io/safetensors.h"
#include "shardlm/model/architecture.h"
#include "shardlm/model/pieces.h"
#include "shardlm/model/weights.h"
#include "shardlm/train/rank_text.h"

namespace shardlm::train {

namespace fs = std::filesystem;

namespace {

std::string ckpt_name(int step) { return checkpoint_name(step); }

// Complete checkpoints in run_dir, oldest first.
std::vector<fs::path> list_checkpoints(const std::string& run_dir) {
    std::vector<fs::path> out;
    if (!fs::is_directory(run_dir)) return out;
    for (const auto& e : fs::directory_iterator(run_dir)) {
        std::string n = e.path().filename().string();
        if (e.is_directory() && checkpoint_dir_kind(n) == CheckpointDir::Complete && fs::exists(e.path() / "meta.json"))
            out.push_back(e.path());
    }
    std::sort(out.begin(), out.end());
    return out;
}


std::string rank_file(const char* kind, int rank, int n) {
    char buf[96];
    std::snprintf(buf, sizeof(buf), "%s.rank%05d-of-%05d.safetensors", kind, rank, n);
    return buf;
}

// The pieces of every element this rank writes: its slice of each unit, the parameters it owns
// (model::ParamSpec::counted: tensor-parallel rank 0 for replicated tensors, never the tied copy).
// f(piece, slice) for each.
template <typename F>
void for_each_written_piece(const model::Layout& layout, const parallel::ParamStore& store, F&& f) {
    for (const parallel::ParamStore::Slice& sl : store.slices())
        for (const model::ParamSpec& p : layout.params) {
            if (!p.counted()) continue;
            const size_t b = std::max(p.offset, sl.range.begin), e = std::min(p.offset + p.numel, sl.range.end);
            if (b >= e) continue;
            for (const model::Piece& pc : model::pieces_of(p, b - p.offset, e - b)) f(pc, sl);
        }
}

// HF name, with the box unless the piece is the whole tensor.
std::string piece_name(const model::Piece& pc) {
    const std::vector<int64_t> hs = pc.param->hf_shape();
    return pc.box.whole(hs) ? pc.param->name : pc.param->name + pc.box.str();
}

std::vector<int64_t> piece_shape(const model::Piece& pc) {
    if (pc.param->full_shape.size() == 1) return {pc.box.rows()};
    return {pc.box.rows(), pc.box.cols()};
}

}  // namespace

std::unique_ptr<PendingCheckpoint> snapshot_checkpoint(const std::string& run_dir, int step, const TrainConfig& cfg,
                                                       const model::GptConfig& mc, const model::Layout& layout,
                                                       const parallel::ParamStore& store, optim::Optimizer& opt, int keep,
                                                       comm::Group& world, const nlohmann::json& writer,
                                                       const nlohmann::json& extra,
                                                       const std::vector<RankTensor>& rank_tensors) {
    // the same temporary name on every rank (they share the directory); stale ones are removed at start-up
    const std::string tmp = (fs::path(run_dir) / ("." + ckpt_name(step) + ".tmp.0")).string();
    if (world.rank() == 0) {
        fs::create_directories(run_dir);
        fs::remove_all(tmp);
        fs::create_directories(tmp);
    }
    world.barrier();
    std::unique_ptr<PendingCheckpoint> p = snapshot_state(step, cfg, mc, layout, store, opt, world, writer, extra, rank_tensors);
    p->run_dir_ = run_dir;
    p->keep_ = keep;
    p->final_dir_ = (fs::path(run_dir) / ckpt_name(step)).string();
    p->tmp_ = tmp;
    return p;
}

std::unique_ptr<PendingCheckpoint> snapshot_state(int step, const TrainConfig& cfg, const model::GptConfig& mc,
                                                  const model::Layout& layout, const parallel::ParamStore& store,
                                                  optim::Optimizer& opt, comm::Group& world, const nlohmann::json& writer,
                                                  const nlohmann::json& extra, const std::vector<RankTensor>& rank_tensors) {
    auto p = std::unique_ptr<PendingCheckpoint>(new PendingCheckpoint);
    p->step_ = step;
    p->rank_ = world.rank();
    p->n_ = world.size();
    // this rank's pieces of the parameters and of the optimiser state, copied into the writers
    std::vector<float> box;
    const auto states = opt.state();
    for_each_written_piece(layout, store, [&](const model::Piece& pc, const parallel::ParamStore::Slice& sl) {
        const std::string name = piece_name(pc);
        box.resize(pc.box.numel());
        model::gather_piece(box.data(), sl.params - sl.range.begin, pc);
        p->model_.add_f32(name, piece_shape(pc), box.data());
        for (auto& [sname, buf] : states) {
            model::gather_piece(box.data(), buf->data() + sl.state - sl.range.begin, pc);
            p->optimizer_.add_f32(sname + "/" + name, piece_shape(pc), box.data());
        }
    });
    // (before the optimiser's views are released: rank_tensors may point into them)
    p->has_state_ = !rank_tensors.empty();  // (the same on every rank: one algorithm)
    for (const RankTensor& t : rank_tensors) p->state_.add_f32(t.name, {int64_t(t.n)}, t.data);
    p->state_.set_metadata("layout", "this rank's own flat tensors (train/checkpoint.h: state.rank<r>-of-<n>)");
    opt.release_state_views();  // adam8bit's dequantised views: copied into the writer
    p->model_.set_metadata("format", "pt");
    p->model_.set_metadata("layout", "pieces of HF GPT-2 tensors: name or name[rows,cols] boxes in HF coordinates");
    p->optimizer_.set_metadata("optimizer", optim::kind_name(opt.config().kind));
    p->optimizer_.set_metadata("layout", "pieces of the optimiser state: <state>/<HF name>[box]");
    if (world.rank() == 0) {
        p->hf_config_ = model::hf_config_json(mc);
        const optim::OptimConfig& oc = opt.config();
        nlohmann::json files = {{"model", nlohmann::json::array()}, {"optimizer", nlohmann::json::array()}};
        if (p->has_state_) files["state"] = nlohmann::json::array();
        for (int r = 0; r < p->n_; r++) {
            files["model"].push_back(rank_file("model", r, p->n_));
            files["optimizer"].push_back(rank_file("optimizer", r, p->n_));
            if (p->has_state_) files["state"].push_back(rank_file("state", r, p->n_));
        }
        p->meta_ = {
            {"format", "shardlm-checkpoint"},
            {"format_version", kCheckpointVersion},
            {"step", step},
            {"model", model::architecture_json(mc)},
            {"train_config", config_to_json(cfg)},
            {"optimizer",
             {{"kind", optim::kind_name(oc.kind)}, {"steps_done", opt.steps_done()}, {"beta1", oc.beta1},
              {"beta2", oc.beta2}, {"eps", oc.eps}, {"momentum", oc.momentum}, {"weight_decay", oc.weight_decay}}},
            {"data", {{"order", setting_text(cfg.data.data_order)}, {"next_global_batch", step}, {"seed", cfg.runtime.seed}}},
            {"rng", {{"seed", cfg.runtime.seed}, {"note", "init and data order are pure functions of the seed and step"}}},
            {"writer", writer},
            {"files", files},
            {"layout", "pieces of HF GPT-2 tensors (Conv1D weights [in, out], true vocabulary); see train/checkpoint.h"},
        };
        for (const auto& [k, v] : extra.items()) p->meta_[k] = v;
    }
    return p;
}

size_t PendingCheckpoint::bytes() const { return model_.size_bytes() + optimizer_.size_bytes() + state_.size_bytes(); }

namespace {

uint64_t dir_bytes(const fs::path& dir) {
    uint64_t n = 0;
    std::error_code ec;
    for (const auto& e : fs::recursive_directory_iterator(dir, ec))
        if (e.is_regular_file(ec)) n += e.file_size(ec);
    return n;
}

// What a failed write of a checkpoint into run_dir means when the disk is short: the checkpoints kept
// stay until the new one is complete (train/checkpoint.h), so the new one needs its whole size free
// beside them. "" when the disk is not short.
std::string disk_short_note(const std::string& run_dir, uint64_t bytes_needed, int keep) {
    struct statvfs st;
    if (::statvfs(run_dir.c_str(), &st) != 0) return "";
    const double free_b = double(st.f_bavail) * double(st.f_frsize);
    const std::vector<fs::path> kept = list_checkpoints(run_dir);
    const double newest = kept.empty() ? double(bytes_needed) : double(dir_bytes(kept.back()));
    if (free_b >= std::max(newest, double(bytes_needed)) && errno != ENOSPC) return "";
    return format("\n  the disk of %s has %.1f MB free; a checkpoint of this run takes %.1f MB, written beside the %zu "
                  "kept (--keep-ckpts %d: the oldest is removed only once the new one is complete, so that a failure "
                  "never leaves none)",
                  run_dir.c_str(), free_b / 1e6, newest / 1e6, kept.size(), keep) +
           "\n---> HINT: free that much space (or move the run to a larger disk: --resume continues it), or "
           "--keep-ckpts 1 if more are kept";
}

}  // namespace

void PendingCheckpoint::write() {
    try {
        errno = 0;
        write_files(tmp_);
    } catch (const Error& e) {
        const std::string note = disk_short_note(run_dir_, bytes() * uint64_t(n_), keep_);
        if (note.empty()) throw;
        throw Error(std::string(e.what()) + note);
    }
}

std::vector<std::string> PendingCheckpoint::file_names() const {
    std::vector<std::string> out = {rank_file("model", rank_, n_), rank_file("optimizer", rank_, n_)};
    if (has_state_) out.push_back(rank_file("state", rank_, n_));
    return out;
}

std::vector<std::pair<std::string, std::string>> PendingCheckpoint::take_files() {
    std::vector<std::pair<std::string, std::string>> out;
    const std::vector<std::string> names = file_names();
    out.emplace_back(names[0], model_.bytes());
    out.emplace_back(names[1], optimizer_.bytes());
    if (has_state_) out.emplace_back(names[2], state_.bytes());
    sums_.clear();
    for (const auto& [name, bytes] : out) sums_ += name + " " + io::hex64(io::xxh64(bytes)) + "\n";
    model_ = io::SafetensorsWriter{};
    optimizer_ = io::SafetensorsWriter{};
    state_ = io::SafetensorsWriter{};
    return out;
}

void PendingCheckpoint::write_files(const std::string& dir) {
    const fs::path tmp = dir;
    model_.write((tmp / rank_file("model", rank_, n_)).string());
    optimizer_.write((tmp / rank_file("optimizer", rank_, n_)).string());
    if (has_state_) state_.write((tmp / rank_file("state", rank_, n_)).string());
    // checksums of this rank's files (read back from the page cache), collected on rank 0 for meta.json
    sums_.clear();
    for (const char* kind : {"model", "optimizer", "state"}) {
        if (std::string(kind) == "state" && !has_state_) continue;
        const std::string f = rank_file(kind, rank_, n_);
        sums_ += f + " " + io::hex64(io::xxh64_file((tmp / f).string())) + "\n";
    }
    model_ = io::SafetensorsWriter{};  // the snapshot's memory back
    optimizer_ = io::SafetensorsWriter{};
    state_ = io::SafetensorsWriter{};
}

std::string PendingCheckpoint::commit(comm::Group& world, FaultInjector* faults) {
    const fs::path tmp = tmp_;
    const std::vector<std::string> all_sums = gather_text(world, sums_);
    if (faults) faults->while_checkpointing(step_);  // the tests: die with this checkpoint half-written
    world.barrier();  // every rank's files are on disk
    if (world.rank() == 0) {
        io::write_file_atomic((tmp / "config.json").string(), hf_config_);
        io::write_file_atomic((tmp / "meta.json").string(), meta_json(all_sums));
        io::fsync_dir(tmp.string());
        if (fs::exists(final_dir_)) fs::remove_all(final_dir_);  // a re-run of the same step
        fs::rename(tmp, final_dir_);
        io::fsync_dir(run_dir_);
        std::vector<fs::path> all = list_checkpoints(run_dir_);
        for (size_t i = 0; i + size_t(keep_) < all.size(); i++) fs::remove_all(all[i]);
    }
    world.barrier();
    return final_dir_;
}

std::string PendingCheckpoint::meta_json(const std::vector<std::string>& all_sums) const {
    nlohmann::json sums_json = nlohmann::json::object();
    for (const std::string& text : all_sums)
        for (size_t at = 0; at < text.size();) {
            const size_t sp = text.find(' ', at), nl = text.find('\n', at);
            sums_json[text.substr(at, sp - at)] = text.substr(sp + 1, nl - sp - 1);
            at = nl + 1;
        }
    sums_json["config.json"] = io::hex64(io::xxh64(hf_config_));
    nlohmann::json meta = meta_;
    meta["checksums"] = {{"algorithm", "xxh64"}, {"files", sums_json}};
    return meta.dump(2) + "\n";
}

std::string save_checkpoint(const std::string& run_dir, int step, const TrainConfig& cfg, const model::GptConfig& mc,
                            const model::Layout& layout, const parallel::ParamStore& store, optim::Optimizer& opt,
                            int keep, comm::Group& world, const nlohmann::json& writer, const nlohmann::json& extra,
                            FaultInjector* faults, const std::vector<RankTensor>& rank_tensors) {
    std::unique_ptr<PendingCheckpoint> p =
        snapshot_checkpoint(run_dir, step, cfg, mc, layout, store, opt, keep, world, writer, extra, rank_tensors);
    p->write();
    return p->commit(world, faults);
}

namespace {
bool digits(const std::string& s, size_t at, size_t n) {
    if (n == 0 || at + n > s.size()) return false;
    for (size_t i = at; i < at + n; i++)
        if (s[i] < '0' || s[i] > '9') return false;
    return true;
}
}  // namespace

CheckpointDir checkpoint_dir_kind(const std::string& n) {
    // ckpt_DDDDDDDD (13 characters), then nothing, ".damaged"; or .ckpt_DDDDDDDD.tmp.D...
    if (n.rfind("ckpt_", 0) == 0 && digits(n, 5, 8)) {
        if (n.size() == 13) return CheckpointDir::Complete;
        if (n.substr(13) == ".damaged") return CheckpointDir::Damaged;
    }
    if (n.rfind(".ckpt_", 0) == 0 && digits(n, 6, 8) && n.compare(14, 5, ".tmp.") == 0 && digits(n, 19, n.size() - 19))
        return CheckpointDir::Temporary;
    return CheckpointDir::None;
}

void remove_stale_checkpoint_temps(const std::string& run_dir) {
    if (!fs::is_directory(run_dir)) return;
    for (const auto& e : fs::directory_iterator(run_dir))
        if (e.is_directory() && checkpoint_dir_kind(e.path().filename().string()) == CheckpointDir::Temporary)
            fs::remove_all(e.path());
}

std::string latest_checkpoint(const std::string& run_dir) {
    auto all = list_checkpoints(run_dir);
    return all.empty() ? "" : all.back().string();
}

std::string checkpoint_name(int step) {
    char buf[32];
    std::snprintf(buf, sizeof(buf), "ckpt_%08d", step);
    return buf;
}

int checkpoint_step(const std::string& dir) {
    if (dir.empty()) return 0;
    const std::string n = fs::path(dir).filename().string();
    return std::atoi(n.c_str() + 5);  // ckpt_<8 digits>
}

std::vector<std::string> checkpoints_newest_first(const std::string& run_dir) {
    std::vector<std::string> out;
    for (const fs::path& p : list_checkpoints(run_dir)) out.insert(out.begin(), p.string());
    return out;
}

std::string newest_good_checkpoint(const std::string& run_dir, std::vector<std::string>* damaged) {
    for (const std::string& c : checkpoints_newest_first(run_dir)) {
        const std::string problem = verify_checkpoint(c);
        if (problem.empty()) return c;
        damaged->push_back(problem);  // (it names the file)
    }
    return "";
}

std::vector<std::pair<std::string, std::string>> checkpoint_files(const nlohmann::json& meta, const std::string& path) {
    std::vector<std::pair<std::string, std::string>> out;
    const bool has_sums = meta.contains("checksums");
    const nlohmann::json* sums = nullptr;
    if (has_sums) {
        SHARDLM_CHECK(meta["checksums"].value("algorithm", "") == "xxh64" && meta["checksums"].contains("files") &&
                          meta["checksums"]["files"].is_object(),
                      path, ": field 'checksums' is not {\"algorithm\": \"xxh64\", \"files\": {...}}");
        sums = &meta["checksums"]["files"];
    }
    SHARDLM_CHECK(meta.value("format_version", 0) < 4 || has_sums, path, ": field 'checksums' is missing");
    auto add = [&](const std::string& f) {
        std::string want;
        if (sums) {
            SHARDLM_CHECK(sums->contains(f) && (*sums)[f].is_string(), path, ": no checksum for '", f, "'");
            want = (*sums)[f].get<std::string>();
        }
        out.emplace_back(f, want);
    };
    for (const char* what : {"model", "optimizer", "state"}) {
        if (std::string(what) == "state" && meta.contains("files") && !meta["files"].contains(what)) continue;  // optional
        SHARDLM_CHECK(meta.contains("files") && meta["files"].contains(what) && meta["files"][what].is_array(), path,
                      ": field 'files.", what, "' missing or not a list");
        for (const auto& f : meta["files"][what]) {
            SHARDLM_CHECK(f.is_string(), path, ": field 'files.", what, "' holds a non-string");
            add(f.get<std::string>());
        }
    }
    if (sums) add("config.json");
    return out;
}

std::string verify_checkpoint(const std::string& dir, comm::Group* g) {
    const int rank = g ? g->rank() : 0, size = g ? g->size() : 1;
    std::string problem;
    try {
        const nlohmann::json meta = read_checkpoint_meta(dir);
        const auto files = checkpoint_files(meta, (fs::path(dir) / "meta.json").string());
        for (size_t i = size_t(rank); i < files.size() && problem.empty(); i += size_t(size)) {
            const auto& [name, want] = files[i];
            const fs::path p = fs::path(dir) / name;
            if (!fs::exists(p)) {
                problem = cat(p.string(), " is missing (listed in meta.json)");
            } else if (!want.empty()) {
                const std::string got = io::hex64(io::xxh64_file(p.string()));
                if (got != want)
                    problem = cat(p.string(), ": checksum mismatch (xxh64 ", got, ", meta.json records ", want,
                                  "): the file is damaged");
            }
        }
    } catch (const std::exception& e) {
        problem = e.what();
    }
    if (!g) return problem;
    for (const std::string& p : all_gather_text(*g, problem))
        if (!p.empty()) return p;  // the lowest rank's finding, the same on every rank
    return "";
}

void check_checkpoint_files(const std::string& dir, comm::Group* g) {
    if (!fs::exists(fs::path(dir) / "meta.json")) return;
    const std::string problem = verify_checkpoint(dir, g);
    SHARDLM_CHECK(problem.empty(), "checkpoint ", dir, " is damaged: ", problem,
                  "\n---> HINT: use another checkpoint (a run directory keeps the last --keep-ckpts of them)");
}

nlohmann::json read_checkpoint_meta(const std::string& dir) {
    const std::string path = (fs::path(dir) / "meta.json").string();
    SHARDLM_CHECK(fs::exists(path), "'", dir, "' is not a shardlm checkpoint (no meta.json)");
    nlohmann::json meta = io::read_json_file(path);
    SHARDLM_CHECK(meta.value("format", "") == "shardlm-checkpoint", path, ": field 'format' is not \"shardlm-checkpoint\"");
    const int version = meta.value("format_version", -1);
    SHARDLM_CHECK(version == kCheckpointVersion || version == 3, path, ": field 'format_version' is ", version,
                  ", this shardlm resumes versions 3 and ", kCheckpointVersion,
                  version == 2 ? "\n---> HINT: version 2 checkpoints still load as weights: --init " + dir : std::string());
    SHARDLM_CHECK(meta.contains("step") && meta["step"].is_number_integer(), path, ": field 'step' missing or not an integer");
    return meta;
}

namespace {

// What the checkpoint's model is: meta.json's record, or for a checkpoint written before the record held
// every knob (only the shape), its own config.json read as --init reads it.
nlohmann::json checkpoint_architecture(const std::string& dir, const nlohmann::json& meta) {
    const nlohmann::json rec = meta.value("model", nlohmann::json::object());
    if (rec.contains("norm")) return rec;
    try {
        return model::architecture_json(model::load_hf_config((fs::path(dir) / "config.json").string()));
    } catch (const std::exception&) {
        return rec;  // no readable config.json: the shape alone
    }
}

}  // namespace

void check_same_architecture(const std::string& dir, const nlohmann::json& meta, const model::GptConfig& mc) {
    const nlohmann::json was = checkpoint_architecture(dir, meta), now = model::architecture_json(mc);
    const std::vector<model::ArchitectureChange> changes = model::architecture_changes(was, now);
    if (changes.empty()) return;
    std::string keys, list, flags;
    for (const model::ArchitectureChange& c : changes) {
        keys.append(keys.empty() ? "" : ", ").append(c.key);
        list.append("\n  ").append(c.key).append(": checkpoint ").append(c.was).append(", this run ").append(c.now);
        flags.append(" ").append(model::architecture_flag(c.key)).append(" ").append(c.was);
    }
    throw Error(cat(dir, " holds a ", model::architecture_summary(was), "; this run asks for a ",
                    model::architecture_summary(now), ": resuming would change ", keys, list,
                    "\n---> HINT: resume with the checkpoint's settings (", flags.substr(1),
                    "), or train the new model into another --out"));
}

nlohmann::json load_checkpoint(const std::string& dir, const model::GptConfig& mc, const model::Layout& layout,
                               parallel::ParamStore& store, optim::Optimizer& opt) {
    nlohmann::json meta = read_checkpoint_meta(dir);
    const std::string path = (fs::path(dir) / "meta.json").string();
    check_same_architecture(dir, meta, mc);
    std::string kind = meta["optimizer"].value("kind", "");
    SHARDLM_CHECK(kind == optim::kind_name(opt.config().kind), path, ": checkpoint has optimizer '", kind,
                  "' but this run uses '", optim::kind_name(opt.config().kind),
                  "'\n---> HINT: resume with --optimizer ", kind);
    auto list = [&](const char* what) {
        SHARDLM_CHECK(meta.contains("files") && meta["files"].contains(what) && meta["files"][what].is_array(), path,
                      ": field 'files.", what, "' missing or not a list");
        model::PieceStore store;
        for (const auto& f : meta["files"][what]) {
            SHARDLM_CHECK(f.is_string(), path, ": field 'files.", what, "' holds a non-string");
            const std::string file = (fs::path(dir) / f.get<std::string>()).string();
            SHARDLM_CHECK(fs::exists(file), dir, ": ", f.get<std::string>(), " is missing (listed in meta.json)",
                          "\n---> HINT: the checkpoint is incomplete; resume from an older one");
            store.add_file(file);
        }
        return store;
    };
    const model::PieceStore params = list("model");
    for (auto& [range, storage] : store.param_storage()) params.load(storage, layout, range);
    const model::PieceStore states = list("optimizer");
    for (auto& [name, buf] : opt.state()) {
        size_t at = 0;
        for (const optim::Range& r : opt.owned()) {
            states.load(buf->data() + at, layout, model::FlatRange{r.begin, r.end}, name + "/");
            at += r.size();
        }
    }
    opt.state_loaded();  // adam8bit: quantised from the loaded fp32 views
    opt.set_steps_done(meta["optimizer"].value("steps_done", 0));
    return meta;
}

bool load_rank_tensors(const std::string& dir, const nlohmann::json& writer, int rank,
                       const std::vector<RankTensor>& targets, std::string* why) {
    const nlohmann::json meta = read_checkpoint_meta(dir);
    const std::string path = (fs::path(dir) / "meta.json").string();
    if (!meta.contains("files") || !meta["files"].contains("state")) {
        *why = "the checkpoint keeps no per-rank state";
        return false;
    }
    if (meta.value("writer", nlohmann::json::object()) != writer) {
        *why = "it was written by another layout (" + meta.value("writer", nlohmann::json::object()).dump() + ", this run " +
               writer.dump() + ")";
        return false;
    }
    const nlohmann::json& files = meta["files"]["state"];
    SHARDLM_CHECK(files.is_array() && size_t(rank) < files.size() && files[size_t(rank)].is_string(), path,
                  ": field 'files.state' does not list rank ", rank, "'s file");
    const std::string file = (fs::path(dir) / files[size_t(rank)].get<std::string>()).string();
    io::SafetensorsReader r(file);
    for (const RankTensor& t : targets) r.read_f32(t.name, {int64_t(t.n)}, t.data);
    return true;
}

}  // namespace shardlm::train
