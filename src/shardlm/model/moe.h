// model/moe.h: a mixture-of-experts feed-forward (config.h: MoeConfig) in place of a block's MLP: the
// router (fp32: softmax or sigmoid over the experts' logits, the top k by score, ties to the lower
// expert), the dispatch of each token's k choices to its experts' rows (grouped by expert, tokens in
// order), each expert's MLP as two products over its rows, and the combination of the k outputs by the
// gate weights, in the order of the choices. Dropless unless a capacity factor bounds each expert's
// tokens (those of the largest router probability kept). The load-balancing loss and the router z-loss
// enter the objective per layer and micro-batch; their gradients reach the router's logits in the
// backward.
//
// Under tensor parallelism every rank routes all N tokens alike (the router is replicated) and holds a
// slice of every expert's width, as the dense MLP is cut: the combined output is partial until the
// block's reduction, and the gate weights' gradients (dot products with the partial outputs) are summed
// over the group.
#pragma once
#include <cstddef>
#include <vector>

#include "shardlm/core/aligned_buffer.h"
#include "shardlm/core/dtype.h"
#include "shardlm/model/config.h"

namespace shardlm::model {

struct UnitContext;

// Expert parallelism's messages among the ep ranks whose tokens meet their experts
// (parallel/expert_parallel.h over a comm::Group).
class ExpertParallel {
public:
    virtual ~ExpertParallel() = default;
    virtual int size() const = 0;
    virtual int rank() const = 0;
    virtual void all_gather_bytes(const void* in, void* out, size_t bytes) = 0;
    // send[j] bytes from send_off[j] of in to rank j, recv[j] bytes from rank j at recv_off[j] of out
    virtual void all_to_all_bytes(const void* in, const size_t* send, const size_t* send_off, void* out,
                                  const size_t* recv, const size_t* recv_off) = 0;
};

// An MoE layer's widths on one of tp tensor-parallel ranks and one of ep expert-parallel ranks.
struct MoeDims {
    int E, K;  // experts, choices per token
    int F;     // an expert's inner width on this rank
    int Ffc;   // its first product's width: F, or 2F for SwiGLU's [gate | up]
    int ep, El;  // expert-parallel ranks, and the experts each holds (E / ep)
};
MoeDims moe_dims(const GptConfig& c, int tp, int ep = 1);

// One micro-batch's routing and what it sent through the experts (N = B T tokens, all of them under
// sequence parallelism: the router reads the gathered rows). The dispatched rows are this rank's choices
// grouped by expert; under expert parallelism each rank's rows for an ep rank's experts go there, and the
// expert side ("local": the rows this rank's experts received from every ep rank, grouped by expert, then
// by sending rank) is its own set of buffers; without, the two sides are one.
struct MoeActs {
    AlignedBuffer<float> logits;  // (N, E) the router's logits
    AlignedBuffer<float> probs;  // (N, E) the router's probabilities (softmax) or scores (sigmoid)
    AlignedBuffer<float> lse;    // (N) log-sum-exp of each token's logits (the z-loss)
    AlignedBuffer<int> choice;   // (N, K) the chosen experts, by descending score
    AlignedBuffer<float> gate;   // (N, K) their combination weights (0: dropped by the capacity)
    AlignedBuffer<int> slot;     // (N, K) the choice's row among the dispatched ones (-1: dropped)
    AlignedBuffer<int> offsets;  // (E + 1) each expert's first dispatched row
    TypedBuffer xe;              // (N K, C) the dispatched inputs
    AlignedBuffer<float> ye;     // (N K, C) fp32 the experts' outputs for them (partial under tensor parallelism)
    // the expert side, R = ep N K rows at most: the inputs (ep > 1; else xe), the first products, the
    // activations and the outputs (ep > 1; else ye); each local expert's first row; each ep rank's rows for
    // each of this rank's experts (ep x El); where each received row sits in the grouped order
    TypedBuffer xl, hl, al;
    AlignedBuffer<float> yl;
    AlignedBuffer<int> loffsets, from, place;
    int received = 0;  // rows the experts here took this micro-batch
    // this micro-batch's statistics: each expert's chosen tokens before the capacity drops them, the
    // balance E sum_i f_i P_i, the mean squared log-sum-exp, the choices dropped
    std::vector<double> load;
    double balance = 0, zsq = 0, dropped = 0;
    void allocate(const GptConfig& c, int B, int T, int tp, DType act, int ep = 1);
    size_t bytes() const;
    const void* local_x() const { return xl.size() ? xl.data() : xe.data(); }
};

// What the B phase leaves for the W phase: the experts' output gradients and their first products'
// gradients (expert side), and the router logits' gradients.
struct MoeKeep {
    AlignedBuffer<float> dye, dyl, dhl, dz;  // (N K, C) send side, (R, C) and (R, Ffc) expert side, (N, E)
    void allocate(const GptConfig& c, int B, int T, int tp, int ep = 1);
    size_t bytes() const { return dye.bytes() + dyl.bytes() + dhl.bytes() + dz.bytes(); }
    const float* local_dy() const { return dyl.size() ? dyl.data() : dye.data(); }
};

// Scratch of one MoE layer's pass (shared by a part's units).
struct MoeScratch {
    AlignedBuffer<float> router;  // (E, C) the router's weight in fp32
    AlignedBuffer<float> dx;      // (N K, C) the dispatched rows' input gradients (partial under TP)
    AlignedBuffer<float> dxl;     // (R, C) the expert side's (ep > 1)
    AlignedBuffer<float> dae;     // (R, F) the activations' gradients
    AlignedBuffer<float> dgate;   // (N, K)
    AlignedBuffer<int> fill;      // (E) rows placed so far
    AlignedBuffer<unsigned char> staging;  // (R, C) fp32: rows in the order the all-to-all moves them
    // expert parallelism's traffic since the last reset (--comm-report's formula): the bytes of the rows sent
    // to the other ep ranks (rows x C x the row's type), and the counts' all-gathers
    size_t exchanged_bytes = 0, count_gathers = 0;
    void allocate(const GptConfig& c, int B, int T, int tp, int ep = 1);
    size_t bytes() const {
        return router.bytes() + dx.bytes() + dxl.bytes() + dae.bytes() + dgate.bytes() + fill.bytes() + staging.bytes();
    }
};

// A step's expert loads and objective terms, summed over the training micro-batches of the layers a rank
// runs (the trainer sums them over the world: every layer's on one tensor-parallel rank).
class MoeStats {
public:
    static constexpr int kExtra = 4;  // after a layer's E loads: dropped choices, balance, z, micro-batches
    explicit MoeStats(const GptConfig& c);
    void reset();
    void add(int layer, const MoeActs& a);
    std::vector<double>& sums() { return sums_; }  // layer-major, E + kExtra a layer
    const std::vector<double>& sums() const { return sums_; }

private:
    int E_, L_;
    std::vector<double> sums_;
};

// The layer's parameters as the units read them (expert e's at e * stride elements from expert 0's), and
// the factor on the objective's per-micro-batch terms (the loss gradient's factor dloss times the
// micro-batch's N tokens: the balance and z-losses are means over the micro-batch).
struct MoeWeights {
    const void* router = nullptr;
    const void* fc = nullptr;
    const void* proj = nullptr;
    size_t stride = 0;
    float objective_scale = 0.0f;
    const float* bias = nullptr;  // (E) added to the scores for the choice only (MoeConfig::bias_rate; null: none)
};
struct MoeGrads {
    float* router = nullptr;
    float* fc = nullptr;
    float* proj = nullptr;
    size_t stride = 0;
};

// out (N, C) fp32 = the experts' combination for the N gathered rows x (act): routing, dispatch, the
// experts, the combination (partial under tensor parallelism), and the micro-batch's statistics in a.
void moe_forward(const UnitContext& u, const MoeWeights& w, MoeActs& a, MoeScratch& s, const void* x, float* out, int N);
// B: from dout (N, C) fp32 (all rows), dx (N, C) fp32 += the experts' share of d(x) (partial under tensor
// parallelism), and k's gradients kept for W.
void moe_backward_input(const UnitContext& u, const MoeWeights& w, const MoeActs& a, MoeKeep& k, MoeScratch& s,
                        const float* dout, float* dx, int N);
// The router's share of d(x) for rows [r0, r0 + n) of the micro-batch: dx (n, C) += dz @ W_router (after the
// group's reduction: the router is replicated).
void moe_router_input_grad(const UnitContext& u, const MoeWeights& w, const MoeKeep& k, MoeScratch& s, float* dx, int r0,
                           int n);
// W tasks, [b, e) of their outputs: the local experts' first matrices (El x Ffc rows), their second (El x C rows),
// the router (E rows; over this rank's rows [r0, r0 + n) of x (act), always +=).
void moe_fc_grad(const UnitContext& u, const MoeGrads& g, const MoeActs& a, const MoeKeep& k, int b, int e, bool acc);
void moe_proj_grad(const UnitContext& u, const MoeGrads& g, const MoeActs& a, const MoeKeep& k, int b, int e, bool acc);
void moe_router_grad(const UnitContext& u, const MoeGrads& g, const MoeKeep& k, const void* x, int r0, int n, int b,
                     int e);

}  // namespace shardlm::model
