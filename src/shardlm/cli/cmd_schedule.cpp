// cli/cmd_schedule.cpp: `shardlm schedule`: a pipeline schedule as the seeds draw it, one row per
// stage, and optionally every rank's list of actions (the data the executor runs).
#include <cstdio>
#include <memory>
#include <string>

#include "shardlm/cli/commands.h"
#include "shardlm/schedule/schedule.h"

namespace shardlm::cli {

void add_schedule_command(CLI::App& app) {
    struct Opts {
        int pp = 4, micro = 8, virtual_stages = 1;
        std::string schedule = "1f1b";
        bool actions = false;
    };
    auto o = std::make_shared<Opts>();
    CLI::App* c = app.add_subcommand("schedule", "Print a pipeline schedule per stage (forward 1 unit, backward 2: B 1 and W 1 when split) and its bubble");
    c->add_option("--pp", o->pp, "Pipeline stages")->capture_default_str();
    c->add_option("--micro-batches", o->micro, "Micro-batches per step")->capture_default_str();
    c->add_option("--schedule", o->schedule, "gpipe | 1f1b | interleaved | zb-h1 | zbv")->capture_default_str();
    c->add_option("--virtual-stages", o->virtual_stages, "Model chunks per stage (interleaved)")->capture_default_str();
    c->add_flag("--actions", o->actions, "Also list every stage's actions (sends, receives, passes) in order");
    c->callback([o] {
        const schedule::Schedule s =
            schedule::make_schedule(schedule::parse_schedule(o->schedule), o->pp, o->micro, o->virtual_stages);
        std::printf("%s", schedule::render_chart(s).c_str());
        if (!o->actions) return;
        for (int r = 0; r < s.stages; r++) {
            std::printf("stage %d:", r);
            for (const schedule::Action& a : s.ranks[size_t(r)]) {
                std::printf(" %s", schedule::op_name(a.op));
                if (a.micro >= 0) std::printf("(%d%s%s)", a.micro,
                                              s.virtual_stages > 1 ? (",c" + std::to_string(a.chunk)).c_str() : "",
                                              a.peer >= 0 ? (",peer " + std::to_string(a.peer)).c_str() : "");
            }
            std::printf("\n");
        }
    });
}

}  // namespace shardlm::cli
