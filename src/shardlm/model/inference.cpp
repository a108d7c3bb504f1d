#include "shardlm/model/inference.h"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>

#include "shardlm/core/check.h"
#include "shardlm/kernels/gelu.h"
#include "shardlm/kernels/layernorm.h"

namespace shardlm::model {

KvCacheGpt::KvCacheGpt(GptConfig config, const float* params)
    : KvCacheGpt(config, make_gpt2_layout(config), params) {}

KvCacheGpt::KvCacheGpt(GptConfig config, Layout layout, const float* params)
    : cfg_(std::move(config)), layout_(std::move(layout)), params_(params) {
    const size_t C = cfg_.n_embd, L = cfg_.n_layer, T = cfg_.n_ctx;
    k_cache_.resize(L * T * C);
    v_cache_.resize(L * T * C);
    x_.resize(C), ln_.resize(C), qkv_.resize(3 * C), att_.resize(C), y_.resize(C), fc_.resize(8 * C);
    logits_.resize(cfg_.padded_vocab());
    scores_.resize(T);
}

const float* KvCacheGpt::param(int unit, int i) const {
    return params_ + layout_.params[layout_.units[unit].first_param + i].offset;
}

// y(OC) = W(OC, C) x(C) + b (b may be null); accumulate: y +=.
static void matvec(float* y, const float* W, const float* x, const float* b, int OC, int C, bool accumulate) {
    if (b) {
        if (accumulate) for (int i = 0; i < OC; i++) y[i] += b[i];
        else std::memcpy(y, b, sizeof(float) * OC);
    }
    cblas_sgemv(CblasRowMajor, CblasNoTrans, OC, C, 1.0f, W, C, x, 1, (b || accumulate) ? 1.0f : 0.0f, y, 1);
}

const float* KvCacheGpt::step(int token) {
    const int C = cfg_.n_embd, NH = cfg_.n_head, HS = C / NH, T = cfg_.n_ctx, V = cfg_.vocab_size;
    SHARDLM_CHECK(pos_ < T, "generation reached the model's context length n_ctx = ", T);
    SHARDLM_CHECK(token >= 0 && token < V, "token id ", token, " is outside the vocabulary [0, ", V, ")");
    float mean, rstd;
    const float* wte = param(0, 0);
    const float* wpe = param(0, 1);
    for (int i = 0; i < C; i++) x_[i] = wte[size_t(token) * C + i] + wpe[size_t(pos_) * C + i];
    const float scale = 1.0f / std::sqrt(float(HS));
    for (int l = 0; l < cfg_.n_layer; l++) {
        const int u = 1 + l;
        kernels::layernorm_forward(ln_.data(), &mean, &rstd, x_.data(), param(u, kLn1W), param(u, kLn1B), 1, C, cfg_.ln_eps);
        matvec(qkv_.data(), param(u, kQkvW), ln_.data(), param(u, kQkvB), 3 * C, C, false);
        float* kc = k_cache_.data() + size_t(l) * T * C;
        float* vc = v_cache_.data() + size_t(l) * T * C;
        std::memcpy(kc + size_t(pos_) * C, qkv_.data() + C, sizeof(float) * C);
        std::memcpy(vc + size_t(pos_) * C, qkv_.data() + 2 * C, sizeof(float) * C);
        for (int h = 0; h < NH; h++) {
            const float* q = qkv_.data() + h * HS;
            float mx = -INFINITY;
            for (int j = 0; j <= pos_; j++) {
                const float* k = kc + size_t(j) * C + h * HS;
                float s = 0;
                for (int e = 0; e < HS; e++) s += q[e] * k[e];
                scores_[j] = s * scale;
                mx = std::max(mx, scores_[j]);
            }
            float z = 0;
            for (int j = 0; j <= pos_; j++) z += (scores_[j] = std::exp(scores_[j] - mx));
            float* o = att_.data() + h * HS;
            std::fill(o, o + HS, 0.0f);
            for (int j = 0; j <= pos_; j++) {
                const float* v = vc + size_t(j) * C + h * HS;
                float p = scores_[j] / z;
                for (int e = 0; e < HS; e++) o[e] += p * v[e];
            }
        }
        matvec(x_.data(), param(u, kAttnProjW), att_.data(), param(u, kAttnProjB), C, C, true);
        kernels::layernorm_forward(ln_.data(), &mean, &rstd, x_.data(), param(u, kLn2W), param(u, kLn2B), 1, C, cfg_.ln_eps);
        matvec(fc_.data(), param(u, kFcW), ln_.data(), param(u, kFcB), 4 * C, C, false);
        kernels::gelu_forward(fc_.data() + 4 * C, fc_.data(), size_t(4) * C);
        matvec(x_.data(), param(u, kFcProjW), fc_.data() + 4 * C, param(u, kFcProjB), C, 4 * C, true);
    }
    const int head = cfg_.n_layer + 1;
    kernels::layernorm_forward(ln_.data(), &mean, &rstd, x_.data(), param(head, 0), param(head, 1), 1, C, cfg_.ln_eps);
    matvec(logits_.data(), wte, ln_.data(), nullptr, V, C, false);
    pos_++;
    return logits_.data();
}

std::vector<int> sample_tokens(KvCacheGpt& model, const std::vector<int>& prompt, const SampleOptions& opt) {
    SHARDLM_CHECK(!prompt.empty(), "generation needs a prompt of at least one token");
    const int V = model.config().vocab_size, T = model.config().n_ctx;
    SHARDLM_CHECK(int(prompt.size()) < T, "the prompt has ", prompt.size(), " tokens; the model's context is ", T);
    const float* logits = nullptr;
    for (int t : prompt) logits = model.step(t);
    std::mt19937_64 rng(opt.seed);
    std::vector<int> out;
    std::vector<float> p(V);
    std::vector<int> idx(V);
    for (int n = 0; n < opt.max_tokens; n++) {
        int next;
        if (opt.temperature <= 0.0f) {
            next = int(std::max_element(logits, logits + V) - logits);
        } else {
            std::iota(idx.begin(), idx.end(), 0);
            int k = (opt.top_k > 0 && opt.top_k < V) ? opt.top_k : V;
            if (k < V)
                std::partial_sort(idx.begin(), idx.begin() + k, idx.end(),
                                  [&](int a, int b) { return logits[a] > logits[b] || (logits[a] == logits[b] && a < b); });
            float mx = -INFINITY;
            for (int i = 0; i < k; i++) mx = std::max(mx, logits[idx[i]]);
            double z = 0;
            for (int i = 0; i < k; i++) z += (p[i] = std::exp((logits[idx[i]] - mx) / opt.temperature));
            // uniform in [0, 1) from 53 random bits: the same on every platform
            double u = double(rng() >> 11) * (1.0 / 9007199254740992.0) * z, c = 0;
            next = idx[k - 1];
            for (int i = 0; i < k; i++) {
                c += p[i];
                if (u < c) {
                    next = idx[i];
                    break;
                }
            }
        }
        out.push_back(next);
        // the last token is predicted from a full context but never fed back
        if (next == opt.stop_token || n + 1 == opt.max_tokens || model.position() >= T) break;
        logits = model.step(next);
    }
    return out;
}

}  // namespace shardlm::model
