#include "shardlm/io/json_file.h"

#include "shardlm/core/check.h"
#include "shardlm/io/atomic_file.h"

namespace shardlm::io {

nlohmann::json read_json_file(const std::string& path) {
    std::string text = read_file(path);
    try {
        return nlohmann::json::parse(text);
    } catch (const nlohmann::json::exception& e) {
        fail(path, ": not valid JSON (", e.what(), ")");
    }
}

}  // namespace shardlm::io
