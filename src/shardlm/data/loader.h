// data/loader.h: which T+1 tokens make row j of global batch k. A pure function of
// (order, seed, k, j), so any process, any data-parallel rank and any resumed run agree.
//   sequential: row r = k*G + j of the shard (wrapping around), tokens[r*T .. r*T + T]
//   random:     each epoch cuts the shard into rows at its own phase p in [0, T) (tokens
//               [p + i*T .. p + i*T + T]) and visits them in a permutation, both drawn from
//               (seed, epoch): over several epochs a token is seen in different contexts and
//               positions, not in the same window again. (n - T) / T rows an epoch.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "shardlm/core/enum_names.h"

namespace shardlm::data {

// --data-order: the shard's rows in order, or a fresh permutation every epoch.
enum class Order { Sequential, Random };
inline constexpr EnumName<Order> kOrderNames[] = {{Order::Sequential, "sequential"}, {Order::Random, "random"}};
constexpr const auto& enum_names(Order) { return kOrderNames; }

// Packed documents: each begins at an end-of-text token `eot` (llm.c's shards put one before every
// document). starts[t] = the position of the last eot at or before t among a row's T inputs (0 if none):
// the first key row t's attention sees under --doc-mask.
void document_starts(const int* inputs, int T, int eot, int* starts);

// What document masks do to a shard read in rows of T: how many documents begin in it, and the share of
// the causal (query, key) pairs of its rows that lie across a document boundary (attention skips them).
struct DocumentStats {
    int64_t documents = 0;
    double skipped = 0;
};

class BatchLoader {
public:
    BatchLoader(std::vector<uint16_t> tokens, int T, Order order, uint64_t seed, std::string source);

    // Rows of the fixed sweep of fill_row (and of an epoch in sequential order).
    int64_t num_rows() const { return rows_; }
    int64_t num_tokens() const { return int64_t(tokens_.size()); }
    // inputs, targets: T ints each, for row j of global batch k of G rows.
    void fill(int64_t k, int G, int j, int* inputs, int* targets);
    // The i-th row of a fixed, ordered sweep (validation): row i mod num_rows.
    void fill_row(int64_t i, int* inputs, int* targets) const;
    int max_token() const;
    // document masks on the fixed sweep's rows (fill_row's)
    DocumentStats document_stats(int eot) const;
    // Entropy (nats) of the shard's unigram token distribution: the loss of the best context-free model.
    double unigram_entropy() const;
    // The same over the concatenation of several shards (e.g. train + validation: the whole corpus).
    static double unigram_entropy(const std::vector<const BatchLoader*>& shards);

private:
    // First token of row j of global batch k.
    int64_t start_of(int64_t k, int G, int j);
    void copy_row(int64_t start, int* inputs, int* targets) const;
    std::vector<uint16_t> tokens_;
    int T_;
    bool random_ = false;  // Order::Random
    uint64_t seed_;
    int64_t rows_, random_rows_;
    int64_t perm_epoch_ = -1, phase_ = 0;
    std::vector<int64_t> perm_;
};

}  // namespace shardlm::data
