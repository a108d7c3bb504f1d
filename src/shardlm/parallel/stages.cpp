#include "shardlm/parallel/stages.h"

#include <algorithm>
#include <limits>
#include <sstream>

#include "shardlm/core/check.h"
#include "shardlm/cost/flops.h"
#include "shardlm/cost/shape.h"
#include "shardlm/model/layout.h"

namespace shardlm::parallel {

double unit_flops_per_token(const model::GptConfig& c, int seq, int unit) {
    // forward + backward = 3 forwards, of the cost model's counts (the head over the padded rows it computes)
    const cost::ModelShape m = model::cost_shape(c, seq, c.padded_vocab());
    switch (model::compute_kind(c.n_layer, unit)) {
    case model::ComputeKind::Embedding: return 3.0 * c.n_embd;  // lookups and adds (the cost model counts them 0): not free
    case model::ComputeKind::Head: return 3.0 * cost::head_forward_flops_per_token(m);
    case model::ComputeKind::Block: break;
    }
    return 3.0 * cost::block_forward_flops_per_token(m, seq).total();
}

std::vector<std::pair<int, int>> split_stages(const model::GptConfig& c, int seq, int chunks, const std::string& split) {
    const int L = c.n_layer, U = L + 2;
    SHARDLM_CHECK(chunks >= 1, "pipeline chunks must be >= 1");
    std::vector<std::pair<int, int>> out;
    if (!split.empty()) {
        std::vector<int> blocks;
        std::stringstream ss(split);
        for (std::string tok; std::getline(ss, tok, ',');) {
            int n = -1;
            try {
                size_t used = 0;
                n = std::stoi(tok, &used);
                if (used != tok.size()) n = -1;
            } catch (...) {
            }
            SHARDLM_CHECK(n >= 0, "--pp-split '", split, "': '", tok, "' is not a number of blocks");
            blocks.push_back(n);
        }
        int sum = 0;
        for (int n : blocks) sum += n;
        SHARDLM_CHECK(int(blocks.size()) == chunks && sum == L, "--pp-split '", split, "' gives ", blocks.size(),
                      " chunks of ", sum, " blocks; the model needs ", chunks, " chunks (pp x virtual stages) of ", L,
                      " blocks in all\n---> HINT: e.g. --pp-split ", L / chunks, ",... with ", chunks, " numbers summing to ",
                      L);
        int at = 1;
        for (int i = 0; i < chunks; i++) {
            int first = i == 0 ? 0 : at, last = at + blocks[size_t(i)] - 1;
            if (i == chunks - 1) last = L + 1;
            SHARDLM_CHECK(last >= first, "--pp-split '", split, "': chunk ", i, " would be empty");
            out.push_back({first, last});
            at += blocks[size_t(i)];
        }
        return out;
    }
    SHARDLM_CHECK(chunks <= U, "the model has ", U, " compute units (embedding, ", L, " blocks, head): it cannot be cut into ",
                  chunks, " pipeline chunks\n---> HINT: use fewer --pp x --virtual-stages, or a deeper model");
    // min over cuts of the largest chunk cost: dynamic programme over prefixes
    std::vector<double> prefix(size_t(U) + 1, 0.0);
    for (int u = 0; u < U; u++) prefix[size_t(u) + 1] = prefix[size_t(u)] + unit_flops_per_token(c, seq, u);
    const double inf = std::numeric_limits<double>::infinity();
    // best[k][i]: the smallest largest-chunk cost of cutting units [0, i) into k chunks
    std::vector<std::vector<double>> best(size_t(chunks) + 1, std::vector<double>(size_t(U) + 1, inf));
    std::vector<std::vector<int>> cut(size_t(chunks) + 1, std::vector<int>(size_t(U) + 1, 0));
    best[0][0] = 0;
    for (int k = 1; k <= chunks; k++)
        for (int i = k; i <= U; i++)
            for (int j = k - 1; j < i; j++) {
                const double v = std::max(best[size_t(k) - 1][size_t(j)], prefix[size_t(i)] - prefix[size_t(j)]);
                if (v < best[size_t(k)][size_t(i)] - 1e-9) best[size_t(k)][size_t(i)] = v, cut[size_t(k)][size_t(i)] = j;
            }
    std::vector<int> ends;
    for (int k = chunks, i = U; k > 0; k--) {
        ends.push_back(i);
        i = cut[size_t(k)][size_t(i)];
    }
    std::reverse(ends.begin(), ends.end());
    int first = 0;
    for (int e : ends) {
        out.push_back({first, e - 1});
        first = e;
    }
    return out;
}

}  // namespace shardlm::parallel
