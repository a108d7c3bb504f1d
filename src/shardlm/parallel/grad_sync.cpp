#include "shardlm/parallel/grad_sync.h"

#include <cmath>
#include <cstring>
#include <optional>

#include "shardlm/core/check.h"
#include "shardlm/kernels/optimizer_kernels.h"

namespace shardlm::parallel {

namespace {

ShardGroups shard_groups(const comm::Collectives& dp, const comm::Collectives* experts) {
    const comm::Collectives& e = experts ? *experts : dp;
    return {dp.rank(), dp.size(), e.rank(), e.size()};
}

// Whether the dp algorithm reduces the gradients in backward (allreduce, or none given).
bool reduces_in_backward(const DpAlgorithm* a) { return !a || !a->local_gradients(); }

}  // namespace

GradSync::GradSync(comm::Collectives& dp, model::ModelPart& part, Options o)
    : dp_(dp),
      part_(part),
      store_(part.layout(), shard_groups(dp, o.experts), residency(o.zero, part.precision().param != DType::F32),
             part.precision().param, o.reduce_dtype),
      algo_(std::move(o.algorithm)),
      tied_(std::move(o.embedding_group), store_, reduces_in_backward(algo_.get())),
      local_(!reduces_in_backward(algo_.get())),
      differ_(algo_ && algo_->replicas_differ()),
      resync_tied_(tied_.active() && algo_ && algo_->may_desync_tied()) {
    zero_ = make_zero_strategy(o.zero, {dp, part, store_, o.bucket_mb, o.single_stage, o.split_backward, !local_, o.experts});
    if (o.pre_reduce) zero_->set_pre_reduce(std::move(o.pre_reduce));
    // stage 3 binds gathered units as they run; stages 2-3 bind a gradient slot per unit's backward
    part_.bind(store_.model_params(), store_.whole_grads());
}

GradSync::~GradSync() = default;

void GradSync::prepare(schedule::Schedule& s) const {
    if (zero_->needs_unshard_actions()) schedule::add_unshard_actions(s);
}

void GradSync::params_loaded(bool start_algorithm) {
    if (start_algorithm && differ_) algo_->start(store_.whole_master());
    if (store_.mixed()) zero_->after_step();  // each rank's slices rounded, then (stages 1-2) all-gathered
}

void GradSync::gather_params(float* out) {
    if (const float* whole = store_.whole_master()) {
        std::memcpy(out, whole, part_.layout().total * sizeof(float));
        return;
    }
    const auto& units = store_.units();
    for (size_t u = 0; u < units.size(); u++)
        zero_->group(int(u))
            .iall_gather_bytes(store_.master() + store_.shard_offset(int(u)), out + units[u].offset,
                               store_.shard_elems(int(u)) * sizeof(float))
            .wait();
}

void GradSync::begin_step() {
    zero_->reset_exposed();
    if (tied_.group()) tied_.group()->reset_stats();
    overflow_ = false;
}

void GradSync::finish_reductions() {
    zero_->finish_step();
    tied_.sum_grads();
}

void GradSync::reduce(int step, float loss_scale, comm::Group& world) {
    finish_reductions();
    if (!local_ || differ_) return;
    // compressed: one exchange of the whole local gradients, unless some rank's is not finite (a
    // loss-scale overflow): every rank decides alike, before any error-feedback buffer moves
    float* g = store_.whole_grads();
    double bad = std::isfinite(kernels::sum_squares(g, part_.layout().total)) ? 0.0 : 1.0;
    world.all_reduce_sum(&bad, 1);
    overflow_ = bad > 0;
    if (!overflow_) algo_->reduce_gradients(g, step, loss_scale);
}

void GradSync::put_norm_sq(double& global, double* replicas, double* by_compute) const {
    if (differ_) replicas[dp_.rank()] = store_.grad_norm_sq_local(true, by_compute);  // this replica's whole gradient
    else global = overflow_ ? double(INFINITY) : store_.grad_norm_sq_local(false, by_compute);
}

GradNormsSq GradSync::norms_sq(double global, const double* replicas) const {
    if (!differ_) return {global, global};
    // reported: the replicas' root mean square norm; clipped: each replica by its own
    GradNormsSq n{global, replicas[dp_.rank()]};
    for (int i = 0; i < dp_.size(); i++) n.reported += replicas[i] / dp_.size();
    return n;
}

void GradSync::step(optim::Optimizer& opt, float lr, float grad_scale, int step, bool touched_after) {
    // mixed precision: the optimiser writes the 16-bit copy in its own pass, unless something changes
    // the parameters after it (an averaging algorithm, the tied embedding's re-sync, a test's poison)
    const bool params_final = !differ_ && !resync_tied_ && !touched_after;
    std::optional<optim::Optimizer::Mirror> mirror;
    if (params_final && store_.mixed()) mirror = optim::Optimizer::Mirror{store_.owned_params16(), store_.param_type()};
    if (opt.step(store_.owned_params(), store_.owned_grads(), lr, grad_scale, mirror ? &*mirror : nullptr))
        zero_->params_rounded();
    after_update(opt, step);
}

void GradSync::skip(optim::Optimizer& opt, int step, bool overflow) {
    if (differ_ && overflow) after_update(opt, step);
}

// After the optimiser: the dp algorithm (average, mix, outer step), the tied embedding's copies made
// equal again where that algorithm's sums could round them apart, what the model reads.
void GradSync::after_update(optim::Optimizer& opt, int step) {
    if (differ_) algo_->after_step(store_.whole_master(), opt, step);
    if (resync_tied_) tied_.sync_params();
    zero_->after_step();
}

}  // namespace shardlm::parallel
