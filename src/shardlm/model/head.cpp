// model/head.cpp: the final norm, the LM head (tied to wte, or lm_head) and the cross-entropy (units.h), in lanes or
// over all threads, vocabulary-parallel across a tensor-parallel group.
#include "shardlm/model/units.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "shardlm/core/check.h"
#include "shardlm/core/profile.h"
#include "shardlm/kernels/crossentropy.h"
#include "shardlm/kernels/layernorm.h"
#include "shardlm/kernels/gemm/gemm.h"
#include "shardlm/kernels/sample_labels.h"
#include "shardlm/model/unit_ops.h"

namespace shardlm::model {

using namespace shardlm::kernels;
using namespace detail;

namespace {

// The chunked head's rows [0, rows) (one tensor-parallel rank): the logits a block of kHeadCols columns at a
// time into the tile lg (rows, width), each block's softmax statistics taken while it is in cache
// (kernels/crossentropy.h), then the losses and, with d16 (rows, Vt), the bf16 gradient.
void head_rows_blocked(const UnitContext& u, float* lg, const void* in, const void* wte, const int* labels,
                       float* losses, unsigned short* d16, int rows, int Vt, float dloss) {
    const int C = u.cfg->n_embd, V = u.cfg->vocab_size;
    const DType wt = u.mixed() ? u.prec.activation : DType::F32;  // the weight as linear() reads it
    const int blocks = (Vt + kHeadCols - 1) / kHeadCols;
    // per row: 4 statistics and each block's maximum (the thread's own; grown once, not in every step)
    thread_local std::vector<float> buf;
    buf.resize(std::max(buf.size(), size_t(rows) * size_t(4 + blocks)));
    float* mb = buf.data() + 4 * size_t(rows);
    const CeRowStats st{buf.data(), buf.data() + rows, buf.data() + 2 * size_t(rows), buf.data() + 3 * size_t(rows)};
    ce_rows_start(st, rows);
    for (int b = 0; b < blocks; b++) {
        const int c0 = b * kHeadCols, w = std::min(kHeadCols, Vt - c0), nr = std::clamp(V - c0, 0, w);
        linear(u, lg, DType::F32, in, at(wte, wt, size_t(c0) * size_t(C)), nullptr, rows, C, w);
        ce_block_stats(lg, d16 ? d16 + c0 : nullptr, size_t(Vt), mb + size_t(b) * size_t(rows), st, labels, rows,
                       nr, w, c0);
    }
    ce_rows_loss(losses, st, rows);
    if (d16) ce_rows_grad(d16, size_t(Vt), mb, kHeadCols, st, labels, rows, V, dloss);
}

}  // namespace

void head_forward(const UnitContext& u, const float* lnf_w, const float* lnf_b, const void* wte, HeadActs& a,
                  const void* xL, const int* targets, int B, int T, float dloss) {
    const int C = u.cfg->n_embd, tp = u.tp_size(), N = B * T;
    const int V = u.cfg->vocab_size, Vt = u.cfg->padded_vocab(tp) / tp, v0 = u.tp->rank() * Vt;
    unsigned short* d16 = u.bf16_products() ? a.dlogits_bf16.data() : nullptr;
    SHARDLM_CHECK(targets || a.logits.size(), "the head keeps no logits with bf16 products: give targets");
    // a group of sequences at a time: rows [r0, r0 + n) (more than one group: one tensor-parallel rank)
    const Groups groups = sequence_groups(u, B, T);
    Items items(u, kRowPhase, groups.count);
    for (int i; items.next(&i);) {
        const Span sq = groups(i, B);
        const size_t r0 = size_t(sq.begin) * size_t(T);
        const int n = sq.count * T;
        void* lnf = at(a.lnf.data(), u.prec.activation, r0 * C);
        norm_forward(u, lnf, stat_rows(a.lnf_mean, r0), a.lnf_rstd.data() + r0, at(xL, u.prec.activation, r0 * C), lnf_w,
                     lnf_b, u.rows(n));
        if (targets) std::memcpy(a.targets.data() + r0, targets + r0, sizeof(int) * size_t(n));
        // the labels the loss uses: the targets, or (sampling) drawn below from the logits into a.targets
        const int* labels = targets ? a.targets.data() : nullptr;
        if (a.logits.size() == 0) {
            // chunked head: the fp32 logits of kHeadRows rows at a time in scratch (the lane's own tile),
            // and from them the loss and the bf16 gradient of those rows
            float* lg = u.scratch->logits.data() + size_t(u.lane) * head_tile_floats(u, Vt);
            for (size_t r = r0; r < r0 + size_t(n); r += kHeadRows) {
                const int rows = int(std::min(size_t(kHeadRows), r0 + size_t(n) - r));
                const void* in = at(a.lnf.data(), u.prec.activation, r * C);
                if (!u.sample_labels) {  // a block of columns at a time, each one's statistics taken in cache
                    head_rows_blocked(u, lg, in, wte, labels + r, a.losses.data() + r, dloss != 0.0f ? d16 + r * Vt : nullptr,
                                      rows, Vt, dloss);
                    continue;
                }
                // Sophia's labels are drawn from whole rows of logits
                linear(u, lg, DType::F32, in, wte, nullptr, rows, C, Vt);
                sample_labels(a.targets.data() + r, lg, targets + r, rows, V, Vt, u.sample_seed);
                if (dloss != 0.0f)
                    crossentropy_forward_backward(lg, a.losses.data() + r, labels + r, rows, V, Vt, dloss, d16 + r * Vt);
                else
                    crossentropy_forward(a.losses.data() + r, lg, labels + r, rows, V, Vt);
            }
            continue;
        }
        // logits (fp32) = lnf @ wte^T over this rank's (padded) vocabulary rows; padded rows of wte are zero
        float* logits = a.logits.data() + r0 * Vt;
        linear(u, logits, DType::F32, gather_input(u, lnf, n, u.prec.activation), wte, nullptr, n, C, Vt);
        if (!targets || tp > 1) continue;
        if (u.sample_labels) sample_labels(a.targets.data() + r0, logits, targets + r0, n, V, Vt, u.sample_seed);
        if (dloss != 0.0f)
            crossentropy_forward_backward(logits, a.losses.data() + r0, labels + r0, n, V, Vt, dloss,
                                          d16 ? d16 + r0 * Vt : nullptr);
        else
            crossentropy_forward(a.losses.data() + r0, logits, labels + r0, n, V, Vt);
    }
    if (!targets || tp == 1 || a.logits.size() == 0) return;
    // vocabulary-parallel cross-entropy (one lane, all N rows)
    const int Vreal = std::max(0, std::min(Vt, V - v0));
    float* mx = u.scratch->ce.data();
    float* stats = mx + N;  // [sum of exp | target logit]
    vocab_parallel_max(mx, a.logits.data(), N, Vreal, Vt);
    u.tp->all_reduce_max(mx, size_t(N));
    if (u.sample_labels) {  // each rank's share of the softmax's sum, then the rank whose share holds u draws
        const size_t n = static_cast<size_t>(N);
        std::vector<float> sums(n), all(n * static_cast<size_t>(tp)), claims(n);
        sample_local_sums(sums.data(), a.logits.data(), mx, N, Vreal, Vt);
        u.tp->all_gather(sums.data(), all.data(), size_t(N));
        sample_claim(claims.data(), a.logits.data(), mx, all.data(), tp, u.tp->rank(), targets, N, Vreal, Vt, v0,
                     u.sample_seed);
        u.tp->all_reduce_sum(claims.data(), size_t(N));
        for (int i = 0; i < N; i++) a.targets[size_t(i)] = int(claims[size_t(i)]) - 1;
    }
    const int* labels = a.targets.data();
    vocab_parallel_sums(stats, a.logits.data(), labels, mx, N, Vreal, Vt, v0, dloss != 0.0f);
    u.tp->all_reduce_sum(stats, 2 * size_t(N));
    vocab_parallel_loss(a.losses.data(), mx, stats, N);
    if (dloss != 0.0f) vocab_parallel_grad(a.logits.data(), labels, stats, N, Vreal, Vt, v0, dloss, d16);
}

double head_loss_sum(const HeadActs& a, int N) {
    double s = 0.0;
    for (int i = 0; i < N; i++) s += a.losses[size_t(i)];
    return s;
}

void head_backward_input(const UnitContext& u, const float* lnf_w, const void* wte, HeadActs& a, HeadKeep& k,
                         const void* xL, float* dxL, int B, int T) {
    const int C = u.cfg->n_embd, tp = u.tp_size(), N = B * T;
    const int Vt = u.cfg->padded_vocab(tp) / tp;
    // d(lnf), partial over the tensor-parallel group: on one rank straight into the kept one
    float* dln = tp == 1 ? k.dlnf.data() : u.scratch->dln.data();
    const unsigned short* d16 = a.dlogits_bf16.data();  // the classifier's bf16 gradient
    // a group of sequences at a time: d(lnf)
    const Groups groups = sequence_groups(u, B, T);
    Items row_items(u, kRowPhase, groups.count);
    // d(xL) of a group's rows, from d(lnf) summed over the tensor-parallel group
    auto input_grad = [&](const float* dl, Span sq) {
        const size_t r0 = size_t(sq.begin) * size_t(T);
        const int nl = u.rows(sq.count * T);
        std::memset(dxL + r0 * C, 0, sizeof(float) * size_t(nl) * C);
        norm_backward_input(u, dxL + r0 * C, dl + r0 * C, at(xL, u.prec.activation, r0 * C), lnf_w,
                            stat_rows(a.lnf_mean, r0), a.lnf_rstd.data() + r0, nl);
    };
    for (int i; row_items.next(&i);) {
        const Span sq = groups(i, B);
        const size_t r0 = size_t(sq.begin) * size_t(T);
        const int n = sq.count * T;
        profile::Scope prof_(profile::kernel("matmul backward"), 2.0 * n * C * Vt, 2.0 * (double(n) * Vt + double(Vt) * C) + 4.0 * n * C);
        if (u.prec.activation == DType::BF16)  // lnf and wte are bf16 already
            gemm_bf16(dln + r0 * C, {d16 + r0 * Vt, Vt, 1}, {static_cast<const unsigned short*>(wte), C, 1}, n, C, Vt,
                      false);
        else if (u.bf16_products())
            matmul_backward_bf16(dln + r0 * C, nullptr, d16 + r0 * Vt, nullptr, static_cast<const float*>(wte), n, C, Vt,
                                 false);
        else
            linear_backward(u, dln + r0 * C, nullptr, nullptr, a.logits.data() + r0 * Vt, nullptr, wte, n, C, Vt, false);
        if (tp == 1) input_grad(dln, sq);  // (lanes run on one rank: nothing to sum)
    }
    if (tp == 1) return;
    // one lane, one group: all rows
    std::memcpy(k.dlnf.data(), reduce_input_grad(u, N), sizeof(float) * size_t(u.rows(N)) * C);
    input_grad(k.dlnf.data(), groups(0, B));
}

namespace {

struct HeadW {
    float *dlnf_w, *dlnf_b, *dwte;
    const HeadActs& a;
    const HeadKeep& k;
    const void* xL;
    const void* lnf;             // every row of the final LayerNorm's output
    const unsigned short* x16;   // the same as the bf16 products read it (null without them)
    int N;
    bool acc;
};

const WeightTask<HeadW> kHeadWeightTasks[] = {
    {"wte (tied head) or lm_head", [](const UnitContext& u, const HeadW&) { return u.cfg->padded_vocab(u.tp_size()) / u.tp_size(); },
     [](const UnitContext& u, const HeadW& h, int b, int e) {
         // this rank's vocabulary rows of d(wte) over every row
         const int C = u.cfg->n_embd, Vt = u.cfg->padded_vocab(u.tp_size()) / u.tp_size();
         profile::Scope prof_(profile::kernel("matmul backward"), 2.0 * (e - b) * C * h.N,
                              2.0 * (double(e - b) * h.N + double(h.N) * C) + 4.0 * (e - b) * C);
         if (h.x16)
             gemm_bf16(h.dwte + size_t(b) * C, {h.a.dlogits_bf16.data() + b, 1, Vt}, {h.x16, C, 1}, e - b, C, h.N,
                       h.acc);
         else
             matmul_backward_weight(h.dwte, nullptr, h.a.logits.data(), h.lnf, u.prec.activation, h.N, C, Vt, b, e, h.acc,
                                    u.matmul());
     }},
    {"ln_f", [](const UnitContext& u, const HeadW&) { return u.cfg->n_embd; },
     [](const UnitContext& u, const HeadW& h, int b, int e) {
         norm_backward_params(u, h.dlnf_w, h.dlnf_b, h.k.dlnf.data(), h.xL, stat_rows(h.a.lnf_mean, 0),
                              h.a.lnf_rstd.data(), u.rows(h.N), b, e);
     }},
};

}  // namespace

void head_backward_weight(const UnitContext& u, float* dlnf_w, float* dlnf_b, float* dwte, const HeadActs& a,
                          const HeadKeep& k, const void* xL, int B, int T, bool accumulate) {
    const int N = B * T;
    // all-gathered under sequence parallelism (one lane); rounded to bf16 once per lane for bf16
    // products on fp32 activations
    const void* lnf = gather_input(u, a.lnf.data(), N, u.prec.activation);
    const unsigned short* x16 = nullptr;
    if (u.prec.activation == DType::BF16) x16 = static_cast<const unsigned short*>(lnf);
    else if (u.bf16_products()) x16 = to_bf16_scratch(2, static_cast<const float*>(lnf), size_t(N) * u.cfg->n_embd);
    run_weight_tasks(u, kHeadWeightTasks, HeadW{dlnf_w, dlnf_b, dwte, a, k, xL, lnf, x16, N, accumulate});
}

void head_backward(const UnitContext& u, const float* lnf_w, const void* wte, float* dlnf_w, float* dlnf_b, float* dwte,
                   HeadActs& a, HeadKeep& k, const void* xL, float* dxL, int B, int T, bool accumulate) {
    head_backward_input(u, lnf_w, wte, a, k, xL, dxL, B, T);
    lane_barrier(u);
    head_backward_weight(u, dlnf_w, dlnf_b, dwte, a, k, xL, B, T, accumulate);
}

}  // namespace shardlm::model
