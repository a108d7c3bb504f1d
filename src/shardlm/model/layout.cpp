#include "shardlm/model/layout.h"

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

int Layout::unit_index(const std::string& name) const {
    for (size_t u = 0; u < units.size(); u++)
        if (units[u].name == name) return int(u);
    return -1;
}

namespace {

constexpr size_t kAlignElems = 16;  // 64 bytes
size_t align_up(size_t n) { return (n + kAlignElems - 1) / kAlignElems * kAlignElems; }

struct Builder {
    Layout L;
    int tp_size = 1, tp_rank = 0;
    size_t unit_align = kAlignElems;

    void begin_unit(std::string name, UnitKind kind, int compute, int block = -1) {
        L.units.push_back({std::move(name), kind, block, compute, L.total, 0, int(L.params.size()), 0});
    }
    // full: internal shape of the whole tensor; tp_axis/tp_parts: how tensor parallelism cuts it.
    void add(std::string name, std::vector<int64_t> full, int tp_axis = -1, int tp_parts = 1, bool transposed = false,
             int64_t hf_rows = -1, bool gemm_written = false) {
        ParamSpec p;
        p.name = std::move(name);
        p.full_shape = full;
        p.shape = full;
        if (tp_axis >= 0 && tp_size > 1) {
            SHARDLM_CHECK(full[size_t(tp_axis)] % (int64_t(tp_size) * tp_parts) == 0, p.name, ": dimension ",
                          full[size_t(tp_axis)], " does not split into ", tp_size, " tensor-parallel ranks");
            p.shape[size_t(tp_axis)] /= tp_size;
        }
        p.tp_axis = tp_axis;
        p.tp_parts = tp_parts;
        p.tp_rank = tp_rank;
        p.tp_size = tp_size;
        p.numel = 1;
        for (auto d : p.shape) p.numel *= size_t(d);
        p.decay = p.shape.size() >= 2;
        p.hf_transposed = transposed;
        p.hf_rows = hf_rows;
        p.gemm_written = gemm_written;
        p.offset = L.total;
        L.total = align_up(L.total + p.numel);
        L.params.push_back(std::move(p));
        L.units.back().num_params++;
    }
    void end_unit() {
        Unit& u = L.units.back();
        u.numel = (L.total - u.offset + unit_align - 1) / unit_align * unit_align;
        L.total = u.offset + u.numel;
    }
};

}  // namespace

Layout make_gpt2_layout(const GptConfig& c, int unit_multiple) {
    LayoutSpec spec;
    spec.unit_multiple = unit_multiple;
    return make_gpt2_layout(c, spec);
}

Layout make_gpt2_layout(const GptConfig& c, const LayoutSpec& spec) {
    const int L = c.n_layer, head = L + 1;
    const int64_t C = c.n_embd, Vp = c.padded_vocab(spec.tp_size);
    std::vector<std::pair<int, int>> chunks = spec.chunks;
    if (chunks.empty()) chunks.push_back({0, head});
    for (auto [a, b] : chunks)
        SHARDLM_CHECK(0 <= a && a <= b && b <= head, "layout: compute units [", a, ", ", b, "] outside [0, ", head, "]");
    SHARDLM_CHECK(spec.tp_size >= 1 && spec.tp_rank >= 0 && spec.tp_rank < spec.tp_size, "layout: tensor-parallel rank ",
                  spec.tp_rank, " of ", spec.tp_size);
    SHARDLM_CHECK(c.n_head % spec.tp_size == 0, "n_head = ", c.n_head, " does not split into ", spec.tp_size,
                  " tensor-parallel ranks\n---> HINT: use a --tp that divides the number of heads");
    Builder b;
    b.L.n_layer = L;
    b.tp_size = spec.tp_size;
    b.tp_rank = spec.tp_rank;
    b.unit_align = kAlignElems * size_t(spec.unit_multiple > 0 ? spec.unit_multiple : 1);
    // the head's GEMM writes the gradient of the wte it reads first (the tied copy, or the
    // embedding's when they share a chunk)
    auto add_wte = [&](bool tied_copy, bool head_writes) {
        b.begin_unit("wte", UnitKind::TokenEmbedding, tied_copy ? head : 0);
        b.add("transformer.wte.weight", {Vp, C}, 0, 1, false, c.vocab_size, head_writes);
        b.L.params.back().tied_copy = tied_copy;
        b.end_unit();
    };
    for (auto [first, last] : chunks)
        for (int u = first; u <= last; u++) {
            if (u == 0) {
                add_wte(false, last == head);
                b.begin_unit("wpe", UnitKind::PositionEmbedding, 0);
                b.add("transformer.wpe.weight", {c.n_ctx, C});
                b.end_unit();
            } else if (u == head) {
                b.begin_unit("head", UnitKind::Head, head);
                b.add("transformer.ln_f.weight", {C});
                b.add("transformer.ln_f.bias", {C});
                b.end_unit();
                if (first != 0) add_wte(true, true);  // the head's chunk does not hold the embedding
            } else {
                const int l = u - 1;
                std::string h = "transformer.h." + std::to_string(l) + ".";
                b.begin_unit("h." + std::to_string(l), UnitKind::Block, u, l);
                b.add(h + "ln_1.weight", {C});
                b.add(h + "ln_1.bias", {C});
                b.add(h + "attn.c_attn.weight", {3 * C, C}, 0, 3, true, -1, true);  // column-parallel, heads split
                b.add(h + "attn.c_attn.bias", {3 * C}, 0, 3);
                b.add(h + "attn.c_proj.weight", {C, C}, 1, 1, true, -1, true);      // row-parallel
                b.add(h + "attn.c_proj.bias", {C});                        // added once, after the reduction
                b.add(h + "ln_2.weight", {C});
                b.add(h + "ln_2.bias", {C});
                b.add(h + "mlp.c_fc.weight", {4 * C, C}, 0, 1, true, -1, true);     // column-parallel
                b.add(h + "mlp.c_fc.bias", {4 * C}, 0);
                b.add(h + "mlp.c_proj.weight", {C, 4 * C}, 1, 1, true, -1, true);   // row-parallel
                b.add(h + "mlp.c_proj.bias", {C});
                b.end_unit();
            }
        }
    return std::move(b.L);
}

}  // namespace shardlm::model
