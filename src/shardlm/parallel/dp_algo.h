// parallel/dp_algo.h: how the data-parallel ranks of one model position (a dp group) combine their
// work: the communication-efficient algorithms of seed 002 (parts 03-04) beside the all-reduce.
//
//   --dp-algo    gradients in backward            after the optimiser step               replicas
//   allreduce    reduced by the ZeRO stage        (the stage's own gathers)              one
//   compressed   local; then C(g) exchanged,      -                                      one
//                the aggregate on every rank
//   local-sgd    local (each replica's own mean)  every H steps: parameters averaged     differ
//   diloco       local                            every H steps: the outer Nesterov step differ
//                                                 on the averaged delta (Douillard 2023)
//   gossip       local                            every step: x_i <- sum_j W_ij x_j over  differ
//                                                 neighbours (D-PSGD, Lian et al. 2017)
//
// The ZeRO stage keeps its hooks (units, gathers, 16-bit copies) but skips its data-parallel
// reductions for every algorithm but allreduce (ZeroStrategy::Setup::reduce). Replicas that differ
// cannot share one ZeRO-sharded replica: those algorithms need --zero 0; compressed works with ZeRO
// 0 and 1 (whole gradients; ZeRO-2/3 keep only slices of the gradient, where error feedback and
// PowerSGD need the whole local gradient: train/train_config.cpp says so). All of it runs on the dp
// group, so tensor and pipeline parallelism compose: every rank of a replica does the same at its
// position.
//
// Mixing weights (gossip): Metropolis-Hastings on the undirected graph of the topology, W_ij =
// 1 / (1 + max(d_i, d_j)) for neighbours, W_ii = 1 - sum_j W_ij: symmetric and doubly stochastic.
//   ring          i +- 1
//   torus         a 2-D grid r x c (r the largest divisor of n at most sqrt n), 4 neighbours, wrapped
//   exp           i +- 2^k for 2^k < n (the static exponential graph)
//   one-peer-exp  at step t one peer, k = t mod ceil(log2 n): i XOR 2^k when n is a power of two
//                 (symmetric, W = 1/2), else the directed shift i + 2^k (send) and i - 2^k (receive),
//                 weights 1/2: a permutation averaged with the identity, doubly stochastic.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "shardlm/comm/group.h"
#include "shardlm/core/aligned_buffer.h"
#include "shardlm/core/dtype.h"
#include "shardlm/core/enum_names.h"
#include "shardlm/model/layout.h"
#include "shardlm/optim/optimizer.h"
#include "shardlm/parallel/compress.h"
#include "shardlm/parallel/dp_algo_config.h"

namespace shardlm::parallel {

// One rank's gossip round: whom it sends its parameters to, whom it receives from (with weights), and
// its own weight. Pure: the same on every rank for (topology, n, step).
struct Mixing {
    std::vector<int> send_to;
    std::vector<int> recv_from;
    std::vector<double> w_recv;  // W_{rank, recv_from[j]}
    double w_self = 1;
};
Mixing gossip_mixing(Topology t, int n, int rank, int step);
// The whole n x n mixing matrix of a step (row-major), for tests and reports.
std::vector<double> mixing_matrix(Topology t, int n, int step);
// The torus's rows (the largest divisor of n at most sqrt(n)); columns = n / rows.
int torus_rows(int n);

// A named buffer of this rank's algorithm state (checkpoints: each rank's own).
struct StateBuffer {
    std::string name;
    AlignedBuffer<float>* buf;
};

class DpAlgorithm {
public:
    // dp: the data-parallel group; layout: this rank's part; n: its elements (the layout's total).
    static std::unique_ptr<DpAlgorithm> make(const DpAlgoConfig& cfg, comm::Group& dp, const model::Layout& layout);
    virtual ~DpAlgorithm() = default;
    const DpAlgoConfig& config() const { return cfg_; }
    DpAlgo algo() const { return cfg_.algo; }
    // Each replica steps on its own gradient (no reduction in backward).
    bool local_gradients() const { return cfg_.algo != DpAlgo::AllReduce; }
    bool replicas_differ() const { return parallel::replicas_differ(cfg_.algo); }
    // Whether the two pipeline copies of a tied embedding can drift apart: averages whose rounding
    // follows a buffer position that differs between the stages (ring sums), so the trainer
    // re-syncs them after the step. Elementwise compressors treat the copies alike (tensor by tensor).
    bool may_desync_tied() const {
        return replicas_differ() || (cfg_.algo == DpAlgo::Compressed && cfg_.compress.kind == CompressKind::PowerSgd);
    }
    // Before the first step when no checkpointed state of this algorithm was loaded (DiLoCo: its anchor
    // is the starting parameters).
    virtual void start(const float* params) {}
    // compressed: grads (the whole local gradient: this replica's mean over its rows) -> the mean of
    // the ranks' compressed gradients, identical on every rank of the group. step: the optimiser step (the compressors' randomness).
    // scale: the loss scale the gradients carry (the algorithm's buffers keep unscaled values, so a
    // dynamic scale's change does not corrupt them; grads come back in the same scale). The caller
    // calls it only when every rank's gradient is finite (an overflow would poison the buffers).
    virtual void reduce_gradients(float* grads, int step, float scale) {}
    // After the optimiser stepped this rank's replica (params: the fp32 master, whole).
    virtual void after_step(float* params, optim::Optimizer& opt, int step) {}
    // This rank's state that checkpoints keep (error-feedback buffers, DiLoCo's anchor and momentum,
    // PowerSGD's Q); after loading into them, state_loaded().
    virtual std::vector<StateBuffer> state() { return {}; }
    virtual void state_loaded() {}
    // The bytes this rank's algorithm should send in the group at `step`, by its formula (the
    // communication report puts it beside what was counted); SIZE_MAX: not this algorithm's to say
    // (allreduce: the ZeRO stage's formula).
    virtual size_t expected_bytes(int step) const;
    // "top-k 1 % + EF: (N-1) 8k bytes..." for the report
    virtual std::string formula() const;

protected:
    DpAlgorithm(const DpAlgoConfig& cfg, comm::Group& dp, const model::Layout& layout)
        : cfg_(cfg), dp_(dp), layout_(layout), n_(layout.total) {}
    DpAlgoConfig cfg_;
    comm::Group& dp_;
    const model::Layout& layout_;
    size_t n_;
};

// x <- the mean over the group of x (fp32 sums in the ring's fixed order: the same bits on every rank).
void average(comm::Group& g, float* x, size_t n);
// One D-PSGD round of `t` at `step` on the group: x (n floats) to the round's peers, theirs received
// into recv (kept between rounds), x <- W_ii x + sum_j W_ij x_j, summed in a fixed order.
void gossip_round(comm::Group& g, Topology t, int step, float* x, size_t n, std::vector<AlignedBuffer<float>>& recv);
// The optimiser's state averaged over the group, buffer by buffer; returns the elements averaged.
size_t average_optimizer(comm::Group& g, optim::Optimizer& opt);

// mean_i ||x_i - mean x|| / ||mean x|| over the replicas of the dp group, on this rank's part (the
// caller sums the parts of a replica over its tensor- and pipeline-parallel ranks): returns
// {||x_i - x_bar||^2, ||x_bar||^2} of the counted elements (replicated copies once). metrics: a
// group of the same ranks as the dp group whose traffic is not the algorithm's (the mean's all-reduce).
std::pair<double, double> consensus_parts(comm::Group& metrics, const model::Layout& layout, const float* params);

}  // namespace shardlm::parallel
