// cli/main.cpp: the `shardlm` binary. Parses the verb and hands over to cli/cmd_<verb>.cpp.
#include <cstdio>

#include "shardlm/cli/commands.h"
#include "shardlm/core/check.h"
#include "shardlm/core/runtime.h"

int main(int argc, char** argv) {
    shardlm::ensure_blas_coretype(argc, argv);
    CLI::App app{"shardlm: pretrain GPT-style language models with data/tensor/pipeline/ZeRO parallelism"};
    app.require_subcommand(1);
    app.set_version_flag("--version", "shardlm 0.1.0");
    using namespace shardlm::cli;
    add_train_command(app);
    add_info_command(app);
    add_export_command(app);
    add_encode_command(app);
    add_tokenize_command(app);
    add_report_command(app);
    add_generate_command(app);
    add_schedule_command(app);
    add_plan_command(app);
    add_calibrate_command(app);
    add_launch_command(app);
    add_doctor_command(app);
    try {
        app.parse(argc, argv);
    } catch (const CLI::ParseError& e) {
        return app.exit(e);
    } catch (const shardlm::Error& e) {
        std::fprintf(stderr, "shardlm: error: %s\n", e.what());
        return 1;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "shardlm: error: %s\n", e.what());
        return 1;
    }
    return 0;
}
