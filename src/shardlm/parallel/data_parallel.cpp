#include "shardlm/parallel/data_parallel.h"

#include <algorithm>
#include <cstdio>
#include <cstring>

#include "shardlm/core/check.h"
#include "shardlm/core/timer.h"
#include "shardlm/kernels/optimizer_kernels.h"

namespace shardlm::parallel {

struct DataParallel::Slot {
    AlignedBuffer<float> buf;      // a unit's parameters (stage 3) or gradient (stages 2-3)
    AlignedBuffer<float> scratch;  // grad slots: this rank's reduce-scattered slice
    int unit = -1;
    bool first = true;             // grad slots: first micro-batch of the step (copy, not add)
    uint64_t used = 0;             // when it was last handed out (least recently used is replaced)
    comm::Request req;
};

DataParallel::DataParallel(comm::Group& dp, model::ModelPart& part, int zero, double bucket_mb, bool single_stage)
    : dp_(dp), part_(part), units_(part.layout().units), zero_(zero), single_stage_(single_stage) {
    SHARDLM_CHECK(zero >= 0 && zero <= 3, "--zero must be 0, 1, 2 or 3 (got ", zero, ")");
    SHARDLM_CHECK(bucket_mb > 0, "--bucket-mb must be > 0 (got ", bucket_mb, ")");
    bucket_elems_ = size_t(bucket_mb * 1024 * 1024 / sizeof(float));
    const model::Layout& layout = part.layout();
    const size_t total = layout.total, n = size_t(dp.size());
    wte_unit_ = layout.unit_index("wte");
    size_t max_unit = 0, max_shard = 0, off = 0;
    for (size_t u = 0; u < units_.size(); u++) {
        SHARDLM_CHECK(units_[u].numel % (16 * n) == 0, "unit ", units_[u].name, " (", units_[u].numel,
                      " floats) is not padded to a multiple of 16 x dp = ", 16 * n,
                      ": build the model part with unit_multiple = dp");
        shard_off_.push_back(off);
        off += units_[u].numel / n;
        if (int(u) != wte_unit_) max_unit = std::max(max_unit, units_[u].numel);
        max_shard = std::max(max_shard, units_[u].numel / n);
    }
    if (zero_ < 3) params_.resize(total);
    else param_shards_.resize(total / n);
    if (zero_ < 2) grads_.resize(total);
    else grad_shards_.resize(total / n);
    const size_t wte_numel = wte_unit_ >= 0 ? units_[size_t(wte_unit_)].numel : 0;
    auto make_slots = [&](std::vector<std::unique_ptr<Slot>>& slots, bool with_scratch) {
        slots.resize(3);
        for (size_t i = 0; i < 3; i++) {
            slots[i] = std::make_unique<Slot>();
            slots[i]->buf.resize(i == 0 ? wte_numel : max_unit);
            if (with_scratch) slots[i]->scratch.resize(i == 0 ? wte_numel / n : max_shard);
        }
    };
    if (zero_ == 3) make_slots(param_slots_, false);
    if (zero_ >= 2) make_slots(grad_slots_, true);
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
    part_.bind(zero_ < 3 ? params_.data() : nullptr, zero_ < 2 ? grads_.data() : nullptr);
}

DataParallel::~DataParallel() {
    for (auto& r : pending_) r.wait();
    for (auto& s : param_slots_) s->req.wait();
    for (auto& s : grad_slots_) s->req.wait();
}

optim::Range DataParallel::shard(int unit) const {
    const model::Unit& u = units_[size_t(unit)];
    size_t s = u.numel / size_t(dp_.size());
    return {u.offset + s * size_t(dp_.rank()), u.offset + s * size_t(dp_.rank() + 1)};
}

std::vector<std::pair<model::FlatRange, float*>> DataParallel::param_storage() {
    if (zero_ < 3) return {{model::FlatRange{0, part_.layout().total}, params_.data()}};
    std::vector<std::pair<model::FlatRange, float*>> out;
    for (size_t u = 0; u < units_.size(); u++) {
        optim::Range r = shard(int(u));
        out.push_back({model::FlatRange{r.begin, r.end}, param_shards_.data() + shard_offset(int(u))});
    }
    return out;
}

std::vector<DataParallel::Slice> DataParallel::slices() const {
    std::vector<Slice> out;
    for (size_t u = 0; u < units_.size(); u++) {
        const optim::Range r = shard(int(u));
        const float* p = zero_ < 3 ? params_.data() + r.begin : param_shards_.data() + shard_offset(int(u));
        out.push_back({model::FlatRange{r.begin, r.end}, p, zero_ == 0 ? r.begin : shard_offset(int(u))});
    }
    return out;
}

void DataParallel::gather_params(float* out) {
    if (zero_ < 3) {
        std::memcpy(out, params_.data(), params_.bytes());
        return;
    }
    for (size_t u = 0; u < units_.size(); u++)
        dp_.all_gather(param_shards_.data() + shard_offset(int(u)), out + units_[u].offset, shard_elems(int(u)));
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
    s.req = dp_.iall_gather(param_shards_.data() + shard_offset(unit), s.buf.data(), shard_elems(unit));
}

float* DataParallel::gathered(int unit) {
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
    float* p = gathered(unit);
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
    size_t n = shard_elems(s.unit);
    if (s.first) {
        std::memcpy(dst, s.scratch.data(), n * sizeof(float));
    } else {
        const float* src = s.scratch.data();
#pragma omp parallel for simd schedule(static)
        for (size_t i = 0; i < n; i++) dst[i] += src[i];
    }
    s.unit = -1;
}

void DataParallel::before_backward(int unit, int next) {
    float* p = nullptr;
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
        g = s.buf.data();
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
            if (pre_reduce_) pre_reduce_(unit, s.buf.data());
            s.req = dp_.ireduce_scatter_sum(s.buf.data(), s.scratch.data(), shard_elems(unit));
            return;
        }
        fail("ZeRO-", zero_, ": no gradient buffer for unit ", u.name);
    }
    if (!last_micro()) return;  // stages 0-1 reduce once, after the last micro-batch
    if (pre_reduce_) pre_reduce_(unit, grads_.data() + u.offset);
    if (zero_ == 1) {
        optim::Range r = shard(unit);
        pending_.push_back(dp_.ireduce_scatter_sum(grads_.data() + u.offset, grads_.data() + r.begin, shard_elems(unit)));
        return;
    }
    // stage 0: all-reduce the bucket this unit completes, if any
    if (int b = closes_bucket_[size_t(unit)]; b >= 0)
        pending_.push_back(dp_.iall_reduce_sum(grads_.data() + buckets_[size_t(b)].begin, buckets_[size_t(b)].size()));
}

void DataParallel::end_pass(int chunk, bool forward) {
    if (forward || zero_ < 2) return;
    for (auto& s : grad_slots_) finish_grad_slot(*s);
}

void DataParallel::finish_step() {
    double t0 = now_s();
    for (auto& r : pending_) r.wait();
    exposed_s_ += now_s() - t0;
    pending_.clear();
}

void DataParallel::sum_tied_grads(comm::Group& g) {
    if (g.size() == 1 || wte_unit_ < 0) return;
    const optim::Range r = shard(wte_unit_);
    if (zero_ == 0) {
        const model::Unit& u = units_[size_t(wte_unit_)];
        g.all_reduce_sum(grads_.data() + u.offset, u.numel);
    } else if (zero_ == 1) {
        g.all_reduce_sum(grads_.data() + r.begin, r.size());
    } else {
        g.all_reduce_sum(grad_shards_.data() + shard_offset(wte_unit_), r.size());
    }
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
    if (zero_ == 0) return {params_.data()};
    std::vector<float*> p;
    for (size_t u = 0; u < units_.size(); u++)
        p.push_back(zero_ < 3 ? params_.data() + shard(int(u)).begin : param_shards_.data() + shard_offset(int(u)));
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
    if (zero_ != 1 && zero_ != 2) return;
    for (size_t u = 0; u < units_.size(); u++) {
        optim::Range r = shard(int(u));
        pending_.push_back(dp_.iall_gather(params_.data() + r.begin, params_.data() + units_[u].offset, shard_elems(int(u))));
    }
    double t0 = now_s();
    for (auto& r : pending_) r.wait();  // nothing to overlap with: the next step needs the parameters
    exposed_s_ += now_s() - t0;
    pending_.clear();
}

// ---- reports --------------------------------------------------------------------------------------

MemoryReport DataParallel::memory(const optim::Optimizer& opt) const {
    MemoryReport m;
    m.params = params_.bytes() + param_shards_.bytes();
    m.grads = grads_.bytes() + grad_shards_.bytes();
    m.optimizer = opt.state_bytes();
    m.activations = part_.activation_bytes();
    for (const auto& s : param_slots_) m.comm_buffers += s->buf.bytes() + s->scratch.bytes();
    for (const auto& s : grad_slots_) m.comm_buffers += s->buf.bytes() + s->scratch.bytes();
    return m;
}

std::string DataParallel::memory_report(const optim::Optimizer& opt) const {
    const MemoryReport m = memory(opt);
    const double psi = double(part_.layout().total), n = dp_.size();
    // optimiser state bytes per parameter: SGD 0, momentum/AdaGrad 4, Adam(W) 8
    const double k = opt.owned_elems() ? double(opt.state_bytes()) / double(opt.owned_elems()) : 0.0;
    double fp = zero_ < 3 ? 4 * psi : 4 * psi / n;
    double fg = zero_ < 2 ? 4 * psi : 4 * psi / n;
    double fo = zero_ == 0 ? k * psi : k * psi / n;
    const char* formula[] = {"4P + 4P + kP", "4P + 4P + kP/N", "4P + (4P + kP)/N", "(4P + 4P + kP)/N"};
    char buf[2048];
    auto mib = [](double b) { return b / (1024.0 * 1024.0); };
    std::snprintf(buf, sizeof(buf),
                  "  ZeRO-%d over %d data-parallel ranks (fp32: no separate master copy; k = %.0f bytes of optimiser "
                  "state per parameter; P = %.0f elements of this rank's part, incl. padding)\n"
                  "  %-22s %12s %12s\n"
                  "  %-22s %12.2f %12.2f\n  %-22s %12.2f %12.2f\n  %-22s %12.2f %12.2f\n  %-22s %12.2f %12.2f\n"
                  "  %-22s %12.2f %12s\n  %-22s %12.2f %12.2f   formula %s\n",
                  zero_, dp_.size(), k, psi, "MiB", "allocated", "formula", "parameters", mib(double(m.params)),
                  mib(fp), "gradients", mib(double(m.grads)), mib(fg), "master weights", mib(double(m.master)), 0.0,
                  "optimizer state", mib(double(m.optimizer)), mib(fo), "communication buffers",
                  mib(double(m.comm_buffers)), "-", "model states total",
                  mib(double(m.params + m.grads + m.master + m.optimizer)), mib(fp + fg + fo), formula[zero_]);
    return buf;
}

std::array<size_t, 3> DataParallel::expected_step_bytes(int micro) const {
    const int n = dp_.size();
    std::array<size_t, 3> b{0, 0, 0};  // all-reduce, reduce-scatter, all-gather
    auto rs = [&](size_t elems) { return comm::Group::ring_bytes_rank(comm::OpKind::ReduceScatter, elems, 4, n, dp_.rank()); };
    auto ag = [&](size_t elems) { return comm::Group::ring_bytes_rank(comm::OpKind::AllGather, elems, 4, n, dp_.rank()); };
    if (zero_ == 0) {
        for (const optim::Range& r : buckets_)
            b[0] += comm::Group::ring_bytes_rank(comm::OpKind::AllReduce, r.size(), 4, n, dp_.rank());
        return b;
    }
    // ZeRO-3 with one stage: the backward starts with what the forward left gathered: wte (its own
    // slot) and the last two other units (the last block and the head).
    std::vector<bool> resident(units_.size(), false);
    if (single_stage_) {
        int seen = 0;
        for (size_t u = units_.size(); u-- > 0;) {
            if (int(u) == wte_unit_) resident[u] = true;
            else if (seen < 2) resident[u] = true, seen++;
        }
    }
    for (size_t u = 0; u < units_.size(); u++) {
        const size_t e = units_[u].numel;
        b[1] += rs(e) * size_t(zero_ == 1 ? 1 : micro);
        if (zero_ < 3) {
            b[2] += ag(e);
        } else {
            b[2] += ag(e) * size_t(micro);                   // forward
            if (!resident[u]) b[2] += ag(e) * size_t(micro);  // backward
        }
    }
    return b;
}

}  // namespace shardlm::parallel
