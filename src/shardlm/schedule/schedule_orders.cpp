// schedule/schedule_orders.cpp: the compute order of each schedule kind (schedule_orders.h).
#include "shardlm/schedule/schedule_orders.h"

#include <algorithm>
#include <array>
#include <utility>

#include "shardlm/core/check.h"

namespace shardlm::schedule::detail {

namespace {

// Megatron's order of virtual micro-batches: k -> (micro-batch, local chunk).
int virtual_chunk(int k, int p, int v, bool forward) {
    const int c = (k % (p * v)) / p;
    return forward ? c : v - 1 - c;
}
int virtual_micro(int k, int p, int v) { return (k / (p * v)) * p + k % p; }

}  // namespace

// Compute order of rank s.
std::vector<Compute> compute_order(ScheduleKind kind, int p, int m, int v, int s, bool forward_only) {
    std::vector<Compute> out;
    const int total = m * v;
    auto F = [&](int k) { out.push_back({Pass::F, virtual_micro(k, p, v), virtual_chunk(k, p, v, true)}); };
    auto B = [&](int k) { out.push_back({Pass::BW, virtual_micro(k, p, v), virtual_chunk(k, p, v, false)}); };
    if (forward_only && kind == ScheduleKind::ZeroBubbleV) {
        // down the V and back up: chunk 1 of micro-batch i runs once its input has come back up,
        // 2 (p - 1 - s) + 1 forwards after chunk 0's, so the stages stay busy
        const int lag = 2 * (p - 1 - s) + 1;
        for (int k = 0; k < m + lag; k++) {
            if (k < m) out.push_back({Pass::F, k, 0});
            if (k >= lag) out.push_back({Pass::F, k - lag, 1});
        }
        return out;
    }
    if (forward_only) {  // each micro-batch through the chunks in order: any m, no backward to interleave
        for (int i = 0; i < m; i++)
            for (int c = 0; c < v; c++) out.push_back({Pass::F, i, c});
        return out;
    }
    int warmup = 0;
    switch (kind) {
    case ScheduleKind::GPipe: warmup = total; break;
    case ScheduleKind::OneFOneB: warmup = std::min(p - s - 1, m); break;
    case ScheduleKind::Interleaved:
        warmup = m == p ? total : std::min(total, (p - s - 1) * 2 + (v - 1) * p);
        break;
    case ScheduleKind::ZeroBubbleH1: {
        // Qi et al.'s ZB-H1: 1F1B's warm-up and order of F and B, but stage s defers the W of its
        // first s micro-batches (W then runs oldest first, one after each B) to its cool-down, where
        // 1F1B leaves it idle: the last stage, idle longest at the end, defers the most; the first
        // none (it runs whole backwards, and keeps no B -> W buffers per slot). A micro-batch's
        // activations live until its W: at most p of them on any stage.
        int f = 0, b = 0, w = 0;
        auto Fw = [&] { out.push_back({Pass::F, f++, 0}); };
        auto Bi = [&] { out.push_back({s == 0 ? Pass::BW : Pass::B, b++, 0}); };
        auto Wt = [&] {
            if (s > 0) out.push_back({Pass::W, w, 0});
            w++;
        };
        for (int k = 0; k < std::min(p - s - 1, m); k++) Fw();
        for (int k = 0; k < s && f < m; k++) Fw(), Bi();
        while (f < m) Fw(), Bi(), Wt();
        while (b < m) Bi(), Wt();
        while (w < m) Wt();
        return out;
    }
    case ScheduleKind::ZeroBubbleV: return {};  // built by v_orders (all ranks at once)
    }
    const int remaining = total - warmup;
    for (int k = 0; k < warmup; k++) F(k);
    for (int k = 0; k < remaining; k++) {
        F(k + warmup);
        B(k);
    }
    for (int k = remaining; k < total; k++) B(k);
    return out;
}

// ZBV (Qi et al. 2023, sec. 6): two chunks per rank in a V, local chunk 0 the way down and chunk 1
// the way back up. Two constructions; make_schedule keeps the one simulate() finds shorter.
//
// (a) A list scheduler over unit times (F = B = W = 1 per chunk, free communication), as the paper's
// own schedules are searched: each rank, when free, runs the ready B of its oldest micro-batch (B is
// on the critical path), else the ready F of its oldest micro-batch (the chunk deeper in the V first)
// while it holds fewer than 2p chunks' activations (1F1B's peak: p micro-batches of a whole stage),
// else the oldest pending W (which frees a slot). It reaches the warm-up bound for m >= p up to p = 4.
std::vector<std::vector<Compute>> v_orders(int p, int m) {
    const int chunks = 2 * p, cap = 2 * p;
    const double never = 1e30;
    // finish times per (model chunk, micro-batch)
    std::vector<std::vector<double>> tf(size_t(chunks), std::vector<double>(size_t(m), never)), tb = tf;
    std::vector<std::vector<Compute>> out(static_cast<size_t>(p));
    std::vector<double> free_at(size_t(p), 0.0);
    std::vector<std::array<int, 2>> nf(size_t(p), {0, 0}), nb(size_t(p), {0, 0}), nw(size_t(p), {0, 0});
    std::vector<int> live(size_t(p), 0);
    std::vector<std::vector<std::pair<int, int>>> wq(static_cast<size_t>(p));  // pending W: (local chunk, micro), oldest first
    int left = 3 * chunks * m;
    for (double t = 0; left > 0; t += 1.0) {
        SHARDLM_CHECK(t < 1e6, "zbv: the list scheduler did not finish (p ", p, ", m ", m, ")");
        for (int r = 0; r < p; r++) {
            if (free_at[size_t(r)] > t) continue;
            int best_c = -1;
            // B: the oldest ready one, ties to the chunk deeper in the V (nearer the loss)
            for (int c : {1, 0}) {
                const int i = nb[size_t(r)][size_t(c)], mc = c == 0 ? r : 2 * p - 1 - r;
                if (i >= m || tf[size_t(mc)][size_t(i)] > t) continue;
                if (mc + 1 < chunks && tb[size_t(mc + 1)][size_t(i)] > t) continue;
                if (best_c < 0 || i < nb[size_t(r)][size_t(best_c)]) best_c = c;
            }
            if (best_c >= 0) {
                const int c = best_c, i = nb[size_t(r)][size_t(c)]++, mc = c == 0 ? r : 2 * p - 1 - r;
                out[size_t(r)].push_back({Pass::B, i, c});
                tb[size_t(mc)][size_t(i)] = t + 1;
                wq[size_t(r)].push_back({c, i});
                free_at[size_t(r)] = t + 1, left--;
                continue;
            }
            if (live[size_t(r)] < cap) {
                for (int c : {1, 0}) {
                    const int i = nf[size_t(r)][size_t(c)], mc = c == 0 ? r : 2 * p - 1 - r;
                    if (i >= m || (mc > 0 && tf[size_t(mc - 1)][size_t(i)] > t)) continue;
                    if (best_c < 0 || i < nf[size_t(r)][size_t(best_c)]) best_c = c;
                }
            }
            if (best_c >= 0) {
                const int c = best_c, i = nf[size_t(r)][size_t(c)]++, mc = c == 0 ? r : 2 * p - 1 - r;
                out[size_t(r)].push_back({Pass::F, i, c});
                tf[size_t(mc)][size_t(i)] = t + 1;
                live[size_t(r)]++;
                free_at[size_t(r)] = t + 1, left--;
                continue;
            }
            if (!wq[size_t(r)].empty()) {
                const auto [c, i] = wq[size_t(r)].front();
                wq[size_t(r)].erase(wq[size_t(r)].begin());
                out[size_t(r)].push_back({Pass::W, i, c});
                nw[size_t(r)][size_t(c)]++;
                live[size_t(r)]--;
                free_at[size_t(r)] = t + 1, left--;
            }
        }
    }
    return out;
}

// (b) The paper's handcrafted pattern (fig. 6), as PyTorch's ScheduleZBVZeroBubble lays it out: rank r
// runs 2 (p - r) - 1 forwards of chunk 0, then r pairs of forwards (chunk 1, chunk 0), then p - r
// times a chunk-1 forward and its backward; in the steady state F0, B0 W0, F1, B1 W1; in the cool-down
// r pairs of B0, B1 with their W deferred, then p - r times B0 and the oldest W0; then the W left. It
// is laid out for max(m, 2p - 1) micro-batches and the passes of the others dropped: it reaches the
// bound for m >= 2p - 1.
std::vector<std::vector<Compute>> v_orders_handcrafted(int p, int m) {
    std::vector<std::vector<Compute>> out(static_cast<size_t>(p));
    const int n = std::max(2 * p - 1, m);
    for (int r = 0; r < p; r++) {
        std::vector<Compute>& o = out[size_t(r)];
        int f[2] = {0, 0}, b[2] = {0, 0}, w[2] = {0, 0};
        auto emit = [&](Pass pass, int c) {
            int& i = pass == Pass::F ? f[c] : pass == Pass::B ? b[c] : w[c];
            if (i < m) o.push_back({pass, i, c});
            i++;
        };
        auto b_and_w = [&](int c) { emit(Pass::B, c), emit(Pass::W, c); };
        for (int k = 0; k < 2 * (p - r) - 1; k++) emit(Pass::F, 0);
        for (int k = 0; k < r; k++) emit(Pass::F, 1), emit(Pass::F, 0);
        for (int k = 0; k < p - r; k++) emit(Pass::F, 1), b_and_w(1);
        while (f[1] < f[0] || f[0] < n) {
            if (f[0] < n) emit(Pass::F, 0);
            b_and_w(0);
            emit(Pass::F, 1);
            b_and_w(1);
        }
        for (int k = 0; k < r; k++) emit(Pass::B, 0), emit(Pass::B, 1);
        for (int k = 0; k < p - r; k++) emit(Pass::B, 0), emit(Pass::W, 0);
        while (w[1] < b[1]) emit(Pass::W, 1);
        while (w[0] < b[0]) emit(Pass::W, 0);
        SHARDLM_CHECK(f[0] == n && b[0] == n && w[0] == n && f[1] == n && b[1] == n && w[1] == n,
                      "zbv: the handcrafted pattern does not close (p ", p, ", m ", m, ")");
    }
    return out;
}

}  // namespace shardlm::schedule::detail
