// model/moe_dispatch.cpp: the tokens' way to their experts and back (model/moe_dispatch.h).
#include "shardlm/model/moe_dispatch.h"

#include <algorithm>
#include <cstring>
#include <vector>

namespace shardlm::model {

namespace {

// The all-to-all's blocks: rows to and from each ep rank (the dispatched side: rows for its experts; the
// expert side: each rank's rows for this rank's experts, in the order they arrive).
struct Blocks {
    std::vector<size_t> to, to_off, from, from_off;
};

Blocks exchange_blocks(const MoeDims& d, const MoeActs& a) {
    Blocks b;
    size_t at = 0;
    for (int j = 0; j < d.ep; j++) {
        b.to.push_back(size_t(a.offsets[size_t(j + 1) * d.El] - a.offsets[size_t(j) * d.El]));
        b.to_off.push_back(size_t(a.offsets[size_t(j) * d.El]));
        size_t n = 0;
        for (int e = 0; e < d.El; e++) n += size_t(a.from[size_t(j) * d.El + e]);
        b.from.push_back(n), b.from_off.push_back(at), at += n;
    }
    return b;
}

// rows (in `row` bytes each) of block counts, scaled to bytes
std::vector<size_t> scaled(const std::vector<size_t>& rows, size_t row) {
    std::vector<size_t> v(rows);
    for (size_t& x : v) x *= row;
    return v;
}

// Rows of `row` bytes between the arriving order (staging) and the grouped order: to_grouped copies arriving
// row r to grouped row place[r]; else back.
void permute_rows(const MoeActs& a, void* grouped, void* staging, size_t row, bool to_grouped) {
    char* g = static_cast<char*>(grouped);
    char* s = static_cast<char*>(staging);
#pragma omp parallel for schedule(static)
    for (int r = 0; r < a.received; r++) {
        char* gp = g + size_t(a.place[size_t(r)]) * row;
        char* sp = s + size_t(r) * row;
        if (to_grouped) std::memcpy(gp, sp, row);
        else std::memcpy(sp, gp, row);
    }
}

// Bytes of the rows a block list sends to the other ranks.
size_t sent_to_others(const std::vector<size_t>& rows, int me, size_t row) {
    size_t n = 0;
    for (size_t j = 0; j < rows.size(); j++)
        if (int(j) != me) n += rows[j];
    return n * row;
}

}  // namespace

// Each kept choice's row among the dispatched ones (grouped by expert, tokens in order), and its input row.
void dispatch_rows(const MoeDims& d, MoeActs& a, MoeScratch& s, const void* x, size_t row_bytes, int N) {
    const int E = d.E, K = d.K;
    std::fill(a.offsets.data(), a.offsets.data() + E + 1, 0);
    for (int j = 0; j < N * K; j++)
        if (a.slot[size_t(j)] >= 0) a.offsets[size_t(a.choice[size_t(j)]) + 1]++;
    for (int e = 0; e < E; e++) a.offsets[size_t(e) + 1] += a.offsets[size_t(e)];
    std::fill(s.fill.data(), s.fill.data() + E, 0);
    for (int j = 0; j < N * K; j++)
        if (a.slot[size_t(j)] >= 0) {
            const int e = a.choice[size_t(j)];
            a.slot[size_t(j)] = a.offsets[size_t(e)] + s.fill[size_t(e)]++;
        }
    char* xe = static_cast<char*>(a.xe.data());
    const char* xs = static_cast<const char*>(x);
#pragma omp parallel for schedule(static)
    for (int j = 0; j < N * K; j++)
        if (a.slot[size_t(j)] >= 0) std::memcpy(xe + size_t(a.slot[size_t(j)]) * row_bytes, xs + size_t(j / K) * row_bytes, row_bytes);
}

// Every ep rank's loads of this rank's experts (a.from), the grouped order of the rows they will send
// (a.loffsets, a.place) and how many arrive.
void plan_exchange(ExpertParallel& ep, const MoeDims& d, MoeActs& a, MoeScratch& s) {
    const int me = ep.rank();
    std::vector<int> mine(static_cast<size_t>(d.E)), all(static_cast<size_t>(d.ep) * d.E);
    for (int e = 0; e < d.E; e++) mine[size_t(e)] = a.offsets[size_t(e) + 1] - a.offsets[size_t(e)];
    ep.all_gather_bytes(mine.data(), all.data(), sizeof(int) * size_t(d.E));
    s.count_gathers++;
    for (int j = 0; j < d.ep; j++)
        for (int e = 0; e < d.El; e++) a.from[size_t(j) * d.El + e] = all[size_t(j) * d.E + size_t(me) * d.El + e];
    // grouped: expert by expert, within an expert rank by rank; arriving: rank by rank, within a rank by expert
    a.loffsets[0] = 0;
    for (int e = 0; e < d.El; e++) {
        int n = 0;
        for (int j = 0; j < d.ep; j++) n += a.from[size_t(j) * d.El + e];
        a.loffsets[size_t(e) + 1] = a.loffsets[size_t(e)] + n;
    }
    a.received = a.loffsets[size_t(d.El)];
    std::vector<int> next(a.loffsets.data(), a.loffsets.data() + d.El);
    int r = 0;
    for (int j = 0; j < d.ep; j++)
        for (int e = 0; e < d.El; e++)
            for (int i = 0; i < a.from[size_t(j) * d.El + e]; i++) a.place[size_t(r++)] = next[size_t(e)]++;
}

// Dispatched rows (send side, `row` bytes each) to the experts' ranks, arriving grouped at `grouped`.
void send_to_experts(ExpertParallel& ep, const MoeDims& d, const MoeActs& a, MoeScratch& s, const void* rows,
                     void* grouped, size_t row) {
    const Blocks b = exchange_blocks(d, a);
    s.exchanged_bytes += sent_to_others(b.to, ep.rank(), row);
    const auto to = scaled(b.to, row), to_off = scaled(b.to_off, row);
    const auto from = scaled(b.from, row), from_off = scaled(b.from_off, row);
    ep.all_to_all_bytes(rows, to.data(), to_off.data(), s.staging.data(), from.data(), from_off.data());
    permute_rows(a, grouped, s.staging.data(), row, true);
}

// The experts' rows (grouped, `row` bytes each) back to the ranks that dispatched them, into `rows`.
void return_from_experts(ExpertParallel& ep, const MoeDims& d, const MoeActs& a, MoeScratch& s, void* grouped,
                         void* rows, size_t row) {
    const Blocks b = exchange_blocks(d, a);
    s.exchanged_bytes += sent_to_others(b.from, ep.rank(), row);
    permute_rows(a, grouped, s.staging.data(), row, false);
    const auto to = scaled(b.to, row), to_off = scaled(b.to_off, row);
    const auto from = scaled(b.from, row), from_off = scaled(b.from_off, row);
    ep.all_to_all_bytes(s.staging.data(), from.data(), from_off.data(), rows, to.data(), to_off.data());
}


void combine_rows(const MoeActs& a, const float* y, const float* weight, float* out, int N, int K, int C) {
#pragma omp parallel for schedule(static)
    for (int i = 0; i < N; i++) {
        float* o = out + size_t(i) * C;
        for (int k = 0; k < K; k++) {
            const int r = a.slot[size_t(i) * K + k];
            if (r < 0) continue;
            const float g = weight ? weight[size_t(i) * K + k] : 1.0f, *yr = y + size_t(r) * C;
            for (int c = 0; c < C; c++) o[c] += g * yr[c];
        }
    }
}

}  // namespace shardlm::model
