// cli/cmd_launch.cpp: `shardlm launch -np N [--min-np M] [--max-restarts R] [--hostfile H] -- train ...`:
// runs the train command under mpirun and, when a rank dies or hangs, restarts it on the ranks left
// (launch/supervisor.h).
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "shardlm/cli/commands.h"
#include "shardlm/cli/train_flags.h"
#include "shardlm/core/check.h"
#include "shardlm/io/json_file.h"
#include "shardlm/launch/supervisor.h"
#include "shardlm/parallel/dp_algo_config.h"

namespace shardlm::cli {

namespace {

constexpr const char* kUsage =
    "usage: shardlm launch -np N [--min-np M] [--max-np X] [--max-restarts R] [--hostfile H] [--oversubscribe]\n"
    "                      [--mpirun CMD] [--mpi-arg ARG]... -- train <train flags>";

int to_int(const std::string& flag, const std::string& v) {
    try {
        size_t used = 0;
        const int x = std::stoi(v, &used);
        if (used == v.size()) return x;
    } catch (const std::exception&) {
    }
    fail("launch: ", flag, " wants a whole number (got '", v, "')\n", kUsage);
}

// launch's default --mem-ckpt-every 1 (launch/supervisor.h), unless the train command sets it (a flag, or a key
// of its --config) or a --dp-algo whose replicas differ would average them at every step.
bool keeps_memory_checkpoints(const TrainFlags& flags, const train::TrainConfig& cfg) {
    if (flags.options->at("mem_ckpt_every")->count() > 0) return false;
    if (!flags.config_file->empty() && io::read_json_file(*flags.config_file).contains("mem_ckpt_every")) return false;
    return !parallel::replicas_differ(cfg.dp_algo.algo);
}

}  // namespace

void add_launch_command(CLI::App& app) {
    CLI::App* c = app.add_subcommand(
        "launch",
        "Run `train` under mpirun and restart it on the ranks left when a rank dies or a collective times out.\n"
        "  shardlm launch -np N [--min-np M] [--max-np X] [--max-restarts R] [--hostfile H] [--oversubscribe] [--mpirun CMD]\n"
        "                 [--mpi-arg ARG]... -- train <train flags>\n"
        "  -np N             ranks of the first attempt (the train command's dp x tp x pp)\n"
        "  --min-np M        fewest ranks to go on with (default 1)\n"
        "  --max-np X        after losing ranks, grow back up to X ranks: without --hostfile at the restart (a lost\n"
        "                    rank's CPU is free again), with one at a checkpoint once the lost nodes run again\n"
        "                    (default: never grow)\n"
        "  --max-restarts R  restarts before giving up (default 3)\n"
        "  --hostfile H      passed to mpirun\n"
        "  --oversubscribe   passed to mpirun (more ranks than cores)\n"
        "  --mpirun CMD      the mpirun to use (default mpirun); --mpi-arg ARG: one more mpirun argument\n"
        "A restart keeps the global batch, takes the largest layout that fits the ranks left (the same tp x pp\n"
        "if it fits; without --hostfile, --max-np ranks at once) and resumes from the newest good checkpoint: the\n"
        "one kept in memory after every step (train --mem-ckpt-every 1 unless the train command sets it) when it\n"
        "is newer than the disk's; each restart is logged with its reason, old and new layout and the steps lost\n"
        "(stdout and <out>/launch.jsonl).");
    c->prefix_command();
    c->allow_extras();
    c->callback([c] {
        std::vector<std::string> args = c->remaining();
        launch::LaunchOptions o;
        size_t i = 0;
        bool np_given = false;
        auto value = [&](const std::string& flag) {
            SHARDLM_CHECK(i + 1 < args.size(), "launch: ", flag, " needs a value\n", kUsage);
            return args[++i];
        };
        for (; i < args.size(); i++) {
            const std::string& a = args[i];
            if (a == "--") {
                i++;
                break;
            }
            if (a == "train") break;
            if (a == "-np" || a == "--np" || a == "-n") o.np = to_int(a, value(a)), np_given = true;
            else if (a == "--min-np") o.min_np = to_int(a, value(a));
            else if (a == "--max-restarts") o.max_restarts = to_int(a, value(a));
            else if (a == "--max-np") o.max_np = to_int(a, value(a));
            else if (a == "--hostfile") o.hostfile = value(a);
            else if (a == "--mpirun") o.mpirun = value(a);
            else if (a == "--mpi-arg") o.mpi_args.push_back(value(a));
            else if (a == "--oversubscribe") o.mpi_args.push_back(a);
            else fail("launch: unknown option '", a, "'\n", kUsage);
        }
        SHARDLM_CHECK(i < args.size() && args[i] == "train", "launch: no train command after the launch options\n",
                      kUsage);
        o.train_args.assign(args.begin() + long(i) + 1, args.end());
        SHARDLM_CHECK(np_given, "launch: -np N is required\n", kUsage);
        SHARDLM_CHECK(o.np >= 1, "launch: -np must be at least 1 (got ", o.np, ")\n---> HINT: -np N, N the train command's ",
                      "dp x tp x pp x cp ranks");
        // read the train command as `shardlm train` would (its errors come now, not in every attempt)
        CLI::App parser{"train"};
        parser.allow_extras(false);
        const TrainFlags flags = add_train_flags(&parser);
        std::vector<std::string> rev(o.train_args.rbegin(), o.train_args.rend());
        try {
            parser.parse(rev);
        } catch (const CLI::ParseError& e) {
            fail("launch: the train command: ", e.what(), "\n---> HINT: shardlm train --help lists its flags");
        }
        train::TrainConfig cfg = flags.resolve();
        if (keeps_memory_checkpoints(flags, cfg)) {
            o.train_args.insert(o.train_args.end(), {"--mem-ckpt-every", "1"});
            cfg.output.mem_ckpt_every = 1;
        }
        const int status = launch::supervise(o, cfg);
        if (status != 0) throw CLI::RuntimeError(status);
    });
}

}  // namespace shardlm::cli
