#include "shardlm/parallel/param_store.h"

#include <algorithm>
#include <span>
#include <vector>

#include "shardlm/core/check.h"
#include "shardlm/kernels/optimizer_kernels.h"

namespace shardlm::parallel {

ParamStore::ParamStore(const model::Layout& layout, ShardGroups groups, Residency where, DType param, DType reduce)
    : layout_(layout), rank_(groups.dp_rank), n_(groups.dp_size), groups_(groups), where_(where), pt_(param), rt_(reduce) {
    const auto& units = layout.units;
    const size_t total = layout.total, n = size_t(n_);
    SHARDLM_CHECK(groups_.edp_size >= 1 && n % size_t(groups_.edp_size) == 0, "ParamStore: the experts' group (",
                  groups_.edp_size, " ranks) must divide dp (", n, ")");
    size_t off = 0;
    for (size_t u = 0; u < units.size(); u++) {
        SHARDLM_CHECK(units[u].numel % (16 * n) == 0, "unit ", units[u].name, " (", units[u].numel,
                      " floats) is not padded to a multiple of 16 x dp = ", 16 * n,
                      ": build the model part with unit_multiple = dp");
        shard_off_.push_back(off);
        off += shard_elems(int(u));
    }
    const size_t sliced = off;  // every unit's slice, packed
    master_.resize(where_.master_whole ? total : sliced);
    if (mixed()) model16_.resize(where_.model16_whole ? total : sliced);
    if (where_.grads_whole) grads_.resize(total);
    else grad_shards_.resize(sliced);
    if (where_.grads_whole && rt_ != DType::F32) grads16_.resize(total);
    // alignment padding inside each unit (local coordinates)
    const auto& params = layout.params;
    gaps_.resize(units.size());
    for (size_t u = 0; u < units.size(); u++) {
        size_t at = units[u].offset;
        for (int i = 0; i < units[u].num_params; i++) {
            const model::ParamSpec& p = params[size_t(units[u].first_param + i)];
            if (p.offset > at) gaps_[u].push_back({at - units[u].offset, p.offset - units[u].offset});
            at = p.offset + p.numel;
        }
        if (units[u].offset + units[u].numel > at) gaps_[u].push_back({at - units[u].offset, units[u].numel});
    }
}

bool ParamStore::expert_unit(int unit) const { return layout_.units[size_t(unit)].kind == model::UnitKind::Experts; }

int ParamStore::shard_count(int unit) const { return expert_unit(unit) ? groups_.edp_size : n_; }

int ParamStore::shard_rank(int unit) const { return expert_unit(unit) ? groups_.edp_rank : rank_; }

optim::Range ParamStore::shard(int unit) const {
    const model::Unit& u = layout_.units[size_t(unit)];
    const size_t s = shard_elems(unit), r = size_t(shard_rank(unit));
    return {u.offset + s * r, u.offset + s * (r + 1)};
}

float* ParamStore::master_slice(int unit) {
    return where_.master_whole ? master_.data() + shard(unit).begin : master_.data() + shard_offset(unit);
}

const float* ParamStore::master_slice(int unit) const {
    return where_.master_whole ? master_.data() + shard(unit).begin : master_.data() + shard_offset(unit);
}

void* ParamStore::model_params() {
    if (mixed()) return where_.model16_whole ? static_cast<void*>(model16_.data()) : nullptr;
    return where_.master_whole ? static_cast<void*>(master_.data()) : nullptr;
}

std::vector<std::pair<model::FlatRange, float*>> ParamStore::param_storage() {
    if (where_.master_whole) return {{model::FlatRange{0, layout_.total}, master_.data()}};
    std::vector<std::pair<model::FlatRange, float*>> out;
    for (size_t u = 0; u < layout_.units.size(); u++) {
        const optim::Range r = shard(int(u));
        out.push_back({model::FlatRange{r.begin, r.end}, master_slice(int(u))});
    }
    return out;
}

void ParamStore::round_to_model(int unit) {
    // this rank's slice of the unit, rounded into the 16-bit copy (whole, or packed slices)
    const size_t at = where_.model16_whole ? shard(unit).begin : shard_offset(unit);
    convert_from_f32(model16_.data() + at, pt_, master_slice(unit), shard_elems(unit));
}

void ParamStore::round_all_to_model() {
    SHARDLM_CHECK(where_.master_whole && where_.model16_whole, "round_all_to_model needs the whole master and copy");
    convert_from_f32(model16_.data(), pt_, master_.data(), master_.size());
}

std::vector<ParamStore::Slice> ParamStore::slices() const {
    std::vector<Slice> out;
    for (size_t u = 0; u < layout_.units.size(); u++) {
        const optim::Range r = shard(int(u));
        out.push_back({model::FlatRange{r.begin, r.end}, master_slice(int(u)),
                       where_.optimizer_whole ? r.begin : shard_offset(int(u))});
    }
    return out;
}

const float* ParamStore::grad_slice(int unit) const {
    return where_.grads_whole ? grads_.data() + shard(unit).begin : grad_shards_.data() + shard_offset(unit);
}

std::pair<float*, size_t> ParamStore::owned_grad(int unit) {
    const model::Unit& u = layout_.units[size_t(unit)];
    if (where_.optimizer_whole) return {grads_.data() + u.offset, u.numel};
    return {const_cast<float*>(grad_slice(unit)), shard_elems(unit)};
}

namespace {
// Every counted parameter's part of a unit in a buffer that holds the unit's flat range r at `base`:
// f(data, n).
template <class T, class F>
void for_each_counted(const model::Layout& layout, const model::Unit& unit, const optim::Range& r, T* base, F&& f) {
    for (int i = 0; i < unit.num_params; i++) {
        const model::ParamSpec& p = layout.params[size_t(unit.first_param + i)];
        const size_t b = std::max(p.offset, r.begin), e = std::min(p.offset + p.numel, r.end);
        if (b < e && p.counted()) f(base + (b - r.begin), e - b);
    }
}
}  // namespace

double ParamStore::grad_norm_sq_local(bool whole, double* by_compute) const {
    SHARDLM_CHECK(!whole || where_.grads_whole, "grad_norm_sq_local(whole): the gradients are sliced");
    std::vector<std::span<const float>> slices;  // every counted parameter's part here, summed in one pass
    std::vector<int> compute;                    // each slice's compute unit
    for (size_t u = 0; u < layout_.units.size(); u++) {
        const model::Unit& unit = layout_.units[u];
        const optim::Range r = whole ? optim::Range{unit.offset, unit.offset + unit.numel} : shard(int(u));
        const float* g = whole ? grads_.data() + unit.offset : grad_slice(int(u));
        for_each_counted(layout_, unit, r, g, [&](const float* d, size_t n) {
            slices.emplace_back(d, n);
            compute.push_back(unit.compute);
        });
    }
    std::vector<double> sums(slices.size());
    kernels::sum_squares(slices.data(), slices.size(), sums.data());
    double s = 0;
    for (size_t i = 0; i < sums.size(); i++) {
        s += sums[i];  // in the order of the parameters, as before
        if (by_compute) by_compute[compute[i]] += sums[i];
    }
    return s;
}

void ParamStore::for_each_counted_master(const std::function<void(int, float*, size_t)>& f) {
    for (size_t u = 0; u < layout_.units.size(); u++) {
        const model::Unit& unit = layout_.units[u];
        const optim::Range r = where_.master_whole ? optim::Range{unit.offset, unit.offset + unit.numel} : shard(int(u));
        float* m = where_.master_whole ? master_.data() + unit.offset : master_slice(int(u));
        for_each_counted(layout_, unit, r, m, [&](float* d, size_t n) { f(unit.compute, d, n); });
    }
}

std::vector<optim::Range> ParamStore::owned_ranges() const {
    if (where_.optimizer_whole) return {{0, layout_.total}};
    std::vector<optim::Range> r;
    for (size_t u = 0; u < layout_.units.size(); u++) r.push_back(shard(int(u)));
    return r;
}

std::vector<float*> ParamStore::owned_params() {
    if (where_.optimizer_whole) return {master_.data()};
    std::vector<float*> p;
    for (size_t u = 0; u < layout_.units.size(); u++) p.push_back(master_slice(int(u)));
    return p;
}

std::vector<void*> ParamStore::owned_params16() {
    SHARDLM_CHECK(mixed(), "owned_params16: the parameters have no 16-bit copy");
    if (where_.optimizer_whole) return {model16_.data()};
    std::vector<void*> p;
    for (size_t u = 0; u < layout_.units.size(); u++) {
        const int unit = int(u);
        p.push_back(at(model16_.data(), pt_, where_.model16_whole ? shard(unit).begin : shard_offset(unit)));
    }
    return p;
}

std::vector<const float*> ParamStore::owned_grads() {
    if (where_.optimizer_whole) return {grads_.data()};
    std::vector<const float*> g;
    for (size_t u = 0; u < layout_.units.size(); u++) g.push_back(grad_slice(int(u)));
    return g;
}

}  // namespace shardlm::parallel
