// model/head.cpp: the final LayerNorm, the tied LM head and the cross-entropy (units.h), in lanes or
// over all threads, vocabulary-parallel across a tensor-parallel group.
#include "shardlm/model/units.h"

#include <algorithm>
#include <cstring>

#include "shardlm/core/check.h"
#include "shardlm/kernels/crossentropy.h"
#include "shardlm/kernels/layernorm.h"
#include "shardlm/kernels/matmul.h"
#include "shardlm/model/unit_ops.h"

namespace shardlm::model {

using namespace shardlm::kernels;
using namespace detail;

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
        void* lnf = at(a.lnf.data(), u.act, r0 * C);
        layernorm_forward(lnf, u.act, a.lnf_mean.data() + r0, a.lnf_rstd.data() + r0, at(xL, u.act, r0 * C), u.act,
                          lnf_w, lnf_b, u.rows(n), C, u.cfg->ln_eps);
        if (targets) std::memcpy(a.targets.data() + r0, targets + r0, sizeof(int) * size_t(n));
        if (a.logits.size() == 0) {
            // chunked head: the fp32 logits of kHeadRows rows at a time in scratch (the lane's own),
            // and from them the loss and the bf16 gradient of those rows
            float* lg = u.scratch->logits.data() + size_t(u.lane) * kHeadRows * size_t(Vt);
            for (size_t r = r0; r < r0 + size_t(n); r += kHeadRows) {
                const int rows = int(std::min(size_t(kHeadRows), r0 + size_t(n) - r));
                linear(u, lg, DType::F32, at(a.lnf.data(), u.act, r * C), wte, nullptr, rows, C, Vt);
                if (dloss != 0.0f)
                    crossentropy_forward_backward(lg, a.losses.data() + r, targets + r, rows, V, Vt, dloss, d16 + r * Vt);
                else
                    crossentropy_forward(a.losses.data() + r, lg, targets + r, rows, V, Vt);
            }
            continue;
        }
        // logits (fp32) = lnf @ wte^T over this rank's (padded) vocabulary rows; padded rows of wte are zero
        float* logits = a.logits.data() + r0 * Vt;
        linear(u, logits, DType::F32, gather_input(u, lnf, n, u.act), wte, nullptr, n, C, Vt);
        if (!targets || tp > 1) continue;
        if (dloss != 0.0f)
            crossentropy_forward_backward(logits, a.losses.data() + r0, targets + r0, n, V, Vt, dloss,
                                          d16 ? d16 + r0 * Vt : nullptr);
        else
            crossentropy_forward(a.losses.data() + r0, logits, targets + r0, n, V, Vt);
    }
    if (!targets || tp == 1 || a.logits.size() == 0) return;
    // vocabulary-parallel cross-entropy (one lane, all N rows)
    const int Vreal = std::max(0, std::min(Vt, V - v0));
    float* mx = u.scratch->ce.data();
    float* stats = mx + N;  // [sum of exp | target logit]
    vocab_parallel_max(mx, a.logits.data(), N, Vreal, Vt);
    u.tp->all_reduce_max(mx, size_t(N));
    vocab_parallel_sums(stats, a.logits.data(), targets, mx, N, Vreal, Vt, v0, dloss != 0.0f);
    u.tp->all_reduce_sum(stats, 2 * size_t(N));
    vocab_parallel_loss(a.losses.data(), mx, stats, N);
    if (dloss != 0.0f) vocab_parallel_grad(a.logits.data(), targets, stats, N, Vreal, Vt, v0, dloss, d16);
}

double head_loss_sum(const HeadActs& a, int N) {
    double s = 0.0;
    for (int i = 0; i < N; i++) s += a.losses[size_t(i)];
    return s;
}

void head_backward(const UnitContext& u, const float* lnf_w, const void* wte, float* dlnf_w, float* dlnf_b, float* dwte,
                   HeadActs& a, const void* xL, float* dxL, int B, int T, bool accumulate) {
    const int C = u.cfg->n_embd, tp = u.tp_size(), N = B * T, Nl = u.rows(N);
    const int Vt = u.cfg->padded_vocab(tp) / tp;
    float* dln = u.scratch->dln.data();
    const void* lnf = gather_input(u, a.lnf.data(), N, u.act);  // every row
    const unsigned short* d16 = a.dlogits_bf16.data();          // the classifier's bf16 gradient
    // 1. row-local, a group of sequences at a time: d(lnf) (partial over the tensor-parallel group)
    const Groups groups = sequence_groups(u, B, T);
    Items row_items(u, kRowPhase, groups.count);
    // d(xL) of a group's rows, from d(lnf) summed over the tensor-parallel group
    auto input_grad = [&](const float* dl, Span sq) {
        const size_t r0 = size_t(sq.begin) * size_t(T);
        const int nl = u.rows(sq.count * T);
        std::memset(dxL + r0 * C, 0, sizeof(float) * size_t(nl) * C);
        layernorm_backward_input(dxL + r0 * C, dl + r0 * C, at(xL, u.act, r0 * C), u.act, lnf_w, a.lnf_mean.data() + r0,
                                 a.lnf_rstd.data() + r0, nl, C);
    };
    for (int i; row_items.next(&i);) {
        const Span sq = groups(i, B);
        const size_t r0 = size_t(sq.begin) * size_t(T);
        const int n = sq.count * T;
        if (u.act == DType::BF16)  // lnf and wte are bf16 already
            gemm_bf16(dln + r0 * C, {d16 + r0 * Vt, Vt, 1}, {static_cast<const unsigned short*>(wte), C, 1}, n, C, Vt,
                      false);
        else if (u.bf16_products())
            matmul_backward_bf16(dln + r0 * C, nullptr, d16 + r0 * Vt, nullptr, static_cast<const float*>(wte), n, C, Vt,
                                 accumulate);
        else
            linear_backward(u, dln + r0 * C, nullptr, nullptr, a.logits.data() + r0 * Vt, nullptr, wte, n, C, Vt,
                            accumulate);
        if (tp == 1) input_grad(dln, sq);  // (lanes run on one rank: nothing to sum)
    }
    const float* dl = reduce_input_grad(u, N);  // the group's sum (one rank: dln itself)
    if (tp > 1) input_grad(dl, groups(0, B));   // one lane, one group: all rows
    lane_barrier(u);
    // 2. over all rows, a block of output rows at a time: d(wte)'s vocabulary rows, d(ln_f)'s columns
    const OutputItems out(u, {Vt, C});
    Items out_items(u, kOutputPhase, out.count());
    const unsigned short* x16 = nullptr;  // lnf as the bf16 products read it
    if (u.act == DType::BF16) x16 = static_cast<const unsigned short*>(lnf);
    for (int i; out_items.next(&i);) {
        const auto [task, b, e] = out[i];
        if (task == 1) {
            layernorm_backward_params(dlnf_w, dlnf_b, dl, xL, u.act, a.lnf_mean.data(), a.lnf_rstd.data(), Nl, C, b, e);
        } else if (u.bf16_products()) {
            if (!x16) x16 = to_bf16_scratch(2, static_cast<const float*>(lnf), size_t(N) * C);  // once per lane
            gemm_bf16(dwte + size_t(b) * C, {d16 + b, 1, Vt}, {x16, C, 1}, e - b, C, N, accumulate);
        } else {
            matmul_backward_weight(dwte, nullptr, a.logits.data(), lnf, u.act, N, C, Vt, b, e, accumulate, u.precision);
        }
    }
}

}  // namespace shardlm::model
