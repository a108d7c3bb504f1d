// model/units.h: forward and backward of the three kinds of compute unit (embedding, transformer
// block, head + loss) over explicit inputs, outputs and saved activations, on this rank's
// tensor-parallel shard of the weights (like llm.c's kernels, one level up).
//
// Shapes: N = B*T rows of the micro-batch; the residual stream holds Nl = N rows, or N/tp rows with
// sequence parallelism (rows [tp_rank*Nl, (tp_rank+1)*Nl) of the (B*T, C) activations); C = n_embd,
// Ct = C/tp (this rank's attention heads), F = 4C/tp, Vt = Vp/tp (this rank's vocabulary rows).
// Contract (llm.c's): parameter gradients are +=, except GEMM weights, which are = when
// `accumulate` is false (the first micro-batch: no pass to zero them); activations are =.
// The caller zeroes the other gradients of a unit before its first backward of a step
// (zero_accumulated_grads).
#pragma once
#include <cstddef>

#include "shardlm/core/aligned_buffer.h"
#include "shardlm/kernels/matmul.h"
#include "shardlm/model/config.h"
#include "shardlm/model/layout.h"
#include "shardlm/model/tensor_parallel.h"

namespace shardlm::model {

// Buffers shared by all units of a rank (used within one unit's forward or backward only).
struct Scratch {
    AlignedBuffer<float> gathered;   // (N, C): an all-gathered LayerNorm output or gradient (SP)
    AlignedBuffer<float> dln;        // (N, C): a linear layer's input gradient, partial under TP;
                                     // also a row-parallel output before its reduction
    AlignedBuffer<float> reduced;    // (Nl, C): a reduce-scattered one (SP)
    AlignedBuffer<float> dqkv, datty, dfch, attn;  // (N, 3Ct), (N, Ct), (N, F), attention backward
    AlignedBuffer<float> ce;         // (3N): vocabulary-parallel cross-entropy statistics
    void allocate(const GptConfig& c, int B, int T, int tp, int threads);
    size_t bytes() const;
};

// How units run on this rank.
struct UnitContext {
    const GptConfig* cfg = nullptr;
    TensorParallel* tp = nullptr;  // never null: no_tensor_parallel() for one rank
    bool sp = false;               // sequence parallelism
    kernels::MatmulPrecision precision = kernels::MatmulPrecision::fp32;
    Scratch* scratch = nullptr;
    int tp_size() const { return tp->size(); }
    int rows(int N) const { return sp ? N / tp->size() : N; }  // Nl
};

// Saved activations of one block for one micro-batch.
struct BlockActs {
    AlignedBuffer<float> ln1, ln1_mean, ln1_rstd;  // (Nl, C), (Nl), (Nl)
    AlignedBuffer<float> qkv;                       // (N, 3Ct)
    AlignedBuffer<float> att;                       // (B, NH/tp, T, T) softmax probabilities
    AlignedBuffer<float> atty;                      // (N, Ct)
    AlignedBuffer<float> resid2;                    // (Nl, C)
    AlignedBuffer<float> ln2, ln2_mean, ln2_rstd;   // (Nl, C), (Nl), (Nl)
    AlignedBuffer<float> fch, fch_gelu;             // (N, F)
    // for_decoding: one sequence, B*T rows, no attention probabilities (they are not kept).
    void allocate(const GptConfig& c, int B, int T, int tp, bool sp, bool for_decoding = false);
    size_t bytes() const;
};

// Key/value cache of one block for incremental decoding (one sequence, no tensor parallelism).
struct KvLayer {
    float* k = nullptr;  // (n_ctx, C)
    float* v = nullptr;  // (n_ctx, C)
    float* scores = nullptr;  // n_ctx floats of scratch
};

struct BlockWeights {
    const float* w[kNumBlockParams];
};
struct BlockGrads {
    float* g[kNumBlockParams];
};

// y (Nl, C) = block(x (Nl, C)). With kv (decoding, tp 1): the T rows are positions pos .. pos+T-1
// of one sequence (B = 1) attending to the cache.
void block_forward(const UnitContext& u, const BlockWeights& w, BlockActs& a, const float* x, float* y, int B, int T,
                   KvLayer* kv = nullptr, int pos = 0);
// dres (Nl, C): d(y) on entry, d(x) on return.
void block_backward(const UnitContext& u, const BlockWeights& w, const BlockGrads& g, const BlockActs& a,
                    const float* x, float* dres, int B, int T, bool accumulate);

// x0 (Nl, C) = wte[tokens] + wpe[positions] (wte: this rank's vocabulary rows).
void embedding_forward(const UnitContext& u, const float* wte, const float* wpe, const int* tokens, float* x0, int B,
                       int T);
// dx0 (Nl, C) -> dwte (+=), dwpe (+=).
void embedding_backward(const UnitContext& u, float* dwte, float* dwpe, const float* dx0, const int* tokens, int B,
                        int T);

// Saved activations of the head for one micro-batch.
struct HeadActs {
    AlignedBuffer<float> lnf, lnf_mean, lnf_rstd;  // (Nl, C), (Nl), (Nl)
    AlignedBuffer<float> logits;                    // (N, Vt): logits, then their gradient
    AlignedBuffer<float> losses;                    // (N)
    AlignedBuffer<int> targets;                     // (N)
    AlignedBuffer<unsigned short> dlogits_bf16;     // (N, Vt) at bf16 matmul precision
    void allocate(const GptConfig& c, int B, int T, int tp, bool sp, bool bf16);
    size_t bytes() const;
};

// Final LayerNorm, logits over this rank's vocabulary rows (lnf @ wte^T), and with targets the
// cross-entropy (vocabulary-parallel across the group: the full (N, V) logits never exist on one
// rank). Returns the sum of the N losses (the same on every tensor-parallel rank). With dloss != 0
// leaves d(loss_sum * dloss)/dlogits for head_backward. Without targets only the logits are computed.
double head_forward(const UnitContext& u, const float* lnf_w, const float* lnf_b, const float* wte, HeadActs& a,
                    const float* xL, const int* targets, int B, int T, float dloss);
// dxL (Nl, C) = d(loss)/d(xL) (=); dwte (+=, or = if !accumulate), dlnf_w, dlnf_b (+=).
void head_backward(const UnitContext& u, const float* lnf_w, const float* wte, float* dlnf_w, float* dlnf_b, float* dwte,
                   HeadActs& a, const float* xL, float* dxL, int B, int T, bool accumulate);

}  // namespace shardlm::model
