#include "shardlm/parallel/data_parallel.h"

#include <algorithm>
#include <cstdio>
#include <cstring>

#include "shardlm/core/check.h"
#include "shardlm/core/timer.h"
#include "shardlm/kernels/optimizer_kernels.h"

namespace shardlm::parallel {

struct DataParallel::Slot {
    AlignedBuffer<unsigned char> buf;  // a unit's parameters (stage 3, the model's type) or gradient (fp32)
    AlignedBuffer<float> scratch;      // grad slots: this rank's reduce-scattered slice
    AlignedBuffer<unsigned short> buf16, scratch16;  // grad slots reduced in 16 bits
    int unit = -1;
    bool first = true;                 // grad slots: first micro-batch of the step (copy, not add)
    uint64_t used = 0;                 // when it was last handed out (least recently used is replaced)
    comm::Request req;
    float* f32() { return reinterpret_cast<float*>(buf.data()); }
};

DataParallel::DataParallel(comm::Group& dp, model::ModelPart& part, int zero, double bucket_mb, bool single_stage,
                           DType reduce_dtype)
    : dp_(dp), part_(part), units_(part.layout().units), zero_(zero), single_stage_(single_stage) {
    SHARDLM_CHECK(zero >= 0 && zero <= 3, "--zero must be 0, 1, 2 or 3 (got ", zero, ")");
    SHARDLM_CHECK(bucket_mb > 0, "--bucket-mb must be > 0 (got ", bucket_mb, ")");
    pt_ = part.precision().param;
    rt_ = reduce_dtype;
    bucket_elems_ = size_t(bucket_mb * 1024 * 1024 / sizeof(float));
    const model::Layout& layout = part.layout();
    const size_t total = layout.total, n = size_t(dp.size());
    wte_unit_ = layout.unit_of(model::UnitKind::TokenEmbedding);
    for (size_t u = 0; u < layout.units.size(); u++)  // the head's tied copy beside the embedding (ZBV)
        if (layout.units[u].kind == model::UnitKind::TokenEmbedding && int(u) != wte_unit_) local_copy_unit_ = int(u);
    size_t max_unit = 0, max_shard = 0, off = 0;
    for (size_t u = 0; u < units_.size(); u++) {
        SHARDLM_CHECK(units_[u].numel % (16 * n) == 0, "unit ", units_[u].name, " (", units_[u].numel,
                      " floats) is not padded to a multiple of 16 x dp = ", 16 * n,
                      ": build the model part with unit_multiple = dp");
        shard_off_.push_back(off);
        off += units_[u].numel / n;
        // slot 0 holds the embedding (used at both ends of the step), slots 1-2 any other unit
        if (int(u) != wte_unit_) max_unit = std::max(max_unit, units_[u].numel), max_shard = max_unit / n;
    }
    const bool mixed = pt_ != DType::F32;
    master_full_ = mixed ? zero_ == 0 : zero_ < 3;
    master_.resize(master_full_ ? total : total / n);
    if (mixed) model16_.resize(zero_ < 3 ? total : total / n);
    if (zero_ < 2) grads_.resize(total);
    else grad_shards_.resize(total / n);
    if (zero_ < 2 && rt_ != DType::F32) grads16_.resize(total);
    const size_t wte_numel = wte_unit_ >= 0 ? units_[size_t(wte_unit_)].numel : 0;
    auto make_slots = [&](std::vector<std::unique_ptr<Slot>>& slots, size_t elem_bytes, bool grad) {
        slots.resize(3);
        for (size_t i = 0; i < 3; i++) {
            slots[i] = std::make_unique<Slot>();
            const size_t numel = i == 0 ? wte_numel : max_unit, shard = i == 0 ? wte_numel / n : max_shard;
            slots[i]->buf.resize(numel * elem_bytes);
            if (!grad) continue;
            slots[i]->scratch.resize(shard);
            if (rt_ != DType::F32) slots[i]->buf16.resize(numel), slots[i]->scratch16.resize(shard);
        }
    };
    if (zero_ == 3) make_slots(param_slots_, dtype_bytes(pt_), false);
    if (zero_ >= 2) make_slots(grad_slots_, sizeof(float), true);
    // ZeRO-0 buckets, per chunk: a chunk's units finish in descending memory order (the head and the
    // tied copy, the last block, ..., the embedding), so a bucket is one contiguous range, closed by
    // its lowest unit once it reaches bucket_elems_ (or at the chunk's first unit).
    closes_bucket_.assign(units_.size(), -1);
    for (int c = 0; c < part.num_chunks(); c++) {
        const std::vector<int>& us = part.chunk_units(c);
        size_t lo = 0, hi = 0;
        for (size_t i = us.size(); i-- > 0;) {
            const model::Unit& u = units_[size_t(us[i])];
            if (hi == lo) hi = u.offset + u.numel;
            lo = u.offset;
            if (hi - lo >= bucket_elems_ || i == 0) {
                closes_bucket_[size_t(us[i])] = int(buckets_.size());
                buckets_.push_back({lo, hi});
                lo = hi = 0;
            }
        }
    }
    // alignment padding inside each unit (local coordinates)
    const auto& params = layout.params;
    gaps_.resize(units_.size());
    for (size_t u = 0; u < units_.size(); u++) {
        size_t at = units_[u].offset;
        for (int i = 0; i < units_[u].num_params; i++) {
            const model::ParamSpec& p = params[size_t(units_[u].first_param + i)];
            if (p.offset > at) gaps_[u].push_back({at - units_[u].offset, p.offset - units_[u].offset});
            at = p.offset + p.numel;
        }
        if (units_[u].offset + units_[u].numel > at) gaps_[u].push_back({at - units_[u].offset, units_[u].numel});
    }
    void* model_params = nullptr;  // stage 3 binds gathered units as they run
    if (zero_ < 3) model_params = mixed ? static_cast<void*>(model16_.data()) : static_cast<void*>(master_.data());
    part_.bind(model_params, zero_ < 2 ? grads_.data() : nullptr);
}

DataParallel::~DataParallel() {
    for (auto& r : pending_) r.wait();
    for (auto& r : reduces_) r.req.wait();
    for (auto& s : param_slots_) s->req.wait();
    for (auto& s : grad_slots_) s->req.wait();
}

size_t DataParallel::comm_buffer_bytes() const {
    size_t n = grads16_.bytes();
    for (const auto& s : param_slots_) n += s->buf.bytes();
    for (const auto& s : grad_slots_) n += s->buf.bytes() + s->scratch.bytes() + s->buf16.bytes() + s->scratch16.bytes();
    return n;
}

optim::Range DataParallel::shard(int unit) const {
    const model::Unit& u = units_[size_t(unit)];
    size_t s = u.numel / size_t(dp_.size());
    return {u.offset + s * size_t(dp_.rank()), u.offset + s * size_t(dp_.rank() + 1)};
}

float* DataParallel::master_slice(int unit) {
    return master_full_ ? master_.data() + shard(unit).begin : master_.data() + shard_offset(unit);
}

void DataParallel::round_to_model(int unit) {
    // this rank's slice of the unit, rounded into the 16-bit copy (whole at stages 0-2, packed at 3)
    const size_t at = zero_ < 3 ? shard(unit).begin : shard_offset(unit);
    convert_from_f32(model16_.data() + at, pt_, master_slice(unit), shard_elems(unit));
}

std::vector<std::pair<model::FlatRange, float*>> DataParallel::param_storage() {
    if (master_full_) return {{model::FlatRange{0, part_.layout().total}, master_.data()}};
    std::vector<std::pair<model::FlatRange, float*>> out;
    for (size_t u = 0; u < units_.size(); u++) {
        optim::Range r = shard(int(u));
        out.push_back({model::FlatRange{r.begin, r.end}, master_slice(int(u))});
    }
    return out;
}

void DataParallel::params_loaded() {
    if (pt_ == DType::F32) return;
    if (zero_ == 0) {  // every rank holds the whole master
        convert_from_f32(model16_.data(), pt_, master_.data(), master_.size());
        return;
    }
    after_step();  // each rank's slices, then (stages 1-2) the all-gather
}

std::vector<DataParallel::Slice> DataParallel::slices() const {
    std::vector<Slice> out;
    for (size_t u = 0; u < units_.size(); u++) {
        const optim::Range r = shard(int(u));
        const float* p = master_full_ ? master_.data() + r.begin : master_.data() + shard_offset(int(u));
        out.push_back({model::FlatRange{r.begin, r.end}, p, zero_ == 0 ? r.begin : shard_offset(int(u))});
    }
    return out;
}

void DataParallel::gather_params(float* out) {
    if (master_full_) {
        std::memcpy(out, master_.data(), master_.bytes());
        return;
    }
    for (size_t u = 0; u < units_.size(); u++)
        dp_.all_gather(master_.data() + shard_offset(int(u)), out + units_[u].offset, shard_elems(int(u)));
}

// ---- stage 3: gathering parameters -------------------------------------------------------------

// The slot for unit: 0 for wte; else whichever of 1, 2 does not hold `keep` (in use), the least
// recently used if neither does.
int DataParallel::pick_slot(const std::vector<std::unique_ptr<Slot>>& slots, int unit, int keep) const {
    if (unit == wte_unit_) return 0;
    if (slots[1]->unit == keep && keep >= 0) return 2;
    if (slots[2]->unit == keep && keep >= 0) return 1;
    return slots[1]->used <= slots[2]->used ? 1 : 2;
}

void DataParallel::prefetch(int unit) {
    for (auto& s : param_slots_)
        if (s->unit == unit) return;
    Slot& s = *param_slots_[size_t(pick_slot(param_slots_, unit, last_unit_))];
    s.req.wait();
    s.unit = unit;
    const size_t eb = dtype_bytes(pt_);
    const void* mine = pt_ == DType::F32 ? static_cast<const void*>(master_.data() + shard_offset(unit))
                                         : static_cast<const void*>(model16_.data() + shard_offset(unit));
    s.req = dp_.iall_gather_bytes(mine, s.buf.data(), shard_elems(unit) * eb);
}

void* DataParallel::gathered(int unit) {
    prefetch(unit);  // no-op if it is there or on its way
    for (auto& sp : param_slots_) {
        Slot& s = *sp;
        if (s.unit != unit) continue;
        const double t0 = now_s();
        s.req.wait();
        exposed_s_ += now_s() - t0;
        s.used = ++clock_;
        return s.buf.data();
    }
    fail("ZeRO-3: unit ", unit, " is not gathered");
}

void DataParallel::reset_residency() {
    for (auto& s : param_slots_) {
        s->req.wait();
        s->unit = -1;
    }
}

void DataParallel::begin_pass(int chunk, bool forward, int micro, int count) {
    last_unit_ = -1;
    if (!forward) {
        micro_index_ = micro;
        micro_count_ = count;
    }
    // Every micro-batch gathers afresh (the parameters do not change within a step, but keeping this
    // simple makes the communication volume a plain formula). With one stage a micro-batch's backward
    // follows its forward, so what the forward left gathered is used.
    if (zero_ == 3 && (forward || !single_stage_)) reset_residency();
}

void DataParallel::before_forward(int unit, int next) {
    if (zero_ < 3) return;
    void* p = gathered(unit);
    if (unit != wte_unit_) last_unit_ = unit;
    part_.bind_unit(unit, p, nullptr);
    if (next >= 0) prefetch(next);
}

// ---- gradients ----------------------------------------------------------------------------------

DataParallel::Slot& DataParallel::grad_slot(int unit) {
    int keep = -1;  // the unit whose gradient was handed out last is still being written
    uint64_t newest = 0;
    for (size_t i = 1; i < grad_slots_.size(); i++)
        if (grad_slots_[i]->used > newest) newest = grad_slots_[i]->used, keep = grad_slots_[i]->unit;
    Slot& s = *grad_slots_[size_t(pick_slot(grad_slots_, unit, keep))];
    if (s.req.pending() || s.unit >= 0) finish_grad_slot(s);
    return s;
}

void DataParallel::finish_grad_slot(Slot& s) {
    double t0 = now_s();
    s.req.wait();
    exposed_s_ += now_s() - t0;
    if (s.unit < 0) return;
    float* dst = grad_shards_.data() + shard_offset(s.unit);
    const size_t n = shard_elems(s.unit);
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

void DataParallel::before_backward(int unit, int next) {
    void* p = nullptr;
    if (zero_ == 3) {
        p = gathered(unit);
        if (unit != wte_unit_) last_unit_ = unit;
    }
    float* g = nullptr;
    if (zero_ >= 2) {
        Slot& s = grad_slot(unit);
        s.unit = unit;
        s.first = micro_index_ == 0;
        s.used = ++clock_;
        g = s.f32();
        // backward writes every parameter's gradient (=); the gaps between them must be zero too
        for (const auto& [b, e] : gaps_[size_t(unit)]) std::memset(g + b, 0, (e - b) * sizeof(float));
    }
    if (p || g) part_.bind_unit(unit, p, g);
    if (zero_ == 3 && next >= 0) prefetch(next);
}

void DataParallel::after_backward(int unit) {
    const model::Unit& u = units_[size_t(unit)];
    if (zero_ >= 2) {
        for (auto& sp : grad_slots_) {
            Slot& s = *sp;
            if (s.unit != unit) continue;
            if (pre_reduce_) pre_reduce_(unit, s.f32());
            if (rt_ == DType::F32) {
                s.req = dp_.ireduce_scatter_sum(s.f32(), s.scratch.data(), shard_elems(unit));
            } else {
                convert_from_f32(s.buf16.data(), rt_, s.f32(), u.numel);
                s.req = dp_.ireduce_scatter_sum(s.buf16.data(), s.scratch16.data(), shard_elems(unit), rt_);
            }
            return;
        }
        fail("ZeRO-", zero_, ": no gradient buffer for unit ", u.name);
    }
    if (!last_micro()) return;  // stages 0-1 reduce once, after the last micro-batch
    if (pre_reduce_) pre_reduce_(unit, grads_.data() + u.offset);
    // the range to reduce: the unit (stage 1) or the bucket this unit completes (stage 0)
    optim::Range range{u.offset, u.offset + u.numel};
    if (zero_ == 0) {
        const int b = closes_bucket_[size_t(unit)];
        if (b < 0) return;
        range = buckets_[size_t(b)];
    }
    const optim::Range mine = zero_ == 1 ? shard(unit) : range;  // what this rank keeps
    if (rt_ == DType::F32) {
        if (zero_ == 1)
            reduces_.push_back({dp_.ireduce_scatter_sum(grads_.data() + range.begin, grads_.data() + mine.begin,
                                                        shard_elems(unit)),
                                {}});
        else
            reduces_.push_back({dp_.iall_reduce_sum(grads_.data() + range.begin, range.size()), {}});
        return;
    }
    convert_from_f32(grads16_.data() + range.begin, rt_, grads_.data() + range.begin, range.size());
    if (zero_ == 1)
        reduces_.push_back({dp_.ireduce_scatter_sum(grads16_.data() + range.begin, grads16_.data() + mine.begin,
                                                    shard_elems(unit), rt_),
                            mine});
    else
        reduces_.push_back({dp_.iall_reduce_sum(grads16_.data() + range.begin, range.size(), rt_), mine});
}

void DataParallel::end_pass(int chunk, bool forward) {
    if (forward || zero_ < 2) return;
    for (auto& s : grad_slots_) finish_grad_slot(*s);
}

void DataParallel::finish_step() {
    double t0 = now_s();
    for (auto& r : reduces_) r.req.wait();
    exposed_s_ += now_s() - t0;
    for (auto& r : reduces_)
        if (r.back.size()) convert_to_f32(grads_.data() + r.back.begin, grads16_.data() + r.back.begin, rt_, r.back.size());
    reduces_.clear();
}

void DataParallel::sum_tied_grads(comm::Group& g) {
    if (wte_unit_ < 0) return;
    // this rank's part of a wte unit's gradient: the whole unit (stage 0) or its slice
    auto part = [&](int unit) -> std::pair<float*, size_t> {
        const model::Unit& u = units_[size_t(unit)];
        if (zero_ == 0) return {grads_.data() + u.offset, u.numel};
        const optim::Range r = shard(unit);
        return {zero_ == 1 ? grads_.data() + r.begin : grad_shards_.data() + shard_offset(unit), r.size()};
    };
    // the embedding's wte and the head's tied copy on this one rank (ZBV's first rank): sum here
    if (local_copy_unit_ >= 0) {
        const std::pair<float*, size_t> mine = part(wte_unit_);  // (no structured bindings: OpenMP captures them)
        float *a = mine.first, *b = part(local_copy_unit_).first;
        const size_t n = mine.second;
#pragma omp parallel for simd schedule(static)
        for (size_t i = 0; i < n; i++) b[i] = a[i] = a[i] + b[i];
        return;
    }
    if (g.size() == 1) return;
    const std::pair<float*, size_t> mine = part(wte_unit_);
    g.all_reduce_sum(mine.first, mine.second);
}

double DataParallel::grad_norm_sq_local() const {
    const auto& params = part_.layout().params;
    double s = 0;
    for (size_t u = 0; u < units_.size(); u++) {
        const optim::Range r = shard(int(u));
        const float* g = zero_ < 2 ? grads_.data() + r.begin : grad_shards_.data() + shard_offset(int(u));
        for (int i = 0; i < units_[u].num_params; i++) {
            const model::ParamSpec& p = params[size_t(units_[u].first_param + i)];
            const size_t b = std::max(p.offset, r.begin), e = std::min(p.offset + p.numel, r.end);
            if (b < e && p.counted()) s += kernels::sum_squares(g + (b - r.begin), e - b);
        }
    }
    return s;
}

std::vector<optim::Range> DataParallel::owned_ranges() const {
    if (zero_ == 0) return {{0, part_.layout().total}};
    std::vector<optim::Range> r;
    for (size_t u = 0; u < units_.size(); u++) r.push_back(shard(int(u)));
    return r;
}

std::vector<float*> DataParallel::owned_params() {
    if (zero_ == 0) return {master_.data()};
    std::vector<float*> p;
    for (size_t u = 0; u < units_.size(); u++) p.push_back(master_slice(int(u)));
    return p;
}

std::vector<const float*> DataParallel::owned_grads() {
    if (zero_ == 0) return {grads_.data()};
    std::vector<const float*> g;
    for (size_t u = 0; u < units_.size(); u++)
        g.push_back(zero_ < 2 ? grads_.data() + shard(int(u)).begin : grad_shards_.data() + shard_offset(int(u)));
    return g;
}

void DataParallel::after_step() {
    if (pt_ != DType::F32) {
        if (zero_ == 0) {
            convert_from_f32(model16_.data(), pt_, master_.data(), master_.size());
            return;
        }
        for (size_t u = 0; u < units_.size(); u++) round_to_model(int(u));
        if (zero_ == 3) return;
        // stages 1-2: every rank's rounded slices to every rank, 16 bits each
        for (size_t u = 0; u < units_.size(); u++) {
            const optim::Range r = shard(int(u));
            pending_.push_back(dp_.iall_gather_bytes(model16_.data() + r.begin, model16_.data() + units_[u].offset,
                                                     shard_elems(int(u)) * dtype_bytes(pt_)));
        }
    } else {
        if (zero_ != 1 && zero_ != 2) return;
        for (size_t u = 0; u < units_.size(); u++) {
            optim::Range r = shard(int(u));
            pending_.push_back(
                dp_.iall_gather(master_.data() + r.begin, master_.data() + units_[u].offset, shard_elems(int(u))));
        }
    }
    double t0 = now_s();
    for (auto& r : pending_) r.wait();  // nothing to overlap with: the next step needs the parameters
    exposed_s_ += now_s() - t0;
    pending_.clear();
}

}  // namespace shardlm::parallel
