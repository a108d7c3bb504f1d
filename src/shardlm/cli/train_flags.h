// cli/train_flags.h: the flags of `shardlm train` (one per TrainConfig field, and --config), shared
// by `train` and `launch` (which reads the train command it supervises to choose layouts).
#pragma once
#include <map>
#include <memory>
#include <string>

#include <CLI/CLI.hpp>

#include "shardlm/train/train_config.h"

namespace shardlm::cli {

struct TrainFlags {
    std::shared_ptr<train::TrainConfig> cfg;      // the flags' values (defaults where not given)
    std::shared_ptr<std::string> config_file;     // --config
    std::shared_ptr<std::map<std::string, CLI::Option*>> options;  // key -> its flag
    // The settings after parsing: --config's file with the flags given on the command line over it.
    train::TrainConfig resolve() const;
};

// Adds every train flag to c.
TrainFlags add_train_flags(CLI::App* c);

}  // namespace shardlm::cli
