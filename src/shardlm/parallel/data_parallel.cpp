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
    comm::Request req;
};

DataParallel::DataParallel(comm::Group& dp, model::Gpt& gpt, int zero, double bucket_mb)
    : dp_(dp), gpt_(gpt), units_(gpt.layout().units), zero_(zero) {
    SHARDLM_CHECK(zero >= 0 && zero <= 3, "--zero must be 0, 1, 2 or 3 (got ", zero, ")");
    SHARDLM_CHECK(bucket_mb > 0, "--bucket-mb must be > 0 (got ", bucket_mb, ")");
    bucket_elems_ = size_t(bucket_mb * 1024 * 1024 / sizeof(float));
    const size_t total = gpt.layout().total, n = size_t(dp.size());
    size_t max_unit = 0, max_shard = 0, off = 0;
    for (size_t u = 0; u < units_.size(); u++) {
        SHARDLM_CHECK(units_[u].numel % (16 * n) == 0, "unit ", units_[u].name, " (", units_[u].numel,
                      " floats) is not padded to a multiple of 16 x dp = ", 16 * n,
                      ": build the model with unit_multiple = dp");
        shard_off_.push_back(off);
        off += units_[u].numel / n;
        if (u > 0) max_unit = std::max(max_unit, units_[u].numel);
        max_shard = std::max(max_shard, units_[u].numel / n);
    }
    if (zero_ < 3) params_.resize(total);
    else param_shards_.resize(total / n);
    if (zero_ < 2) grads_.resize(total);
    else grad_shards_.resize(total / n);
    if (zero_ == 3) {
        // slot 0: the embedding (tied to the head); slots 1, 2: the other units, alternating
        param_slots_.resize(3);
        for (size_t i = 0; i < 3; i++) {
            param_slots_[i] = std::make_unique<Slot>();
            param_slots_[i]->buf.resize(i == 0 ? units_[0].numel : max_unit);
        }
    }
    if (zero_ >= 2) {
        grad_slots_.resize(3);
        for (size_t i = 0; i < 3; i++) {
            grad_slots_[i] = std::make_unique<Slot>();
            grad_slots_[i]->buf.resize(i == 0 ? units_[0].numel : max_unit);
            grad_slots_[i]->scratch.resize(i == 0 ? units_[0].numel / n : max_shard);
        }
    }
    param_slot_of_.assign(units_.size(), -1);
    // ZeRO-0 buckets: units finish in descending memory order (head, last block, ..., embedding), so a
    // bucket is one contiguous range, closed by its lowest unit once it reaches bucket_elems_.
    closes_bucket_.assign(units_.size(), -1);
    for (size_t lo = 0, hi = 0, u = units_.size(); u-- > 0;) {
        if (hi == lo) hi = units_[u].offset + units_[u].numel;
        lo = units_[u].offset;
        if (hi - lo >= bucket_elems_ || u == 0) {
            closes_bucket_[u] = int(buckets_.size());
            buckets_.push_back({lo, hi});
            lo = hi = 0;
        }
    }
    // alignment padding inside each unit (local coordinates)
    const auto& params = gpt.layout().params;
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
    gpt_.bind(zero_ < 3 ? params_.data() : nullptr, zero_ < 2 ? grads_.data() : nullptr);
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

void DataParallel::load_params(const float* full) {
    if (zero_ < 3) {
        std::memcpy(params_.data(), full, params_.bytes());
        return;
    }
    for (size_t u = 0; u < units_.size(); u++)
        std::memcpy(param_shards_.data() + shard_offset(int(u)), full + shard(int(u)).begin,
                    shard_elems(int(u)) * sizeof(float));
    param_slot_of_.assign(units_.size(), -1);
    for (auto& s : param_slots_) s->unit = -1;
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

void DataParallel::prefetch(int unit) {
    if (param_slot_of_[size_t(unit)] >= 0) return;
    int si = unit == 0 ? 0 : 1 + unit % 2;
    Slot& s = *param_slots_[size_t(si)];
    s.req.wait();
    if (s.unit >= 0) param_slot_of_[size_t(s.unit)] = -1;
    s.unit = unit;
    param_slot_of_[size_t(unit)] = si;
    s.req = dp_.iall_gather(param_shards_.data() + shard_offset(unit), s.buf.data(), shard_elems(unit));
}

float* DataParallel::gathered(int unit) {
    prefetch(unit);  // no-op if it is there or on its way
    Slot& s = *param_slots_[size_t(param_slot_of_[size_t(unit)])];
    double t0 = now_s();
    s.req.wait();
    exposed_s_ += now_s() - t0;
    return s.buf.data();
}

void DataParallel::begin_micro_batch(int index, int count) {
    micro_index_ = index;
    micro_count_ = count;
    if (zero_ == 3) {  // every micro-batch gathers afresh (the parameters do not change within a step,
                       // but keeping this simple makes the communication volume a plain formula)
        for (auto& s : param_slots_) {
            s->req.wait();
            s->unit = -1;
        }
        param_slot_of_.assign(units_.size(), -1);
    }
}

void DataParallel::before_forward(int unit) {
    if (zero_ < 3) return;
    gpt_.bind_unit(unit, gathered(unit), nullptr);
    if (unit + 1 < int(units_.size())) prefetch(unit + 1);
}

bool DataParallel::backward_accumulates() const {
    // stages 0-1 accumulate micro-batches in the full gradient; 2-3 write each micro-batch into a
    // fresh unit buffer and accumulate in the shard after reduce-scatter.
    return zero_ < 2 && micro_index_ > 0;
}

// ---- gradients ----------------------------------------------------------------------------------

DataParallel::Slot& DataParallel::grad_slot(int unit) {
    Slot& s = *grad_slots_[size_t(unit == 0 ? 0 : 1 + unit % 2)];
    if (s.req.pending()) finish_grad_slot(s);
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

void DataParallel::before_backward(int unit) {
    float* p = nullptr;
    if (zero_ == 3) {
        p = gathered(unit);
        // prefetch the next unit in backward order (head, last block, ..., first block)
        if (unit >= 2) prefetch(unit - 1);
    }
    float* g = nullptr;
    if (zero_ >= 2) {
        Slot& s = grad_slot(unit);
        s.unit = unit;
        s.first = micro_index_ == 0;
        g = s.buf.data();
        // backward writes every parameter's gradient (=); the gaps between them must be zero too
        for (const auto& [b, e] : gaps_[size_t(unit)]) std::memset(g + b, 0, (e - b) * sizeof(float));
    }
    if (p || g) gpt_.bind_unit(unit, p, g);
}

void DataParallel::after_backward(int unit) {
    const model::Unit& u = units_[size_t(unit)];
    if (zero_ >= 2) {
        Slot& s = *grad_slots_[size_t(unit == 0 ? 0 : 1 + unit % 2)];
        s.req = dp_.ireduce_scatter_sum(s.buf.data(), s.scratch.data(), shard_elems(unit));
        return;
    }
    if (!last_micro()) return;  // stages 0-1 reduce once, after the last micro-batch
    if (zero_ == 1) {
        optim::Range r = shard(unit);
        pending_.push_back(dp_.ireduce_scatter_sum(grads_.data() + u.offset, grads_.data() + r.begin, shard_elems(unit)));
        return;
    }
    // stage 0: all-reduce the bucket this unit completes, if any
    if (int b = closes_bucket_[size_t(unit)]; b >= 0)
        pending_.push_back(dp_.iall_reduce_sum(grads_.data() + buckets_[size_t(b)].begin, buckets_[size_t(b)].size()));
}

void DataParallel::end_backward() {
    if (zero_ >= 2) {
        for (auto& s : grad_slots_) finish_grad_slot(*s);
        return;
    }
    if (!last_micro()) return;
    double t0 = now_s();
    for (auto& r : pending_) r.wait();
    exposed_s_ += now_s() - t0;
    pending_.clear();
}

double DataParallel::grad_norm_sq() {
    double s = 0;
    for (size_t u = 0; u < units_.size(); u++) {
        const float* g = zero_ < 2 ? grads_.data() + shard(int(u)).begin : grad_shards_.data() + shard_offset(int(u));
        s += kernels::sum_squares(g, shard_elems(int(u)));
    }
    dp_.all_reduce_sum(&s, 1);
    return s;
}

std::vector<optim::Range> DataParallel::owned_ranges() const {
    if (zero_ == 0) return {{0, gpt_.layout().total}};
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
    m.activations = gpt_.activation_bytes();
    for (const auto& s : param_slots_) m.comm_buffers += s->buf.bytes() + s->scratch.bytes();
    for (const auto& s : grad_slots_) m.comm_buffers += s->buf.bytes() + s->scratch.bytes();
    return m;
}

std::string DataParallel::memory_report(const optim::Optimizer& opt) const {
    const MemoryReport m = memory(opt);
    const double psi = double(gpt_.layout().total), n = dp_.size();
    // optimiser state bytes per parameter: SGD 0, momentum/AdaGrad 4, Adam(W) 8
    const double k = opt.owned_elems() ? double(opt.state_bytes()) / double(opt.owned_elems()) : 0.0;
    double fp = zero_ < 3 ? 4 * psi : 4 * psi / n;
    double fg = zero_ < 2 ? 4 * psi : 4 * psi / n;
    double fo = zero_ == 0 ? k * psi : k * psi / n;
    const char* formula[] = {"4P + 4P + kP", "4P + 4P + kP/N", "4P + (4P + kP)/N", "(4P + 4P + kP)/N"};
    char buf[2048];
    auto mib = [](double b) { return b / (1024.0 * 1024.0); };
    std::snprintf(buf, sizeof(buf),
                  "memory report, rank %d of %d, ZeRO-%d (fp32: no separate master copy; k = %.0f bytes of optimiser "
                  "state per parameter; P = %.0f elements incl. padding)\n"
                  "  %-22s %12s %12s\n"
                  "  %-22s %12.2f %12.2f\n  %-22s %12.2f %12.2f\n  %-22s %12.2f %12.2f\n  %-22s %12.2f %12.2f\n"
                  "  %-22s %12.2f %12s\n  %-22s %12.2f %12s\n  %-22s %12.2f %12.2f   formula %s\n",
                  dp_.rank(), dp_.size(), zero_, k, psi, "MiB", "allocated", "formula", "parameters", mib(double(m.params)),
                  mib(fp), "gradients", mib(double(m.grads)), mib(fg), "master weights", mib(double(m.master)), 0.0,
                  "optimizer state", mib(double(m.optimizer)), mib(fo), "activations", mib(double(m.activations)), "-",
                  "communication buffers", mib(double(m.comm_buffers)), "-", "model states total",
                  mib(double(m.params + m.grads + m.master + m.optimizer)), mib(fp + fg + fo), formula[zero_]);
    return buf;
}

std::array<size_t, 3> DataParallel::expected_step_bytes(int micro) const {
    const int n = dp_.size();
    std::array<size_t, 3> b{0, 0, 0};  // all-reduce, reduce-scatter, all-gather
    auto rs = [&](size_t elems) { return comm::Group::ring_bytes_rank(comm::OpKind::ReduceScatter, elems, 4, n, dp_.rank()); };
    auto ag = [&](size_t elems) { return comm::Group::ring_bytes_rank(comm::OpKind::AllGather, elems, 4, n, dp_.rank()); };
    const int U = int(units_.size()), L = U - 2;
    // every step also all-reduces two doubles: the loss and the squared gradient norm
    b[0] += 2 * comm::Group::ring_bytes_rank(comm::OpKind::AllReduce, 1, 8, n, dp_.rank());
    if (zero_ == 0) {
        for (const optim::Range& r : buckets_)
            b[0] += comm::Group::ring_bytes_rank(comm::OpKind::AllReduce, r.size(), 4, n, dp_.rank());
        return b;
    }
    for (int u = 0; u < U; u++) {
        size_t e = units_[size_t(u)].numel;
        b[1] += rs(e) * size_t(zero_ == 1 ? 1 : micro);
        if (zero_ < 3) b[2] += ag(e);
        else {
            // forward gathers every unit; backward regathers the blocks except the last one (still
            // resident with the head from the end of forward); the embedding stays gathered.
            b[2] += ag(e) * size_t(micro);
            if (u >= 1 && u <= L - 1) b[2] += ag(e) * size_t(micro);
        }
    }
    return b;
}

std::string DataParallel::comm_report(int micro) const {
    const comm::CommStats& st = dp_.stats();
    auto exp = expected_step_bytes(micro);
    const comm::OpKind kinds[3] = {comm::OpKind::AllReduce, comm::OpKind::ReduceScatter, comm::OpKind::AllGather};
    std::string out = "communication, rank " + std::to_string(dp_.rank()) + " of " + std::to_string(dp_.size()) +
                      " (bytes sent by this rank in the last step; theory: ring all-reduce 2(N-1)/N B, "
                      "reduce-scatter and all-gather (N-1)/N B each, for the buffers each ZeRO stage moves, plus "
                      "two 8-byte all-reduces for the loss and the gradient norm)\n";
    char line[256];
    for (int i = 0; i < 3; i++) {
        const comm::OpStats& o = st[kinds[i]];
        std::snprintf(line, sizeof(line), "  %-15s calls %5llu  sent %14llu  theory %14zu  busy %.3f s\n",
                      std::string(comm::op_name(kinds[i])).c_str(), (unsigned long long)o.calls,
                      (unsigned long long)o.bytes_sent, exp[size_t(i)], o.busy_seconds);
        out += line;
    }
    double total = st[kinds[0]].busy_seconds + st[kinds[1]].busy_seconds + st[kinds[2]].busy_seconds;
    std::snprintf(line, sizeof(line), "  communication busy %.3f s, training thread waited %.3f s: %.0f %% hidden behind compute\n", total,
                  exposed_s_, total > 0 ? 100.0 * std::max(0.0, 1.0 - exposed_s_ / total) : 0.0);
    out += line;
    return out;
}

}  // namespace shardlm::parallel
