// model/context_parallel.h: context parallelism (a sequence split over cp ranks), what the units need of
// it without MPI: how a sequence is cut (SequenceSplit), the group's messages (ContextParallel:
// parallel/context_parallel.h implements it over a comm::Group, tests with ranks as threads), and the
// attention over the whole sequence from a rank's slice (cp_attention_forward / _backward).
//
// Everything in a block but attention is row-local, so a rank runs its T / cp rows of every sequence
// through the embedding, the blocks and the head as if they were a shorter batch; only three things read
// the rows' places in the sequence: the learned position table, the rotary embeddings and the causal
// mask. Those read SequenceSplit::positions (global positions, so both position schemes see the same
// angles and rows as one process does). Attention exchanges keys and values:
//   ring (default, Liu et al. 2023's ring attention): each rank's keys and values travel around the
//     ring, cp - 1 messages a layer, each posted before the step's tiles so it moves while they are
//     computed; a rank's queries meet one key block per step, merged into an fp32 running state (the
//     online softmax: running maximum and sum, kernels/flash_attention.h by blocks). The backward replays
//     the ring: the keys and values travel again, and each block's dK/dV, accumulated in fp32 by every
//     rank its keys meet, travels with it and comes home after the last step (cp messages).
//   allgather (Llama 3's): the keys and values of every rank gathered once a layer (forward, and again
//     in backward), every block computed locally, the dK/dV of all blocks reduce-scattered to their
//     owners in fp32.
// Load balance (zigzag, Megatron-Core's and Brandon et al.'s striping of causal work): the sequence is cut
// into 2 cp chunks and rank r keeps chunks r and 2 cp - 1 - r, so every rank holds an early and a late
// chunk and does the same share of the causal triangle (a contiguous split gives the last rank cp times
// the first's work). T must be a multiple of 2 cp.
#pragma once
#include <cstddef>
#include <vector>

#include "shardlm/core/dtype.h"
#include "shardlm/cost/flops.h"

namespace shardlm::model {

// One enum of the concept, shared with the cost model and the planner (cost/flops.h).
using CpComm = cost::CpComm;

// How each sequence of T rows is cut over cp ranks: rank r holds chunks r and 2 cp - 1 - r of T / (2 cp)
// rows, in that order (cp = 1: the whole sequence).
class SequenceSplit {
public:
    // Throws, naming --seq and --cp, unless T is a multiple of 2 cp (cp > 1).
    SequenceSplit(int T, int cp);
    int T() const { return T_; }
    int cp() const { return cp_; }
    int local() const { return T_ / cp_; }  // rows per sequence on a rank
    // rank r's positions in the sequence (local() of them, increasing)
    const int* positions(int r) const { return pos_.data() + size_t(r) * size_t(local()); }

private:
    int T_, cp_;
    std::vector<int> pos_;
};

// The cp group's messages. A ring exchange sends `bytes` to the next rank (rank + 1) and receives as many
// from the previous one (rank - 1), both posted at once and completed by wait(ticket); several may be in
// flight (their tags tell them apart). Buffers belong to the exchange until it completes.
class ContextParallel {
public:
    virtual ~ContextParallel() = default;
    virtual int size() const = 0;
    virtual int rank() const = 0;
    virtual int ring_start(const void* send, void* recv, size_t bytes, int tag) = 0;
    virtual void ring_wait(int ticket) = 0;
    // out: size() * bytes; block r = rank r's in
    virtual void all_gather_bytes(const void* in, void* out, size_t bytes) = 0;
    // in: size() * n floats; out (n) = block rank() of the sum over ranks
    virtual void reduce_scatter_sum(const float* in, float* out, size_t n) = 0;
};

// The buffers of one rank's context-parallel attention (one layer at a time), sized for a micro-batch of
// B sequences of `local` rows with KVC key (and value) columns and NH query heads of HS (cp 1: the state alone).
struct CpBuffers {
    std::vector<float> o, m, l, D;  // the running state (B, NH, local, HS) and (B, NH, local); D: dO.O
    std::vector<char> kv[2];        // ring: the block in hand and the one arriving (B, local, 2 KVC) of t;
                                    // allgather: kv[0] every rank's (cp, B, local, 2 KVC)
    std::vector<float> dkv[2];      // ring: the travelling dK/dV (B, local, 2 KVC); allgather: dkv[0] every
                                    // rank's (cp, ...) and dkv[1] this rank's sum
    void allocate(CpComm mode, int cp, int B, int local, int NH, int HS, int KVC, DType t);
    size_t bytes() const;
};

// One rank's attention over its rows of B sequences: qkv (B, local, C + 2 KVC) as t (C = NH HS query
// columns, KVC = NKV HS), positions from split; causal or not (every key visible). group null: one rank
// (the whole sequence: attention by blocks for its document masks). doc_start (B, local): each row's
// document's first position, no key before it seen (null: none).
struct CpAttention {
    ContextParallel* group;
    const SequenceSplit* split;
    CpComm mode;
    CpBuffers* buffers;
    DType t;
    int B, C, NH, NKV;
    bool causal = true;
    const int* doc_start = nullptr;
};
// out (B, local, C) as t and lse (B, NH, local) fp32: as flash_attention_forward's over the whole sequence,
// this rank's rows.
void cp_attention_forward(const CpAttention& a, void* out, float* lse, const void* qkv);
// dqkv (B, local, C + 2 KVC) = fp32: this rank's rows of the whole sequence's gradient (dK, dV summed over
// every rank's queries); dout (B, local, C) fp32; out, lse: the forward's.
void cp_attention_backward(const CpAttention& a, float* dqkv, const float* dout, const void* qkv, const void* out,
                           const float* lse);

// The bytes a rank sends per layer: the keys and values in a forward and again in a backward (cp - 1
// blocks of t each: the ring's messages, or the ring all-gather's share), and the fp32 dK/dV of a backward
// (ring: cp messages, the last one home; allgather: a ring reduce-scatter, cp - 1 blocks). A block is
// B x local x 2 KVC elements.
struct CpBytes {
    size_t kv_forward = 0, kv_backward = 0, dkv_backward = 0;
    CpBytes& operator*=(size_t n) {
        kv_forward *= n, kv_backward *= n, dkv_backward *= n;
        return *this;
    }
};
CpBytes cp_attention_bytes(CpComm mode, int cp, size_t block_elems, DType t);

}  // namespace shardlm::model
