// model/gpt.h: GPT-2 forward and backward over the flat parameter buffer (explicit kernels, no
// autograd, like llm.c). The model knows nothing of MPI or files: it reads parameters through
// pointers into a flat buffer it is handed, and tells its caller, through UnitHooks, when each
// unit is about to be used and when its gradient is final, so that the parallel layer can gather
// parameters or reduce gradients around it.
#pragma once
#include <cstddef>
#include <vector>

#include "shardlm/core/aligned_buffer.h"
#include "shardlm/kernels/matmul.h"
#include "shardlm/model/config.h"
#include "shardlm/model/layout.h"

namespace shardlm::model {

// Called around each unit (index into Layout::units). Defaults do nothing.
// Forward: before_forward(0), (1), ..., (L+1). The head (L+1) also reads the embedding's tied wte.
// Backward: before_backward(L+1), before_backward(0) (the head writes wte's gradient first), then
// after_backward(L+1); for each block from the last: before_backward(u), after_backward(u); and
// after_backward(0) last. A unit's gradient is final for the micro-batch at its after_backward.
struct UnitHooks {
    virtual ~UnitHooks() = default;
    virtual void before_forward(int unit) {}
    virtual void before_backward(int unit) {}
    virtual void after_backward(int unit) {}
};

// Activations of one micro-batch of at most B x T tokens, allocated once.
struct Activations {
    int B = 0, T = 0;
    AlignedBuffer<int> inputs, targets;
    std::vector<AlignedBuffer<float>> resid;  // L + 1 of (B,T,C): block inputs; resid[L] feeds ln_f
    struct Block {
        AlignedBuffer<float> ln1, ln1_mean, ln1_rstd, qkv, att, atty, resid2, ln2, ln2_mean, ln2_rstd, fch, fch_gelu;
    };
    std::vector<Block> blocks;
    AlignedBuffer<float> lnf, lnf_mean, lnf_rstd, logits, losses;
    AlignedBuffer<unsigned short> dlogits_bf16;  // (B*T, Vp), only at bf16 matmul precision
    // backward scratch, shared by all layers
    AlignedBuffer<float> dresid, dln, dqkv, datty, dfch, attn_scratch;
    size_t bytes() const;
};

class Gpt {
public:
    // B, T: the largest micro-batch that will be run. threads: OpenMP threads (attention scratch).
    // unit_multiple: see make_gpt2_layout (the data-parallel size under ZeRO).
    Gpt(GptConfig config, int B, int T, int threads, int unit_multiple = 1);

    const GptConfig& config() const { return config_; }
    const Layout& layout() const { return layout_; }
    size_t num_elems() const { return layout_.total; }

    // Parameters and gradients are flat buffers of layout().total floats owned by the caller, so
    // that the caller (trainer / ZeRO) decides where they live. Must be set before forward.
    void bind(float* params, float* grads);
    // Points one unit at its own parameter and gradient storage (unit-sized, same layout as the
    // unit's range of the flat buffer): ZeRO-3 binds gathered parameters just before a unit runs,
    // ZeRO-2 a temporary gradient buffer. Either may be null to keep the current one.
    void bind_unit(int unit, float* params, float* grads);

    // Forward over B x T tokens (B <= max B, T <= max T). With targets: returns the mean loss over
    // the B*T targets, and if `dloss` != 0 leaves d(loss_sum * dloss)/dlogits ready for backward()
    // (the classifier is fused). Without targets: logits for every position are left in logits().
    float forward(const int* inputs, const int* targets, int B, int T, float dloss, UnitHooks* hooks = nullptr);
    // Parameter gradients of the last forward into the bound gradient buffer: += if accumulate,
    // else = (the first micro-batch of a step: no separate pass to zero the buffer).
    void backward(UnitHooks* hooks = nullptr, bool accumulate = true);

    // Logits of the last forward without targets: (B, T, padded_vocab), row (b, t) at (b*T + t)*Vp.
    // Precision of the linear layers' products (kernels/matmul.h); fp32 unless set.
    void set_matmul_precision(kernels::MatmulPrecision p);
    kernels::MatmulPrecision matmul_precision() const { return matmul_precision_; }

    const float* logits() const { return acts_.logits.data(); }
    const float* losses() const { return acts_.losses.data(); }
    size_t activation_bytes() const { return acts_.bytes(); }

private:
    // Parameter i of `unit` (i indexes the unit's params, e.g. a BlockParam).
    size_t local_offset(int unit, int i) const {
        return layout_.params[layout_.units[unit].first_param + i].offset - layout_.units[unit].offset;
    }
    const float* param(int unit, int i) const { return unit_params_[unit] + local_offset(unit, i); }
    float* grad(int unit, int i) const { return unit_grads_[unit] + local_offset(unit, i); }
    void block_forward(int l, int B, int T);
    void block_backward(int l, int B, int T, bool acc);
    // Zeroes the gradients of `unit` that are accumulated by += kernels (all but GEMM weights).
    void zero_small_grads(int unit);

    GptConfig config_;
    Layout layout_;
    Activations acts_;
    std::vector<float*> unit_params_, unit_grads_;  // per unit: start of its range
    int B_ = 0, T_ = 0;  // shape of the last forward
    bool has_grad_ = false;
    kernels::MatmulPrecision matmul_precision_ = kernels::MatmulPrecision::fp32;
};

}  // namespace shardlm::model
