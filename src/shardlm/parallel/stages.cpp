#include "shardlm/parallel/stages.h"

#include <algorithm>
#include <limits>
#include <charconv>

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

std::string setting_text(const StageSplit& s) {
    std::string t;
    for (size_t i = 0; i < s.blocks.size(); i++) {
        if (i) t += ',';
        t += std::to_string(s.blocks[i]);
    }
    return t;
}

namespace {

// The split text names, or why it does not (*why).
bool read_split(std::string_view text, StageSplit* out, std::string* why) {
    StageSplit s;
    for (size_t at = 0; !text.empty() && at <= text.size();) {
        const size_t comma = std::min(text.find(',', at), text.size());
        std::string_view tok = text.substr(at, comma - at);
        while (!tok.empty() && tok.front() == ' ') tok.remove_prefix(1);  // "3, 3"
        while (!tok.empty() && tok.back() == ' ') tok.remove_suffix(1);
        if (tok.empty() && comma == text.size() && !s.blocks.empty()) break;  // "3,3,": a trailing comma
        int n = -1;
        const auto r = std::from_chars(tok.data(), tok.data() + tok.size(), n);
        if (r.ec != std::errc() || r.ptr != tok.data() + tok.size() || n < 0) {
            why->assign(1, '\'').append(tok).append("' is not a number of blocks");
            return false;
        }
        s.blocks.push_back(n);
        at = comma + 1;
    }
    *out = s;
    return true;
}

}  // namespace

bool setting_parse(std::string_view text, StageSplit* out) {
    std::string why;
    return read_split(text, out, &why);
}

std::string setting_problem(std::string_view text, const StageSplit*) {
    StageSplit s;
    std::string why;
    return read_split(text, &s, &why) ? "" : why;
}

std::string setting_choices(const StageSplit*) {
    return "numbers of blocks >= 0 separated by commas, one per chunk (pp x virtual stages) summing to n_layer, e.g. 3,3,3,3";
}

std::vector<std::pair<int, int>> split_stages(const model::GptConfig& c, int seq, int chunks, const StageSplit& pp_split) {
    const int L = c.n_layer, U = L + 2;
    SHARDLM_CHECK(chunks >= 1, "pipeline chunks must be >= 1");
    std::vector<std::pair<int, int>> out;
    if (!pp_split.empty()) {
        const std::vector<int>& blocks = pp_split.blocks;
        const std::string split = setting_text(pp_split);
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
