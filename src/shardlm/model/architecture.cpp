#include "shardlm/model/architecture.h"

#include "shardlm/core/enum_names.h"
#include "shardlm/core/format.h"

namespace shardlm::model {

namespace {

std::string moe_layer_list(const GptConfig& c) {
    std::string out;
    for (int l = 0; l < c.n_layer; l++)
        if (c.is_moe(l)) {
            if (!out.empty()) out += ',';
            out += std::to_string(l);
        }
    return out;
}

std::string text(const nlohmann::json& v) { return v.is_string() ? v.get<std::string>() : v.dump(); }

}  // namespace

nlohmann::json architecture_json(const GptConfig& c) {
    nlohmann::json j = {{"n_layer", c.n_layer},
                        {"n_head", c.n_head},
                        {"n_embd", c.n_embd},
                        {"vocab_size", c.vocab_size},
                        {"n_ctx", c.n_ctx},
                        {"ln_eps", c.ln_eps},
                        {"family", c.family() == Family::Gpt2 ? "gpt2" : "llama"},
                        {"norm", setting_text(c.norm)},
                        {"position", setting_text(c.position)},
                        {"rope_theta", c.rope_theta},
                        {"mlp", setting_text(c.mlp)},
                        {"ffn_hidden", c.ffn()},
                        {"bias", c.bias},
                        {"tie_embeddings", c.tie_embeddings},
                        {"n_kv_head", c.kv_heads()},
                        {"qk_norm", c.qk_norm},
                        {"n_experts", c.moe.n_experts}};
    if (c.has_moe()) {
        j["top_k"] = c.moe.top_k;
        j["shared_experts"] = c.moe.n_shared;
        j["moe_ffn"] = c.expert_ffn();
        j["router"] = setting_text(c.moe.router);
        j["norm_topk"] = c.moe.norm_topk;
        j["moe_layers"] = moe_layer_list(c);
    }
    return j;
}

std::vector<ArchitectureChange> architecture_changes(const nlohmann::json& was, const nlohmann::json& now) {
    std::vector<ArchitectureChange> out;
    if (!was.is_object()) return out;
    for (const auto& [key, v] : was.items()) {
        if (key == "family") continue;  // follows from the others (and is named in the summaries)
        const nlohmann::json w = now.contains(key) ? now[key] : nlohmann::json();
        // numbers compare as numbers (a float written as 1e-05 and read back as a double)
        const bool same = v.is_number() && w.is_number() ? v.get<double>() == w.get<double>() ||
                                                               float(v.get<double>()) == float(w.get<double>())
                                                         : v == w;
        if (!same) out.push_back({key, text(v), w.is_null() ? "(none)" : text(w)});
    }
    return out;
}

std::string architecture_summary(const nlohmann::json& a) {
    auto has = [&](const char* k) { return a.contains(k); };
    std::string s = has("family") ? (a["family"] == "gpt2" ? "GPT-2 family" : "LLaMA family") : "a model";
    if (has("n_layer") && has("n_head")) s += format(", %s layers x %s heads", text(a["n_layer"]).c_str(), text(a["n_head"]).c_str());
    if (has("n_embd")) s += ", width " + text(a["n_embd"]);
    if (has("vocab_size")) s += ", vocabulary " + text(a["vocab_size"]);
    if (has("norm")) s += ", " + text(a["norm"]);
    if (has("position")) s += ", " + text(a["position"]) + " positions";
    if (has("mlp")) s += ", " + text(a["mlp"]) + " MLP" + (has("ffn_hidden") ? " of " + text(a["ffn_hidden"]) : "");
    if (has("bias")) s += a["bias"] == true ? ", biases" : ", no biases";
    if (has("tie_embeddings")) s += a["tie_embeddings"] == true ? ", tied head" : ", own head";
    if (has("n_kv_head") && has("n_head") && a["n_kv_head"] != a["n_head"]) s += ", " + text(a["n_kv_head"]) + " KV heads";
    if (a.value("qk_norm", false)) s += ", q/k norms";
    if (a.value("n_experts", 0) > 0)
        s += ", " + text(a["n_experts"]) + " experts" + (has("top_k") ? " (top " + text(a["top_k"]) + ")" : "");
    return s;
}

std::string architecture_flag(const std::string& key) {
    if (key == "ln_eps") return "--rms-norm-eps";
    std::string f = "--" + key;
    for (char& c : f) c = c == '_' ? '-' : c;
    return f;
}

}  // namespace shardlm::model
