#include "shardlm/model/gpt.h"

#include <cstring>

#include "shardlm/core/check.h"
#include "shardlm/kernels/attention.h"
#include "shardlm/kernels/crossentropy.h"
#include "shardlm/kernels/encoder.h"
#include "shardlm/kernels/gelu.h"
#include "shardlm/kernels/layernorm.h"
#include "shardlm/kernels/matmul.h"

namespace shardlm::model {

using namespace shardlm::kernels;

size_t Activations::bytes() const {
    size_t n = inputs.bytes() + targets.bytes();
    for (const auto& r : resid) n += r.bytes();
    for (const auto& b : blocks)
        n += b.ln1.bytes() + b.ln1_mean.bytes() + b.ln1_rstd.bytes() + b.qkv.bytes() + b.att.bytes() + b.atty.bytes() +
             b.resid2.bytes() + b.ln2.bytes() + b.ln2_mean.bytes() + b.ln2_rstd.bytes() + b.fch.bytes() +
             b.fch_gelu.bytes();
    n += lnf.bytes() + lnf_mean.bytes() + lnf_rstd.bytes() + logits.bytes() + losses.bytes() + dlogits_bf16.bytes();
    n += dresid.bytes() + dln.bytes() + dqkv.bytes() + datty.bytes() + dfch.bytes() + attn_scratch.bytes();
    return n;
}

Gpt::Gpt(GptConfig config, int B, int T, int threads, int unit_multiple) : config_(std::move(config)) {
    config_.validate("model '" + config_.name + "'");
    SHARDLM_CHECK(T <= config_.n_ctx, "sequence length ", T, " exceeds the model's n_ctx ", config_.n_ctx,
                  "\n---> HINT: use --seq <= ", config_.n_ctx);
    layout_ = make_gpt2_layout(config_, unit_multiple);
    const size_t BT = size_t(B) * T, C = config_.n_embd, L = config_.n_layer, NH = config_.n_head;
    Activations& a = acts_;
    a.B = B;
    a.T = T;
    a.inputs.resize(BT);
    a.targets.resize(BT);
    a.resid.resize(L + 1);
    for (auto& r : a.resid) r.resize(BT * C);
    a.blocks.resize(L);
    for (auto& b : a.blocks) {
        b.ln1.resize(BT * C), b.ln1_mean.resize(BT), b.ln1_rstd.resize(BT);
        b.qkv.resize(BT * 3 * C), b.att.resize(size_t(B) * NH * T * T), b.atty.resize(BT * C);
        b.resid2.resize(BT * C), b.ln2.resize(BT * C), b.ln2_mean.resize(BT), b.ln2_rstd.resize(BT);
        b.fch.resize(BT * 4 * C), b.fch_gelu.resize(BT * 4 * C);
    }
    a.lnf.resize(BT * C), a.lnf_mean.resize(BT), a.lnf_rstd.resize(BT);
    a.logits.resize(BT * config_.padded_vocab());
    a.losses.resize(BT);
    a.dresid.resize(BT * C), a.dln.resize(BT * C), a.dqkv.resize(BT * 3 * C), a.datty.resize(BT * C);
    a.dfch.resize(BT * 4 * C);
    a.attn_scratch.resize(attention_scratch_floats(T, threads > 0 ? threads : 1));
}

void Gpt::bind(float* params, float* grads) {
    unit_params_.resize(layout_.units.size());
    unit_grads_.resize(layout_.units.size());
    for (size_t u = 0; u < layout_.units.size(); u++) {
        unit_params_[u] = params ? params + layout_.units[u].offset : nullptr;
        unit_grads_[u] = grads ? grads + layout_.units[u].offset : nullptr;
    }
}

void Gpt::bind_unit(int unit, float* params, float* grads) {
    if (params) unit_params_[size_t(unit)] = params;
    if (grads) unit_grads_[size_t(unit)] = grads;
}

void Gpt::block_forward(int l, int B, int T) {
    const int C = config_.n_embd, NH = config_.n_head, N = B * T, u = 1 + l;
    Activations::Block& a = acts_.blocks[l];
    const float* x = acts_.resid[l].data();
    layernorm_forward(a.ln1.data(), a.ln1_mean.data(), a.ln1_rstd.data(), x, param(u, kLn1W), param(u, kLn1B), N, C,
                      config_.ln_eps);
    matmul_forward(a.qkv.data(), a.ln1.data(), param(u, kQkvW), param(u, kQkvB), N, C, 3 * C, false, matmul_precision_);
    attention_forward(a.atty.data(), a.att.data(), a.qkv.data(), B, T, C, NH);
    // resid2 = x + atty @ Wproj^T + b
    std::memcpy(a.resid2.data(), x, sizeof(float) * N * C);
    matmul_forward(a.resid2.data(), a.atty.data(), param(u, kAttnProjW), param(u, kAttnProjB), N, C, C, true, matmul_precision_);
    layernorm_forward(a.ln2.data(), a.ln2_mean.data(), a.ln2_rstd.data(), a.resid2.data(), param(u, kLn2W),
                      param(u, kLn2B), N, C, config_.ln_eps);
    matmul_forward(a.fch.data(), a.ln2.data(), param(u, kFcW), param(u, kFcB), N, C, 4 * C, false, matmul_precision_);
    gelu_forward(a.fch_gelu.data(), a.fch.data(), size_t(N) * 4 * C);
    // resid[l+1] = resid2 + fch_gelu @ Wfcproj^T + b
    float* y = acts_.resid[l + 1].data();
    std::memcpy(y, a.resid2.data(), sizeof(float) * N * C);
    matmul_forward(y, a.fch_gelu.data(), param(u, kFcProjW), param(u, kFcProjB), N, 4 * C, C, true, matmul_precision_);
}

float Gpt::forward(const int* inputs, const int* targets, int B, int T, float dloss, UnitHooks* hooks) {
    SHARDLM_CHECK(!unit_params_.empty(), "Gpt::forward before bind()");
    SHARDLM_CHECK(B <= acts_.B && T <= acts_.T, "micro-batch ", B, "x", T, " exceeds the allocated ", acts_.B, "x",
                  acts_.T);
    B_ = B;
    T_ = T;
    const int C = config_.n_embd, N = B * T, V = config_.vocab_size, Vp = config_.padded_vocab();
    const int L = config_.n_layer, head = L + 1;
    for (int i = 0; i < N; i++) {
        SHARDLM_CHECK(inputs[i] >= 0 && inputs[i] < V, "token id ", inputs[i], " at position ", i,
                      " is outside the vocabulary [0, ", V, ")");
        if (targets)
            SHARDLM_CHECK(targets[i] >= 0 && targets[i] < V, "target id ", targets[i], " at position ", i,
                          " is outside the vocabulary [0, ", V, ")");
    }
    std::memcpy(acts_.inputs.data(), inputs, sizeof(int) * N);
    if (targets) std::memcpy(acts_.targets.data(), targets, sizeof(int) * N);

    if (hooks) hooks->before_forward(0);
    encoder_forward(acts_.resid[0].data(), inputs, param(0, 0), param(0, 1), B, T, C);
    for (int l = 0; l < L; l++) {
        if (hooks) hooks->before_forward(1 + l);
        block_forward(l, B, T);
    }
    if (hooks) hooks->before_forward(head);
    layernorm_forward(acts_.lnf.data(), acts_.lnf_mean.data(), acts_.lnf_rstd.data(), acts_.resid[L].data(),
                      param(head, 0), param(head, 1), N, C, config_.ln_eps);
    // logits = lnf @ wte^T over the padded vocabulary (padded rows of wte are zero).
    matmul_forward(acts_.logits.data(), acts_.lnf.data(), param(0, 0), nullptr, N, C, Vp, false, matmul_precision_);
    has_grad_ = false;
    if (!targets) return 0.0f;
    if (dloss != 0.0f) {
        crossentropy_forward_backward(acts_.logits.data(), acts_.losses.data(), targets, N, V, Vp, dloss,
                                      matmul_precision_ == MatmulPrecision::bf16 ? acts_.dlogits_bf16.data() : nullptr);
        has_grad_ = true;
    } else {
        crossentropy_forward(acts_.losses.data(), acts_.logits.data(), targets, N, V, Vp);
    }
    double s = 0.0;
    for (int i = 0; i < N; i++) s += acts_.losses[i];
    return float(s / N);
}

void Gpt::set_matmul_precision(MatmulPrecision p) {
    matmul_precision_ = p;
    if (p == MatmulPrecision::bf16 && acts_.dlogits_bf16.size() == 0)
        acts_.dlogits_bf16.resize(size_t(acts_.B) * acts_.T * config_.padded_vocab());
}

void Gpt::zero_small_grads(int unit) {
    const Unit& u = layout_.units[unit];
    for (int i = 0; i < u.num_params; i++) {
        const ParamSpec& p = layout_.params[u.first_param + i];
        bool gemm_weight = p.shape.size() == 2 && p.name.find(".wpe.") == std::string::npos;
        if (!gemm_weight) std::memset(unit_grads_[size_t(unit)] + (p.offset - u.offset), 0, p.numel * sizeof(float));
    }
}

void Gpt::block_backward(int l, int B, int T, bool acc) {
    const int C = config_.n_embd, NH = config_.n_head, N = B * T, u = 1 + l;
    Activations::Block& a = acts_.blocks[l];
    float* dres = acts_.dresid.data();
    float* dln = acts_.dln.data();
    float* dfch = acts_.dfch.data();
    matmul_backward(dfch, grad(u, kFcProjW), grad(u, kFcProjB), dres, a.fch_gelu.data(), param(u, kFcProjW), N, 4 * C, C,
                    acc, matmul_precision_);
    gelu_backward(dfch, a.fch.data(), dfch, size_t(N) * 4 * C);
    matmul_backward(dln, grad(u, kFcW), grad(u, kFcB), dfch, a.ln2.data(), param(u, kFcW), N, C, 4 * C, acc, matmul_precision_);
    layernorm_backward(dres, grad(u, kLn2W), grad(u, kLn2B), dln, a.resid2.data(), param(u, kLn2W), a.ln2_mean.data(),
                       a.ln2_rstd.data(), N, C);
    matmul_backward(acts_.datty.data(), grad(u, kAttnProjW), grad(u, kAttnProjB), dres, a.atty.data(),
                    param(u, kAttnProjW), N, C, C, acc, matmul_precision_);
    attention_backward(acts_.dqkv.data(), acts_.attn_scratch.data(), acts_.datty.data(), a.qkv.data(), a.att.data(),
                       B, T, C, NH);
    matmul_backward(dln, grad(u, kQkvW), grad(u, kQkvB), acts_.dqkv.data(), a.ln1.data(), param(u, kQkvW), N, C, 3 * C,
                    acc, matmul_precision_);
    layernorm_backward(dres, grad(u, kLn1W), grad(u, kLn1B), dln, acts_.resid[l].data(), param(u, kLn1W),
                       a.ln1_mean.data(), a.ln1_rstd.data(), N, C);
}

void Gpt::backward(UnitHooks* hooks, bool accumulate) {
    SHARDLM_CHECK(has_grad_, "Gpt::backward without a training forward (targets and dloss)");
    const int B = B_, T = T_, C = config_.n_embd, N = B * T, Vp = config_.padded_vocab();
    const int L = config_.n_layer, head = L + 1;
    // The head writes the tied wte's gradient first, so the embedding unit's gradient storage is
    // needed from the start; it is final only after the embedding's own backward, last.
    if (hooks) hooks->before_backward(head);
    if (hooks) hooks->before_backward(0);
    if (!accumulate) zero_small_grads(head), zero_small_grads(0);
    if (matmul_precision_ == MatmulPrecision::bf16)
        matmul_backward_bf16(acts_.dln.data(), grad(0, 0), acts_.dlogits_bf16.data(), acts_.lnf.data(), param(0, 0), N,
                             C, Vp, accumulate);
    else
        matmul_backward(acts_.dln.data(), grad(0, 0), nullptr, acts_.logits.data(), acts_.lnf.data(), param(0, 0), N, C,
                        Vp, accumulate);
    std::memset(acts_.dresid.data(), 0, sizeof(float) * N * C);
    layernorm_backward(acts_.dresid.data(), grad(head, 0), grad(head, 1), acts_.dln.data(), acts_.resid[L].data(),
                       param(head, 0), acts_.lnf_mean.data(), acts_.lnf_rstd.data(), N, C);
    if (hooks) hooks->after_backward(head);
    for (int l = L - 1; l >= 0; l--) {
        if (hooks) hooks->before_backward(1 + l);
        if (!accumulate) zero_small_grads(1 + l);
        block_backward(l, B, T, accumulate);
        if (hooks) hooks->after_backward(1 + l);
    }
    encoder_backward(grad(0, 0), grad(0, 1), acts_.dresid.data(), acts_.inputs.data(), B, T, C);
    if (hooks) hooks->after_backward(0);
    has_grad_ = false;
}

}  // namespace shardlm::model
