#include "shardlm/data/token_ids.h"

#include <cstdint>
#include <nlohmann/json.hpp>

#include "shardlm/core/check.h"

namespace shardlm::data {

std::vector<int> parse_token_ids(std::string_view json_text) {
    nlohmann::json j;
    try {
        j = nlohmann::json::parse(json_text);
    } catch (const std::exception& e) {
        fail("decode: stdin is not JSON (", e.what(), ")\n---> HINT: pipe in an array of token ids, e.g. "
             "echo '[40, 1101]' | shardlm decode");
    }
    SHARDLM_CHECK(j.is_array(), "decode: stdin holds JSON ", j.type_name(),
                  ", want an array of token ids\n---> HINT: e.g. echo '[40, 1101]' | shardlm decode");
    std::vector<int> ids;
    ids.reserve(j.size());
    for (size_t i = 0; i < j.size(); ++i) {
        const auto& v = j[i];
        bool ok = false;
        int64_t id = 0;
        if (v.is_number_unsigned()) {
            ok = v.get<uint64_t>() <= uint64_t(INT32_MAX);
            id = ok ? int64_t(v.get<uint64_t>()) : 0;
        } else if (v.is_number_integer()) {
            id = v.get<int64_t>();
            ok = id >= INT32_MIN && id <= INT32_MAX;
        } else if (v.is_number_float()) {  // accept 40.0, which some JSON writers produce
            const double d = v.get<double>();
            ok = d >= INT32_MIN && d <= INT32_MAX && d == double(int64_t(d));
            id = ok ? int64_t(d) : 0;
        }
        SHARDLM_CHECK(ok, "decode: element ", i, " of the input array is ", v.dump(), ", want an integer token id");
        ids.push_back(int(id));
    }
    return ids;
}

}  // namespace shardlm::data
