#include "shardlm/train/rank_text.h"

#include <cstdint>

namespace shardlm::train {

std::vector<std::string> gather_text(comm::Group& g, const std::string& mine) {
    constexpr int kTagLen = 7001, kTagText = 7002;
    std::vector<std::string> out;
    if (g.rank() != 0) {
        uint64_t n = mine.size();
        g.send(&n, sizeof(n), 0, kTagLen);
        g.send(mine.data(), n, 0, kTagText);
        return out;
    }
    out.push_back(mine);
    for (int r = 1; r < g.size(); r++) {
        uint64_t n = 0;
        g.recv(&n, sizeof(n), r, kTagLen);
        std::string other(n, '\0');
        g.recv(other.data(), n, r, kTagText);
        out.push_back(std::move(other));
    }
    return out;
}

}  // namespace shardlm::train
