// cli/cmd_train.cpp: `shardlm train`. Every TrainConfig field is a flag (--global-batch for
// global_batch); --config FILE reads the same keys from JSON, and flags given on the command line
// override the file.
#include <cstdio>
#include <map>
#include <memory>
#include <new>
#include <string>
#include <type_traits>

#include "shardlm/cli/commands.h"
#include "shardlm/cli/train_flags.h"
#include "shardlm/comm/flight.h"
#include "shardlm/comm/mpi_env.h"
#include "shardlm/comm/settings.h"
#include "shardlm/io/json_file.h"
#include "shardlm/core/check.h"
#include "shardlm/train/trainer.h"

namespace shardlm::cli {

TrainFlags add_train_flags(CLI::App* c) {
    TrainFlags f;
    f.cfg = std::make_shared<train::TrainConfig>();
    f.config_file = std::make_shared<std::string>();
    f.options = std::make_shared<std::map<std::string, CLI::Option*>>();
    auto cfg = f.cfg;
    auto options = f.options;
    c->add_option("--config", *f.config_file, "JSON file of settings (keys as below with '_'); flags override it");
    train::for_each_input(*cfg, [&](const char* key, auto& ref, const char* help) {
        std::string flag = std::string("--") + key;
        for (auto& ch : flag) ch = ch == '_' ? '-' : ch;
        using T = std::decay_t<decltype(ref)>;
        CLI::Option* o;
        if constexpr (std::is_same_v<T, bool>) {
            o = c->add_flag(flag, ref, help);
        } else if constexpr (TextSetting<T>) {  // parsed here, once: a bad name fails naming the flag
            auto* dst = &ref;
            o = c->add_option_function<std::string>(
                     flag, [dst, flag](const std::string& s) { train::parse_setting(flag, s, dst); },
                     std::string(help) + ": " + setting_choices(dst))
                    ->default_str(setting_text(ref));
        } else if constexpr (NumberSetting<T>) {  // --zero 3: a number from a fixed set
            auto* dst = &ref;
            o = c->add_option_function<int64_t>(
                     flag, [dst, flag](int64_t n) { train::parse_number_setting(flag, n, dst); },
                     std::string(help) + ": " + setting_choices(dst))
                    ->default_str(std::to_string(setting_number(ref)));
        } else {
            o = c->add_option(flag, ref, help)->capture_default_str();
        }
        (*options)[key] = o;
    });
    return f;
}

train::TrainConfig TrainFlags::resolve() const {
    train::TrainConfig run = *cfg;
    if (!config_file->empty()) {
        // the file's keys, then the flags given on the command line over them; older spellings folded once,
        // when every source is in (--matmul-precision fp32 over a file's bf16 stays fp32 products)
        run = train::TrainConfig{};
        train::apply_config_keys(run, io::read_json_file(*config_file), *config_file);
        train::for_each_input(run, [&](const char* key, auto& ref, const char*) {
            if (options->at(key)->count() == 0) return;
            train::for_each_input(*cfg, [&](const char* k2, auto& src, const char*) {
                if constexpr (std::is_same_v<std::decay_t<decltype(src)>, std::decay_t<decltype(ref)>>)
                    if (std::string(k2) == key) ref = src;
            });
        });
    }
    run.fold_aliases();
    return run;
}

void add_train_command(CLI::App& app) {
    CLI::App* c = app.add_subcommand("train", "Train a GPT model");
    const TrainFlags flags = add_train_flags(c);
    c->callback([flags] {
        const train::TrainConfig run = flags.resolve();
        // MPI only when launched by mpirun; otherwise one process, no MPI at all.
        int status = 0;
        {
            comm::MpiEnv env;
            try {
                train::Trainer t(run, env.world());
                t.set_faults(train::faults_from_env(env.world_rank(), t.node_memory()));  // tests only
                status = t.run();
            } catch (const std::bad_alloc&) {
                const std::string msg = "out of memory while setting up or training the model"
                                        "\n---> HINT: a smaller --model, --micro-batch or --seq, or --zero 3 over more ranks";
                if (!env.is_distributed()) throw Error(msg);
                std::fprintf(stderr, "shardlm: error (rank %d of %d): %s\n", env.world_rank(), env.world_size(), msg.c_str());
                env.abort(1);
            } catch (const std::exception& e) {
                if (!env.is_distributed()) throw;
                // one rank failing must not leave the others waiting in a collective
                std::fprintf(stderr, "shardlm: error (rank %d of %d): %s\n", env.world_rank(), env.world_size(), e.what());
                // this rank's last operations; the others dump theirs on the SIGTERM mpirun sends them. The hint
                // only where a collective timed out: a bad flag or file fails alike on every rank, nothing stalled.
                const std::string flight = comm::flight::dump(e.what());
                if (!flight.empty() && comm::timed_out())
                    std::fprintf(stderr, "shardlm: rank %d: flight record written to %s; which rank stalled: "
                                         "shardlm report --flight %s\n", env.world_rank(), flight.c_str(),
                                 comm::flight::dump_dir().c_str());
                std::fflush(stderr);
                env.abort(1);
            }
        }
        if (status != 0) throw CLI::RuntimeError(status);  // after MPI_Finalize (MpiEnv's destructor)
    });
}

}  // namespace shardlm::cli
