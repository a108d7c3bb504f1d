#include "shardlm/model/layout.h"

namespace shardlm::model {

std::vector<int64_t> ParamSpec::hf_shape() const {
    std::vector<int64_t> s = shape;
    if (hf_rows >= 0) s[0] = hf_rows;
    if (hf_transposed) std::swap(s[0], s[1]);
    return s;
}

size_t ParamSpec::hf_numel() const {
    return hf_rows >= 0 ? size_t(hf_rows) * (numel / size_t(shape[0])) : numel;
}

const ParamSpec* Layout::find(const std::string& name) const {
    for (const auto& p : params)
        if (p.name == name) return &p;
    return nullptr;
}

namespace {

constexpr size_t kAlignElems = 16;  // 64 bytes
size_t align_up(size_t n) { return (n + kAlignElems - 1) / kAlignElems * kAlignElems; }

struct Builder {
    Layout L;
    void begin_unit(std::string name) {
        L.units.push_back({std::move(name), L.total, 0, int(L.params.size()), 0});
    }
    void add(std::string name, std::vector<int64_t> shape, bool transposed = false, int64_t hf_rows = -1) {
        ParamSpec p;
        p.name = std::move(name);
        p.numel = 1;
        for (auto d : shape) p.numel *= size_t(d);
        p.shape = std::move(shape);
        p.decay = p.shape.size() >= 2;
        p.hf_transposed = transposed;
        p.hf_rows = hf_rows;
        p.offset = L.total;
        L.total = align_up(L.total + p.numel);
        L.params.push_back(std::move(p));
        L.units.back().num_params++;
    }
    size_t unit_align = kAlignElems;
    void end_unit() {
        Unit& u = L.units.back();
        u.numel = (L.total - u.offset + unit_align - 1) / unit_align * unit_align;
        L.total = u.offset + u.numel;
    }
};

}  // namespace

Layout make_gpt2_layout(const GptConfig& c, int unit_multiple) {
    const int64_t C = c.n_embd, Vp = c.padded_vocab();
    Builder b;
    b.unit_align = kAlignElems * size_t(unit_multiple > 0 ? unit_multiple : 1);
    b.begin_unit("embedding");
    b.add("transformer.wte.weight", {Vp, C}, false, c.vocab_size);
    b.add("transformer.wpe.weight", {c.n_ctx, C});
    b.end_unit();
    for (int l = 0; l < c.n_layer; l++) {
        std::string h = "transformer.h." + std::to_string(l) + ".";
        b.begin_unit("h." + std::to_string(l));
        b.add(h + "ln_1.weight", {C});
        b.add(h + "ln_1.bias", {C});
        b.add(h + "attn.c_attn.weight", {3 * C, C}, true);
        b.add(h + "attn.c_attn.bias", {3 * C});
        b.add(h + "attn.c_proj.weight", {C, C}, true);
        b.add(h + "attn.c_proj.bias", {C});
        b.add(h + "ln_2.weight", {C});
        b.add(h + "ln_2.bias", {C});
        b.add(h + "mlp.c_fc.weight", {4 * C, C}, true);
        b.add(h + "mlp.c_fc.bias", {4 * C});
        b.add(h + "mlp.c_proj.weight", {C, 4 * C}, true);
        b.add(h + "mlp.c_proj.bias", {C});
        b.end_unit();
    }
    b.begin_unit("head");
    b.add("transformer.ln_f.weight", {C});
    b.add("transformer.ln_f.bias", {C});
    b.end_unit();
    return std::move(b.L);
}

}  // namespace shardlm::model
