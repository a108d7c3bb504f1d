#include "shardlm/data/loader.h"

#include <algorithm>
#include <cmath>
#include <random>

#include "shardlm/core/check.h"

namespace shardlm::data {

BatchLoader::BatchLoader(std::vector<uint16_t> tokens, int T, Order order, uint64_t seed, std::string source)
    : tokens_(std::move(tokens)), T_(T), random_(order == Order::Random), seed_(seed) {
    rows_ = tokens_.size() > 0 ? int64_t(tokens_.size() - 1) / T_ : 0;
    random_rows_ = (int64_t(tokens_.size()) - T_) / T_;  // rows that fit at any phase in [0, T)
    SHARDLM_CHECK(rows_ > 0, "token shard '", source, "' holds ", tokens_.size(), " tokens, fewer than one row of T+1 = ",
                  T_ + 1, "\n---> HINT: use a smaller --seq or more data");
    SHARDLM_CHECK(!random_ || random_rows_ > 0, "token shard '", source, "' holds ", tokens_.size(),
                  " tokens, fewer than 2T = ", 2 * T_, " (one row at every phase) for --data-order random",
                  "\n---> HINT: use --data-order sequential, a smaller --seq or more data");
}

int64_t BatchLoader::start_of(int64_t k, int G, int j) {
    int64_t r = k * G + j;
    if (!random_) return (r % rows_) * T_;
    int64_t epoch = r / random_rows_;
    if (epoch != perm_epoch_) {
        perm_.resize(size_t(random_rows_));
        for (int64_t i = 0; i < random_rows_; i++) perm_[size_t(i)] = i;
        std::mt19937_64 rng(seed_ * 0x9e3779b97f4a7c15ull + uint64_t(epoch));
        phase_ = int64_t(rng() % uint64_t(T_));
        // Fisher-Yates with our own index draw (std::uniform_int_distribution is not portable bit for bit)
        for (int64_t i = random_rows_ - 1; i > 0; i--) {
            int64_t t = int64_t(rng() % uint64_t(i + 1));
            std::swap(perm_[size_t(i)], perm_[size_t(t)]);
        }
        perm_epoch_ = epoch;
    }
    return phase_ + perm_[size_t(r % random_rows_)] * T_;
}

void BatchLoader::copy_row(int64_t start, int* inputs, int* targets) const {
    const uint16_t* p = tokens_.data() + size_t(start);
    for (int t = 0; t < T_; t++) {
        inputs[t] = p[t];
        targets[t] = p[t + 1];
    }
}

void BatchLoader::fill(int64_t k, int G, int j, int* inputs, int* targets) {
    copy_row(start_of(k, G, j), inputs, targets);
}

void BatchLoader::fill_row(int64_t i, int* inputs, int* targets) const { copy_row((i % rows_) * T_, inputs, targets); }

void document_starts(const int* inputs, int T, int eot, int* starts) {
    int start = 0;
    for (int t = 0; t < T; t++) {
        if (inputs[t] == eot) start = t;
        starts[t] = start;
    }
}

DocumentStats BatchLoader::document_stats(int eot) const {
    DocumentStats s;
    const size_t n = size_t(T_);
    std::vector<int> in(n), tg(n), starts(n);
    double skipped = 0, pairs = 0;
    for (int64_t r = 0; r < rows_; r++) {
        fill_row(r, in.data(), tg.data());
        document_starts(in.data(), T_, eot, starts.data());
        for (int t = 0; t < T_; t++) {
            skipped += double(starts[size_t(t)]);  // keys 0 .. start - 1 of a causal row t
            pairs += double(t + 1);
            s.documents += in[size_t(t)] == eot;
        }
    }
    s.skipped = pairs > 0 ? skipped / pairs : 0.0;
    return s;
}

int BatchLoader::max_token() const {
    uint16_t m = 0;
    for (uint16_t t : tokens_) m = std::max(m, t);
    return m;
}

}  // namespace shardlm::data

namespace shardlm::data {

double BatchLoader::unigram_entropy() const { return unigram_entropy({this}); }

double BatchLoader::unigram_entropy(const std::vector<const BatchLoader*>& shards) {
    std::vector<int64_t> count(65536, 0);
    int64_t total = 0;
    for (const BatchLoader* s : shards) {
        for (uint16_t t : s->tokens_) count[t]++;
        total += int64_t(s->tokens_.size());
    }
    const double n = double(total);
    double h = 0;
    for (int64_t c : count)
        if (c > 0) h -= double(c) / n * std::log(double(c) / n);
    return h;
}

}  // namespace shardlm::data
