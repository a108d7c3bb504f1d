// cli/cmd_export.cpp: `shardlm export`: write a model as an HF GPT-2 directory.
#include <filesystem>
#include <memory>
#include <string>

#include "shardlm/cli/commands.h"
#include "shardlm/core/aligned_buffer.h"
#include "shardlm/core/check.h"
#include "shardlm/model/weights.h"
#include "shardlm/train/checkpoint.h"
#include "shardlm/train/run_dir.h"

namespace shardlm::cli {

namespace {

namespace fs = std::filesystem;

// Export writes config.json and model.safetensors: into a checkpoint they would replace its weights
// (and its config.json), into a run directory its config.json. Neither is ever allowed; an existing
// non-empty directory only with --force.
void check_export_target(const std::string& out, bool force) {
    if (!fs::exists(out)) return;
    SHARDLM_CHECK(fs::is_directory(out), "export: --out '", out, "' exists and is not a directory");
    const bool checkpoint = fs::exists(fs::path(out) / "meta.json");
    SHARDLM_CHECK(!checkpoint, "export: --out '", out, "' is a shardlm checkpoint (it holds meta.json): exporting into it ",
                  "would replace the weights it resumes from\n---> HINT: export into a new directory, e.g. --out ",
                  (fs::path(out).parent_path() / "hf").string());
    const std::string run = train::existing_run(out, false);
    SHARDLM_CHECK(run.empty(), "export: --out '", out, "' is a training run directory (", run, "): exporting into it would replace its config.json",
                  "\n---> HINT: export into a new directory, e.g. --out ", (fs::path(out) / "hf").string());
    SHARDLM_CHECK(force || fs::is_empty(out), "export: --out '", out, "' already exists and is not empty",
                  "\n---> HINT: --force to overwrite its config.json and model.safetensors, or another --out");
}

}  // namespace

void add_export_command(CLI::App& app) {
    struct Opts {
        std::string init, model, out, dtype = "F32";
        uint64_t seed = 1337;
        bool force = false;
    };
    auto o = std::make_shared<Opts>();
    CLI::App* c = app.add_subcommand("export", "Write a model as an HF GPT-2 or LLaMA directory (config.json + model.safetensors)");
    c->add_option("--init", o->init, "HF GPT-2 or LLaMA directory or shardlm checkpoint to read (assembles the checkpoint's pieces)");
    c->add_option("--model", o->model, "Model preset, randomly initialised with --seed");
    c->add_option("--seed", o->seed, "Seed for --model")->capture_default_str();
    c->add_option("--dtype", o->dtype, "F32 | BF16 | F16")->capture_default_str();
    c->add_option("--out", o->out, "Output directory (new or empty; an HF directory only with --force)")->required();
    c->add_flag("--force", o->force, "Overwrite an existing HF directory in --out (never a checkpoint or a run directory)");
    c->callback([o] {
        SHARDLM_CHECK(o->init.empty() != o->model.empty(), "export: give exactly one of --init DIR or --model PRESET");
        check_export_target(o->out, o->force);
        if (!o->init.empty()) train::check_checkpoint_files(o->init);  // a checkpoint: its checksums
        DType dt;
        SHARDLM_CHECK(dtype_from_name(o->dtype, &dt), "export: --dtype '", o->dtype, "' is not one of F32, BF16, F16");
        model::GptConfig cfg = o->init.empty() ? model::find_preset(o->model) : model::load_hf_dir_config(o->init);
        const std::string why = model::hf_unsupported(cfg);
        SHARDLM_CHECK(why.empty(), "export: HF has no architecture for this model: ", why,
                      "\n---> HINT: HF GPT-2 is layernorm + learned + gelu with biases and a tied head; HF LLaMA is ",
                      "rmsnorm + rope + swiglu; its checkpoints still load with --init");
        model::Layout layout = model::make_gpt2_layout(cfg);
        AlignedBuffer<float> params(layout.total);
        if (o->init.empty()) model::init_gpt2_weights(params.data(), layout, o->seed);
        else model::load_hf_weights(o->init, cfg, layout, params.data());
        model::save_hf_model(o->out, cfg, layout, params.data(), dt);
        std::printf("wrote %s/config.json and %s/model.safetensors\n", o->out.c_str(), o->out.c_str());
    });
}

}  // namespace shardlm::cli
