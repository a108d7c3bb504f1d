// cli/cmd_report.cpp: `shardlm report RUN_DIR`: training curves (SVG) and a one-page report.html;
// `shardlm report --trace FILE.json`: a picture (SVG) of a training step's timeline;
// `shardlm report --flight DIR`: what the ranks' flight records say about a hang.
#include <cstdio>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "shardlm/cli/commands.h"
#include "shardlm/comm/flight.h"
#include "shardlm/core/check.h"
#include "shardlm/io/atomic_file.h"
#include "shardlm/io/json_file.h"
#include "shardlm/train/report.h"
#include "shardlm/train/trace_svg.h"

namespace shardlm::cli {

void add_report_command(CLI::App& app) {
    struct Opts {
        std::string run_dir, trace, svg, flight;
    };
    auto o = std::make_shared<Opts>();
    CLI::App* c = app.add_subcommand(
        "report", "Write loss/throughput/lr/grad-norm curves (SVG) and report.html into a run directory, or draw a --trace timeline");
    c->add_option("RUN_DIR", o->run_dir, "Run directory of `shardlm train --out` (holds metrics.jsonl)");
    c->add_option("--trace", o->trace, "A timeline written by `shardlm train --trace`: draw it as SVG");
    c->add_option("--svg", o->svg, "Where the timeline's SVG goes (default: the trace file with .svg)");
    c->add_option("--flight", o->flight,
                  "A directory of flight records (<out>/flight): say which rank did not enter which communication");
    c->callback([o] {
        if (!o->flight.empty()) {
            std::fputs(comm::flight::analyse(o->flight).c_str(), stdout);
            return;
        }
        if (!o->trace.empty()) {
            const std::string out = o->svg.empty() ? o->trace.substr(0, o->trace.rfind('.')) + ".svg" : o->svg;
            io::write_file_atomic(out, train::trace_svg(io::read_json_file(o->trace)));
            std::printf("wrote %s\n", out.c_str());
            return;
        }
        SHARDLM_CHECK(!o->run_dir.empty(), "report: give a RUN_DIR (of `shardlm train --out`) or --trace FILE.json");
        for (const std::string& path : train::write_report(o->run_dir)) std::printf("wrote %s\n", path.c_str());
    });
}

}  // namespace shardlm::cli
