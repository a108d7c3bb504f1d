// libFuzzer target: the training configuration parser (train/train_config.h): a JSON config file,
// its keys applied to TrainConfig and the result validated. Bad files are refused with
// shardlm::Error naming the key; nothing else may happen.
#include <cstdint>

#include <nlohmann/json.hpp>

#include "fuzz_input.h"
#include "shardlm/core/check.h"
#include "shardlm/io/json_file.h"
#include "shardlm/train/train_config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const std::string path = shardlm::fuzz::as_file(data, size);
    try {
        shardlm::train::TrainConfig c;
        shardlm::train::apply_config_json(c, shardlm::io::read_json_file(path), path);
        c.validate();
        (void)c.optim_config();
        (void)shardlm::train::config_to_json(c).dump();
    } catch (const shardlm::Error&) {
    }
    return 0;
}
