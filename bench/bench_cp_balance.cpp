// bench/bench_cp_balance.cpp: the attention work each context-parallel rank does, zigzag against contiguous
// chunks. For every rank of cp, the pairs its ring computes (its queries against every rank's keys: the
// forward's flash_block_forward and the backward's flash_block_backward, kernels/flash_attention.h), timed
// on this machine's threads one rank after another (no messages: the compute a ring step waits for), best
// of --reps; then max/min over the ranks. A ring step lasts as long as its slowest rank, so max/min is the
// step time lost to imbalance. Beside them, the whole sequence's fused attention on one rank.
//   bench_cp_balance [--seq 16384] [--cp 4] [--heads 12] [--kv-heads 12] [--head-dim 64] [--reps 3]
#include <omp.h>

#include <algorithm>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "bench_options.h"
#include "shardlm/core/timer.h"
#include "shardlm/kernels/flash_attention.h"
#include "shardlm/model/context_parallel.h"

namespace {

using namespace shardlm;
using Vec = std::vector<float>;

struct Args {
    int T = 16384, cp = 4, NH = 12, NKV = 12, HS = 64, reps = 3;
};

Vec random(size_t n, unsigned seed) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> d(0.0f, 1.0f);
    Vec v(n);
    for (float& x : v) x = d(rng);
    return v;
}

// The positions of every rank: zigzag (model::SequenceSplit) or contiguous chunks of T / cp.
std::vector<std::vector<int>> positions(const Args& a, bool zigzag) {
    const model::SequenceSplit split(a.T, a.cp);
    const int L = split.local();
    std::vector<std::vector<int>> pos(size_t(a.cp));
    for (int r = 0; r < a.cp; r++)
        for (int i = 0; i < L; i++) pos[size_t(r)].push_back(zigzag ? split.positions(r)[i] : r * L + i);
    return pos;
}

// One rank's forward and backward over every rank's key block, in seconds (best of reps).
double rank_seconds(const Args& a, const std::vector<std::vector<int>>& pos, int r, const std::vector<Vec>& qkv,
                    const Vec& dout) {
    const int L = a.T / a.cp, C = a.NH * a.HS, KVC = a.NKV * a.HS, W = C + 2 * KVC;
    const size_t rows = size_t(a.NH) * size_t(L);
    Vec o(rows * size_t(a.HS)), m(rows), l(rows), out(size_t(L) * size_t(C)), lse(rows), D(rows);
    Vec dq(size_t(L) * size_t(W)), dkv(size_t(L) * size_t(W));
    double best = 1e30;
    for (int rep = 0; rep < a.reps; rep++) {
        const double t0 = now_s();
        const kernels::FlashState st{o.data(), m.data(), l.data()};
        kernels::flash_state_reset(st, 1, a.NH, L, a.HS);
        auto pair = [&](int src) {
            return kernels::FlashBlockPair{qkv[size_t(r)].data(), W, qkv[size_t(src)].data() + C, W, DType::F32,
                                           pos[size_t(r)].data(), pos[size_t(src)].data(), 1, L, L, C, a.NH, a.NKV, true};
        };
        for (int k = 0; k < a.cp; k++) kernels::flash_block_forward(st, pair((r - k + a.cp) % a.cp));
        kernels::flash_state_finish(out.data(), lse.data(), st, DType::F32, 1, L, C, a.NH);
        kernels::flash_block_delta(D.data(), dout.data(), out.data(), DType::F32, 1, L, C, a.NH);
        std::fill(dq.begin(), dq.end(), 0.0f);
        for (int k = 0; k < a.cp; k++)
            kernels::flash_block_backward(dq.data(), W, dkv.data() + C, W, dout.data(), lse.data(), D.data(),
                                          pair((r - k + a.cp) % a.cp));
        best = std::min(best, now_s() - t0);
    }
    return best;
}

// the whole sequence's fused attention, forward and backward, on one rank
double whole_seconds(const Args& a) {
    const int C = a.NH * a.HS, W = C + 2 * a.NKV * a.HS;
    const Vec qkv = random(size_t(a.T) * size_t(W), 1), dout = random(size_t(a.T) * size_t(C), 2);
    Vec out(size_t(a.T) * size_t(C)), lse(size_t(a.NH) * size_t(a.T)), dqkv(qkv.size());
    double best = 1e30;
    for (int rep = 0; rep < a.reps; rep++) {
        const double t0 = now_s();
        kernels::flash_attention_forward(out.data(), lse.data(), qkv.data(), DType::F32, 1, a.T, C, a.NH, a.NKV);
        kernels::flash_attention_backward(dqkv.data(), dout.data(), qkv.data(), out.data(), lse.data(), DType::F32, 1,
                                          a.T, C, a.NH, a.NKV);
        best = std::min(best, now_s() - t0);
    }
    return best;
}

}  // namespace

int main(int argc, char** argv) {
    if (!options_paired("bench_cp_balance", argc, argv)) return 2;
    Args a;
    for (int i = 1; i + 1 < argc; i += 2) {
        const std::string k = argv[i];
        const int v = whole_or_exit("bench_cp_balance", k, argv[i + 1], 1);
        if (k == "--seq") a.T = v;
        else if (k == "--cp") a.cp = v;
        else if (k == "--heads") a.NH = v;
        else if (k == "--kv-heads") a.NKV = v;
        else if (k == "--head-dim") a.HS = v;
        else if (k == "--reps") a.reps = v;
        else {
            std::fprintf(stderr, "bench_cp_balance: unknown option %s (the options: the comment at the top of bench/bench_cp_balance.cpp)\n", k.c_str());
            return 2;
        }
    }
    const int L = a.T / a.cp, C = a.NH * a.HS, W = C + 2 * a.NKV * a.HS;
    std::printf("attention per context-parallel rank: T %d, cp %d (%d rows a rank), %d heads (%d kv) of %d, fp32, %d threads, best of %d\n",
                a.T, a.cp, L, a.NH, a.NKV, a.HS, omp_get_max_threads(), a.reps);
    const Vec dout = random(size_t(L) * size_t(C), 3);
    for (bool zigzag : {true, false}) {
        const std::vector<std::vector<int>> pos = positions(a, zigzag);
        std::vector<Vec> qkv;
        for (int r = 0; r < a.cp; r++) qkv.push_back(random(size_t(L) * size_t(W), 10u + unsigned(r)));
        std::vector<double> t;
        for (int r = 0; r < a.cp; r++) t.push_back(rank_seconds(a, pos, r, qkv, dout));
        std::printf("%-10s", zigzag ? "zigzag" : "contiguous");
        double sum = 0;
        for (int r = 0; r < a.cp; r++) std::printf("  rank %d %8.1f ms", r, t[size_t(r)] * 1e3), sum += t[size_t(r)];
        const auto [lo, hi] = std::minmax_element(t.begin(), t.end());
        std::printf("  | max/min %.3f  sum %.1f ms\n", *hi / *lo, sum * 1e3);
    }
    std::printf("%-10s  whole sequence on one rank %.1f ms\n", "one rank", whole_seconds(a) * 1e3);
    return 0;
}
