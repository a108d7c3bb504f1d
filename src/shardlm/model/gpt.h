// model/gpt.h: the whole GPT-2 in one process, one micro-batch at a time: a ModelPart with one
// chunk (every compute unit), one activation slot and no tensor parallelism. Tests, benchmarks and
// tools use it; training builds its ModelPart from the parallel layout instead.
#pragma once
#include <cstddef>

#include "shardlm/model/part.h"

namespace shardlm::model {

class Gpt {
public:
    // B, T: the largest micro-batch. threads: OpenMP threads, each a lane of its own (model/units.h).
    // unit_multiple: see make_gpt2_layout (the data-parallel size under ZeRO).
    Gpt(GptConfig config, int B, int T, int threads, int unit_multiple = 1);

    const GptConfig& config() const { return part_.config(); }
    const Layout& layout() const { return part_.layout(); }
    size_t num_elems() const { return part_.layout().total; }
    ModelPart& part() { return part_; }

    // Parameters and gradients: flat buffers of layout().total floats owned by the caller.
    void bind(float* params, float* grads) { part_.bind(params, grads); }

    // Forward over B x T tokens. With targets: returns the mean loss over the B*T targets, and if
    // dloss != 0 prepares backward() of loss_sum * dloss. Without targets: logits() for every position.
    float forward(const int* inputs, const int* targets, int B, int T, float dloss, UnitHooks* hooks = nullptr);
    // Parameter gradients of the last forward: += if accumulate, else = (GEMM weights) / zeroed first.
    void backward(UnitHooks* hooks = nullptr, bool accumulate = true) { part_.backward(0, 0, hooks, accumulate); }

    void set_matmul_precision(kernels::MatmulPrecision p) { part_.set_matmul_precision(p); }
    kernels::MatmulPrecision matmul_precision() const { return part_.matmul_precision(); }
    // Logits of the last forward without targets: (B, T, padded_vocab), row (b, t) at (b*T + t)*Vp.
    const float* logits() const { return part_.logits(0, 0); }
    const float* losses() const { return part_.losses(0, 0); }
    size_t activation_bytes() const { return part_.activation_bytes(); }

private:
    ModelPart part_;
};

}  // namespace shardlm::model
