#include "shardlm/train/checkpoint.h"

#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <csignal>
#include <cstdlib>
#include <cstdio>
#include <filesystem>
#include <vector>

#include "shardlm/core/check.h"
#include "shardlm/io/atomic_file.h"
#include "shardlm/io/json_file.h"
#include "shardlm/io/safetensors.h"
#include "shardlm/model/weights.h"

namespace shardlm::train {

namespace fs = std::filesystem;

namespace {

std::string ckpt_name(int step) {
    char buf[32];
    std::snprintf(buf, sizeof(buf), "ckpt_%08d", step);
    return buf;
}

// Complete checkpoints in run_dir, oldest first.
std::vector<fs::path> list_checkpoints(const std::string& run_dir) {
    std::vector<fs::path> out;
    if (!fs::is_directory(run_dir)) return out;
    for (const auto& e : fs::directory_iterator(run_dir)) {
        std::string n = e.path().filename().string();
        if (e.is_directory() && n.size() == 13 && n.rfind("ckpt_", 0) == 0 && fs::exists(e.path() / "meta.json"))
            out.push_back(e.path());
    }
    std::sort(out.begin(), out.end());
    return out;
}

nlohmann::json model_json(const model::GptConfig& c) {
    return {{"n_layer", c.n_layer}, {"n_head", c.n_head},       {"n_embd", c.n_embd},
            {"vocab_size", c.vocab_size}, {"n_ctx", c.n_ctx}, {"ln_eps", c.ln_eps}};
}

// Writes each parameter as an HF-layout tensor named prefix + name (full flat buffer).
void add_flat(io::SafetensorsWriter& w, const std::string& prefix, const model::Layout& layout, const float* flat,
              std::vector<std::vector<float>>& keep_alive) {
    for (const model::ParamSpec& p : layout.params) {
        std::vector<int64_t> hs = p.hf_shape();
        size_t n = p.hf_numel();
        keep_alive.emplace_back(n);
        model::to_hf_layout(keep_alive.back().data(), flat + p.offset, p);
        w.add_f32_ref(prefix + p.name, hs, keep_alive.back().data());
    }
}

// Calls f(param, piece_begin_in_param, n, offset_in_state) for every piece of a parameter that the
// optimiser's owned ranges cover, in state order.
template <typename F>
void for_each_owned_piece(const model::Layout& layout, const optim::Optimizer& opt, F&& f) {
    size_t state = 0;
    for (const optim::Range& r : opt.owned()) {
        for (const model::ParamSpec& p : layout.params) {
            size_t b = std::max(p.offset, r.begin), e = std::min(p.offset + p.numel, r.end);
            if (b < e) f(p, b - p.offset, e - b, state + (b - r.begin));
        }
        state += r.size();
    }
}

std::string shard_file(int rank, int n) {
    char buf[64];
    std::snprintf(buf, sizeof(buf), "optimizer.rank%05d-of-%05d.safetensors", rank, n);
    return buf;
}

}  // namespace

std::string save_checkpoint(const std::string& run_dir, int step, const TrainConfig& cfg, const model::GptConfig& mc,
                            const model::Layout& layout, const float* full_params, optim::Optimizer& opt, int keep,
                            comm::Group& group) {
    const bool root = group.rank() == 0;
    const fs::path final_dir = fs::path(run_dir) / ckpt_name(step);
    // the same name on every rank (they share the directory); stale ones are removed at start-up
    const fs::path tmp = fs::path(run_dir) / ("." + ckpt_name(step) + ".tmp.0");
    if (root) {
        fs::create_directories(run_dir);
        fs::remove_all(tmp);
        fs::create_directories(tmp);
    }
    group.barrier();
    {  // this rank's optimiser state, never gathered
        io::SafetensorsWriter w;
        for (auto& [name, buf] : opt.state()) {
            const float* st = buf->data();
            for_each_owned_piece(layout, opt, [&](const model::ParamSpec& p, size_t first, size_t n, size_t at) {
                w.add_f32_ref(name + "/" + p.name + "/" + std::to_string(first), {int64_t(n)}, st + at);
            });
        }
        w.set_metadata("optimizer", optim::kind_name(opt.config().kind));
        w.set_metadata("layout", "pieces of parameters flattened in shardlm's internal [out, in] layout");
        w.write((tmp / shard_file(group.rank(), group.size())).string());
    }
    if (root) {
        std::vector<std::vector<float>> bufs;
        io::SafetensorsWriter w;
        add_flat(w, "", layout, full_params, bufs);
        w.set_metadata("format", "pt");
        w.write((tmp / "model.safetensors").string());
    }
    // Fault injection for the tests: die by SIGKILL with this checkpoint half-written.
    if (const char* k = std::getenv("SHARDLM_TEST_KILL_IN_CKPT"); k && std::atoi(k) == step) std::raise(SIGKILL);
    group.barrier();  // every rank's shard is on disk
    if (root) {
        io::write_file_atomic((tmp / "config.json").string(), model::hf_config_json(mc));
        const optim::OptimConfig& oc = opt.config();
        nlohmann::json meta = {
            {"format", "shardlm-checkpoint"},
            {"format_version", kCheckpointVersion},
            {"step", step},
            {"model", model_json(mc)},
            {"train_config", config_to_json(cfg)},
            {"optimizer",
             {{"kind", optim::kind_name(oc.kind)}, {"steps_done", opt.steps_done()}, {"beta1", oc.beta1},
              {"beta2", oc.beta2}, {"eps", oc.eps}, {"momentum", oc.momentum}, {"weight_decay", oc.weight_decay},
              {"shards", group.size()}}},
            {"data", {{"order", cfg.data_order}, {"next_global_batch", step}, {"seed", cfg.seed}}},
            {"rng", {{"seed", cfg.seed}, {"note", "init and data order are pure functions of the seed and step"}}},
            {"writer", {{"dp", group.size()}, {"zero", cfg.zero}}},
            {"layout", "model.safetensors: HF GPT-2 names and shapes (Conv1D weights [in, out]), true vocabulary"},
        };
        io::write_file_atomic((tmp / "meta.json").string(), meta.dump(2) + "\n");
        io::fsync_dir(tmp.string());
        if (fs::exists(final_dir)) fs::remove_all(final_dir);  // a re-run of the same step
        fs::rename(tmp, final_dir);
        io::fsync_dir(run_dir);
        std::vector<fs::path> all = list_checkpoints(run_dir);
        for (size_t i = 0; i + size_t(keep) < all.size(); i++) fs::remove_all(all[i]);
    }
    group.barrier();
    return final_dir.string();
}

void remove_stale_checkpoint_temps(const std::string& run_dir) {
    if (!fs::is_directory(run_dir)) return;
    for (const auto& e : fs::directory_iterator(run_dir)) {
        std::string n = e.path().filename().string();
        if (e.is_directory() && n.rfind(".ckpt_", 0) == 0 && n.find(".tmp.") != std::string::npos) fs::remove_all(e.path());
    }
}

std::string latest_checkpoint(const std::string& run_dir) {
    auto all = list_checkpoints(run_dir);
    return all.empty() ? "" : all.back().string();
}

nlohmann::json read_checkpoint_meta(const std::string& dir) {
    const std::string path = (fs::path(dir) / "meta.json").string();
    SHARDLM_CHECK(fs::exists(path), "'", dir, "' is not a shardlm checkpoint (no meta.json)");
    nlohmann::json meta = io::read_json_file(path);
    SHARDLM_CHECK(meta.value("format", "") == "shardlm-checkpoint", path, ": field 'format' is not \"shardlm-checkpoint\"");
    SHARDLM_CHECK(meta.value("format_version", -1) == kCheckpointVersion, path, ": field 'format_version' is ",
                  meta.value("format_version", -1), ", this shardlm reads version ", kCheckpointVersion);
    SHARDLM_CHECK(meta.contains("step") && meta["step"].is_number_integer(), path, ": field 'step' missing or not an integer");
    return meta;
}

nlohmann::json load_checkpoint(const std::string& dir, const model::GptConfig& mc, const model::Layout& layout,
                               float* full_params, optim::Optimizer& opt) {
    nlohmann::json meta = read_checkpoint_meta(dir);
    const std::string path = (fs::path(dir) / "meta.json").string();
    const nlohmann::json want = model_json(mc);
    for (const char* k : {"n_layer", "n_head", "n_embd", "vocab_size", "n_ctx"})
        SHARDLM_CHECK(meta["model"][k] == want[k], path, ": checkpoint has model.", k, " = ", meta["model"][k].dump(),
                      " but this run's model has ", want[k].dump(),
                      "\n---> HINT: resume with the same model, or start a new --out directory");
    std::string kind = meta["optimizer"].value("kind", "");
    SHARDLM_CHECK(kind == optim::kind_name(opt.config().kind), path, ": checkpoint has optimizer '", kind,
                  "' but this run uses '", optim::kind_name(opt.config().kind),
                  "'\n---> HINT: resume with --optimizer ", kind);
    model::load_hf_weights(dir, mc, layout, full_params);

    // Optimiser state: index every stored piece by parameter, then copy the intersections with the
    // pieces this rank owns.
    const int shards = meta["optimizer"].value("shards", 0);
    SHARDLM_CHECK(shards > 0, path, ": field 'optimizer.shards' missing or not positive");
    std::vector<io::SafetensorsReader> files;
    for (int r = 0; r < shards; r++) files.emplace_back((fs::path(dir) / shard_file(r, shards)).string());
    struct Piece {
        const io::SafetensorsReader* file;
        const io::TensorInfo* t;
        size_t first, n;
    };
    std::map<std::string, std::vector<Piece>> index;  // "<state>/<param>" -> pieces
    for (const auto& f : files)
        for (const io::TensorInfo& t : f.tensors()) {
            size_t slash = t.name.rfind('/');
            SHARDLM_CHECK(slash != std::string::npos && t.dtype == "F32" && t.shape.size() == 1, f.path(), ": tensor '",
                          t.name, "' is not a '<state>/<param>/<first>' F32 vector");
            index[t.name.substr(0, slash)].push_back({&f, &t, size_t(std::stoull(t.name.substr(slash + 1))), size_t(t.shape[0])});
        }
    for (auto& [name, buf] : opt.state()) {
        float* st = buf->data();
        for_each_owned_piece(layout, opt, [&](const model::ParamSpec& p, size_t first, size_t n, size_t at) {
            size_t covered = 0;
            for (const Piece& pc : index[name + "/" + p.name]) {
                size_t b = std::max(first, pc.first), e = std::min(first + n, pc.first + pc.n);
                if (b >= e) continue;
                const char* src = static_cast<const char*>(pc.file->data(*pc.t));  // may be unaligned
                std::memcpy(st + at + (b - first), src + (b - pc.first) * sizeof(float), (e - b) * sizeof(float));
                covered += e - b;
            }
            SHARDLM_CHECK(covered == n, dir, ": optimiser state '", name, "' of ", p.name, " covers ", covered, " of ", n,
                          " elements this rank needs\n---> HINT: the checkpoint is incomplete or from another model");
        });
    }
    opt.set_steps_done(meta["optimizer"].value("steps_done", 0));
    return meta;
}

}  // namespace shardlm::train
