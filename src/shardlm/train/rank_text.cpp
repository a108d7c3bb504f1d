#include "shardlm/train/rank_text.h"

#include <algorithm>
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

namespace shardlm::train {

std::vector<std::string> all_gather_text(comm::Group& g, const std::string& mine) {
    const size_t n = size_t(g.size());
    std::vector<uint64_t> lens(n);
    const uint64_t my_len = mine.size();
    g.all_gather_bytes(&my_len, lens.data(), sizeof(uint64_t));
    uint64_t longest = 0;
    for (uint64_t l : lens) longest = std::max(longest, l);
    if (longest == 0) return std::vector<std::string>(n);
    std::string padded = mine;
    padded.resize(longest);
    std::string all(longest * n, '\0');
    g.all_gather_bytes(padded.data(), all.data(), longest);
    std::vector<std::string> out(n);
    for (size_t r = 0; r < n; r++) out[r] = all.substr(r * longest, lens[r]);
    return out;
}

}  // namespace shardlm::train
