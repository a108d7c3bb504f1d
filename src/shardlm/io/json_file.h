// io/json_file.h: read a JSON file with an error that names the file.
#pragma once
#include <string>

#include <nlohmann/json.hpp>

namespace shardlm::io {

// Throws shardlm::Error "<path>: not valid JSON (...)" or "cannot read '<path>'".
nlohmann::json read_json_file(const std::string& path);

}  // namespace shardlm::io
