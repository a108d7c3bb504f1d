// model/units.h: forward and backward of the three kinds of compute unit (embedding, transformer
// block, head + loss) over explicit inputs, outputs and saved activations, on this rank's
// tensor-parallel shard of the weights (like llm.c's kernels, one level up). units.cpp holds the
// buffers and the embedding, block.cpp and head.cpp the other two; unit_ops.h what they share.
//
// Shapes: N = B*T rows of the micro-batch; the residual stream holds Nl = N rows, or N/tp rows with
// sequence parallelism (rows [tp_rank*Nl, (tp_rank+1)*Nl) of the (B*T, C) activations); C = n_embd,
// Ct = C/tp (this rank's attention heads), F = 4C/tp, Vt = Vp/tp (this rank's vocabulary rows).
// Contract (llm.c's): parameter gradients are +=, except GEMM weights, which are = when
// `accumulate` is false (the first micro-batch: no pass to zero them); activations are =.
// The caller zeroes the other gradients of a unit before its first backward of a step.
//
// Precision (UnitContext): activations a step keeps, the residual stream included, are stored as
// `act` (fp32, or bf16/fp16 in mixed precision); the units read matrices as `wt` (fp32, or the
// 16-bit copy of the parameters) and vectors (LayerNorm gains, biases) in fp32; GEMMs accumulate in
// fp32; LayerNorm statistics, softmax, the loss and every gradient stay fp32.
// Lanes: the threads of a rank may share a micro-batch by sequences instead of by kernels. Each lane
// runs whole groups of sequences through the unit (every kernel on its one thread, in row ranges of
// the micro-batch's buffers); a block's backward meets the other lanes once, after the row-local half
// (input gradients), and then the lanes compute the weight gradients over all rows of the micro-batch
// a block of output rows at a time (the gradients sum over rows). Sequence groups and output blocks
// are items of fixed bounds that the lanes take as they come (LaneWork): a lane whose core is shared
// with another process takes fewer, and every item is computed the same whichever lane takes it. So
// the threads synchronise twice per block instead of at every kernel (docs/DESIGN.md). One lane (the
// default) runs every kernel over all threads; tensor parallelism runs one lane.
// Recomputation: `full` keeps only each block's input and re-runs the block before its backward;
// `selective` keeps everything but the attention probabilities (the part that grows with T^2) and
// recomputes them from the kept q, k, v.
#pragma once
#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>

#include "shardlm/core/aligned_buffer.h"
#include "shardlm/core/dtype.h"
#include "shardlm/core/precision.h"
#include "shardlm/cost/flops.h"
#include "shardlm/kernels/gemm/gemm.h"
#include "shardlm/model/config.h"
#include "shardlm/model/context_parallel.h"
#include "shardlm/model/layout.h"
#include "shardlm/model/moe.h"
#include "shardlm/model/tensor_parallel.h"

namespace shardlm::model {

// One enum of the concept, shared with the cost model (cost/flops.h).
using Recompute = cost::Recompute;
using cost::recompute_name;

// A block's widths on one of tp tensor-parallel ranks.
struct BlockDims {
    int C;     // n_embd
    int HS;    // head_dim
    int NHt;   // this rank's query heads
    int KVt;   // this rank's key/value heads
    int Ct;    // NHt HS: the attention output's width
    int Wqkv;  // (NHt + 2 KVt) HS: a row of [q | k | v]
    int F;     // the MLP's inner width on this rank (an MoE layer's: its shared experts', 0 without)
    int Ffc;   // its first product's width: F, or 2F for SwiGLU's [gate | up]
};
BlockDims block_dims(const GptConfig& c, int tp, bool moe = false);

// Buffers shared by all units of a rank (used within one unit's forward or backward only).
struct Scratch {
    AlignedBuffer<float> gathered;  // (N, C): an all-gathered activation (act) or gradient (fp32) (SP)
    AlignedBuffer<float> dln;       // (N, C): a linear layer's input gradient, partial under TP;
                                    // also a row-parallel output before its reduction
    AlignedBuffer<float> reduced;   // (Nl, C): a reduce-scattered one (SP)
    AlignedBuffer<float> datty, attn;  // (N, Ct), attention backward
    AlignedBuffer<float> dh;        // (N, F): SwiGLU's output gradient
    AlignedBuffer<float> ce;        // (3N): vocabulary-parallel cross-entropy statistics
    TypedBuffer att, atty;          // selective recomputation: one block's probabilities and output
    TypedBuffer recomputed;         // full recomputation: the block output its forward computes again
    CpBuffers cp;                   // context parallelism: one layer's ring (model/context_parallel.h)
    MoeScratch moe;                 // a mixture-of-experts layer's pass (model/moe.h)
    AlignedBuffer<float> logits;    // head_tile_floats per lane: the chunked head's logits tile
    // threads: at least the lanes (each takes its own attention scratch)
    // fused: the fused attention kernel (no probabilities to recompute, no materialized scratch)
    void allocate(const GptConfig& c, int B, int T, int tp, int threads, DType act, Recompute r, bool sp = false,
                  bool fused = false, int ep = 1);
    size_t bytes() const;
};

// With bf16 products on one tensor-parallel rank the head computes its fp32 logits this many rows at
// a time (only their bf16 gradient is kept for backward): the full (N, Vp) fp32 logits never exist.
inline constexpr int kHeadRows = 256;
// and those rows' logits a block of this many columns at a time (with kHeadRows rows: 1 MB, about an L2)
inline constexpr int kHeadCols = 1024;
static_assert(kHeadCols % 32 == 0, "a block's first column starts a cache line of the bf16 gradient (streamed)");

// The items of a unit's two phases (sequence groups, output-row blocks) the lanes take in turn; reset
// before each unit runs on more than one lane.
struct LaneWork {
    std::atomic<int> next[2] = {0, 0};
    void reset() {
        next[0].store(0, std::memory_order_relaxed);
        next[1].store(0, std::memory_order_relaxed);
    }
};

// How many sequence groups (the lanes' items: about 256 rows each, at least one per lane) a B x T
// micro-batch makes for `lanes` lanes. With fewer than two per lane the lanes cannot balance their work.
int lane_groups(int B, int T, int lanes);

// How units run on this rank.
struct UnitContext {
    const GptConfig* cfg = nullptr;
    TensorParallel* tp = nullptr;  // never null: no_tensor_parallel() for one rank
    bool sp = false;               // sequence parallelism
    // what is stored and multiplied in what (core/precision.h): prec.activation the activations a
    // step keeps, prec.param the matrices as the units read them, prec.products the GEMM operands
    PrecisionPolicy prec;
    Recompute recompute = Recompute::None;
    // the attention kernel: fused (kernels/flash_attention.h: each row's log-sum-exp kept, no
    // probabilities) or materialized (kernels/attention.h: the (B, NH, T, T) probabilities kept)
    bool fused_attention = false;
    // context parallelism (model/context_parallel.h): each sequence's rows here are this rank's slice
    // (null: the whole sequence); attention is then the fused kernel by blocks over the cp group
    ContextParallel* cp = nullptr;
    const SequenceSplit* split = nullptr;
    int cp_size() const { return cp ? cp->size() : 1; }
    CpComm cp_comm = CpComm::Ring;
    // expert parallelism (model/moe.h): the ranks an MoE layer's tokens and experts are spread over (null: one)
    ExpertParallel* ep = nullptr;
    int ep_size() const { return ep ? ep->size() : 1; }
    // each sequence's rows' positions (null: 0, 1, ...)
    const int* positions() const { return cp ? split->positions(cp->rank()) : nullptr; }
    // packed documents: the pass's rows' document starts (B x T positions: attention sees no key before
    // its row's; null: no mask), set by the part for each pass
    const int* doc_start = nullptr;
    // attention by the fused kernel's block pairs (model/context_parallel.h): over cp ranks, or masked by documents
    bool attention_by_blocks() const { return cp || doc_start; }
    Scratch* scratch = nullptr;
    int lane = 0, lanes = 1;  // this call's lane and how many run the unit (lanes > 1: tp 1)
    LaneWork* work = nullptr;  // lanes > 1: the items they share
    int tp_size() const { return tp->size(); }
    int rows(int N) const { return sp ? N / tp->size() : N; }  // Nl
    bool mixed() const { return prec.mixed(); }
    // bf16 products: the classifier writes its gradient in bf16 for them
    bool bf16_products() const { return prec.bf16_products(); }
    // the fp32 kernels' precision: bf16 products on fp32 storage round their operands as they multiply
    kernels::MatmulPrecision matmul() const {
        return prec.rounds_fp32_products() ? kernels::MatmulPrecision::bf16 : kernels::MatmulPrecision::fp32;
    }
    bool chunked_head() const { return bf16_products() && tp->size() == 1; }
    // Sophia's Hessian passes: the head draws each token's label from the model's softmax
    // (kernels/sample_labels.h) with this seed; the targets it is given are then the tokens' keys
    bool sample_labels = false;
    uint64_t sample_seed = 0;
};

// The chunked head's fp32 logits tile, one lane's: kHeadRows rows of a column block (at most kHeadCols), or
// of whole rows (Vt columns: this rank's padded vocabulary) while labels are sampled from them.
inline size_t head_tile_floats(const UnitContext& u, int Vt) {
    return size_t(kHeadRows) * size_t(u.sample_labels ? Vt : std::min(kHeadCols, Vt));
}

// Saved activations of one block for one micro-batch (act type; statistics fp32).
struct BlockActs {
    TypedBuffer ln1, qkv, att, atty, resid2, ln2, fch, fch_gelu;  // (Nl,C) (N,Wqkv) (B,NH/tp,T,T) (N,Ct)
                                                                  // (Nl,C) (Nl,C) (N,Ffc) (N,F)
    AlignedBuffer<float> ln1_mean, ln1_rstd, ln2_mean, ln2_rstd;  // (Nl); RMSNorm: only the rstd
    AlignedBuffer<float> lse;  // fused attention: (B, NH/tp, T) each query row's log-sum-exp
    TypedBuffer qk_pre;             // qk_norm: (N, Ct + KVt HS) the q and k columns before their norms
    AlignedBuffer<float> qk_rstd;   // qk_norm: (N, 2) their scales
    MoeActs moe;               // an MoE layer's routing and experts (model/moe.h); empty in a dense layer
    // keep_att: the probabilities are kept (false under selective recomputation, and for decoding:
    // one sequence at a time, attending to the KV cache); fused: the fused kernel's row statistics
    // instead (always: they are NH/tp T floats a sequence).
    // moe: it serves a mixture-of-experts layer; dense: a dense one (a part's shared set: both)
    void allocate(const GptConfig& c, int B, int T, int tp, bool sp, DType act, bool keep_att, bool fused = false,
                  bool moe = false, bool dense = true, int ep = 1);
    size_t bytes() const;        // everything
    size_t stats_bytes() const;  // the LayerNorm statistics alone (the attention's lse counts as a value)
};

// What a block's B phase (input gradients) leaves for its W phase (weight gradients), fp32: the
// output gradients of its four linears (the row-parallel ones' as their GEMMs read them: all N rows)
// and the (reduced) gradients of its two LayerNorms' outputs. One set serves a backward whose W
// follows its B; a schedule that defers W (zero-bubble pipelines) keeps one per micro-batch in flight.
// With bf16 products the four output gradients are kept in bf16 too, as the B phase's products rounded
// them: the W phase's products read those (the fp32 ones give the biases' gradients), so a weight
// gradient's operand is rounded once and read at half the bytes, and a library that rounds in a pass of
// its own (oneDNN) can serve it (about 1.3x the native kernels' speed on a transposed bf16 operand).
struct BlockKeep {
    AlignedBuffer<float> dy_fcproj, dy_proj;  // (N, C)
    AlignedBuffer<float> dfch, dqkv;          // (N, Ffc), (N, Wqkv)
    AlignedBuffer<float> dln2, dln1;          // (Nl, C)
    AlignedBuffer<float> dqk;                 // qk_norm: (N, Ct + KVt HS) the normalised q and k's gradients
    AlignedBuffer<uint16_t> dy_fcproj16, dy_proj16, dfch16, dqkv16;  // bf16 products only (else empty)
    MoeKeep moe;                                                     // an MoE layer's (model/moe.h)
    void allocate(const GptConfig& c, int B, int T, int tp, bool sp, bool bf16_products, bool moe = false, int ep = 1);
    // the bf16 copies alone, for products that become bf16 (or fp32) after allocate (a keep never allocated
    // stays empty)
    void size_copies(const GptConfig& c, int B, int T, int tp, bool bf16_products);
    size_t bytes() const;
};

// Key/value cache of one block for incremental decoding (one sequence, fp32, no tensor parallelism).
struct KvLayer {
    float* k = nullptr;  // (n_ctx, n_kv_head head_dim)
    float* v = nullptr;  // (n_ctx, n_kv_head head_dim)
    float* scores = nullptr;  // n_ctx floats of scratch
};

// Parameters of a block: matrices as the context's wt, vectors (LayerNorms, biases) as fp32.
// An MoE layer's also as MoeWeights / MoeGrads (moe: whether the layer is one).
struct BlockWeights {
    const void* w[kNumBlockParams];
    bool moe = false;
    MoeWeights experts;
    const float* vec(int i) const { return static_cast<const float*>(w[i]); }
};
struct BlockGrads {
    float* g[kNumBlockParams];
    bool moe = false;
    MoeGrads experts;
};

// y (Nl, C) = block(x (Nl, C)), both act. With kv (decoding, fp32, tp 1): the T rows are positions
// pos .. pos+T-1 of one sequence (B = 1) attending to the cache.
void block_forward(const UnitContext& u, const BlockWeights& w, BlockActs& a, const void* x, void* y, int B, int T,
                   KvLayer* kv = nullptr, int pos = 0);
// The backward of every unit kind is two phases (Qi et al.'s B and W), written once and run by one
// lane (all threads per kernel, tensor parallelism's collectives between the products) or by several:
//   B (`*_backward_input`): the input gradients, row-local (a group of sequences at a time), keeping
//     in a Keep what W needs; it writes no parameter gradient.
//   W (`*_backward_weight`): the parameter gradients over all rows of the micro-batch, from a named
//     table of tasks, each split into blocks of output rows that the lanes take as they come.
// `*_backward` is B, a barrier of the lanes, then W (the pipeline schedules that do not defer W).
// W reads only the kept activations and the Keep: it may run any time later, before the slot's next
// forward. Its sums run in the same order whenever it runs: deferring W changes no bit.
//
// dres (Nl, C) fp32: d(y) on entry, d(x) on return. With Recompute::Full the block's forward runs
// again first (into a, from x: the same activations to the bit), with Recompute::Selective the
// probabilities (a.att empty); lanes recompute a group of sequences just before its backward.
void block_backward_input(const UnitContext& u, const BlockWeights& w, const BlockActs& a, BlockKeep& k, const void* x,
                          float* dres, int B, int T);
// Gradients += (GEMM weights = unless accumulate). Under sequence parallelism the column-parallel
// linears' inputs are all-gathered again (a collective of the tensor-parallel group).
void block_backward_weight(const UnitContext& u, const BlockGrads& g, const BlockActs& a, const BlockKeep& k,
                           const void* x, int B, int T, bool accumulate);
void block_backward(const UnitContext& u, const BlockWeights& w, const BlockGrads& g, const BlockActs& a, BlockKeep& k,
                    const void* x, float* dres, int B, int T, bool accumulate);

// x0 (Nl, C) = wte[tokens] + wpe[positions] (wte: this rank's vocabulary rows; wt in, act out).
void embedding_forward(const UnitContext& u, const void* wte, const void* wpe, const int* tokens, void* x0, int B,
                       int T);
// dx0 (Nl, C) -> dwte (+=), dwpe (+=): the embedding's backward is all W (it has no input gradient).
void embedding_backward(const UnitContext& u, float* dwte, float* dwpe, const float* dx0, const int* tokens, int B,
                        int T);

// Saved activations of the head for one micro-batch.
struct HeadActs {
    TypedBuffer lnf;                                // (Nl, C) act
    AlignedBuffer<float> lnf_mean, lnf_rstd;        // (Nl)
    AlignedBuffer<float> logits;                    // (N, Vt): logits, then their gradient (not kept
                                                    // with a chunked head: its gradient is in bf16)
    AlignedBuffer<float> losses;                    // (N)
    AlignedBuffer<int> targets;                     // (N)
    AlignedBuffer<unsigned short> dlogits_bf16;     // (N, Vt) with bf16 products
    void allocate(const GptConfig& c, int B, int T, int tp, bool sp, DType act, bool bf16_grad, bool chunked);
    size_t bytes() const;
};

// Final LayerNorm, logits over this rank's vocabulary rows (lnf @ wte^T), and with targets the
// cross-entropy (vocabulary-parallel across the group: the full (N, V) logits never exist on one
// rank) into a.losses. With dloss != 0 leaves d(loss_sum * dloss)/dlogits for head_backward. Without
// targets only the logits are computed; head_loss_sum gives the loss. With u.sample_labels the
// targets are the tokens' keys and the labels are drawn from the logits first (a.targets keeps them).
void head_forward(const UnitContext& u, const float* lnf_w, const float* lnf_b, const void* wte, HeadActs& a,
                  const void* xL, const int* targets, int B, int T, float dloss);
// The sum of the N losses of the last head_forward, in row order (the same on every tensor-parallel
// rank, and for any number of lanes).
double head_loss_sum(const HeadActs& a, int N);
// What the head's B leaves for its W: d(lnf) summed over the tensor-parallel group (Nl, C); the
// logits' gradient stays in HeadActs.
struct HeadKeep {
    AlignedBuffer<float> dlnf;
    void allocate(const GptConfig& c, int B, int T, int tp, bool sp);
    size_t bytes() const { return dlnf.bytes(); }
};
// B: dxL (Nl, C) = d(loss)/d(xL) (=, fp32). W: dwte (+=, or = if !accumulate), dlnf_w, dlnf_b (+=).
void head_backward_input(const UnitContext& u, const float* lnf_w, const void* wte, HeadActs& a, HeadKeep& k,
                         const void* xL, float* dxL, int B, int T);
void head_backward_weight(const UnitContext& u, float* dlnf_w, float* dlnf_b, float* dwte, const HeadActs& a,
                          const HeadKeep& k, const void* xL, int B, int T, bool accumulate);
void head_backward(const UnitContext& u, const float* lnf_w, const void* wte, float* dlnf_w, float* dlnf_b, float* dwte,
                   HeadActs& a, HeadKeep& k, const void* xL, float* dxL, int B, int T, bool accumulate);

}  // namespace shardlm::model
