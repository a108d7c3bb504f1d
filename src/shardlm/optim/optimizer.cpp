#include "shardlm/optim/optimizer.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <tuple>

#include "shardlm/core/check.h"
#include "shardlm/cost/memory.h"
#include "shardlm/kernels/optimizer_kernels.h"

namespace shardlm::optim {

Kind parse_kind(const std::string& name) {
    Kind k;
    if (!enum_from_name(kKindNames, name, &k))
        fail("unknown optimizer '", name, "'\n---> HINT: choose one of ", names_list(kKindNames));
    return k;
}

std::string kind_name(Kind k) { return enum_name(kKindNames, k); }

Optimizer::Optimizer(OptimConfig cfg, const model::Layout& layout, std::vector<Range> owned)
    : cfg_(cfg), layout_(layout), owned_(std::move(owned)) {
    cut_pieces();
    const size_t n = owned_elems_;
    switch (cfg_.kind) {
        case Kind::SGD: break;
        case Kind::Momentum:
        case Kind::AdaGrad:
        case Kind::Lion: s0_.resize(n); break;
        case Kind::Adam:
        case Kind::AdamW:
        case Kind::RAdam:
        case Kind::Sophia:
            s0_.resize(n);
            s1_.resize(n);
            break;
        case Kind::Adam8bit: allocate_8bit(); break;
        case Kind::Adafactor: allocate_factored(); break;
    }
}

// The pieces: each owned range intersected with the parameters (ranges ascend), padding skipped.
void Optimizer::cut_pieces() {
    for (const Range& r : owned_) owned_elems_ += r.size();
    size_t state_base = 0, first = 0;
    for (size_t k = 0; k < owned_.size(); k++) {
        const Range r = owned_[k];
        while (first < layout_.params.size() && layout_.params[first].offset + layout_.params[first].numel <= r.begin)
            first++;
        for (size_t pi = first; pi < layout_.params.size() && layout_.params[pi].offset < r.end; pi++) {
            const model::ParamSpec& p = layout_.params[pi];
            Piece pc;
            pc.range = k, pc.param = pi;
            pc.begin = std::max(p.offset, r.begin), pc.end = std::min(p.offset + p.numel, r.end);
            if (pc.begin >= pc.end) continue;
            pc.state = state_base + (pc.begin - r.begin);
            pieces_.push_back(pc);
        }
        state_base += r.size();
    }
}

// 8-bit Adam: small tensors keep fp32 state; the others 8-bit codes in blocks of cfg_.block elements
// (a block never crosses a parameter), each with its absmax; every block starts as zeros.
void Optimizer::allocate_8bit() {
    SHARDLM_CHECK(cfg_.block > 0, "adam8bit: block size ", cfg_.block, " must be > 0");
    const bool linear = cfg_.code == QuantCode::Linear;
    code_m_.emplace(linear ? kernels::linear_code(true) : kernels::dynamic_code(true));
    code_v_.emplace(linear ? kernels::linear_code(false) : kernels::dynamic_code(false));
    size_t f32 = 0, codes = 0;
    const size_t B = size_t(cfg_.block);
    for (Piece& pc : pieces_) {
        const model::ParamSpec& p = layout_.params[pc.param];
        size_t whole = 1;
        for (int64_t d : p.full_shape) whole *= size_t(d);
        pc.small = whole < kSmallTensor;
        if (pc.small) {
            pc.f32 = f32, f32 += pc.end - pc.begin;
            continue;
        }
        pc.q = codes, codes += pc.end - pc.begin;
        pc.block = blocks_.size();
        for (size_t b = pc.begin; b < pc.end;) {
            const size_t e = std::min(pc.end, p.offset + ((b - p.offset) / B + 1) * B);
            blocks_.push_back({b, e});
            b = e;
        }
        pc.blocks = blocks_.size() - pc.block;
    }
    const size_t blocks = blocks_.size();
    s0_.resize(f32), s1_.resize(f32);
    q0_.resize(codes), q1_.resize(codes);
    a0_.resize(blocks), a1_.resize(blocks);
    // every block starts as zeros: 0's code, absmax 0
    const uint8_t zm = code_m_->nearest(0.0f), zv = code_v_->nearest(0.0f);
    std::fill(q0_.begin(), q0_.end(), zm);
    std::fill(q1_.begin(), q1_.end(), zv);
    scratch_.resize(size_t(std::max(1, omp_get_max_threads())) * 2 * B);
}

// Adafactor: the factored second moment's row and column sums per matrix, the full one for vectors.
void Optimizer::allocate_factored() {
    size_t rc = 0, stat = 0, vec = 0;
    std::vector<char> expert(layout_.params.size(), 0);
    for (const model::Unit& u : layout_.units)
        if (u.kind == model::UnitKind::Experts) std::fill_n(expert.begin() + u.first_param, u.num_params, 1);
    for (const model::ParamSpec& p : layout_.params) {
        Factor f;
        f.expert = expert[factors_.size()];
        f.factored = p.shape.size() >= 2;
        if (f.factored) {
            f.rows = size_t(p.shape[0]), f.cols = p.numel / f.rows;
            f.real_rows = p.hf_rows >= 0 ? std::min(f.rows, size_t(p.hf_rows)) : f.rows;
        } else {
            f.rows = f.real_rows = 1, f.cols = p.numel;
        }
        f.real = f.real_rows * f.cols;
        f.rc = rc, f.stat = stat;
        if (f.factored) rc += f.rows + f.cols, stat += f.rows + f.cols;
        stat += 1;  // the sum of p^2
        rc_expert_.resize(rc, f.expert), stat_expert_.resize(stat, f.expert);
        factors_.push_back(f);
    }
    for (Piece& pc : pieces_)
        if (!factors_[pc.param].factored) pc.f32 = vec, vec += pc.end - pc.begin;
    rc_.resize(rc), rf_.resize(rc);
    stats_.resize(stat), usq_.resize(layout_.params.size());
    s1_.resize(vec);
    if (cfg_.first_moment) s0_.resize(owned_elems_);
}

std::vector<std::pair<std::string, AlignedBuffer<float>*>> Optimizer::state() {
    switch (cfg_.kind) {
        case Kind::SGD: return {};
        case Kind::Momentum: return {{"momentum_buffer", &s0_}};
        case Kind::AdaGrad: return {{"sum", &s0_}};
        case Kind::Lion: return {{"exp_avg", &s0_}};
        case Kind::Adam:
        case Kind::AdamW:
        case Kind::RAdam: return {{"exp_avg", &s0_}, {"exp_avg_sq", &s1_}};
        case Kind::Sophia: return {{"exp_avg", &s0_}, {"hessian", &s1_}};
        case Kind::Adafactor: {
            for (AlignedBuffer<float>* v : {&view0_, &view1_, &view2_})
                if (v->size() != owned_elems_) v->resize(owned_elems_);  // kept: views handed out stay valid
            for (const Piece& pc : pieces_) {
                const Factor& f = factors_[pc.param];
                const size_t i0 = pc.begin - layout_.params[pc.param].offset;
                for (size_t i = i0; i < i0 + (pc.end - pc.begin); i++) {
                    const size_t at = pc.state + (i - i0), r = i / f.cols;
                    if (!f.factored) view0_.data()[at] = s1_.data()[pc.f32 + (i - i0)];
                    else if (r < f.real_rows)
                        view1_.data()[at] = rc_.data()[f.rc + r], view2_.data()[at] = rc_.data()[f.rc + f.rows + i % f.cols];
                }
            }
            std::vector<std::pair<std::string, AlignedBuffer<float>*>> s;
            if (cfg_.first_moment) s.push_back({"exp_avg", &s0_});
            s.push_back({"exp_avg_sq", &view0_});
            s.push_back({"exp_avg_sq_row", &view1_});
            s.push_back({"exp_avg_sq_col", &view2_});
            return s;
        }
        case Kind::Adam8bit: {
            for (AlignedBuffer<float>* v : {&view0_, &view1_})
                if (v->size() != owned_elems_) v->resize(owned_elems_);  // kept: views handed out stay valid
            move_8bit_state(true);
            return {{"exp_avg", &view0_}, {"exp_avg_sq", &view1_}};
        }
    }
    return {};
}

void Optimizer::move_8bit_state(bool to_views) {
    for (const Piece& pc : pieces_) {
        const size_t n = pc.end - pc.begin;
        if (pc.small) {  // fp32 state, copied
            float *state[2] = {s0_.data() + pc.f32, s1_.data() + pc.f32}, *view[2] = {view0_.data() + pc.state, view1_.data() + pc.state};
            for (int i : {0, 1}) std::copy_n(to_views ? state[i] : view[i], n, to_views ? view[i] : state[i]);
            continue;
        }
        for (size_t k = pc.block; k < pc.block + pc.blocks; k++) {
            const auto [b, e] = blocks_[k];
            const size_t at = pc.state + (b - pc.begin), q = pc.q + (b - pc.begin);
            if (to_views) {
                kernels::dequantize_block(q0_.data() + q, e - b, code_m_->code, a0_.data()[k], view0_.data() + at);
                kernels::dequantize_block(q1_.data() + q, e - b, code_v_->code, a1_.data()[k], view1_.data() + at);
            } else {
                a0_.data()[k] = kernels::quantize_block(view0_.data() + at, e - b, *code_m_, q0_.data() + q);
                a1_.data()[k] = kernels::quantize_block(view1_.data() + at, e - b, *code_v_, q1_.data() + q);
            }
        }
    }
}

void Optimizer::state_loaded() {
    if (cfg_.kind == Kind::Adam8bit || cfg_.kind == Kind::Adafactor)
        SHARDLM_CHECK(view0_.size() == owned_elems_, "Optimizer::state_loaded() without state() first");
    if (cfg_.kind == Kind::Adam8bit) move_8bit_state(false);
    if (cfg_.kind == Kind::Adafactor) load_adafactor_state();
    release_state_views();
}

template <class IsExpert>
void Optimizer::sum_over_shards(double* v, size_t n, IsExpert expert) const {
    if (!shard_sum_) return;
    if (!expert_sum_) return shard_sum_(v, n);
    std::vector<double> part[2];  // the rest's entries, the experts'
    for (size_t i = 0; i < n; i++) part[expert(i) ? 1 : 0].push_back(v[i]);
    shard_sum_(part[0].data(), part[0].size());
    expert_sum_(part[1].data(), part[1].size());
    size_t at[2] = {0, 0};
    for (size_t i = 0; i < n; i++) {
        const int k = expert(i) ? 1 : 0;
        v[i] = part[k][at[k]++];
    }
}

void Optimizer::load_adafactor_state() {
    // Vectors: their v. Matrices: every element of row r holds R_r (column c: C_c), the same value
    // wherever it was written; a rank holds only some rows' elements, so sums and counts over the
    // shards give each statistic whole on every rank: sum / count is the value, exactly (n equal
    // floats sum exactly in double for n < 2^29).
    std::vector<double> sums(2 * rc_.size(), 0.0);  // sums, then counts
    for (const Piece& pc : pieces_) {
        const Factor& f = factors_[pc.param];
        const size_t i0 = pc.begin - layout_.params[pc.param].offset;
        for (size_t i = i0; i < i0 + (pc.end - pc.begin); i++) {
            const size_t at = pc.state + (i - i0), r = i / f.cols, c = i % f.cols;
            if (!f.factored) {
                s1_.data()[pc.f32 + (i - i0)] = view0_.data()[at];
            } else if (r < f.real_rows) {
                sums[f.rc + r] += view1_.data()[at], sums[rc_.size() + f.rc + r] += 1;
                sums[f.rc + f.rows + c] += view2_.data()[at], sums[rc_.size() + f.rc + f.rows + c] += 1;
            }
        }
    }
    sum_over_shards(sums.data(), sums.size(), [&](size_t i) { return rc_expert_[i % rc_.size()] != 0; });
    for (size_t k = 0; k < rc_.size(); k++) {
        const double count = sums[rc_.size() + k];
        rc_.data()[k] = count > 0 ? float(sums[k] / count) : 0.0f;
    }
}

void Optimizer::release_state_views() {
    view0_ = AlignedBuffer<float>();
    view1_ = AlignedBuffer<float>();
    view2_ = AlignedBuffer<float>();
}

size_t Optimizer::state_bytes() const {
    return s0_.bytes() + s1_.bytes() + q0_.bytes() + q1_.bytes() + a0_.bytes() + a1_.bytes() + rc_.bytes();
}

double Optimizer::state_bytes_per_param(const OptimConfig& cfg) {
    // the planner's table (cost/memory.h): one count for the engine's memory check and the planner
    const double bytes = cost::optimizer_state_bytes(kind_name(cfg.kind), cfg.block);
    SHARDLM_CHECK(bytes >= 0, "optimiser '", kind_name(cfg.kind), "' has no entry in cost::optimizer_state_bytes");
    return bytes + (cfg.kind == Kind::Adafactor && cfg.first_moment ? 4 : 0);
}

void Optimizer::step(float* params, const float* grads, float lr, float gs) {
    std::vector<float*> p;
    std::vector<const float*> g;
    for (const Range& r : owned_) p.push_back(params + r.begin), g.push_back(grads + r.begin);
    step(p, g, lr, gs);
}

bool Optimizer::step(const std::vector<float*>& params, const std::vector<const float*>& grads, float lr, float gs,
                     const Mirror* mirror) {
    SHARDLM_CHECK(params.size() == owned_.size() && grads.size() == owned_.size(), "Optimizer::step: ",
                  params.size(), " parameter ranges for ", owned_.size(), " owned ranges");
    SHARDLM_CHECK(!mirror || mirror->ranges.size() == owned_.size(), "Optimizer::step: ", mirror ? mirror->ranges.size() : 0,
                  " mirror ranges for ", owned_.size(), " owned ranges");
    step_++;
    if (cfg_.kind == Kind::Adam8bit) return step_adam8bit(params, grads, lr, gs), false;
    if (cfg_.kind == Kind::Adafactor) return step_adafactor(params, grads, lr, gs), false;
    if (cfg_.kind == Kind::Adam || cfg_.kind == Kind::AdamW) {  // every piece in one pass (the threads meet once)
        const bool mirrored = mirror != nullptr;
        std::vector<kernels::AdamSlice> slices;
        for (const Piece& pc : pieces_) {
            const size_t off = pc.begin - owned_[pc.range].begin;
            slices.push_back({params[pc.range] + off, grads[pc.range] + off, s0_.data() + pc.state, s1_.data() + pc.state,
                              pc.end - pc.begin, layout_.params[pc.param].decay ? cfg_.weight_decay : 0.0f,
                              mirrored ? at(mirror->ranges[pc.range], mirror->type, off) : nullptr});
        }
        kernels::adam_update_slices(slices.data(), slices.size(), cfg_.kind == Kind::AdamW, lr, cfg_.beta1, cfg_.beta2, cfg_.eps,
                                    step_, gs, mirror ? mirror->type : DType::BF16);
        return mirrored;
    }
    // the other elementwise rules: every piece in one pass too
    kernels::RuleArgs a;
    a.lr = lr, a.gs = gs, a.beta1 = cfg_.beta1, a.beta2 = cfg_.beta2, a.step = step_;
    switch (cfg_.kind) {
        case Kind::SGD: a.rule = kernels::Rule::SGD; break;
        case Kind::Momentum: a.rule = kernels::Rule::Momentum, a.momentum = cfg_.momentum; break;
        case Kind::AdaGrad: a.rule = kernels::Rule::AdaGrad, a.eps = cfg_.adagrad_eps; break;
        case Kind::RAdam: a.rule = kernels::Rule::RAdam, a.eps = cfg_.eps; break;
        case Kind::Lion: a.rule = kernels::Rule::Lion; break;
        case Kind::Sophia: a.rule = kernels::Rule::Sophia, a.rho_bs = float(double(cfg_.rho) * cfg_.hess_batch); break;
        case Kind::Adam:
        case Kind::AdamW:
        case Kind::Adam8bit:
        case Kind::Adafactor: SHARDLM_CHECK(false, "Optimizer::step: ", kind_name(cfg_.kind), " has its own pass");
    }
    run_rule(a, params, grads);
    return false;  // (only Adam and AdamW write the 16-bit copy in their pass)
}

void Optimizer::update_hessian(const float* grads, float gs) {
    std::vector<const float*> g;
    for (const Range& r : owned_) g.push_back(grads + r.begin);
    update_hessian(g, gs);
}

void Optimizer::update_hessian(const std::vector<const float*>& grads, float gs) {
    SHARDLM_CHECK(cfg_.kind == Kind::Sophia, "update_hessian: --optimizer ", kind_name(cfg_.kind), " keeps no Hessian");
    SHARDLM_CHECK(grads.size() == owned_.size(), "Optimizer::update_hessian: ", grads.size(), " gradient ranges for ",
                  owned_.size(), " owned ranges");
    kernels::RuleArgs a;
    a.rule = kernels::Rule::SophiaHessian, a.beta2 = cfg_.beta2, a.gs = gs;
    run_rule(a, {}, grads);
}

void Optimizer::run_rule(const kernels::RuleArgs& a, const std::vector<float*>& params,
                         const std::vector<const float*>& grads) {
    std::vector<kernels::RuleSlice>& slices = rule_slices_;  // (kept: no allocation each step)
    slices.clear();
    for (const Piece& pc : pieces_) {
        const size_t off = pc.begin - owned_[pc.range].begin;
        slices.push_back({params.empty() ? nullptr : params[pc.range] + off, grads[pc.range] + off,
                          s0_.size() ? s0_.data() + pc.state : nullptr, s1_.size() ? s1_.data() + pc.state : nullptr,
                          pc.end - pc.begin, layout_.params[pc.param].decay ? cfg_.weight_decay : 0.0f});
    }
    kernels::rule_update_slices(a, slices.data(), slices.size());
}

void Optimizer::step_adafactor(const std::vector<float*>& params, const std::vector<const float*>& grads, float lr,
                               float gs) {
    const float eps1 = cfg_.eps, eps2 = OptimConfig::kAdafactorEps2;
    const float beta2t = float(1.0 - std::pow(double(step_), double(cfg_.decay_rate)));
    auto where = [&](const Piece& pc) {  // the piece's parameters and gradients, its first element's index
        const size_t off = pc.begin - owned_[pc.range].begin;
        return std::tuple{params[pc.range] + off, grads[pc.range] + off, pc.begin - layout_.params[pc.param].offset};
    };
    // 1. sums of g^2 along rows and columns, and of p^2, over this rank's pieces (each pass one parallel region over
    // every piece); then over the shards
    std::vector<kernels::AdafactorPiece> pieces(pieces_.size());
    std::vector<std::span<const float>> ws(pieces_.size());
    for (size_t j = 0; j < pieces_.size(); j++) {
        const Piece& pc = pieces_[j];
        const Factor& f = factors_[pc.param];
        const auto [w, g, i0] = where(pc);
        kernels::AdafactorPiece& k = pieces[j];
        k.p = w, k.g = g, k.m = cfg_.first_moment ? s0_.data() + pc.state : nullptr;
        k.i0 = i0, k.n = pc.end - pc.begin, k.factored = f.factored;
        if (f.factored) {
            k.cols = f.cols, k.real_rows = f.real_rows;
            k.row = &stats_[f.stat], k.col = &stats_[f.stat + f.rows];
            k.rf = rf_.data() + f.rc, k.cf = rf_.data() + f.rc + f.rows;
        } else {
            k.cols = k.n, k.real_rows = 1, k.v = s1_.data() + pc.f32;
        }
        ws[j] = {w, k.n};
    }
    std::fill(stats_.begin(), stats_.end(), 0.0);
    kernels::adafactor_square_sums(pieces.data(), pieces.size(), gs);
    std::vector<double> psq(pieces_.size()), usq(pieces_.size());
    kernels::sum_squares(ws.data(), ws.size(), psq.data());
    for (size_t j = 0; j < pieces_.size(); j++) {
        const Factor& f = factors_[pieces_[j].param];
        stats_[f.stat + (f.factored ? f.rows + f.cols : 0)] += psq[j];
    }
    sum_over_shards(stats_.data(), stats_.size(), [&](size_t i) { return stat_expert_[i] != 0; });
    // 2. the matrices' statistics (whole, every rank alike) and their rsqrt factors; each step size
    std::vector<float> lr_of(factors_.size());
    for (size_t pi = 0; pi < factors_.size(); pi++) {
        const Factor& f = factors_[pi];
        const double psq = stats_[f.stat + (f.factored ? f.rows + f.cols : 0)];
        float step_size = cfg_.relative_step ? float(std::min(1e-2, 1.0 / std::sqrt(double(step_)))) : lr;
        if (cfg_.scale_parameter) step_size = std::max(eps2, float(std::sqrt(psq / double(f.real)))) * step_size;
        lr_of[pi] = step_size;
        if (!f.factored) continue;
        float* R = rc_.data() + f.rc;
        float* C = R + f.rows;
        double rsum = 0;
        for (size_t r = 0; r < f.real_rows; r++) {
            R[r] = beta2t * R[r] + (1.0f - beta2t) * float(stats_[f.stat + r] / double(f.cols) + eps1);
            rsum += R[r];
        }
        for (size_t c = 0; c < f.cols; c++)
            C[c] = beta2t * C[c] + (1.0f - beta2t) * float(stats_[f.stat + f.rows + c] / double(f.real_rows) + eps1);
        const float rmean = float(rsum / double(f.real_rows));
        float* rf = rf_.data() + f.rc;
        for (size_t r = 0; r < f.real_rows; r++) rf[r] = 1.0f / std::sqrt(R[r] / rmean);
        for (size_t c = 0; c < f.cols; c++) rf[f.rows + c] = 1.0f / std::sqrt(C[c]);
    }
    // 3. the update's sum of squares (the vectors' v updated on the way), over the shards; 4. apply it
    std::fill(usq_.begin(), usq_.end(), 0.0);
    kernels::adafactor_update(pieces.data(), pieces.size(), gs, beta2t, eps1, false, usq.data());
    for (size_t j = 0; j < pieces_.size(); j++) usq_[pieces_[j].param] += usq[j];
    sum_over_shards(usq_.data(), usq_.size(), [&](size_t i) { return factors_[i].expert; });
    for (size_t j = 0; j < pieces_.size(); j++) {
        const Piece& pc = pieces_[j];
        const Factor& f = factors_[pc.param];
        kernels::AdafactorApply& a = pieces[j].apply;
        a.lr = lr_of[pc.param];
        a.wd = layout_.params[pc.param].decay ? cfg_.weight_decay : 0.0f;
        const double rms = std::sqrt(usq_[pc.param] / double(f.real));
        a.clip_div = cfg_.clip_threshold > 0 ? std::max(1.0f, float(rms) / cfg_.clip_threshold) : 1.0f;
        a.beta1 = cfg_.beta1, a.first_moment = cfg_.first_moment;
    }
    kernels::adafactor_update(pieces.data(), pieces.size(), gs, beta2t, eps1, true, nullptr);
}

void Optimizer::step_adam8bit(const std::vector<float*>& params, const std::vector<const float*>& grads, float lr,
                              float gs) {
    // Two passes, each over every piece (the threads meet twice a step, not once a tensor): the small tensors'
    // fp32 AdamW, then the 8-bit blocks of the others
    struct Block {
        float* w;
        const float* g;
        size_t k, q;  // the block's index in blocks_, its codes' offset in q0_/q1_
        float wd;
    };
    std::vector<kernels::AdamSlice> small;
    std::vector<Block> blocks;
    blocks.reserve(blocks_.size());
    for (const Piece& pc : pieces_) {
        const size_t off = pc.begin - owned_[pc.range].begin;
        float* w = params[pc.range] + off;
        const float* g = grads[pc.range] + off;
        const float wd = layout_.params[pc.param].decay ? cfg_.weight_decay : 0.0f;
        if (pc.small) {
            small.push_back({w, g, s0_.data() + pc.f32, s1_.data() + pc.f32, pc.end - pc.begin, wd});
            continue;
        }
        for (size_t k = pc.block; k < pc.block + pc.blocks; k++) {
            const size_t o = blocks_[k].begin - pc.begin;
            blocks.push_back({w + o, g + o, k, pc.q + o, wd});
        }
    }
    kernels::adam_update_slices(small.data(), small.size(), true, lr, cfg_.beta1, cfg_.beta2, cfg_.eps, step_, gs);
    const int threads = int(scratch_.size() / (2 * size_t(cfg_.block)));  // one scratch each
    const long n_blocks = long(blocks.size());
#pragma omp parallel for schedule(dynamic, 1) num_threads(threads)
    for (long t = 0; t < n_blocks; t++) {
        const Block& b = blocks[size_t(t)];
        const size_t k = b.k;
        float* scratch = scratch_.data() + size_t(omp_get_thread_num()) * 2 * size_t(cfg_.block);
        kernels::adam8bit_block(b.w, b.g, q0_.data() + b.q, q1_.data() + b.q, a0_.data() + k, a1_.data() + k,
                                blocks_[k].size(), *code_m_, *code_v_, lr, cfg_.beta1, cfg_.beta2, cfg_.eps, b.wd, step_, gs,
                                scratch);
    }
}

float LrSchedule::at(int step) const {
    if (kind == LrKind::Constant) return lr;
    if (step < warmup) return lr * float(step + 1) / float(warmup);
    if (step >= total) return lr_min;
    double progress = double(step - warmup) / double(std::max(1, total - warmup));
    if (kind == LrKind::Linear) return float(lr_min + (lr - lr_min) * (1.0 - progress));
    return float(lr_min + 0.5 * (lr - lr_min) * (1.0 + std::cos(M_PI * progress)));
}

}  // namespace shardlm::optim
