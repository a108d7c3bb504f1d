#include "shardlm/parallel/tied_embedding.h"

#include <cstring>

namespace shardlm::parallel {

TiedEmbedding::TiedEmbedding(std::unique_ptr<comm::Group> group, ParamStore& store, bool reduced)
    : group_(std::move(group)), store_(store), reduced_(reduced) {
    const model::Layout& layout = store.layout();
    wte_unit_ = layout.unit_of(model::UnitKind::TokenEmbedding);
    for (size_t u = 0; u < layout.units.size(); u++)
        if (layout.units[u].kind == model::UnitKind::TokenEmbedding && int(u) != wte_unit_) local_copy_unit_ = int(u);
}

std::pair<float*, size_t> TiedEmbedding::grad(int unit) {
    if (reduced_) return store_.owned_grad(unit);
    const model::Unit& u = store_.units()[size_t(unit)];  // not reduced over the group: all of it
    return {store_.grads() + u.offset, u.numel};
}

void TiedEmbedding::sum_grads() {
    if (!group_ || wte_unit_ < 0) return;
    if (local_copy_unit_ >= 0) {  // the embedding's wte and the head's copy on this one rank (ZBV)
        const std::pair<float*, size_t> mine = grad(wte_unit_);  // (no structured bindings: OpenMP)
        float *a = mine.first, *b = grad(local_copy_unit_).first;
        const size_t n = mine.second;
#pragma omp parallel for simd schedule(static)
        for (size_t i = 0; i < n; i++) b[i] = a[i] = a[i] + b[i];
        return;
    }
    if (group_->size() == 1) return;
    const std::pair<float*, size_t> mine = grad(wte_unit_);
    group_->all_reduce_sum(mine.first, mine.second);
}

void TiedEmbedding::sync_params() {
    if (!group_ || wte_unit_ < 0) return;
    if (!store_.residency().master_whole) {  // this rank's slice: the same slice of the copy on the other stage
        if (group_->size() > 1) group_->broadcast(store_.master_slice(wte_unit_), store_.shard_elems(wte_unit_), 0);
        return;
    }
    const model::Unit& u = store_.units()[size_t(wte_unit_)];
    float* w = store_.master() + u.offset;
    if (local_copy_unit_ >= 0) {  // both on this rank (ZBV)
        const model::Unit& c = store_.units()[size_t(local_copy_unit_)];
        std::memcpy(store_.master() + c.offset, w, u.numel * sizeof(float));
        return;
    }
    if (group_->size() > 1) group_->broadcast(w, u.numel, 0);  // rank 0 of the group: the embedding's stage
}

}  // namespace shardlm::parallel
