// cli/cmd_export.cpp: `shardlm export`: write a model as an HF GPT-2 directory.
#include <memory>
#include <string>

#include "shardlm/cli/commands.h"
#include "shardlm/core/aligned_buffer.h"
#include "shardlm/core/check.h"
#include "shardlm/model/weights.h"

namespace shardlm::cli {

void add_export_command(CLI::App& app) {
    struct Opts {
        std::string init, model, out, dtype = "F32";
        uint64_t seed = 1337;
    };
    auto o = std::make_shared<Opts>();
    CLI::App* c = app.add_subcommand("export", "Write a model as an HF GPT-2 directory (config.json + model.safetensors)");
    c->add_option("--init", o->init, "HF GPT-2 directory or shardlm checkpoint to read (assembles the checkpoint's pieces)");
    c->add_option("--model", o->model, "Model preset, randomly initialised with --seed");
    c->add_option("--seed", o->seed, "Seed for --model")->capture_default_str();
    c->add_option("--dtype", o->dtype, "F32 | BF16 | F16")->capture_default_str();
    c->add_option("--out", o->out, "Output directory")->required();
    c->callback([o] {
        SHARDLM_CHECK(o->init.empty() != o->model.empty(), "export: give exactly one of --init DIR or --model PRESET");
        DType dt;
        SHARDLM_CHECK(dtype_from_name(o->dtype, &dt), "export: --dtype '", o->dtype, "' is not one of F32, BF16, F16");
        model::GptConfig cfg = o->init.empty() ? model::find_preset(o->model) : model::load_hf_dir_config(o->init);
        model::Layout layout = model::make_gpt2_layout(cfg);
        AlignedBuffer<float> params(layout.total);
        if (o->init.empty()) model::init_gpt2_weights(params.data(), layout, o->seed);
        else model::load_hf_weights(o->init, cfg, layout, params.data());
        model::save_hf_model(o->out, cfg, layout, params.data(), dt);
        std::printf("wrote %s/config.json and %s/model.safetensors\n", o->out.c_str(), o->out.c_str());
    });
}

}  // namespace shardlm::cli
