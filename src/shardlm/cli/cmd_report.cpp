// cli/cmd_report.cpp: `shardlm report RUN_DIR`: training curves (SVG) and a one-page report.html.
#include <cstdio>
#include <memory>
#include <string>

#include "shardlm/cli/commands.h"
#include "shardlm/train/report.h"

namespace shardlm::cli {

void add_report_command(CLI::App& app) {
    auto run_dir = std::make_shared<std::string>();
    CLI::App* c = app.add_subcommand(
        "report", "Write loss/throughput/lr/grad-norm curves (SVG) and report.html into a run directory");
    c->add_option("RUN_DIR", *run_dir, "Run directory of `shardlm train --out` (holds metrics.jsonl)")->required();
    c->callback([run_dir] {
        for (const std::string& path : train::write_report(*run_dir)) std::printf("wrote %s\n", path.c_str());
    });
}

}  // namespace shardlm::cli
