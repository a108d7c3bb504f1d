#include "shardlm/model/weights.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <set>
#include <vector>

#include "shardlm/core/check.h"
#include "shardlm/io/atomic_file.h"

namespace shardlm::model {

namespace fs = std::filesystem;

namespace {

uint64_t splitmix64(uint64_t x) {
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

uint64_t fnv1a(const std::string& s) {
    uint64_t h = 1469598103934665603ull;
    for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
    return h;
}

// Standard normal from a 64-bit key (Box-Muller on two 32-bit uniforms).
float normal_from_key(uint64_t key) {
    uint64_t r = splitmix64(key);
    double u1 = (double((r >> 32) & 0xffffffffu) + 1.0) / 4294967297.0;  // (0, 1]
    double u2 = double(r & 0xffffffffu) / 4294967296.0;
    return float(std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2));
}

bool ends_with(const std::string& s, const std::string& suffix) {
    return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// The whole tensor's internal flat index of p's local element k (tensor-parallel shards map back).
int64_t full_index(const ParamSpec& p, int64_t k) {
    if (p.tp_size == 1 || p.tp_axis < 0) return k;
    const int64_t W = p.shape.size() == 2 ? p.shape[1] : 1, r = k / W, c = k % W;
    if (p.tp_axis == 1) return r * p.full_shape[1] + int64_t(p.tp_rank) * W + c;
    const int64_t part_rows = p.shape[0] / p.tp_parts, part = r / part_rows;
    const int64_t R = part * (p.full_shape[0] / p.tp_parts) + int64_t(p.tp_rank) * part_rows + (r - part * part_rows);
    return R * W + c;
}

}  // namespace

void init_gpt2_weights(float* dst, const Layout& layout, FlatRange range, uint64_t seed) {
    const float std_resid = 0.02f / std::sqrt(2.0f * float(layout.n_layer));
    std::memset(dst, 0, (range.end - range.begin) * sizeof(float));
    for (const ParamSpec& p : layout.params) {
        const size_t b = std::max(p.offset, range.begin), e = std::min(p.offset + p.numel, range.end);
        if (b >= e) continue;
        float* w = dst + (b - range.begin);
        const int64_t k0 = int64_t(b - p.offset), n = int64_t(e - b);
        if (p.init == Init::Zero || p.init == Init::One) {
            const float v = p.init == Init::One ? 1.0f : 0.0f;
            for (int64_t i = 0; i < n; i++) w[i] = v;
            continue;
        }
        const float sd = p.init == Init::ResidNormal ? std_resid : 0.02f;
        const int64_t real = p.hf_rows >= 0 ? p.hf_rows * p.full_shape[1] : INT64_MAX;  // vocabulary padding
        const uint64_t base = splitmix64(seed ^ fnv1a(p.name));
#pragma omp parallel for schedule(static)
        for (int64_t i = 0; i < n; i++) {
            const int64_t f = full_index(p, k0 + i);
            w[i] = f < real ? sd * normal_from_key(base + uint64_t(f)) : 0.0f;
        }
    }
}

void to_hf_layout(float* dst, const float* src, const ParamSpec& p) {
    for (const Piece& pc : pieces_of(p, 0, p.numel)) {
        // the parameter is whole (tp 1): its single piece starts at HF (0, 0)
        gather_piece(dst, src - p.offset, pc);
    }
}

void from_hf_layout(float* dst, const float* src, const ParamSpec& p) {
    const std::vector<int64_t> hs = p.hf_shape();
    const Box whole{{0, 0}, {hs[0], hs.size() > 1 ? hs[1] : 1}};
    for (const Piece& pc : pieces_of(p, 0, p.numel)) scatter_intersection(dst - p.offset, pc, whole, src);
}

// ---- stored pieces --------------------------------------------------------------------------------

void PieceStore::add_file(const std::string& path) {
    readers_.push_back(std::make_unique<io::SafetensorsReader>(path));
    paths_.push_back(path);
    const io::SafetensorsReader& r = *readers_.back();
    for (const io::TensorInfo& t : r.tensors()) {
        std::string name = t.name;
        Box box;
        const size_t lb = name.find('[');
        const bool whole = lb == std::string::npos;
        if (lb != std::string::npos) {
            SHARDLM_CHECK(parse_box(name.substr(lb), &box), path, ": tensor '", t.name,
                          "' has a malformed piece box (want name[r0:r1,c0:c1] or name[r0:r1])");
            name = name.substr(0, lb);
            SHARDLM_CHECK(int64_t(box.numel()) == t.numel(), path, ": piece '", t.name, "' holds ", t.numel(),
                          " elements but its box has ", box.numel());
        } else {
            SHARDLM_CHECK(t.shape.size() >= 1 && t.shape.size() <= 2, path, ": tensor '", t.name, "' has ",
                          t.shape.size(), " dimensions; GPT-2 parameters have 1 or 2");
            box = Box{{0, 0}, {t.shape[0], t.shape.size() > 1 ? t.shape[1] : 1}};
        }
        DType dt;
        SHARDLM_CHECK(dtype_from_name(t.dtype, &dt), path, ": tensor '", t.name, "' has dtype ", t.dtype,
                      "; parameters must be F32, BF16 or F16");
        index_[name].push_back({&r, &t, box, whole});
    }
}

std::vector<std::string> PieceStore::names() const {
    std::vector<std::string> out;
    for (const auto& [n, v] : index_) out.push_back(n);
    return out;
}

void PieceStore::load(float* dst, const Layout& layout, FlatRange range, const std::string& prefix) const {
    std::memset(dst, 0, (range.end - range.begin) * sizeof(float));
    std::vector<float> rows;
    for (Piece pc : pieces_of(layout, {range})) {
        pc.base -= int64_t(range.begin);  // dst holds the range only
        const std::string name = prefix + pc.param->name;
        auto it = index_.find(name);
        SHARDLM_CHECK(it != index_.end(), "no tensor '", name, "' in ", paths_.empty() ? "(no files)" : paths_.front(),
                      paths_.size() > 1 ? " and the other files of the checkpoint" : "",
                      "\n---> HINT: is this the right model or checkpoint directory?");
        const std::vector<int64_t> hs = pc.param->hf_shape();
        size_t covered = 0;
        for (const Stored& s : it->second) {
            SHARDLM_CHECK(!s.whole || s.tensor->shape == hs, s.file->path(), ": tensor '", s.tensor->name, "' has shape ",
                          io::shape_str(s.tensor->shape), ", expected ", io::shape_str(hs),
                          "\n---> HINT: does config.json match the weights?");
            SHARDLM_CHECK(s.box.hi[0] <= hs[0] && s.box.hi[1] <= (hs.size() > 1 ? hs[1] : 1), s.file->path(),
                          ": tensor '", s.tensor->name, "' ", s.box.str(), " lies outside ", pc.param->name, "'s shape ",
                          io::shape_str(hs), "\n---> HINT: does config.json match the weights?");
            const Box x = intersect(pc.box, s.box);
            if (x.empty()) continue;
            // read only the stored rows that intersect, converted to fp32
            const Box part{{x.lo[0], s.box.lo[1]}, {x.hi[0], s.box.hi[1]}};
            DType dt;
            dtype_from_name(s.tensor->dtype, &dt);
            const size_t eb = dtype_bytes(dt);
            rows.resize(part.numel());
            const char* src = static_cast<const char*>(s.file->data(*s.tensor)) +
                              size_t(x.lo[0] - s.box.lo[0]) * size_t(s.box.cols()) * eb;
            convert_to_f32(rows.data(), src, dt, rows.size());
            covered += scatter_intersection(dst, pc, part, rows.data());
        }
        SHARDLM_CHECK(covered == pc.box.numel(), "tensor '", name, "' ", pc.box.str(), ": the stored pieces cover ",
                      covered, " of its ", pc.box.numel(), " elements", covered > pc.box.numel() ? " (overlapping pieces)" : "",
                      "\n---> HINT: the checkpoint is incomplete, or from another model");
    }
}

// ---- HF directories ----------------------------------------------------------------------------

namespace {
// A training run's directory (`train --out`) holds checkpoints, not weights: name them.
void check_not_run_dir(const std::string& dir) {
    if (!fs::is_directory(dir) || fs::exists(fs::path(dir) / "meta.json")) return;
    std::vector<std::string> ckpts;
    for (const auto& e : fs::directory_iterator(dir)) {
        const std::string n = e.path().filename().string();
        if (e.is_directory() && n.rfind("ckpt_", 0) == 0 && n.size() == 13 && fs::exists(e.path() / "meta.json"))
            ckpts.push_back(n);
    }
    if (ckpts.empty()) return;
    std::sort(ckpts.begin(), ckpts.end());
    std::string list;
    for (const std::string& c : ckpts) list += (list.empty() ? "" : ", ") + c;
    fail("'", dir, "' is a training run's directory, not weights: its checkpoints are ", list,
         "\n---> HINT: name one of them, e.g. ", (fs::path(dir) / ckpts.back()).string(), " (the newest)");
}
}  // namespace

GptConfig load_hf_dir_config(const std::string& dir) {
    check_not_run_dir(dir);
    std::string path = (fs::path(dir) / "config.json").string();
    SHARDLM_CHECK(fs::exists(path), "'", dir, "' has no config.json\n---> HINT: --init takes a ",
                  "directory with an HF GPT-2 config.json and model.safetensors (e.g. written by `shardlm export`) ",
                  "or a shardlm checkpoint");
    return load_hf_config(path);
}

std::vector<std::string> model_files(const std::string& dir) {
    check_not_run_dir(dir);
    std::vector<std::string> out;
    if (fs::is_directory(dir))
        for (const auto& e : fs::directory_iterator(dir)) {
            const std::string n = e.path().filename().string();
            // HF: model.safetensors, or its shards model-0000i-of-0000n.safetensors; a checkpoint: model.rank*
            if (n == "model.safetensors" || ((n.rfind("model.rank", 0) == 0 || n.rfind("model-", 0) == 0) &&
                                             ends_with(n, ".safetensors")))
                out.push_back(e.path().string());
        }
    std::sort(out.begin(), out.end());
    SHARDLM_CHECK(!out.empty(), "'", dir, "' has no model.safetensors (HF directory) nor model.rank*.safetensors ",
                  "(shardlm checkpoint)\n---> HINT: --init takes an HF GPT-2 directory or a checkpoint directory");
    return out;
}

void check_model_tensors(const PieceStore& store, const GptConfig& c, const std::string& where) {
    std::set<std::string> known;
    for (const ParamSpec& p : make_gpt2_layout(c).params) known.insert(p.name);
    for (const std::string& n : store.names()) {
        if (known.count(n)) continue;
        // HF files may carry the tied head, GPT-2's causal-mask buffers and LLaMA's rotary frequencies
        // (older versions); they hold no parameters of ours.
        if ((n == "lm_head.weight" && c.tie_embeddings) || ends_with(n, ".attn.bias") ||
            ends_with(n, ".attn.masked_bias") || ends_with(n, ".rotary_emb.inv_freq"))
            continue;
        fail(where, ": unexpected tensor '", n, "' for a ", c.family() == Family::Gpt2 ? "GPT-2" : "LLaMA-named model",
             " with n_layer=", c.n_layer, c.family() == Family::Llama && !c.bias && ends_with(n, ".bias") ? " and no biases" : "",
             "\n---> HINT: does config.json match the weights?");
    }
}

void load_hf_weights(const std::string& dir, const GptConfig& c, const Layout& layout, float* params) {
    PieceStore store;
    for (const std::string& f : model_files(dir)) store.add_file(f);
    check_model_tensors(store, c, dir);
    store.load(params, layout, FlatRange{0, layout.total});
}

void save_hf_model(const std::string& dir, const GptConfig& c, const Layout& layout, const float* params, DType dtype) {
    fs::create_directories(dir);
    io::SafetensorsWriter w;
    std::vector<float> tmp;
    for (const ParamSpec& p : layout.params) {
        if (p.tied_copy) continue;
        tmp.resize(p.hf_numel());
        to_hf_layout(tmp.data(), params + p.offset, p);
        w.add_f32(p.name, p.hf_shape(), tmp.data(), dtype);
    }
    w.set_metadata("format", "pt");
    w.write((fs::path(dir) / "model.safetensors").string());
    io::write_file_atomic((fs::path(dir) / "config.json").string(), hf_config_json(c));
}

}  // namespace shardlm::model
