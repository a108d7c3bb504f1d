#include "shardlm/model/layout.h"

#include <initializer_list>
#include <utility>

#include "shardlm/core/check.h"

namespace shardlm::model {

std::vector<int64_t> ParamSpec::hf_shape() const {
    std::vector<int64_t> s = full_shape;
    if (hf_rows >= 0) s[0] = hf_rows;
    if (hf_transposed) std::swap(s[0], s[1]);
    return s;
}

size_t ParamSpec::hf_numel() const {
    size_t n = 1;
    for (int64_t d : hf_shape()) n *= size_t(d);
    return n;
}

const ParamSpec* Layout::find(const std::string& name) const {
    for (const auto& p : params)
        if (p.name == name && !p.tied_copy) return &p;
    return nullptr;
}

int Layout::unit_of(UnitKind kind) const {
    for (size_t u = 0; u < units.size(); u++)
        if (units[u].kind == kind) return int(u);
    return -1;
}

size_t Layout::expert_stride(int unit) const {
    const Unit& u = units[size_t(unit)];
    if (local_experts < 2) return 0;
    const int per_expert = u.num_params / local_experts;
    return params[size_t(u.first_param + per_expert)].offset - params[size_t(u.first_param)].offset;
}

int Layout::unit_index(const std::string& name) const {
    for (size_t u = 0; u < units.size(); u++)
        if (units[u].name == name) return int(u);
    return -1;
}

namespace {

constexpr size_t kAlignElems = 16;  // 64 bytes
size_t align_up(size_t n) { return (n + kAlignElems - 1) / kAlignElems * kAlignElems; }

// How tensor parallelism cuts a parameter: tp_axis/tp_parts (ParamSpec).
struct Split {
    int axis = -1, parts = 1;
};

struct Builder {
    Layout L;
    int tp_size = 1, tp_rank = 0;
    size_t unit_align = kAlignElems;

    void begin_unit(std::string name, UnitKind kind, int compute, int block = -1) {
        Unit u;
        u.name = std::move(name), u.kind = kind, u.block = block, u.compute = compute;
        u.offset = L.total, u.first_param = int(L.params.size());
        L.units.push_back(std::move(u));
    }
    // full: internal shape of the whole tensor. packed: right after the previous parameter, without
    // alignment (a fused matrix's next block: q | k | v, gate | up).
    ParamSpec& add(int role, std::string name, std::vector<int64_t> full, Init init, Split split = Split{},
                   bool transposed = false, int64_t hf_rows = -1, bool gemm_written = false, bool packed = false) {
        ParamSpec p;
        p.name = std::move(name);
        p.full_shape = full;
        p.shape = full;
        if (split.axis >= 0 && tp_size > 1) {
            SHARDLM_CHECK(full[size_t(split.axis)] % (int64_t(tp_size) * split.parts) == 0, p.name, ": dimension ",
                          full[size_t(split.axis)], " does not split into ", tp_size, " tensor-parallel ranks");
            p.shape[size_t(split.axis)] /= tp_size;
        }
        p.tp_axis = split.axis;
        p.tp_parts = split.parts;
        p.tp_rank = tp_rank;
        p.tp_size = tp_size;
        p.numel = 1;
        for (auto d : p.shape) p.numel *= size_t(d);
        p.decay = p.shape.size() >= 2;
        p.hf_transposed = transposed;
        p.hf_rows = hf_rows;
        p.gemm_written = gemm_written;
        p.init = init;
        p.offset = packed ? L.params.back().offset + L.params.back().numel : L.total;
        p.packed = packed;
        L.total = align_up(p.offset + p.numel);
        Unit& u = L.units.back();
        if (role >= 0) u.role[role] = int(L.params.size());
        L.params.push_back(std::move(p));
        u.num_params++;
        return L.params.back();
    }
    void end_unit() {
        Unit& u = L.units.back();
        u.numel = (L.total - u.offset + unit_align - 1) / unit_align * unit_align;
        L.total = u.offset + u.numel;
    }
};

constexpr Split kColumn{0, 1}, kRow{1, 1};

// GPT-2's names and its fused c_attn (HF Conv1D: transposed).
void add_gpt2_block(Builder& b, const GptConfig& c, int l) {
    const int64_t C = c.n_embd;
    const std::string h = "transformer.h." + std::to_string(l) + ".";
    b.add(kLn1W, h + "ln_1.weight", {C}, Init::One);
    b.add(kLn1B, h + "ln_1.bias", {C}, Init::Zero);
    b.add(kQkvW, h + "attn.c_attn.weight", {3 * C, C}, Init::Normal, {0, 3}, true, -1, true);  // heads split
    b.add(kQkvB, h + "attn.c_attn.bias", {3 * C}, Init::Zero, {0, 3});
    b.add(kAttnProjW, h + "attn.c_proj.weight", {C, C}, Init::ResidNormal, kRow, true, -1, true);
    b.add(kAttnProjB, h + "attn.c_proj.bias", {C}, Init::Zero);  // added once, after the reduction
    b.add(kLn2W, h + "ln_2.weight", {C}, Init::One);
    b.add(kLn2B, h + "ln_2.bias", {C}, Init::Zero);
    b.add(kFcW, h + "mlp.c_fc.weight", {4 * C, C}, Init::Normal, kColumn, true, -1, true);
    b.add(kFcB, h + "mlp.c_fc.bias", {4 * C}, Init::Zero, kColumn);
    b.add(kFcProjW, h + "mlp.c_proj.weight", {C, 4 * C}, Init::ResidNormal, kRow, true, -1, true);
    b.add(kFcProjB, h + "mlp.c_proj.bias", {C}, Init::Zero);
}

// A norm's gain and (LayerNorm with biases) its bias.
void add_norm(Builder& b, const GptConfig& c, int w_role, int b_role, const std::string& name) {
    b.add(w_role, name + ".weight", {c.n_embd}, Init::One);
    if (c.norm == Norm::LayerNorm && c.bias) b.add(b_role, name + ".bias", {c.n_embd}, Init::Zero);
}

// Several column-parallel linears read as one matrix: each tensor whole on its own, cut alike.
void add_fused(Builder& b, const GptConfig& c, int w_role, int b_role, const std::string& prefix,
               std::initializer_list<std::pair<const char*, int64_t>> parts) {
    bool first = true;
    for (auto [name, rows] : parts) {
        b.add(first ? w_role : -1, prefix + name + ".weight", {rows, c.n_embd}, Init::Normal, kColumn, false, -1, true,
              !first);
        first = false;
    }
    if (!c.bias) return;
    first = true;
    for (auto [name, rows] : parts) {
        b.add(first ? b_role : -1, prefix + name + ".bias", {rows}, Init::Zero, kColumn, false, -1, false, !first);
        first = false;
    }
}

// A mixture of experts' feed-forward, by HF Mixtral's names: the router (and the shared experts, as a dense MLP
// of n_shared times an expert's width: DeepSeek-MoE's names) in the block's unit; then a unit of this rank's
// experts, each expert's [w1 | w3] (gate, up; w1 alone for GELU) and w2, one after the other at equal distances.
// With q/k norms (an OLMoE): OLMoE's names, mlp.gate and mlp.experts.N.gate_proj, up_proj, down_proj.
void add_moe(Builder& b, const GptConfig& c, const std::string& h, int l) {
    const int64_t C = c.n_embd, F = c.expert_ffn(), S = int64_t(c.moe.n_shared) * F;
    const bool olmoe = c.qk_norm;
    const std::string m = h + (olmoe ? "mlp." : "block_sparse_moe.");
    const char *w1 = olmoe ? "gate_proj" : "w1", *w3 = olmoe ? "up_proj" : "w3", *w2 = olmoe ? "down_proj" : "w2";
    b.add(kRouterW, m + "gate.weight", {c.moe.n_experts, C}, Init::Normal);
    if (S > 0) {
        const std::string s = m + "shared_experts.";
        if (c.mlp == Mlp::SwiGLU)
            add_fused(b, c, kFcW, kFcB, s, {{"gate_proj", S}, {"up_proj", S}});
        else
            add_fused(b, c, kFcW, kFcB, s, {{"up_proj", S}});
        b.add(kFcProjW, s + "down_proj.weight", {C, S}, Init::ResidNormal, kRow, false, -1, true);
        if (c.bias) b.add(kFcProjB, s + "down_proj.bias", {C}, Init::Zero);
    }
    const Unit& block = b.L.units.back();
    const int compute = block.compute;
    b.end_unit();
    b.begin_unit("h." + std::to_string(l) + ".experts", UnitKind::Experts, compute, l);
    for (int e = b.L.first_expert; e < b.L.first_expert + b.L.local_experts; e++) {
        const std::string x = m + "experts." + std::to_string(e) + ".";
        const bool first = e == b.L.first_expert;
        b.add(first ? kExpertFcW : -1, x + w1 + ".weight", {F, C}, Init::Normal, kColumn, false, -1, true);
        if (c.mlp == Mlp::SwiGLU) b.add(-1, x + w3 + ".weight", {F, C}, Init::Normal, kColumn, false, -1, true, true);
        b.add(first ? kExpertProjW : -1, x + w2 + ".weight", {C, F}, Init::ResidNormal, kRow, false, -1, true);
    }
}

// HF LLaMA's names (nn.Linear [out, in], as stored internally).
void add_llama_block(Builder& b, const GptConfig& c, int l) {
    const int64_t C = c.n_embd, hd = c.head_dim(), F = c.ffn();
    const std::string h = "model.layers." + std::to_string(l) + ".";
    add_norm(b, c, kLn1W, kLn1B, h + "input_layernorm");
    add_fused(b, c, kQkvW, kQkvB, h + "self_attn.",
              {{"q_proj", c.n_head * hd}, {"k_proj", c.kv_heads() * hd}, {"v_proj", c.kv_heads() * hd}});
    b.add(kAttnProjW, h + "self_attn.o_proj.weight", {C, c.n_head * hd}, Init::ResidNormal, kRow, false, -1, true);
    if (c.bias) b.add(kAttnProjB, h + "self_attn.o_proj.bias", {C}, Init::Zero);
    if (c.qk_norm) {  // cut by heads, as q and k are
        b.add(kQkNormW, h + "self_attn.q_norm.weight", {c.n_head * hd}, Init::One, kColumn);
        b.add(-1, h + "self_attn.k_norm.weight", {c.kv_heads() * hd}, Init::One, kColumn, false, -1, false, true);
    }
    add_norm(b, c, kLn2W, kLn2B, h + "post_attention_layernorm");
    if (c.is_moe(l)) return add_moe(b, c, h, l);
    if (c.mlp == Mlp::SwiGLU)
        add_fused(b, c, kFcW, kFcB, h + "mlp.", {{"gate_proj", F}, {"up_proj", F}});
    else
        add_fused(b, c, kFcW, kFcB, h + "mlp.", {{"up_proj", F}});
    b.add(kFcProjW, h + "mlp.down_proj.weight", {C, F}, Init::ResidNormal, kRow, false, -1, true);
    if (c.bias) b.add(kFcProjB, h + "mlp.down_proj.bias", {C}, Init::Zero);
}

}  // namespace

Layout make_gpt2_layout(const GptConfig& c, int unit_multiple) {
    LayoutSpec spec;
    spec.unit_multiple = unit_multiple;
    return make_gpt2_layout(c, spec);
}

Layout make_gpt2_layout(const GptConfig& c, const LayoutSpec& spec) {
    const int L = c.n_layer, head = head_compute_unit(L);
    const int64_t C = c.n_embd, Vp = c.padded_vocab(spec.tp_size);
    const bool gpt2 = c.family() == Family::Gpt2;
    std::vector<std::pair<int, int>> chunks = spec.chunks;
    if (chunks.empty()) chunks.push_back({0, head});
    for (auto [a, b] : chunks)
        SHARDLM_CHECK(0 <= a && a <= b && b <= head, "layout: compute units [", a, ", ", b, "] outside [0, ", head, "]");
    SHARDLM_CHECK(spec.tp_size >= 1 && spec.tp_rank >= 0 && spec.tp_rank < spec.tp_size, "layout: tensor-parallel rank ",
                  spec.tp_rank, " of ", spec.tp_size);
    SHARDLM_CHECK(c.n_head % spec.tp_size == 0, "n_head = ", c.n_head, " does not split into ", spec.tp_size,
                  " tensor-parallel ranks\n---> HINT: use a --tp that divides the number of heads");
    SHARDLM_CHECK(c.kv_heads() % spec.tp_size == 0, "n_kv_head = ", c.kv_heads(), " does not split into ", spec.tp_size,
                  " tensor-parallel ranks: each rank holds whole key/value heads and the query heads that share them",
                  "\n---> HINT: use a --tp that divides n_kv_head (", c.kv_heads(), ")");
    SHARDLM_CHECK(!c.has_moe() || (c.expert_ffn() % spec.tp_size == 0),
                  "an expert's inner size ", c.expert_ffn(), " does not split into ", spec.tp_size,
                  " tensor-parallel ranks\n---> HINT: use a --tp that divides moe_ffn");
    SHARDLM_CHECK(c.ffn() % spec.tp_size == 0, "the MLP's inner size ", c.ffn(), " does not split into ", spec.tp_size,
                  " tensor-parallel ranks\n---> HINT: use a --tp that divides ffn_hidden");
    SHARDLM_CHECK(spec.ep_size >= 1 && spec.ep_rank >= 0 && spec.ep_rank < spec.ep_size &&
                      (!c.has_moe() || c.moe.n_experts % spec.ep_size == 0),
                  "n_experts = ", c.moe.n_experts, " does not split into ", spec.ep_size, " expert-parallel ranks",
                  "\n---> HINT: use an --ep that divides the number of experts");
    Builder b;
    b.L.n_layer = L;
    b.L.local_experts = c.has_moe() ? c.moe.n_experts / spec.ep_size : 0;
    b.L.first_expert = spec.ep_rank * b.L.local_experts;
    b.tp_size = spec.tp_size;
    b.tp_rank = spec.tp_rank;
    b.unit_align = kAlignElems * size_t(spec.unit_multiple > 0 ? spec.unit_multiple : 1);
    const std::string wte_name = gpt2 ? "transformer.wte.weight" : "model.embed_tokens.weight";
    // the head's GEMM writes the gradient of the wte it reads first (the tied copy, or the
    // embedding's when they share a chunk)
    auto add_wte = [&](bool tied_copy, bool head_writes) {
        b.begin_unit("wte", UnitKind::TokenEmbedding, tied_copy ? head : 0);
        b.add(kTable, wte_name, {Vp, C}, Init::Normal, kColumn, false, c.vocab_size, head_writes).tied_copy = tied_copy;
        b.end_unit();
    };
    for (auto [first, last] : chunks)
        for (int u = first; u <= last; u++) switch (compute_kind(L, u)) {
            case ComputeKind::Embedding:
                add_wte(false, compute_kind(L, last) == ComputeKind::Head && c.tie_embeddings);
                if (c.position == Position::Learned) {
                    b.begin_unit("wpe", UnitKind::PositionEmbedding, 0);
                    b.add(kTable, gpt2 ? "transformer.wpe.weight" : "model.embed_positions.weight", {c.n_ctx, C},
                          Init::Normal);
                    b.end_unit();
                }
                break;
            case ComputeKind::Head:
                b.begin_unit("head", UnitKind::Head, head);
                add_norm(b, c, kLnfW, kLnfB, gpt2 ? "transformer.ln_f" : "model.norm");
                if (!c.tie_embeddings)  // vocabulary-parallel, as wte
                    b.add(kLmHead, "lm_head.weight", {Vp, C}, Init::Normal, kColumn, false, c.vocab_size, true);
                b.end_unit();
                // the head's chunk does not hold the embedding
                if (compute_kind(L, first) != ComputeKind::Embedding && c.tie_embeddings) add_wte(true, true);
                break;
            case ComputeKind::Block: {
                const int l = compute_layer(u);
                b.begin_unit("h." + std::to_string(l), UnitKind::Block, u, l);
                if (gpt2) add_gpt2_block(b, c, l);
                else add_llama_block(b, c, l);
                b.end_unit();
                break;
            }
        }
    return std::move(b.L);
}

ParamCount count_params(const GptConfig& c) {
    // from the layout the engine trains: every knob counts as it is built (true vocabulary)
    const Layout L = make_gpt2_layout(c);
    ParamCount p;
    for (const Unit& u : L.units)
        for (int i = u.first_param; i < u.first_param + u.num_params; i++) {
            const ParamSpec& s = L.params[size_t(i)];
            const int64_t n = int64_t(s.hf_numel());
            switch (u.kind) {
                case UnitKind::TokenEmbedding:
                case UnitKind::PositionEmbedding: p.embedding += n; break;
                case UnitKind::Block: p.blocks += n; break;
                case UnitKind::Experts: p.blocks += n, p.experts += n; break;
                case UnitKind::Head: (s.shape.size() == 2 ? p.head : p.final_norm) += n; break;
            }
        }
    p.per_block = c.n_layer > 0 ? p.blocks / c.n_layer : 0;
    p.total = p.embedding + p.blocks + p.final_norm + p.head;
    p.active = p.total - (c.has_moe() ? p.experts - p.experts / c.moe.n_experts * c.moe.top_k : 0);
    return p;
}

}  // namespace shardlm::model
