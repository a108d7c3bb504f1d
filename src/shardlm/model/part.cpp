#include "shardlm/model/part.h"

#include <omp.h>

#include <algorithm>
#include <cstring>
#include <string>

#include "shardlm/core/check.h"
#include "shardlm/core/dtype.h"
#include "shardlm/model/block_unit.h"
#include "shardlm/model/embedding_unit.h"

namespace shardlm::model {

ModelPart::ModelPart(GptConfig config, Options opt, int B, int T) : config_(std::move(config)), moe_stats_(config_) {
    if (config_.has_moe() && config_.moe.bias_rate > 0)
        expert_bias_.assign(size_t(config_.n_layer) * size_t(config_.moe.n_experts), 0.0f);
    config_.validate("model '" + config_.name + "'");
    const int cp = opt.cp ? opt.cp->size() : 1;
    SHARDLM_CHECK(T * cp <= config_.n_ctx, "sequence length ", T * cp, " exceeds the model's n_ctx ", config_.n_ctx,
                  "\n---> HINT: use --seq <= ", config_.n_ctx);
    if (cp > 1 || opt.doc_mask) split_ = std::make_unique<SequenceSplit>(T * cp, cp);
    doc_mask_ = opt.doc_mask;
    TensorParallel* tp = opt.tp ? opt.tp : &no_tensor_parallel();
    const int t = tp->size();
    if (opt.sequence_parallel && t > 1)
        SHARDLM_CHECK(T % t == 0, "--sequence-parallel splits the sequence over the ", t, " tensor-parallel ranks: --seq ",
                      T * cp, cp > 1 ? cat(" / --cp ", cp, " = ", T) : std::string(), " must be a multiple of ", t);
    if (opt.chunks.empty()) opt.chunks.push_back({0, head_compute_unit(config_.n_layer)});
    LayoutSpec spec;
    spec.chunks = opt.chunks;
    spec.tp_size = t;
    spec.tp_rank = tp->rank();
    spec.unit_multiple = opt.unit_multiple;
    if (opt.ep) spec.ep_size = opt.ep->size(), spec.ep_rank = opt.ep->rank();
    layout_ = make_gpt2_layout(config_, spec);
    ids_ = ParamUnits(layout_, config_);
    params_ = std::make_unique<ParamBinding>(layout_, opt.precision.activation, opt.precision.mixed());
    make_context(opt, tp, B, T);

    defer_ = opt.defer_weight_grads;
    SHARDLM_CHECK(!defer_ || opt.recompute != Recompute::Full,
                  "a schedule that defers the weight gradients (W) needs each block's activations until its W;"
                  " --recompute full keeps only the block's input\n---> HINT: use --recompute selective or none,"
                  " or --schedule 1f1b");
    if (opt.recompute == Recompute::Full)
        shared_.recompute.allocate(config_, B, T, t, ctx_.sp, ctx_.prec.activation, true, ctx_.fused_attention,
                                   config_.has_moe(), true, ctx_.ep_size());
    maxB_ = B;
    maxT_ = T;
    bool any_block = false, any_head = false;
    for (size_t c = 0; c < opt.chunks.size(); c++) {
        chunks_.push_back(make_chunk(opt, c, B, T));
        any_block = any_block || chunks_.back().blocks > 0;
        any_head = any_head || chunks_.back().has_head;
    }
    if (!defer_ && any_block)
        shared_.keep.allocate(config_, B, T, t, ctx_.sp, ctx_.bf16_products(), config_.has_moe(), ctx_.ep_size());
    if (!defer_ && any_head) shared_.head_keep.allocate(config_, B, T, t, ctx_.sp);
    head_in_part_ = any_head;
    size_head_scratch();
}

// How units run on this rank: the context, its lanes and their scratch.
void ModelPart::make_context(const Options& opt, TensorParallel* tp, int B, int T) {
    const int t = tp->size();
    ctx_.cfg = &config_;
    ctx_.tp = tp;
    ctx_.sp = opt.sequence_parallel && t > 1;
    ctx_.prec = opt.precision;
    ctx_.recompute = opt.recompute;
    ctx_.fused_attention = opt.fused_attention || split_;
    ctx_.scratch = &scratch_;
    ctx_.ep = opt.ep && opt.ep->size() > 1 ? opt.ep : nullptr;
    if (split_) ctx_.cp = split_->cp() > 1 ? opt.cp : nullptr, ctx_.split = split_.get(), ctx_.cp_comm = opt.cp_comm;
    SHARDLM_CHECK(opt.lanes >= 1 && (opt.lanes == 1 || t == 1), "model part: ", opt.lanes,
                  " lanes need one tensor-parallel rank (got --tp ", t, ")");
    SHARDLM_CHECK(opt.lanes == 1 || !split_, "model part: ", opt.lanes, " lanes need one context-parallel rank and no ",
                  "document masks (attention by blocks runs on all threads; got --cp ", split_ ? split_->cp() : 1, ")");
    lanes_ = LaneRunner(std::min(opt.lanes, B));
    // per-thread attention scratch: for the lanes, or for every thread OpenMP may run a kernel on
    const int threads = std::max({opt.threads, lanes_.lanes(), omp_get_max_threads()});
    scratch_.allocate(config_, B, T, t, threads, ctx_.prec.activation, opt.recompute, ctx_.sp, ctx_.fused_attention,
                      ctx_.ep_size());
    if (split_) {
        const BlockDims d = block_dims(config_, t);
        scratch_.cp.allocate(opt.cp_comm, split_->cp(), B, T, d.NHt, d.HS, d.KVt * d.HS, ctx_.prec.activation);
    }
}

// Model chunk c of this part (compute units first..last) with its activation slots.
ModelPart::Chunk ModelPart::make_chunk(const Options& opt, size_t c, int B, int T) {
    Chunk ch;
    ch.first = opt.chunks[c].first;
    ch.last = opt.chunks[c].second;
    for (size_t u = 0; u < layout_.units.size(); u++)
        if (layout_.units[u].compute >= ch.first && layout_.units[u].compute <= ch.last) ch.units.push_back(int(u));
    const int nslots = c < opt.slots.size() ? opt.slots[c] : 1;
    SHARDLM_CHECK(nslots >= 1, "model part: chunk ", c, " needs at least one activation slot");
    UnitEnv env{&config_, &ctx_, &lanes_, params_.get(), &ids_, &shared_, defer_, B, T, nslots, &moe_stats_,
                expert_bias_.empty() ? nullptr : expert_bias_.data()};
    add_units(ch, env);
    ch.backward_units = backward_order(ch);
    // the residual stream: x[k] enters compute unit k, x.back() leaves the chunk
    const size_t n = size_t(ctx_.rows(B * T)) * size_t(config_.n_embd), eb = dtype_bytes(ctx_.prec.activation);
    ch.slots.resize(size_t(nslots));
    for (ActivationSlot& s : ch.slots) {
        s.x.resize(ch.compute.size() + 1);
        for (size_t k = 0; k < ch.compute.size(); k++)
            if (ch.compute[k]->reads_stream()) s.x[k].resize(n, eb);
        if (ch.compute.back()->writes_stream()) s.x.back().resize(n, eb);
    }
    ch.dres.resize(size_t(ctx_.rows(B * T)) * size_t(config_.n_embd));
    return ch;
}

// The chunk's compute units, typed (model/layout.h: compute_kind).
void ModelPart::add_units(Chunk& ch, const UnitEnv& env) {
    const int L = config_.n_layer;
    const bool embedding_first = compute_kind(L, ch.first) == ComputeKind::Embedding;
    const bool head_last = compute_kind(L, ch.last) == ComputeKind::Head;
    for (int cu = ch.first, k = 0; cu <= ch.last; cu++, k++) {
        switch (compute_kind(L, cu)) {
        case ComputeKind::Embedding:
            ch.compute.push_back(std::make_unique<EmbeddingUnit>(k, env, head_last));
            ch.has_embedding = true;
            break;
        case ComputeKind::Head: {
            auto u = std::make_unique<HeadUnit>(k, env, embedding_first);
            ch.head = u.get();
            ch.compute.push_back(std::move(u));
            ch.has_head = true;
            break;
        }
        case ComputeKind::Block:
            ch.compute.push_back(std::make_unique<BlockUnit>(k, env, compute_layer(cu)));
            ch.blocks++;
            break;
        }
    }
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
    // the head's buffers and the keeps' bf16 copies of the output gradients follow the products
    shared_.keep.size_copies(config_, maxB_, maxT_, ctx_.tp_size(), ctx_.bf16_products());
    for (Chunk& ch : chunks_)
        for (auto& u : ch.compute) u->products_changed();
    size_head_scratch();
}

void ModelPart::bind(void* params, float* grads) { params_->bind(params, grads); }

void ModelPart::bind_unit(int unit, void* params, float* grads) { params_->bind_unit(unit, params, grads); }

void* ModelPart::input(int chunk, int slot) {
    SHARDLM_CHECK(!has_embedding(chunk), "ModelPart::input: chunk ", chunk, " starts with the embedding");
    return chunks_[size_t(chunk)].slots[size_t(slot)].x.front().data();
}

const void* ModelPart::output(int chunk, int slot) const {
    SHARDLM_CHECK(!has_head(chunk), "ModelPart::output: chunk ", chunk, " ends with the head");
    return chunks_[size_t(chunk)].slots[size_t(slot)].x.back().data();
}

const float* ModelPart::logits(int chunk, int slot) const {
    SHARDLM_CHECK(has_head(chunk), "ModelPart::logits: chunk ", chunk, " has no head");
    return chunks_[size_t(chunk)].head->acts(slot).logits.data();
}

const float* ModelPart::losses(int chunk, int slot) const {
    SHARDLM_CHECK(has_head(chunk), "ModelPart::losses: chunk ", chunk, " has no head");
    return chunks_[size_t(chunk)].head->acts(slot).losses.data();
}

double ModelPart::forward(int chunk, int slot, const int* inputs, const int* targets, int B, int T, float dloss,
                          UnitHooks* hooks, const int* doc_start) {
    SHARDLM_CHECK(params_->bound(), "ModelPart::forward before bind()");
    Chunk& ch = chunks_[size_t(chunk)];
    ActivationSlot& s = ch.slots[size_t(slot)];
    SHARDLM_CHECK(!s.has_w, "ModelPart::forward: chunk ", chunk, " slot ", slot, " still waits for its W");
    SHARDLM_CHECK(size_t(B) * size_t(T) <= scratch_.dln.size() / size_t(config_.n_embd) && T <= config_.n_ctx,
                  "micro-batch ", B, "x", T, " exceeds what the model part was built for");
    SHARDLM_CHECK(!ctx_.cp || (T == maxT_ && B <= maxB_), "micro-batch ", B, "x", T, ": with context parallelism every ",
                  "micro-batch holds ", split_->local(), " rows of each sequence (--seq / --cp)");
    SHARDLM_CHECK(!doc_mask_ || ch.blocks == 0 || doc_start, "ModelPart::forward: a document-masked part needs each row's document start");
    if (doc_mask_ && ch.blocks > 0) s.doc_start.assign(doc_start, doc_start + size_t(B) * size_t(T));
    ForwardHooks announce(hooks, ch.units);
    ForwardPass pass{s, slot, B, T, inputs, targets, dloss, announce};
    for (const auto& u : ch.compute) u->check_inputs(pass);
    s.B = B;
    s.T = T;
    ctx_.doc_start = s.doc_start.empty() ? nullptr : s.doc_start.data();  // this pass's (attention reads it)
    double loss = 0.0;
    for (auto& u : ch.compute) {
        loss += u->forward(pass);
        if (probe_sq_ && u->writes_stream()) probe_stream(s.x[size_t(u->in()) + 1], B, T, u->compute_index());
    }
    s.has_grad = !ch.has_head || (targets && dloss != 0.0f);
    return loss;
}

void ModelPart::probe_stream(const TypedBuffer& y, int B, int T, int compute) {
    const size_t n = size_t(ctx_.rows(B * T)) * size_t(config_.n_embd);
    const DType t = ctx_.prec.activation;
    double sq = 0;
    if (t == DType::F32) {
        const float* v = y.f32();
        for (size_t i = 0; i < n; i++) sq += double(v[i]) * double(v[i]);
    } else {
        AlignedBuffer<float> row(size_t(config_.n_embd));
        for (size_t k = 0; k < n; k += row.size()) {
            convert_to_f32(row.data(), shardlm::at(y.data(), t, k), t, row.size());
            for (float x : row) sq += double(x) * double(x);
        }
    }
    probe_sq_[compute] += sq;
    probe_n_[compute] += double(n);
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

std::vector<int> ModelPart::backward_order(const Chunk& ch) const {
    std::vector<int> order;
    for (auto u = ch.compute.rbegin(); u != ch.compute.rend(); ++u) (*u)->backward_units(order);
    return order;
}

void ModelPart::run_backward(int chunk, int slot, UnitHooks* hooks, bool accumulate, Phases phases) {
    Chunk& ch = chunks_[size_t(chunk)];
    ActivationSlot& s = ch.slots[size_t(slot)];
    ctx_.doc_start = s.doc_start.empty() ? nullptr : s.doc_start.data();  // the forward's (recomputation, attention)
    const bool input = phases != Phases::Weight;
    if (input)
        SHARDLM_CHECK(s.has_grad, "ModelPart::backward without a training forward of chunk ", chunk, " slot ", slot);
    else
        SHARDLM_CHECK(s.has_w, "ModelPart::backward_weight before backward_input of chunk ", chunk, " slot ", slot);
    WeightHooks wh(*params_, hooks, phases != Phases::Input, accumulate, ch.backward_units);
    BackwardPass pass{s, slot, ch.dres.data(), phases, wh};
    for (auto u = ch.compute.rbegin(); u != ch.compute.rend(); ++u) (*u)->backward(pass);
    if (input) s.has_grad = false;
    s.has_w = phases == Phases::Input;
}

}  // namespace shardlm::model
