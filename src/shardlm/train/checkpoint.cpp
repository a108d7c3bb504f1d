#include "shardlm/train/checkpoint.h"

#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <cstdlib>
#include <cstdio>
#include <filesystem>
#include <vector>

#include "shardlm/core/check.h"
#include "shardlm/io/atomic_file.h"
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

// Writes each parameter's piece of a flat buffer as an HF-layout tensor named prefix + name.
void add_flat(io::SafetensorsWriter& w, const std::string& prefix, const model::Layout& layout, const float* flat,
              std::vector<std::vector<float>>& keep_alive) {
    for (const model::ParamSpec& p : layout.params) {
        std::vector<int64_t> hs = p.hf_shape();
        size_t n = 1;
        for (auto d : hs) n *= size_t(d);
        keep_alive.emplace_back(n);
        model::to_hf_layout(keep_alive.back().data(), flat + p.offset, p);
        w.add_f32_ref(prefix + p.name, hs, keep_alive.back().data());
    }
}

void read_flat(const io::SafetensorsReader& r, const std::string& prefix, const model::Layout& layout, float* flat) {
    std::vector<float> tmp;
    for (const model::ParamSpec& p : layout.params) {
        std::vector<int64_t> hs = p.hf_shape();
        size_t n = 1;
        for (auto d : hs) n *= size_t(d);
        tmp.resize(n);
        r.read_f32(prefix + p.name, hs, tmp.data());
        model::from_hf_layout(flat + p.offset, tmp.data(), p);
    }
}

}  // namespace

std::string save_checkpoint(const std::string& run_dir, int step, const TrainConfig& cfg, const model::GptConfig& mc,
                            const model::Layout& layout, const float* params, optim::Optimizer& opt, int keep) {
    fs::create_directories(run_dir);
    const fs::path final_dir = fs::path(run_dir) / ckpt_name(step);
    const fs::path tmp = fs::path(run_dir) / ("." + ckpt_name(step) + ".tmp." + std::to_string(::getpid()));
    fs::remove_all(tmp);
    fs::create_directories(tmp);

    std::vector<std::vector<float>> bufs;
    {
        io::SafetensorsWriter w;
        add_flat(w, "", layout, params, bufs);
        w.set_metadata("format", "pt");
        w.write((tmp / "model.safetensors").string());
    }
    bufs.clear();
    {
        io::SafetensorsWriter w;
        for (auto& [name, buf] : opt.state()) add_flat(w, name + ".", layout, buf->data(), bufs);
        w.set_metadata("optimizer", optim::kind_name(opt.config().kind));
        w.write((tmp / "optimizer.safetensors").string());
    }
    bufs.clear();
    // Fault injection for the tests: die by SIGKILL with this checkpoint half-written.
    if (const char* k = std::getenv("SHARDLM_TEST_KILL_IN_CKPT"); k && std::atoi(k) == step) std::raise(SIGKILL);
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
          {"beta2", oc.beta2}, {"eps", oc.eps}, {"momentum", oc.momentum}, {"weight_decay", oc.weight_decay}}},
        {"data", {{"order", cfg.data_order}, {"next_global_batch", step}, {"seed", cfg.seed}}},
        {"rng", {{"seed", cfg.seed}, {"note", "init and data order are pure functions of the seed and step"}}},
        {"layout", "HF GPT-2 names and shapes (Conv1D weights [in, out]); true vocabulary"},
    };
    io::write_file_atomic((tmp / "meta.json").string(), meta.dump(2) + "\n");
    io::fsync_dir(tmp.string());
    if (fs::exists(final_dir)) fs::remove_all(final_dir);  // a re-run of the same step
    fs::rename(tmp, final_dir);
    io::fsync_dir(run_dir);

    std::vector<fs::path> all = list_checkpoints(run_dir);
    for (size_t i = 0; i + size_t(keep) < all.size(); i++) fs::remove_all(all[i]);
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
    nlohmann::json meta;
    try {
        meta = nlohmann::json::parse(io::read_file(path));
    } catch (const nlohmann::json::exception& e) {
        fail(path, ": not valid JSON (", e.what(), ")");
    }
    SHARDLM_CHECK(meta.value("format", "") == "shardlm-checkpoint", path, ": field 'format' is not \"shardlm-checkpoint\"");
    SHARDLM_CHECK(meta.value("format_version", -1) == kCheckpointVersion, path, ": field 'format_version' is ",
                  meta.value("format_version", -1), ", this shardlm reads version ", kCheckpointVersion);
    SHARDLM_CHECK(meta.contains("step") && meta["step"].is_number_integer(), path, ": field 'step' missing or not an integer");
    return meta;
}

nlohmann::json load_checkpoint(const std::string& dir, const model::GptConfig& mc, const model::Layout& layout,
                               float* params, optim::Optimizer& opt) {
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
    model::load_hf_weights(dir, mc, layout, params);
    io::SafetensorsReader r((fs::path(dir) / "optimizer.safetensors").string());
    for (auto& [name, buf] : opt.state()) read_flat(r, name + ".", layout, buf->data());
    opt.set_steps_done(meta["optimizer"].value("steps_done", 0));
    return meta;
}

}  // namespace shardlm::train
