#include "shardlm/parallel/zero.h"

#include <algorithm>
#include <cstring>

#include "shardlm/core/check.h"
#include "shardlm/core/timer.h"

namespace shardlm::parallel {

// ---- the common part ----------------------------------------------------------------------------

ZeroStrategy::ZeroStrategy(const Setup& s)
    : dp_(s.dp), edp_(s.edp ? *s.edp : s.dp), part_(s.part), store_(s.store), units_(s.store.units()),
      pt_(s.store.param_type()),
      rt_(s.store.reduce_type()), reduce_(s.reduce) {
    SHARDLM_CHECK(s.reduce || s.store.residency().grads_whole, "a data-parallel algorithm without gradient reduction "
                  "needs whole gradients (ZeRO-0 or 1)");
    wte_unit_ = store_.layout().unit_of(model::UnitKind::TokenEmbedding);
}

ZeroStrategy::~ZeroStrategy() {
    for (auto& r : reduces_) r.req.settle();
}

void ZeroStrategy::wait(comm::Request& r) {
    const double t0 = now_s();
    r.wait();
    exposed_s_ += now_s() - t0;
}

void ZeroStrategy::begin_pass(int, bool forward, int micro, int count) {
    if (forward) return;
    micro_index_ = micro;
    micro_count_ = count;
}

void ZeroStrategy::finish_step() {
    const double t0 = now_s();
    for (auto& r : reduces_) r.req.wait();
    exposed_s_ += now_s() - t0;
    for (auto& r : reduces_)
        if (r.back.size())
            convert_to_f32(store_.grads() + r.back.begin, store_.grads16() + r.back.begin, rt_, r.back.size());
    reduces_.clear();
}

size_t ZeroStrategy::comm_buffer_bytes() const { return store_.staging_bytes(); }

void ZeroStrategy::round_slices_to_model() {
    if (pt_ != DType::F32 && !rounded_)
        for (size_t u = 0; u < units_.size(); u++) store_.round_to_model(int(u));
    rounded_ = false;
}

void ZeroStrategy::gather_updated_slices() {
    // what the model reads, whole on every rank: the fp32 master, or the 16-bit copy of it (rounded
    // from this rank's master slices first), each rank's slice of every unit to every rank
    const bool mixed = pt_ != DType::F32;
    round_slices_to_model();
    char* model = mixed ? reinterpret_cast<char*>(store_.model16()) : reinterpret_cast<char*>(store_.master());
    const size_t eb = dtype_bytes(pt_);
    std::vector<comm::Request> pending;
    for (size_t u = 0; u < units_.size(); u++)
        pending.push_back(group(int(u)).iall_gather_bytes(model + store_.shard(int(u)).begin * eb,
                                                          model + units_[u].offset * eb, store_.shard_elems(int(u)) * eb));
    const double t0 = now_s();
    for (auto& r : pending) r.wait();  // nothing to overlap with: the next step needs the parameters
    exposed_s_ += now_s() - t0;
}

size_t ZeroStrategy::ring_bytes(comm::OpKind k, size_t elems, DType t, int unit) const {
    const comm::Collectives& g = unit >= 0 ? group(unit) : dp_;
    return comm::ring_bytes_rank(k, elems, dtype_bytes(t), g.size(), g.rank());
}

// ---- stage 0 ------------------------------------------------------------------------------------

Replicated::Replicated(const Setup& s) : ZeroStrategy(s) {
    const size_t bucket_elems = size_t(s.bucket_mb * 1024 * 1024 / sizeof(float));
    SHARDLM_CHECK(s.bucket_mb > 0, "--bucket-mb must be > 0 (got ", s.bucket_mb, ")");
    closes_bucket_.assign(units_.size(), -1);
    for (int c = 0; c < part_.num_chunks(); c++) {
        const std::vector<int>& us = part_.chunk_units(c);
        size_t lo = 0, hi = 0;
        auto close = [&](int unit) {
            closes_bucket_[size_t(unit)] = int(buckets_.size());
            bucket_group_.push_back(store_.expert_unit(unit));
            buckets_.push_back({lo, hi});
            lo = hi = 0;
        };
        for (size_t i = us.size(); i-- > 0;) {
            const model::Unit& u = units_[size_t(us[i])];
            // an MoE layer's experts are reduced over their own group: a bucket of their own
            const bool experts = store_.expert_unit(us[i]);
            if (experts && hi != lo) close(us[i + 1]);
            if (hi == lo) hi = u.offset + u.numel;
            lo = u.offset;
            if (hi - lo >= bucket_elems || i == 0 || experts) close(us[i]);
        }
    }
}

void Replicated::after_backward(int unit) {
    if (!last_micro()) return;  // reduced once, after the last micro-batch
    const model::Unit& u = units_[size_t(unit)];
    if (pre_reduce_) pre_reduce_(unit, store_.grads() + u.offset);
    if (!reduce_) return;
    const int b = closes_bucket_[size_t(unit)];
    if (b < 0) return;
    const optim::Range range = buckets_[size_t(b)];
    comm::Collectives& g = bucket_group_[size_t(b)] ? edp_ : dp_;
    if (rt_ == DType::F32) {
        reduces_.push_back({g.iall_reduce_sum(store_.grads() + range.begin, range.size(), DType::F32), {}});
        return;
    }
    convert_from_f32(store_.grads16() + range.begin, rt_, store_.grads() + range.begin, range.size());
    reduces_.push_back({g.iall_reduce_sum(store_.grads16() + range.begin, range.size(), rt_), range});
}

void Replicated::after_step() {
    if (pt_ != DType::F32 && !rounded_) store_.round_all_to_model();
    rounded_ = false;
}

std::array<size_t, 3> Replicated::expected_step_bytes(int, UnitGroup group) const {
    std::array<size_t, 3> b{0, 0, 0};
    for (size_t i = 0; i < buckets_.size(); i++) {
        if (group != UnitGroup::All && bucket_group_[i] != (group == UnitGroup::Experts)) continue;
        const comm::Collectives& g = bucket_group_[i] ? edp_ : dp_;
        b[0] += comm::ring_bytes_rank(comm::OpKind::AllReduce, buckets_[i].size(), dtype_bytes(rt_), g.size(), g.rank());
    }
    return b;
}

// ---- stage 1 ------------------------------------------------------------------------------------

void ShardedOptimizer::after_backward(int unit) {
    if (!last_micro()) return;  // reduced once, after the last micro-batch
    const model::Unit& u = units_[size_t(unit)];
    if (pre_reduce_) pre_reduce_(unit, store_.grads() + u.offset);
    if (!reduce_) return;
    const optim::Range mine = store_.shard(unit);  // what this rank keeps
    const size_t n = store_.shard_elems(unit);
    if (rt_ == DType::F32) {
        reduces_.push_back(
            {group(unit).ireduce_scatter_sum(store_.grads() + u.offset, store_.grads() + mine.begin, n, DType::F32), {}});
        return;
    }
    convert_from_f32(store_.grads16() + u.offset, rt_, store_.grads() + u.offset, u.numel);
    reduces_.push_back(
        {group(unit).ireduce_scatter_sum(store_.grads16() + u.offset, store_.grads16() + mine.begin, n, rt_), mine});
}

std::array<size_t, 3> ZeroStrategy::sharded_step_bytes(int reductions, UnitGroup group) const {
    std::array<size_t, 3> b{0, 0, 0};  // every unit reduce-scattered `reductions` times, gathered once
    for (size_t i = 0; i < units_.size(); i++) {
        if (!in_group(int(i), group)) continue;
        const size_t e = units_[i].numel;
        b[1] += ring_bytes(comm::OpKind::ReduceScatter, e, rt_, int(i)) * size_t(reductions);
        b[2] += ring_bytes(comm::OpKind::AllGather, e, pt_, int(i));
    }
    return b;
}

std::array<size_t, 3> ShardedOptimizer::expected_step_bytes(int, UnitGroup group) const {
    return sharded_step_bytes(1, group);
}

// ---- stage 2 ------------------------------------------------------------------------------------

struct ShardedGradients::Slot {
    AlignedBuffer<unsigned char> buf;  // a unit's parameters (stage 3, the model's type) or gradient (fp32)
    AlignedBuffer<float> scratch;      // grad slots: this rank's reduce-scattered slice
    AlignedBuffer<unsigned short> buf16, scratch16;  // grad slots reduced in 16 bits
    int unit = -1;
    bool first = true;                 // grad slots: first micro-batch of the step (copy, not add)
    uint64_t used = 0;                 // when it was last handed out (least recently used is replaced)
    comm::Request req;
    float* f32() { return reinterpret_cast<float*>(buf.data()); }
};

ShardedGradients::ShardedGradients(const Setup& s) : ZeroStrategy(s) { grad_slots_ = make_slots(sizeof(float), true); }

ShardedGradients::~ShardedGradients() {
    for (auto& s : grad_slots_) s->req.settle();
}

std::vector<std::unique_ptr<ShardedGradients::Slot>> ShardedGradients::make_slots(size_t elem_bytes, bool grad) const {
    // slot 0 holds the embedding (used at both ends of the step), slots 1-2 any other unit; a third for
    // parameters where a block reads two units (an MoE layer's block and experts) while the next is prefetched
    const size_t n = size_t(dp_.size());
    size_t max_unit = 0, max_slice = 0;
    for (size_t u = 0; u < units_.size(); u++)
        if (int(u) != wte_unit_)
            max_unit = std::max(max_unit, units_[u].numel), max_slice = std::max(max_slice, store_.shard_elems(int(u)));
    const size_t wte_numel = wte_unit_ >= 0 ? units_[size_t(wte_unit_)].numel : 0;
    const bool experts = store_.layout().unit_of(model::UnitKind::Experts) >= 0;
    std::vector<std::unique_ptr<Slot>> slots(!grad && experts ? 4 : 3);
    for (size_t i = 0; i < slots.size(); i++) {
        slots[i] = std::make_unique<Slot>();
        const size_t numel = i == 0 ? wte_numel : max_unit;
        slots[i]->buf.resize(numel * elem_bytes);
        if (!grad) continue;
        const size_t slice = i == 0 ? numel / n : max_slice;
        slots[i]->scratch.resize(slice);
        if (rt_ != DType::F32) slots[i]->buf16.resize(numel), slots[i]->scratch16.resize(slice);
    }
    return slots;
}

size_t ShardedGradients::comm_buffer_bytes() const {
    size_t n = ZeroStrategy::comm_buffer_bytes();
    for (const auto& s : grad_slots_) n += s->buf.bytes() + s->scratch.bytes() + s->buf16.bytes() + s->scratch16.bytes();
    return n;
}

int ShardedGradients::pick_slot(const std::vector<std::unique_ptr<Slot>>& slots, int unit, int keep, int keep2) const {
    if (unit == wte_unit_) return 0;
    int best = -1;
    for (size_t i = 1; i < slots.size(); i++) {
        const int held = slots[i]->unit;
        if (held >= 0 && (held == keep || held == keep2)) continue;
        if (best < 0 || slots[i]->used < slots[size_t(best)]->used) best = int(i);
    }
    SHARDLM_CHECK(best > 0, "ZeRO: no free buffer for unit ", units_[size_t(unit)].name);
    return best;
}

float* ShardedGradients::take_grad_slot(int unit) {
    int keep = -1;  // the unit whose gradient was handed out last is still being written
    uint64_t newest = 0;
    for (size_t i = 1; i < grad_slots_.size(); i++)
        if (grad_slots_[i]->used > newest) newest = grad_slots_[i]->used, keep = grad_slots_[i]->unit;
    Slot& s = *grad_slots_[size_t(pick_slot(grad_slots_, unit, keep))];
    if (s.req.pending() || s.unit >= 0) finish_grad_slot(s);
    s.unit = unit;
    s.first = micro_index_ == 0;
    s.used = ++clock_;
    float* g = s.f32();
    // backward writes every parameter's gradient (=); the gaps between them must be zero too
    for (const auto& [b, e] : store_.gaps(unit)) std::memset(g + b, 0, (e - b) * sizeof(float));
    return g;
}

void ShardedGradients::finish_grad_slot(Slot& s) {
    wait(s.req);
    if (s.unit < 0) return;
    float* dst = store_.grad_shards() + store_.shard_offset(s.unit);
    const size_t n = store_.shard_elems(s.unit);
    const float* src = s.scratch.data();
    if (rt_ != DType::F32) convert_to_f32(s.scratch.data(), s.scratch16.data(), rt_, n);
    if (s.first) {
        std::memcpy(dst, src, n * sizeof(float));
    } else {
#pragma omp parallel for simd schedule(static)
        for (size_t i = 0; i < n; i++) dst[i] += src[i];
    }
    s.unit = -1;
}

void ShardedGradients::before_backward(int unit, int) { part_.bind_unit(unit, nullptr, take_grad_slot(unit)); }

void ShardedGradients::after_backward(int unit) {
    for (auto& sp : grad_slots_) {
        Slot& s = *sp;
        if (s.unit != unit) continue;
        if (pre_reduce_) pre_reduce_(unit, s.f32());
        const size_t n = store_.shard_elems(unit);
        if (rt_ == DType::F32) {
            s.req = group(unit).ireduce_scatter_sum(s.f32(), s.scratch.data(), n, DType::F32);
        } else {
            convert_from_f32(s.buf16.data(), rt_, s.f32(), units_[size_t(unit)].numel);
            s.req = group(unit).ireduce_scatter_sum(s.buf16.data(), s.scratch16.data(), n, rt_);
        }
        return;
    }
    fail("ZeRO-", stage_number(stage()), ": no gradient buffer for unit ", units_[size_t(unit)].name);
}

void ShardedGradients::end_pass(int, bool forward) {
    if (forward) return;
    for (auto& s : grad_slots_) finish_grad_slot(*s);
}

std::array<size_t, 3> ShardedGradients::expected_step_bytes(int micro, UnitGroup group) const {
    return sharded_step_bytes(micro, group);
}

// ---- stage 3 ------------------------------------------------------------------------------------

ShardedParameters::ShardedParameters(const Setup& s)
    : ShardedGradients(s), single_stage_(s.single_stage), per_chunk_(s.split_backward) {
    if (per_chunk_) chunk_params_.resize(size_t(part_.num_chunks()));
    else param_slots_ = make_slots(dtype_bytes(pt_), false);
}

void ShardedParameters::unshard(int chunk) {
    if (!per_chunk_) return;
    const std::vector<int>& us = part_.chunk_units(chunk);
    size_t numel = 0;
    for (int u : us) numel += units_[size_t(u)].numel;
    const size_t eb = dtype_bytes(pt_);
    AlignedBuffer<unsigned char>& buf = chunk_params_[size_t(chunk)];
    buf.resize(numel * eb);
    size_t held = 0;
    for (const auto& b : chunk_params_) held += b.bytes();
    chunk_peak_bytes_ = std::max(chunk_peak_bytes_, held);
    std::vector<comm::Request> gathers;
    size_t at = 0;
    for (int u : us) {
        const size_t off = store_.shard_offset(u);
        const void* mine = pt_ == DType::F32 ? static_cast<const void*>(store_.master() + off)
                                             : static_cast<const void*>(store_.model16() + off);
        gathers.push_back(group(u).iall_gather_bytes(mine, buf.data() + at * eb, store_.shard_elems(u) * eb));
        part_.bind_unit(u, buf.data() + at * eb, nullptr);
        at += units_[size_t(u)].numel;
    }
    for (auto& g : gathers) wait(g);
}

void ShardedParameters::reshard(int chunk) {
    if (per_chunk_) chunk_params_[size_t(chunk)].resize(0);
}

ShardedParameters::~ShardedParameters() {
    for (auto& s : param_slots_) s->req.settle();
}

size_t ShardedParameters::comm_buffer_bytes() const {
    size_t n = ShardedGradients::comm_buffer_bytes() + chunk_peak_bytes_;
    for (const auto& s : param_slots_) n += s->buf.bytes();
    return n;
}

void ShardedParameters::prefetch(int unit) {
    for (auto& s : param_slots_)
        if (s->unit == unit) return;
    // two units stay in use only where a third slot exists for them (MoE layers)
    const int keep2 = param_slots_.size() > 3 ? prev_unit_ : -1;
    Slot& s = *param_slots_[size_t(pick_slot(param_slots_, unit, last_unit_, keep2))];
    s.req.wait();
    s.unit = unit;
    const size_t eb = dtype_bytes(pt_), at = store_.shard_offset(unit);
    const void* mine = pt_ == DType::F32 ? static_cast<const void*>(store_.master() + at)
                                         : static_cast<const void*>(store_.model16() + at);
    s.req = group(unit).iall_gather_bytes(mine, s.buf.data(), store_.shard_elems(unit) * eb);
}

void* ShardedParameters::gathered(int unit) {
    prefetch(unit);  // no-op if it is there or on its way
    for (auto& sp : param_slots_) {
        Slot& s = *sp;
        if (s.unit != unit) continue;
        wait(s.req);
        s.used = ++clock_;
        return s.buf.data();
    }
    fail("ZeRO-3: unit ", unit, " is not gathered");
}

void ShardedParameters::reset_residency() {
    for (auto& s : param_slots_) {
        s->req.wait();
        s->unit = -1;
    }
}

void ShardedParameters::begin_pass(int chunk, bool forward, int micro, int count) {
    ZeroStrategy::begin_pass(chunk, forward, micro, count);
    last_unit_ = prev_unit_ = -1;
    // Every micro-batch gathers afresh (the parameters do not change within a step, but keeping this
    // simple makes the communication volume a plain formula). With one stage a micro-batch's backward
    // follows its forward, so what the forward left gathered is used.
    if (!per_chunk_ && (forward || !single_stage_)) reset_residency();
}

void ShardedParameters::before_forward(int unit, int next) {
    if (per_chunk_) return;  // the chunk is unsharded for the step
    void* p = gathered(unit);
    in_use(unit);
    part_.bind_unit(unit, p, nullptr);
    if (next >= 0) prefetch(next);
}

void ShardedParameters::before_backward(int unit, int next) {
    if (per_chunk_) {
        part_.bind_unit(unit, nullptr, take_grad_slot(unit));
        return;
    }
    void* p = gathered(unit);
    in_use(unit);
    part_.bind_unit(unit, p, take_grad_slot(unit));
    if (next >= 0) prefetch(next);
}

void ShardedParameters::in_use(int unit) {
    if (unit == wte_unit_ || unit == last_unit_) return;
    prev_unit_ = last_unit_;
    last_unit_ = unit;
}

void ShardedParameters::after_step() {
    round_slices_to_model();  // fp32: the optimiser stepped the master slices the gathers read
}

std::array<size_t, 3> ShardedParameters::expected_step_bytes(int micro, UnitGroup group) const {
    if (per_chunk_) return sharded_step_bytes(micro, group);  // every unit gathered once a step
    // With one stage the backward starts with what the forward left gathered: wte (its own slot) and
    // the last units in the other slots (the last block, its experts, and the head).
    std::vector<bool> resident(units_.size(), false);
    if (single_stage_) {
        int seen = 0;
        for (size_t u = units_.size(); u-- > 0;) {
            if (int(u) == wte_unit_) resident[u] = true;
            else if (seen < int(param_slots_.size()) - 1) resident[u] = true, seen++;
        }
    }
    std::array<size_t, 3> b{0, 0, 0};
    for (size_t u = 0; u < units_.size(); u++) {
        if (!in_group(int(u), group)) continue;
        const size_t e = units_[u].numel;
        b[1] += ring_bytes(comm::OpKind::ReduceScatter, e, rt_, int(u)) * size_t(micro);
        b[2] += ring_bytes(comm::OpKind::AllGather, e, pt_, int(u)) * size_t(micro);            // forward
        if (!resident[u]) b[2] += ring_bytes(comm::OpKind::AllGather, e, pt_, int(u)) * size_t(micro);  // backward
    }
    return b;
}

std::unique_ptr<ZeroStrategy> make_zero_strategy(ZeroStage stage, const ZeroStrategy::Setup& s) {
    switch (stage) {
    case ZeroStage::Replicate: return std::make_unique<Replicated>(s);
    case ZeroStage::Optimizer: return std::make_unique<ShardedOptimizer>(s);
    case ZeroStage::Gradients: return std::make_unique<ShardedGradients>(s);
    case ZeroStage::Parameters: return std::make_unique<ShardedParameters>(s);
    }
    fail("--zero must be 0, 1, 2 or 3 (got ", stage_number(stage), ")");
}

}  // namespace shardlm::parallel
