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
    const int G = cfg_.global_batch, M = cfg_.micro_batch, T = cfg_.seq;
    const int dp = e_.grid->dp_size(), row0 = e_.grid->dp_rank() * (G / dp);
    const float scale = scaler_.scale();
    parallel::PipelineExecutor::Batch batch;
    batch.rows = [M](int) { return M; };
    batch.fill = [&](int i, int* inputs, int* keys) {
        for (int j = 0; j < M; j++) {
            const int row = row0 + i * M + j;
            int* k = keys + size_t(j) * T;
            loader_->fill(step, G, row, inputs + size_t(j) * T, k);
            for (int t = 0; t < T; t++) k[t] = row * T + t;
        }
    };
    bool finite = true;
    auto reduce = [&](const parallel::PipelineExecutor::Result&) {
        e_.dp->finish_step();
        if (e_.embedding_group) e_.dp->sum_tied_grads(*e_.embedding_group);
        double sq = e_.dp->grad_norm_sq_local();
        world_->all_reduce_sum(&sq, 1);
        finite = std::isfinite(sq);
    };
    auto update = [&] {
        if (finite) e_.optimizer->update_hessian(e_.dp->owned_grads(), 1.0f / scale);
    };
    e_.part->set_label_sampling(true, kernels::label_sample_seed(cfg_.seed, step));
    e_.exec->run(e_.schedule, batch, M, T, scale / float(G * T), reduce, update);
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
    const auto [d, b] = parallel::consensus_parts(*e_.dp_metrics, e_.part->layout(), e_.dp->whole_params());
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
    if (e_.dp_algo->replicas_differ()) {  // this replica's parameters and optimiser state (ZeRO-0: whole)
        t.push_back({"params", e_.dp->whole_params(), e_.part->layout().total});
        for (auto& [name, buf] : e_.optimizer->state()) t.push_back({"optimizer/" + name, buf->data(), buf->size()});
    }
    for (const parallel::StateBuffer& b : e_.dp_algo->state()) t.push_back({b.name, b.buf->data(), b.buf->size()});
    return t;
}

void Trainer::load_rank_state() {
    std::vector<RankTensor> targets = rank_tensors();
    if (targets.empty()) return;
    std::string why;
    const bool ok = load_rank_tensors(resumed_from_, writer_json(), world_->rank(), targets, &why);
    // adam8bit, adafactor: from the views (loaded, or as the checkpoint's pieces left them)
    if (e_.dp_algo->replicas_differ()) e_.optimizer->state_loaded();
    if (ok) {
        e_.dp_algo->state_loaded();
        return;
    }
    if (e_.dp_algo->replicas_differ()) e_.dp_algo->start(e_.dp->whole_params());
    if (is_root())
        std::printf("warning: --dp-algo %s: %s, so each rank's own state (%s) starts afresh from the checkpoint's model\n",
                    setting_text(cfg_.dp_algo).c_str(), why.c_str(),
                    e_.dp_algo->replicas_differ() ? "its replica and optimiser state" : "error feedback and the like");
}

std::vector<RankTensor> Trainer::checkpoint_rank_tensors(std::vector<AlignedBuffer<float>>& replica) {
    std::vector<RankTensor> t = rank_tensors();
    if (!e_.dp_algo->replicas_differ()) return t;
    // rank_tensors() lists "params", then "optimizer/<state>" in state() order, then the algorithm's
    for (RankTensor& r : t) {
        if (r.name != "params" && r.name.rfind("optimizer/", 0) != 0) continue;
        replica.emplace_back(r.n);
        std::copy_n(r.data, r.n, replica.back().data());
        r.data = replica.back().data();
    }
    parallel::average(*e_.dp_metrics, e_.dp->whole_params(), e_.part->layout().total);
    parallel::average_optimizer(*e_.dp_metrics, *e_.optimizer);
    return t;
}

void Trainer::restore_replica(std::vector<AlignedBuffer<float>>& replica) {
    if (replica.empty()) return;
    std::copy_n(replica[0].data(), replica[0].size(), e_.dp->whole_params());
    size_t k = 1;
    for (auto& [name, buf] : e_.optimizer->state()) {
        std::copy_n(replica[k].data(), replica[k].size(), buf->data());
        k++;
    }
    e_.optimizer->state_loaded();  // adam8bit: quantised back from this rank's own
    replica.clear();
}

}  // namespace shardlm::train
