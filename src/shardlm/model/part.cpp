#include "shardlm/model/part.h"

#include <omp.h>

#include <algorithm>
#include <cstring>
#include <exception>
#include <string>

#include "shardlm/core/check.h"

namespace shardlm::model {

ModelPart::ModelPart(GptConfig config, Options opt, int B, int T) : config_(std::move(config)) {
    config_.validate("model '" + config_.name + "'");
    SHARDLM_CHECK(T <= config_.n_ctx, "sequence length ", T, " exceeds the model's n_ctx ", config_.n_ctx,
                  "\n---> HINT: use --seq <= ", config_.n_ctx);
    const int L = config_.n_layer, head = L + 1;
    TensorParallel* tp = opt.tp ? opt.tp : &no_tensor_parallel();
    const int t = tp->size();
    if (opt.sequence_parallel && t > 1)
        SHARDLM_CHECK(T % t == 0, "--sequence-parallel splits the sequence over the ", t,
                      " tensor-parallel ranks: --seq ", T, " must be a multiple of ", t);
    if (opt.chunks.empty()) opt.chunks.push_back({0, head});
    LayoutSpec spec;
    spec.chunks = opt.chunks;
    spec.tp_size = t;
    spec.tp_rank = tp->rank();
    spec.unit_multiple = opt.unit_multiple;
    layout_ = make_gpt2_layout(config_, spec);

    ctx_.cfg = &config_;
    ctx_.tp = tp;
    ctx_.sp = opt.sequence_parallel && t > 1;
    ctx_.prec = opt.precision;
    ctx_.recompute = opt.recompute;
    ctx_.fused_attention = opt.fused_attention;
    ctx_.scratch = &scratch_;
    SHARDLM_CHECK(opt.lanes >= 1 && (opt.lanes == 1 || t == 1), "model part: ", opt.lanes,
                  " lanes need one tensor-parallel rank (got --tp ", t, ")");
    lanes_ = LaneRunner(std::min(opt.lanes, B));
    // per-thread attention scratch: for the lanes, or for every thread OpenMP may run a kernel on
    const int threads = std::max({opt.threads, lanes_.lanes(), omp_get_max_threads()});
    scratch_.allocate(config_, B, T, t, threads, ctx_.prec.activation, opt.recompute, ctx_.sp, opt.fused_attention);

    index_units();
    plan_unit_vectors();

    const bool keep_blocks = opt.recompute != Recompute::Full;
    if (!keep_blocks)
        recompute_acts_.allocate(config_, B, T, t, ctx_.sp, ctx_.prec.activation, true, opt.fused_attention);
    defer_ = opt.defer_weight_grads;
    SHARDLM_CHECK(!defer_ || keep_blocks,
                  "a schedule that defers the weight gradients (W) needs each block's activations until its W;"
                  " --recompute full keeps only the block's input\n---> HINT: use --recompute selective or none,"
                  " or --schedule 1f1b");
    bool any_block = false, any_head = false;
    for (size_t c = 0; c < opt.chunks.size(); c++) {
        chunks_.push_back(make_chunk(opt, c, B, T));
        const Chunk& ch = chunks_.back();
        any_block = any_block || ch.blocks > 0;
        any_head = any_head || ch.has_head;
    }
    if (!defer_ && any_block) keep_.allocate(config_, B, T, t, ctx_.sp, ctx_.bf16_products());
    if (!defer_ && any_head) head_keep_.allocate(config_, B, T, t, ctx_.sp);
    maxB_ = B;
    maxT_ = T;
    configure_head();
}

// Which unit is the embedding, the head's tied copy, the position table, the head and each block.
void ModelPart::index_units() {
    block_unit_.assign(size_t(config_.n_layer), -1);
    for (size_t u = 0; u < layout_.units.size(); u++) {
        const Unit& un = layout_.units[u];
        switch (un.kind) {
        case UnitKind::TokenEmbedding:
            (layout_.params[size_t(un.first_param)].tied_copy ? head_wte_unit_ : wte_unit_) = int(u);
            break;
        case UnitKind::PositionEmbedding: wpe_unit_ = int(u); break;
        case UnitKind::Head: head_unit_ = int(u); break;
        case UnitKind::Block: block_unit_[size_t(un.block)] = int(u); break;
        }
    }
    // the head's chunk starts with the embedding; an untied head reads its own lm_head
    if (head_wte_unit_ < 0 && config_.tie_embeddings) head_wte_unit_ = wte_unit_;
}

// Per unit: where its vectors (LayerNorms, biases) sit when mixed precision widens them to fp32 as
// it runs, and the parameter ranges no GEMM writes (zeroed before a backward writes the gradient).
void ModelPart::plan_unit_vectors() {
    vec_at_.resize(layout_.units.size());
    zero_ranges_.resize(layout_.units.size());
    size_t max_vec = 0;
    for (size_t u = 0; u < layout_.units.size(); u++) {
        const Unit& un = layout_.units[u];
        size_t at = 0;
        for (int i = 0; i < un.num_params; i++) {
            const ParamSpec& p = layout_.params[size_t(un.first_param + i)];
            vec_at_[u].push_back(at);
            if (p.shape.size() == 1) at += (p.numel + 15) / 16 * 16;
            if (!p.gemm_written) zero_ranges_[u].push_back({p.offset - un.offset, p.offset - un.offset + p.numel});
        }
        max_vec = std::max(max_vec, at);
    }
    if (ctx_.mixed()) vec_.resize(max_vec);
}

// Model chunk c of this part (compute units first..last) with its activation slots.
ModelPart::Chunk ModelPart::make_chunk(const Options& opt, size_t c, int B, int T) {
    Chunk ch;
    ch.first = opt.chunks[c].first;
    ch.last = opt.chunks[c].second;
    const int head = config_.n_layer + 1;
    for (int cu = ch.first, k = 0; cu <= ch.last; cu++, k++) {
        ComputeUnit u;
        u.in = k;
        if (cu == 0) u.kind = ComputeUnit::Kind::Embedding, ch.has_embedding = true;
        else if (cu == head) u.kind = ComputeUnit::Kind::Head, ch.has_head = true;
        else u.kind = ComputeUnit::Kind::Block, u.layer = cu - 1, u.block = ch.blocks++;
        ch.compute.push_back(u);
    }
    for (size_t u = 0; u < layout_.units.size(); u++)
        if (layout_.units[u].compute >= ch.first && layout_.units[u].compute <= ch.last) ch.units.push_back(int(u));
    const int nslots = c < opt.slots.size() ? opt.slots[c] : 1;
    SHARDLM_CHECK(nslots >= 1, "model part: chunk ", c, " needs at least one activation slot");
    ch.slots.resize(size_t(nslots));
    for (Slot& s : ch.slots) allocate_slot(s, ch, opt, B, T);
    ch.dres.resize(size_t(ctx_.rows(B * T)) * size_t(config_.n_embd));
    return ch;
}

// One micro-batch's activations in a chunk: the tokens (the embedding's chunk), the input of every
// compute unit, each block's saved activations (unless --recompute full) and, under a deferred W,
// what its weight gradients read.
void ModelPart::allocate_slot(Slot& s, const Chunk& ch, const Options& opt, int B, int T) {
    const int t = ctx_.tp_size();
    const size_t N = size_t(B) * T, Nl = size_t(ctx_.rows(B * T)), C = size_t(config_.n_embd);
    const size_t eb = dtype_bytes(ctx_.prec.activation);
    const bool keep_blocks = opt.recompute != Recompute::Full, keep_att = opt.recompute != Recompute::Selective;
    s.x.resize(ch.compute.size() + 1);  // x[k] enters compute unit k; x.back() leaves the chunk
    for (const ComputeUnit& u : ch.compute) {
        switch (u.kind) {
        case ComputeUnit::Kind::Embedding:  // takes tokens
            s.tokens.resize(N);
            if (defer_) s.dx0.resize(Nl * C);
            break;
        case ComputeUnit::Kind::Block:
            s.x[size_t(u.in)].resize(Nl * C, eb);
            if (keep_blocks) {
                s.blocks.emplace_back();
                s.blocks.back().allocate(config_, B, T, t, ctx_.sp, ctx_.prec.activation, keep_att, opt.fused_attention);
            }
            if (defer_) {
                s.keeps.emplace_back();
                s.keeps.back().allocate(config_, B, T, t, ctx_.sp, ctx_.bf16_products());
            }
            break;
        case ComputeUnit::Kind::Head:  // its output is the loss
            s.x[size_t(u.in)].resize(Nl * C, eb);
            s.head.allocate(config_, B, T, t, ctx_.sp, ctx_.prec.activation, false, false);
            if (defer_) s.head_keep.allocate(config_, B, T, t, ctx_.sp);
            break;
        }
    }
    if (!ch.has_head) s.x.back().resize(Nl * C, eb);  // what leaves the chunk
}

void ModelPart::configure_head() {
    const int t = ctx_.tp_size();
    bool any = false;
    for (Chunk& ch : chunks_)
        if (ch.has_head)
            for (Slot& s : ch.slots) {
                s.head.allocate(config_, maxB_, maxT_, t, ctx_.sp, ctx_.prec.activation, ctx_.bf16_products(), ctx_.chunked_head());
                any = true;
            }
    head_in_part_ = any;
    size_head_scratch();
}

void ModelPart::size_head_scratch() {
    const int t = ctx_.tp_size();
    const size_t n = head_in_part_ && ctx_.chunked_head() ? size_t(lanes_.lanes()) * head_tile_floats(ctx_, config_.padded_vocab(t) / t) : 0;
    // grown, never shrunk while a head needs it: Sophia's passes turn sampling on and off every few steps
    if (n == 0 || n > scratch_.logits.size()) scratch_.logits.resize(n);
}

void ModelPart::set_label_sampling(bool on, uint64_t seed) {
    ctx_.sample_labels = on, ctx_.sample_seed = seed;
    size_head_scratch();  // sampled labels need whole rows of logits
}

void ModelPart::set_matmul_precision(kernels::MatmulPrecision p) {
    SHARDLM_CHECK(!ctx_.mixed() || p == kernels::MatmulPrecision::fp32,
                  "--matmul-precision applies to fp32 training; with --precision bf16/fp16 the products are 16-bit already");
    ctx_.prec.products = p == kernels::MatmulPrecision::bf16 ? DType::BF16 : DType::F32;
    configure_head();
    // the keeps' bf16 copies of the output gradients follow the products
    const int t = ctx_.tp_size();
    keep_.size_copies(config_, maxB_, maxT_, t, ctx_.bf16_products());
    for (Chunk& ch : chunks_)
        for (Slot& s : ch.slots)
            for (BlockKeep& k : s.keeps) k.size_copies(config_, maxB_, maxT_, t, ctx_.bf16_products());
}

void ModelPart::bind(void* params, float* grads) {
    unit_params_.resize(layout_.units.size());
    unit_grads_.resize(layout_.units.size());
    for (size_t u = 0; u < layout_.units.size(); u++) {
        unit_params_[u] = params ? at(params, ctx_.prec.activation, layout_.units[u].offset) : nullptr;
        unit_grads_[u] = grads ? grads + layout_.units[u].offset : nullptr;
    }
}

void ModelPart::bind_unit(int unit, void* params, float* grads) {
    if (params) unit_params_[size_t(unit)] = params;
    if (grads) unit_grads_[size_t(unit)] = grads;
}

const float* ModelPart::vec(int unit, int i) {
    if (!ctx_.mixed() || !has(unit, i)) return static_cast<const float*>(param(unit, i));
    const ParamSpec& p = spec(unit, i);
    float* v = vec_.data() + vec_at_[size_t(unit)][size_t(layout_.units[size_t(unit)].role[i] -
                                                           layout_.units[size_t(unit)].first_param)];
    convert_to_f32(v, param(unit, i), ctx_.prec.activation, p.numel);
    return v;
}

BlockWeights ModelPart::block_weights(int l) {
    const int u = block_unit_[size_t(l)];
    const Unit& un = layout_.units[size_t(u)];
    BlockWeights w;
    for (int i = 0; i < kNumBlockParams; i++)
        w.w[i] = un.role[i] >= 0 && spec(u, i).shape.size() == 1 ? vec(u, i) : param(u, i);
    return w;
}

BlockGrads ModelPart::block_grads(int l) const {
    BlockGrads g;
    for (int i = 0; i < kNumBlockParams; i++) g.g[i] = grad(block_unit_[size_t(l)], i);
    return g;
}

void* ModelPart::input(int chunk, int slot) {
    SHARDLM_CHECK(!has_embedding(chunk), "ModelPart::input: chunk ", chunk, " starts with the embedding");
    return chunks_[size_t(chunk)].slots[size_t(slot)].x.front().data();
}

const void* ModelPart::output(int chunk, int slot) const {
    SHARDLM_CHECK(!has_head(chunk), "ModelPart::output: chunk ", chunk, " ends with the head");
    return chunks_[size_t(chunk)].slots[size_t(slot)].x.back().data();
}

const float* ModelPart::logits(int chunk, int slot) const {
    return chunks_[size_t(chunk)].slots[size_t(slot)].head.logits.data();
}

const float* ModelPart::losses(int chunk, int slot) const {
    return chunks_[size_t(chunk)].slots[size_t(slot)].head.losses.data();
}

void ModelPart::zero_accumulated_grads(int unit) {
    float* g = unit_grads_[size_t(unit)];
    for (auto [b, e] : zero_ranges_[size_t(unit)]) std::memset(g + b, 0, (e - b) * sizeof(float));
}

double ModelPart::forward(int chunk, int slot, const int* inputs, const int* targets, int B, int T, float dloss,
                          UnitHooks* hooks) {
    SHARDLM_CHECK(!unit_params_.empty(), "ModelPart::forward before bind()");
    Chunk& ch = chunks_[size_t(chunk)];
    Slot& s = ch.slots[size_t(slot)];
    SHARDLM_CHECK(!s.has_w, "ModelPart::forward: chunk ", chunk, " slot ", slot, " still waits for its W");
    const int N = B * T, V = config_.vocab_size;
    SHARDLM_CHECK(size_t(N) <= scratch_.dln.size() / size_t(config_.n_embd) && T <= config_.n_ctx, "micro-batch ", B,
                  "x", T, " exceeds what the model part was built for");
    if (ch.has_embedding) {
        for (int i = 0; i < N; i++)
            SHARDLM_CHECK(inputs[i] >= 0 && inputs[i] < V, "token id ", inputs[i], " at position ", i,
                          " is outside the vocabulary [0, ", V, ")");
        std::memcpy(s.tokens.data(), inputs, sizeof(int) * size_t(N));
    }
    if (targets && ch.has_head && ctx_.sample_labels)
        for (int i = 0; i < N; i++)
            SHARDLM_CHECK(targets[i] >= 0, "label sampling: negative token key ", targets[i], " at position ", i);
    else if (targets && ch.has_head)
        for (int i = 0; i < N; i++)
            SHARDLM_CHECK(targets[i] >= 0 && targets[i] < V, "target id ", targets[i], " at position ", i,
                          " is outside the vocabulary [0, ", V, ")");
    s.B = B;
    s.T = T;
    const std::vector<int>& seq = ch.units;
    size_t at = 0;  // next unit of seq to announce
    auto announce = [&](int unit) {
        if (!hooks || unit < 0) return;
        for (size_t i = 0; i < at; i++)
            if (seq[i] == unit) return;
        while (at < seq.size()) {
            const int u = seq[at++];
            hooks->before_forward(u, at < seq.size() ? seq[at] : -1);
            if (u == unit) break;
        }
    };
    double loss = 0.0;
    for (const ComputeUnit& u : ch.compute) {
        switch (u.kind) {
        case ComputeUnit::Kind::Embedding: embedding_forward_pass(s, announce); break;
        case ComputeUnit::Kind::Block: block_forward_pass(s, u, announce); break;
        case ComputeUnit::Kind::Head: loss = head_forward_pass(ch, s, u, targets, dloss, announce); break;
        }
    }
    s.has_grad = !ch.has_head || (targets && dloss != 0.0f);
    return loss;
}

template <class Announce>
void ModelPart::embedding_forward_pass(Slot& s, Announce&& announce) {
    announce(wte_unit_);
    announce(wpe_unit_);
    embedding_forward(ctx_, param(wte_unit_, kTable), param(wpe_unit_, kTable), s.tokens.data(), s.x[1].data(), s.B, s.T);
}

template <class Announce>
void ModelPart::block_forward_pass(Slot& s, const ComputeUnit& u, Announce&& announce) {
    announce(block_unit_[size_t(u.layer)]);
    const BlockWeights w = block_weights(u.layer);
    BlockActs& a = acts(s, u.block);
    const void* x = s.x[size_t(u.in)].data();
    void* y = s.x[size_t(u.in) + 1].data();
    const int B = s.B, T = s.T;
    lanes_.run_lanes(ctx_, B, [&](const UnitContext& c) { block_forward(c, w, a, x, y, B, T); });
}

template <class Announce>
double ModelPart::head_forward_pass(const Chunk& ch, Slot& s, const ComputeUnit& u, const int* targets, float dloss,
                                    Announce&& announce) {
    announce(head_unit_);
    if (!ch.has_embedding) announce(head_wte_unit_);  // the tied copy
    const float *w = vec(head_unit_, kLnfW), *b = vec(head_unit_, kLnfB);
    const void *wte = head_matrix(), *x = s.x[size_t(u.in)].data();
    const int B = s.B, T = s.T;
    lanes_.run_lanes(ctx_, B, [&](const UnitContext& c) { head_forward(c, w, b, wte, s.head, x, targets, B, T, dloss); });
    return targets ? head_loss_sum(s.head, B * T) : 0.0;
}

void ModelPart::backward(int chunk, int slot, UnitHooks* hooks, bool accumulate) {
    run_backward(chunk, slot, hooks, accumulate, Phases::Both);
}

void ModelPart::backward_input(int chunk, int slot) {
    SHARDLM_CHECK(defer_, "ModelPart::backward_input: the part was not built to defer W (Options::defer_weight_grads)");
    run_backward(chunk, slot, nullptr, false, Phases::Input);
}

void ModelPart::backward_weight(int chunk, int slot, UnitHooks* hooks, bool accumulate) {
    run_backward(chunk, slot, hooks, accumulate, Phases::Weight);
}

// The order in which a backward of chunk ch first uses its units (for the hooks' prefetching).
std::vector<int> ModelPart::backward_order(const Chunk& ch) const {
    std::vector<int> seq;
    for (auto u = ch.compute.rbegin(); u != ch.compute.rend(); ++u) {
        switch (u->kind) {
        case ComputeUnit::Kind::Head:
            seq.push_back(head_unit_);
            if (head_wte_unit_ >= 0) seq.push_back(head_wte_unit_);
            break;
        case ComputeUnit::Kind::Embedding:
            if (wpe_unit_ >= 0) seq.push_back(wpe_unit_);
            if (!ch.has_head || head_wte_unit_ != wte_unit_) seq.push_back(wte_unit_);  // not the head's already
            break;
        case ComputeUnit::Kind::Block: seq.push_back(block_unit_[size_t(u->layer)]); break;
        }
    }
    return seq;
}

// before(unit): every unit up to `unit` in the backward's order announced to the hooks (with the next
// one, to prefetch) and its gradient zeroed unless accumulating; after(unit): its gradient is final.
// Only around W, where parameter gradients are written.
void ModelPart::WeightHooks::before(int unit) {
    if (!weight || unit < 0) return;
    for (size_t i = 0; i < at; i++)
        if (order[i] == unit) return;
    while (at < order.size()) {
        const int u = order[at++];
        if (hooks) hooks->before_backward(u, at < order.size() ? order[at] : -1);
        if (!accumulate) part.zero_accumulated_grads(u);
        if (u == unit) break;
    }
}

void ModelPart::WeightHooks::after(int unit) {
    if (weight && hooks && unit >= 0) hooks->after_backward(unit);
}

void ModelPart::run_backward(int chunk, int slot, UnitHooks* hooks, bool accumulate, Phases phases) {
    Chunk& ch = chunks_[size_t(chunk)];
    Slot& s = ch.slots[size_t(slot)];
    const bool input = phases != Phases::Weight, weight = phases != Phases::Input;
    if (input)
        SHARDLM_CHECK(s.has_grad, "ModelPart::backward without a training forward of chunk ", chunk, " slot ", slot);
    else
        SHARDLM_CHECK(s.has_w, "ModelPart::backward_weight before backward_input of chunk ", chunk, " slot ", slot);
    WeightHooks wh{*this, hooks, weight, accumulate, backward_order(ch)};
    for (auto u = ch.compute.rbegin(); u != ch.compute.rend(); ++u) {
        switch (u->kind) {
        case ComputeUnit::Kind::Head: head_backward_pass(ch, s, *u, phases, wh); break;
        case ComputeUnit::Kind::Block: block_backward_pass(ch, s, *u, phases, wh); break;
        case ComputeUnit::Kind::Embedding: embedding_backward_pass(ch, s, phases, wh); break;
        }
    }
    if (input) s.has_grad = false;
    s.has_w = phases == Phases::Input;
}

void ModelPart::head_backward_pass(Chunk& ch, Slot& s, const ComputeUnit& u, Phases phases, WeightHooks& wh) {
    const void* x = s.x[size_t(u.in)].data();
    const bool input = phases != Phases::Weight, weight = phases != Phases::Input, acc = wh.accumulate;
    const int B = s.B, T = s.T;
    float* dres = ch.dres.data();
    wh.before(head_unit_);
    wh.before(head_wte_unit_);
    HeadKeep& hk = head_keep(s);
    const float* w = input ? vec(head_unit_, kLnfW) : nullptr;
    const void* wte = head_matrix();
    // (gradient storage is bound for W only: ZeRO-2 hands it out in the hooks)
    float* dw = weight ? grad(head_unit_, kLnfW) : nullptr;
    float* db = weight ? grad(head_unit_, kLnfB) : nullptr;
    float* dwte = !weight ? nullptr : head_wte_unit_ >= 0 ? grad(head_wte_unit_, kTable) : grad(head_unit_, kLmHead);
    lanes_.run_unit_backward(
        ctx_, B, phases, [&](const UnitContext& c) { head_backward(c, w, wte, dw, db, dwte, s.head, hk, x, dres, B, T, acc); },
        [&](const UnitContext& c) { head_backward_input(c, w, wte, s.head, hk, x, dres, B, T); },
        [&](const UnitContext& c) { head_backward_weight(c, dw, db, dwte, s.head, hk, x, B, T, acc); });
    if (head_wte_unit_ != wte_unit_) wh.after(head_wte_unit_);  // the tied copy: final after the head
    wh.after(head_unit_);
}

// All W: with W deferred its d(x0) is kept, as dres takes the next micro-batch's.
void ModelPart::embedding_backward_pass(Chunk& ch, Slot& s, Phases phases, WeightHooks& wh) {
    float* dres = ch.dres.data();
    if (phases != Phases::Weight && defer_) std::memcpy(s.dx0.data(), dres, sizeof(float) * boundary_floats(s.B, s.T));
    if (phases == Phases::Input) return;
    wh.before(wpe_unit_);
    wh.before(wte_unit_);
    embedding_backward(ctx_, grad(wte_unit_, kTable), grad(wpe_unit_, kTable), defer_ ? s.dx0.data() : dres,
                       s.tokens.data(), s.B, s.T);
    wh.after(wpe_unit_);
    wh.after(wte_unit_);
}

void ModelPart::block_backward_pass(Chunk& ch, Slot& s, const ComputeUnit& cu, Phases phases, WeightHooks& wh) {
    const bool input = phases != Phases::Weight, weight = phases != Phases::Input, acc = wh.accumulate;
    const int B = s.B, T = s.T;
    float* dres = ch.dres.data();
    const void* x = s.x[size_t(cu.in)].data();
    const int l = cu.layer, u = block_unit_[size_t(l)];
    wh.before(u);
    BlockActs& a = acts(s, cu.block);
    BlockKeep& kp = keep(s, cu.block);
    const BlockWeights w = input ? block_weights(l) : BlockWeights{};
    const BlockGrads g = weight ? block_grads(l) : BlockGrads{};
    lanes_.run_unit_backward(
        ctx_, B, phases, [&](const UnitContext& c) { block_backward(c, w, g, a, kp, x, dres, B, T, acc); },
        [&](const UnitContext& c) { block_backward_input(c, w, a, kp, x, dres, B, T); },
        [&](const UnitContext& c) { block_backward_weight(c, g, a, kp, x, B, T, acc); });
    wh.after(u);
}

BlockActs& ModelPart::acts(Slot& s, int block) {
    return ctx_.recompute == Recompute::Full ? recompute_acts_ : s.blocks[size_t(block)];
}

}  // namespace shardlm::model
