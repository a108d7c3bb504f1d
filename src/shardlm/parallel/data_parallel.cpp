#include "shardlm/parallel/data_parallel.h"

#include <cstring>

#include "shardlm/core/check.h"

namespace shardlm::parallel {

DataParallel::DataParallel(comm::Collectives& dp, model::ModelPart& part, int zero, double bucket_mb,
                           bool single_stage, DType reduce_dtype, bool gather_per_chunk, bool reduce_grads)
    : dp_(dp),
      part_(part),
      store_(part.layout(), dp.rank(), dp.size(), ZeroStrategy::residency(zero, part.precision().param),
             part.precision().param, reduce_dtype) {
    SHARDLM_CHECK(!gather_per_chunk || zero == 3, "gathering parameters per chunk is ZeRO-3's (got --zero ", zero, ")");
    gather_per_chunk_ = gather_per_chunk;
    reduce_grads_ = reduce_grads;
    zero_ = make_zero_strategy(zero, {dp, part, store_, bucket_mb, single_stage, gather_per_chunk, reduce_grads});
    const model::Layout& layout = part.layout();
    wte_unit_ = layout.unit_of(model::UnitKind::TokenEmbedding);
    for (size_t u = 0; u < layout.units.size(); u++)  // the head's tied copy beside the embedding (ZBV)
        if (layout.units[u].kind == model::UnitKind::TokenEmbedding && int(u) != wte_unit_) local_copy_unit_ = int(u);
    // stage 3 binds gathered units as they run; stages 2-3 bind a gradient slot per unit's backward
    part_.bind(store_.model_params(), store_.residency().grads_whole ? store_.grads() : nullptr);
}

DataParallel::~DataParallel() = default;

void DataParallel::params_loaded() {
    if (store_.mixed()) zero_->after_step();  // each rank's slices rounded, then (stages 1-2) all-gathered
}

void DataParallel::gather_params(float* out) {
    if (full_params()) {
        std::memcpy(out, store_.master(), part_.layout().total * sizeof(float));
        return;
    }
    const auto& units = store_.units();
    for (size_t u = 0; u < units.size(); u++)
        dp_.iall_gather_bytes(store_.master() + store_.shard_offset(int(u)), out + units[u].offset,
                              store_.shard_elems(int(u)) * sizeof(float))
            .wait();
}

std::pair<float*, size_t> DataParallel::tied_grad(int unit) {
    if (reduce_grads_) return store_.owned_grad(unit);
    // not reduced over the group (a data-parallel algorithm combines whole local gradients): all of it
    const model::Unit& u = part_.layout().units[size_t(unit)];
    return {store_.grads() + u.offset, u.numel};
}

void DataParallel::sum_tied_grads(comm::Group& g) {
    if (wte_unit_ < 0) return;
    // the embedding's wte and the head's tied copy on this one rank (ZBV's first rank): sum here
    if (local_copy_unit_ >= 0) {
        const std::pair<float*, size_t> mine = tied_grad(wte_unit_);  // (no structured bindings: OpenMP)
        float *a = mine.first, *b = tied_grad(local_copy_unit_).first;
        const size_t n = mine.second;
#pragma omp parallel for simd schedule(static)
        for (size_t i = 0; i < n; i++) b[i] = a[i] = a[i] + b[i];
        return;
    }
    if (g.size() == 1) return;
    const std::pair<float*, size_t> mine = tied_grad(wte_unit_);
    g.all_reduce_sum(mine.first, mine.second);
}

void DataParallel::sync_tied_params(comm::Group& g) {
    if (wte_unit_ < 0) return;
    const model::Unit& u = part_.layout().units[size_t(wte_unit_)];
    if (!store_.residency().master_whole) {  // this rank's slice: the same slice of the copy on the other stage
        if (g.size() > 1) g.broadcast(store_.master_slice(wte_unit_), store_.shard_elems(wte_unit_), 0);
        return;
    }
    float* w = store_.master() + u.offset;
    if (local_copy_unit_ >= 0) {  // both on this rank (ZBV)
        const model::Unit& c = part_.layout().units[size_t(local_copy_unit_)];
        std::memcpy(store_.master() + c.offset, w, u.numel * sizeof(float));
        return;
    }
    if (g.size() > 1) g.broadcast(w, u.numel, 0);  // rank 0 of the group: the embedding's stage
}

}  // namespace shardlm::parallel
