// train/trainer_algorithms.cpp: the trainer's parts that belong to one optimiser or one data-parallel
// algorithm rather than to every step: Sophia's Hessian pass, the replicas' consensus distance, and
// the per-rank state that checkpoints keep for --dp-algo (train/checkpoint.h: state.rank<r>-of-<n>).
#include <cmath>
#include <cstdio>

#include "shardlm/kernels/sample_labels.h"
#include "shardlm/train/checkpoint.h"
#include "shardlm/train/trainer.h"

namespace shardlm::train {

// Sophia-G's Gauss-Newton-Bartlett estimate (Liu et al. 2023, Algorithm 2): one more forward/backward
// of the step's batch through the same schedule, on labels the head draws from the model's own softmax
// (kernels/sample_labels.h: keyed by each token's place in the global batch and the step, so every
// layout draws the same labels), reduced like any gradient; then h <- beta2 h + (1 - beta2) g^2 on the
// owned ranges. The gradient is of the mean loss over the G x T tokens (the optimiser's rho B h with
// B = G T undoes the mean, as the authors' bs does). Returns false (no update) if it is not finite.
bool Trainer::hessian_pass(int step) {
    const float scale = scaler_.scale();
    bool finite = true;
    auto reduce = [&](const parallel::PipelineExecutor::Result&) {
        e_.sync->finish_reductions();
        double sq = e_.sync->store().grad_norm_sq_local();
        world_->all_reduce_sum(&sq, 1);
        finite = std::isfinite(sq);
    };
    auto update = [&] {
        if (finite) e_.optimizer->update_hessian(e_.sync->store().owned_grads(), 1.0f / scale);
    };
    e_.part->set_label_sampling(true, kernels::label_sample_seed(cfg_.runtime.seed, step));
    e_.exec->run(e_.schedule, step_batch(step, /*label_keys=*/true), cfg_.data.micro_batch, e_.seq_local,
                 scale / float(cfg_.data.global_batch * cfg_.data.seq), reduce, update);
    e_.part->set_label_sampling(false);
    if (!finite && is_root())
        std::printf("warning: step %d: the Hessian estimate's gradient is not finite%s: the estimate keeps its last value\n",
                    step + 1, scaler_.enabled() ? " (a loss-scale overflow)" : "");
    return finite;
}

// mean over replicas of ||x_i - x_bar|| / ||x_bar|| (collective): each rank's part of its replica's
// squared distance in that replica's slot, the mean's squared norm once per model position (dp rank
// 0), summed over the world; the mean's all-reduce on dp_metrics, not counted as the algorithm's bytes.
double Trainer::consensus() {
    const int dp = e_.grid->dp_size();
    const auto [d, b] = parallel::consensus_parts(*e_.dp_metrics, e_.part->layout(), e_.sync->store().whole_master());
    std::vector<double> sums(size_t(dp) + 1, 0.0);
    sums[size_t(e_.grid->dp_rank())] = d;
    if (e_.grid->dp_rank() == 0) sums[size_t(dp)] = b;
    world_->all_reduce_sum(sums.data(), sums.size());
    double c = 0;
    for (int i = 0; i < dp; i++) c += std::sqrt(sums[size_t(i)]);
    return sums[size_t(dp)] > 0 ? c / dp / std::sqrt(sums[size_t(dp)]) : 0.0;
}

std::vector<RankTensor> Trainer::rank_tensors() {
    std::vector<RankTensor> t;
    if (e_.sync->replicas_differ()) {  // this replica's parameters and optimiser state (ZeRO-0: whole)
        t.push_back({"params", e_.sync->store().whole_master(), e_.part->layout().total});
        for (auto& [name, buf] : e_.optimizer->state()) t.push_back({"optimizer/" + name, buf->data(), buf->size()});
    }
    for (const parallel::StateBuffer& b : e_.sync->algorithm()->state()) t.push_back({b.name, b.buf->data(), b.buf->size()});
    return t;
}

void Trainer::load_rank_state() {
    std::vector<RankTensor> targets = rank_tensors();
    if (targets.empty()) return;
    std::string why;
    const bool ok = load_rank_tensors(resumed_from_, writer_json(), world_->rank(), targets, &why);
    // adam8bit, adafactor: from the views (loaded, or as the checkpoint's pieces left them)
    parallel::DpAlgorithm& algo = *e_.sync->algorithm();
    if (algo.replicas_differ()) e_.optimizer->state_loaded();
    if (ok) {
        algo.state_loaded();
        return;
    }
    if (algo.replicas_differ()) algo.start(e_.sync->store().whole_master());
    if (is_root())
        std::printf("warning: --dp-algo %s: %s, so each rank's own state (%s) starts afresh from the checkpoint's model\n",
                    setting_text(cfg_.dp_algo.algo).c_str(), why.c_str(),
                    algo.replicas_differ() ? "its replica and optimiser state" : "error feedback and the like");
}

std::vector<RankTensor> Trainer::checkpoint_rank_tensors(std::vector<AlignedBuffer<float>>& replica) {
    std::vector<RankTensor> t = rank_tensors();
    if (!e_.sync->replicas_differ()) return t;
    // rank_tensors() lists "params", then "optimizer/<state>" in state() order, then the algorithm's
    for (RankTensor& r : t) {
        if (r.name != "params" && r.name.rfind("optimizer/", 0) != 0) continue;
        replica.emplace_back(r.n);
        std::copy_n(r.data, r.n, replica.back().data());
        r.data = replica.back().data();
    }
    parallel::average(*e_.dp_metrics, e_.sync->store().whole_master(), e_.part->layout().total);
    parallel::average_optimizer(*e_.dp_metrics, *e_.optimizer);
    return t;
}

void Trainer::restore_replica(std::vector<AlignedBuffer<float>>& replica) {
    if (replica.empty()) return;
    std::copy_n(replica[0].data(), replica[0].size(), e_.sync->store().whole_master());
    size_t k = 1;
    for (auto& [name, buf] : e_.optimizer->state()) {
        std::copy_n(replica[k].data(), replica[k].size(), buf->data());
        k++;
    }
    e_.optimizer->state_loaded();  // adam8bit: quantised back from this rank's own
    replica.clear();
}

}  // namespace shardlm::train
