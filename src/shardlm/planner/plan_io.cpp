#include "shardlm/planner/plan_io.h"

#include <algorithm>
#include <limits>
#include <type_traits>
#include <vector>

#include "shardlm/core/check.h"
#include "shardlm/io/json_file.h"

namespace shardlm::planner {

namespace {

using nlohmann::json;

// Typed access to one JSON object whose keys must all be known; errors name the source and the key.
class Fields {
public:
    Fields(const json& j, std::string source, std::string what, std::vector<std::string> keys)
        : j_(j), source_(std::move(source)), keys_(std::move(keys)) {
        SHARDLM_CHECK(j_.is_object(), source_, ": expected a JSON object of ", what, " settings\n---> HINT: keys are ", list());
        for (auto it = j_.begin(); it != j_.end(); ++it)
            SHARDLM_CHECK(std::find(keys_.begin(), keys_.end(), it.key()) != keys_.end(), source_, ": unknown key '",
                          it.key(), "'\n---> HINT: ", what, " keys are ", list());
    }
    bool has(const char* key) const { return j_.contains(key); }
    void require(const char* key) const {
        SHARDLM_CHECK(has(key), source_, ": missing key '", key, "'\n---> HINT: add \"", key, "\": ... (keys: ", list(), ")");
    }
    // The value of `key` as a T (bool, int, int64_t, double or std::string), or fallback if absent.
    template <typename T>
    T get(const char* key, T fallback) const {
        if (!has(key)) return fallback;
        const json& v = j_[key];
        bool ok;
        const char* want;
        if constexpr (std::is_same_v<T, bool>) ok = v.is_boolean(), want = "true or false";
        else if constexpr (std::is_integral_v<T>) ok = v.is_number_integer(), want = "an integer";
        else if constexpr (std::is_floating_point_v<T>) ok = v.is_number(), want = "a number";
        else ok = v.is_string(), want = "a string";
        SHARDLM_CHECK(ok, source_, ": key '", key, "' must be ", want, " (got ", v.dump(), ")");
        if constexpr (std::is_same_v<T, int>) {
            const int64_t x = v.get<int64_t>();
            SHARDLM_CHECK(x >= std::numeric_limits<int>::min() && x <= std::numeric_limits<int>::max(), source_,
                          ": key '", key, "' is out of range (", x, ")");
        }
        return v.get<T>();
    }
    [[noreturn]] void bad_value(const char* key, const std::string& value, const char* choices) const {
        fail(source_, ": key '", key, "' has the unknown value \"", value, "\"\n---> HINT: use one of ", choices);
    }

private:
    std::string list() const {
        std::string s;
        for (const auto& k : keys_) s += (s.empty() ? "" : ", ") + k;
        return s;
    }
    const json& j_;
    std::string source_;
    std::vector<std::string> keys_;
};

// A cluster file's list of measured products (gemm_shapes, lanes_gemm_shapes): [{M, N, K, efficiency}, ...].
std::shared_ptr<const std::vector<MeasuredGemm>> measured_gemms(const json& j, const std::string& source, const char* key) {
    if (!j.contains(key)) return nullptr;
    const json& a = j[key];
    const std::string hint = "\n---> HINT: \"" + std::string(key) +
                             "\": [{\"M\": 1024, \"N\": 768, \"K\": 256, \"efficiency\": 0.8}, ...] (efficiency: the "
                             "fraction of the peak; `shardlm calibrate` writes them)";
    SHARDLM_CHECK(a.is_array(), source, ": key '", key, "' must be a list of measured products", hint);
    auto v = std::make_shared<std::vector<MeasuredGemm>>();
    for (size_t i = 0; i < a.size(); i++) {
        const json& g = a[i];
        const auto num = [&](const char* k) {
            SHARDLM_CHECK(g.is_object() && g.contains(k) && g[k].is_number() && g[k].get<double>() > 0, source, ": ", key,
                          "[", i, "] needs a positive number '", k, "'", hint);
            return g[k].get<double>();
        };
        MeasuredGemm m{num("M"), num("N"), num("K"), num("efficiency")};
        SHARDLM_CHECK(m.efficiency <= 1, source, ": ", key, "[", i, "].efficiency is ", m.efficiency,
                      ", above the peak", hint);
        v->push_back(m);
    }
    return v;
}

json measured_gemms_to_json(const std::shared_ptr<const std::vector<MeasuredGemm>>& v) {
    json a = json::array();
    for (const MeasuredGemm& g : *v) a.push_back({{"M", g.M}, {"N", g.N}, {"K", g.K}, {"efficiency", g.efficiency}});
    return a;
}

}  // namespace

cost::ModelShape model_from_json(const json& j, const std::string& source) {
    const Fields f(j, source, "model",
                   {"name", "layers", "hidden", "heads", "kv_heads", "ffn_hidden", "vocab", "seq_len", "arch",
                    "tied_embeddings", "dropout", "experts", "top_k", "expert_ffn", "shared_experts", "qk_norm"});
    for (const char* key : {"layers", "hidden", "heads", "vocab"}) f.require(key);
    cost::Arch arch;
    const std::string a = f.get<std::string>("arch", "gpt");
    if (!cost::arch_from_name(a, &arch)) f.bad_value("arch", a, "\"gpt\", \"llama\"");
    const int layers = f.get<int>("layers", 0), hidden = f.get<int>("hidden", 0), heads = f.get<int>("heads", 0);
    const int vocab = f.get<int>("vocab", 0), seq = f.get<int>("seq_len", 0);
    cost::ModelShape m = arch == cost::Arch::Gpt ? cost::gpt_shape("custom", layers, hidden, heads, vocab, seq)
                                                 : cost::llama_shape("custom", layers, hidden, heads, heads,
                                                                     cost::llama_default_ffn(hidden), vocab, seq);
    m.name = f.get<std::string>("name", source);
    m.kv_heads = f.get<int>("kv_heads", heads);
    m.ffn_hidden = f.get<int>("ffn_hidden", m.ffn_hidden);
    m.tied_embeddings = f.get<bool>("tied_embeddings", m.tied_embeddings);
    m.dropout = f.get<bool>("dropout", m.dropout);
    m.experts = f.get<int>("experts", 0), m.top_k = f.get<int>("top_k", m.experts ? 2 : 0);
    m.expert_ffn = f.get<int>("expert_ffn", m.ffn_hidden), m.shared_experts = f.get<int>("shared_experts", 0);
    m.qk_norm = f.get<bool>("qk_norm", false);
    return m;
}

Cluster cluster_from_json(const json& j, const std::string& source) {
    const Fields f(j, source, "cluster",
                   {"gpu", "num_gpus", "gpus_per_node", "peak_tflops", "memory_gb", "intra_node_GBps",
                    "inter_node_GBps", "hbm_GBps", "peak_tflops_tf32", "peak_tflops_fp32", "intra_node_alpha_us",
                    "inter_node_alpha_us", "reserve_gb", "gemm_max", "gemm_half_dim", "memory_efficiency", "comm_overlap",
                    "peak_tflops_fp8", "fp8_gemm_max", "flash_efficiency", "intra_node_link_efficiency",
                    "inter_node_link_efficiency", "allocator_overhead", "allocator_overhead_pytorch",
                    "fp8_gemm_max_pytorch", "flash_efficiency_pytorch", "threads_per_rank", "lanes_gemm_max",
                    "lanes_gemm_half_dim", "gemm_shapes", "lanes_gemm_shapes", "alone_speedup",
                    "measured"});  // "measured": what `shardlm calibrate` fitted the constants to (not read)
    f.require("num_gpus");
    f.require("gpus_per_node");
    Cluster c;
    const std::string name = f.get<std::string>("gpu", "custom");
    const GpuSpec* known = gpu_preset(name);
    const bool preset = known != nullptr;
    if (preset) {
        c.gpu = *known, c.efficiency = known->efficiency;
        c.allocator_overhead = kGpuAllocatorOverhead, c.allocator_overhead_pytorch = kGpuAllocatorOverheadPytorch;
    } else {
        for (const char* key : {"peak_tflops", "memory_gb", "intra_node_GBps", "inter_node_GBps"}) f.require(key);
    }
    GpuSpec& g = c.gpu;
    g.name = name;
    g.peak_tflops = f.get<double>("peak_tflops", g.peak_tflops);
    g.memory_gb = f.get<double>("memory_gb", g.memory_gb);
    g.intra_node_GBps = f.get<double>("intra_node_GBps", g.intra_node_GBps);
    g.inter_node_GBps = f.get<double>("inter_node_GBps", g.inter_node_GBps);
    g.hbm_GBps = f.get<double>("hbm_GBps", preset ? g.hbm_GBps : 6.5 * g.peak_tflops);
    g.peak_tflops_tf32 = f.get<double>("peak_tflops_tf32", preset ? g.peak_tflops_tf32 : g.peak_tflops / 2);
    g.peak_tflops_fp32 = f.get<double>("peak_tflops_fp32", preset ? g.peak_tflops_fp32 : g.peak_tflops / 16);
    g.peak_tflops_fp8 = f.get<double>("peak_tflops_fp8", g.peak_tflops_fp8);
    c.num_gpus = f.get<int>("num_gpus", 0);
    c.gpus_per_node = f.get<int>("gpus_per_node", 0);
    c.intra_node_alpha_us = f.get<double>("intra_node_alpha_us", c.intra_node_alpha_us);
    c.inter_node_alpha_us = f.get<double>("inter_node_alpha_us", c.inter_node_alpha_us);
    c.reserve_gb = f.get<double>("reserve_gb", c.reserve_gb);
    c.comm_overlap = f.get<double>("comm_overlap", c.comm_overlap);
    c.efficiency.gemm_max = f.get<double>("gemm_max", c.efficiency.gemm_max);
    c.efficiency.gemm_half_dim = f.get<double>("gemm_half_dim", c.efficiency.gemm_half_dim);
    c.efficiency.memory = f.get<double>("memory_efficiency", c.efficiency.memory);
    c.efficiency.fp8_gemm_max = f.get<double>("fp8_gemm_max", c.efficiency.fp8_gemm_max);
    c.efficiency.flash = f.get<double>("flash_efficiency", c.efficiency.flash);
    c.efficiency.intra_link = f.get<double>("intra_node_link_efficiency", c.efficiency.intra_link);
    c.efficiency.inter_link = f.get<double>("inter_node_link_efficiency", c.efficiency.inter_link);
    c.allocator_overhead = f.get<double>("allocator_overhead", c.allocator_overhead);
    c.allocator_overhead_pytorch = f.get<double>("allocator_overhead_pytorch", c.allocator_overhead_pytorch);
    c.efficiency.fp8_gemm_max_pytorch = f.get<double>("fp8_gemm_max_pytorch", c.efficiency.fp8_gemm_max_pytorch);
    c.efficiency.flash_pytorch = f.get<double>("flash_efficiency_pytorch", c.efficiency.flash_pytorch);
    c.threads_per_rank = f.get<int>("threads_per_rank", c.threads_per_rank);
    c.efficiency.lanes_gemm_max = f.get<double>("lanes_gemm_max", c.efficiency.lanes_gemm_max);
    c.efficiency.lanes_gemm_half_dim = f.get<double>("lanes_gemm_half_dim", c.efficiency.lanes_gemm_half_dim);
    c.alone_speedup = f.get<double>("alone_speedup", c.alone_speedup);
    c.efficiency.gemm_shapes = measured_gemms(j, source, "gemm_shapes");
    c.efficiency.lanes_gemm_shapes = measured_gemms(j, source, "lanes_gemm_shapes");
    const std::string why = check_cluster(c);
    SHARDLM_CHECK(why.empty(), source, ": ", why, "\n---> HINT: fix the value in the cluster file");
    return c;
}

PolicyRequest policy_request_from_json(const json& j, const std::string& source) {
    PolicyRequest r;
    json named = j;
    if (named.is_object()) {
        // null: left to the planner (a published case's unstated field)
        auto open = [&](const char* key, bool* flag) {
            if (named.contains(key) && named[key].is_null()) named.erase(key), *flag = true;
        };
        open("micro_batch", &r.open.micro_batch), open("virtual_stages", &r.open.virtual_stages);
        open("recompute", &r.open.recompute), open("sequence_parallel", &r.open.sequence_parallel);
        open("framework", &r.open.framework), open("attention", &r.open.attention);
        open("grad_accum_fp32", &r.open.grad_accum_fp32);
        // not named: the micro-batch is the planner's choice, the framework default_framework's and its
        // attention kernel and gradient accumulation that framework's; the rest take their defaults
        for (auto [key, flag] : {std::pair{"micro_batch", &r.open.micro_batch}, {"framework", &r.open.framework},
                                 {"attention", &r.open.attention}, {"grad_accum_fp32", &r.open.grad_accum_fp32}})
            *flag = *flag || !named.contains(key);
    }
    r.policy = policy_from_json(named, source);
    return r;
}

Policy policy_from_json(const json& j, const std::string& source) {
    const Fields f(j, source, "policy",
                   {"tp", "pp", "dp", "cp", "zero_stage", "micro_batch", "virtual_stages", "recompute",
                    "sequence_parallel", "precision", "schedule", "attention", "grad_accum_fp32", "framework",
                    "compile", "cp_comm", "ep"});
    Policy p;
    p.tp = f.get<int>("tp", 1), p.pp = f.get<int>("pp", 1), p.dp = f.get<int>("dp", 0), p.cp = f.get<int>("cp", 1);
    p.ep = f.get<int>("ep", 1);
    p.zero_stage = f.get<int>("zero_stage", 0);
    p.micro_batch = f.get<int64_t>("micro_batch", 1);
    const std::string sched = f.get<std::string>("schedule", "1f1b");
    if (sched != "1f1b" && sched != "interleaved" && sched != "zb-h1" && sched != "zbv")
        f.bad_value("schedule", sched, "\"1f1b\", \"interleaved\", \"zb-h1\", \"zbv\"");
    // interleaved is 1F1B over virtual stages; zbv implies two
    p.schedule = sched == "interleaved" ? cost::Schedule::OneFOneB : cost::parse_schedule(sched);
    p.virtual_stages = f.get<int>("virtual_stages", p.schedule == cost::Schedule::ZeroBubbleV ? 2 : 1);
    p.sequence_parallel = f.get<bool>("sequence_parallel", false);
    const std::string r = f.get<std::string>("recompute", "none");
    if (!cost::recompute_from_name(r, &p.recompute)) f.bad_value("recompute", r, "\"none\", \"selective\", \"full\"");
    const std::string prec = f.get<std::string>("precision", "bf16");
    if (!precision_from_name(prec, &p.precision))
        f.bad_value("precision", prec, "\"bf16\", \"fp16\", \"fp32\", \"fp8\"");
    p.grad_accum_fp32 = f.get<bool>("grad_accum_fp32", false);
    const std::string fw = f.get<std::string>("framework", "megatron");
    if (!framework_from_name(fw, &p.framework))
        f.bad_value("framework", fw, "\"megatron\", \"megatron-deepspeed\", \"megatron-core\", \"pytorch\", \"shardlm\"");
    const std::string att = f.get<std::string>("attention", "flash");
    if (!cost::attention_from_name(att, &p.attention)) f.bad_value("attention", att, "\"flash\", \"naive\"");
    const std::string cpc = f.get<std::string>("cp_comm", "allgather");
    if (!enum_from_name(cost::kCpCommNames, cpc, &p.cp_comm)) f.bad_value("cp_comm", cpc, "\"ring\", \"allgather\"");
    const std::string comp = f.get<std::string>("compile", "none");
    if (!enum_from_name(kCompileNames, comp, &p.compile))
        f.bad_value("compile", comp, "\"none\", \"blocks\", \"blocks_and_loss\"");
    return p;
}

cost::ModelShape load_model_file(const std::string& path) { return model_from_json(io::read_json_file(path), path); }
Cluster load_cluster_file(const std::string& path) { return cluster_from_json(io::read_json_file(path), path); }
Policy load_policy_file(const std::string& path) { return policy_from_json(io::read_json_file(path), path); }
PolicyRequest load_policy_request(const std::string& path) {
    return policy_request_from_json(io::read_json_file(path), path);
}

json model_to_json(const cost::ModelShape& m) {
    return {{"name", m.name},         {"layers", m.layers},         {"hidden", m.hidden},
            {"heads", m.heads},       {"kv_heads", m.kv_heads},     {"ffn_hidden", m.ffn_hidden},
            {"vocab", m.vocab},       {"seq_len", m.seq_len},       {"arch", cost::arch_name(m.arch)},
            {"tied_embeddings", m.tied_embeddings}, {"dropout", m.dropout}, {"params", cost::total_params(m)},
            {"experts", m.experts}, {"top_k", m.top_k}, {"expert_ffn", m.expert_ffn},
            {"shared_experts", m.shared_experts}, {"qk_norm", m.qk_norm}, {"active_params", cost::active_params(m)}};
}

json cluster_to_json(const Cluster& c) {
    const GpuSpec& g = c.gpu;
    json j = {{"gpu", g.name},
            {"num_gpus", c.num_gpus},
            {"gpus_per_node", c.gpus_per_node},
            {"peak_tflops", g.peak_tflops},
            {"memory_gb", g.memory_gb},
            {"intra_node_GBps", g.intra_node_GBps},
            {"inter_node_GBps", g.inter_node_GBps},
            {"hbm_GBps", g.hbm_GBps},
            {"peak_tflops_tf32", g.peak_tflops_tf32},
            {"peak_tflops_fp32", g.peak_tflops_fp32},
            {"peak_tflops_fp8", g.peak_tflops_fp8},
            {"intra_node_alpha_us", c.intra_node_alpha_us},
            {"inter_node_alpha_us", c.inter_node_alpha_us},
            {"reserve_gb", c.reserve_gb},
            {"comm_overlap", c.comm_overlap},
            {"gemm_max", c.efficiency.gemm_max},
            {"gemm_half_dim", c.efficiency.gemm_half_dim},
            {"memory_efficiency", c.efficiency.memory},
            {"fp8_gemm_max", c.efficiency.fp8_gemm_max},
            {"flash_efficiency", c.efficiency.flash},
            {"intra_node_link_efficiency", c.efficiency.intra_link},
            {"inter_node_link_efficiency", c.efficiency.inter_link},
            {"allocator_overhead", c.allocator_overhead},
            {"fp8_gemm_max_pytorch", c.efficiency.fp8_gemm_max_pytorch},
            {"flash_efficiency_pytorch", c.efficiency.flash_pytorch},
            {"threads_per_rank", c.threads_per_rank},
            {"lanes_gemm_max", c.efficiency.lanes_gemm_max},
            {"lanes_gemm_half_dim", c.efficiency.lanes_gemm_half_dim},
            {"alone_speedup", c.alone_speedup}};
    if (c.efficiency.gemm_shapes) j["gemm_shapes"] = measured_gemms_to_json(c.efficiency.gemm_shapes);
    if (c.efficiency.lanes_gemm_shapes) j["lanes_gemm_shapes"] = measured_gemms_to_json(c.efficiency.lanes_gemm_shapes);
    return j;
}

json policy_to_json(const Policy& p) {
    return {{"tp", p.tp},
            {"pp", p.pp},
            {"dp", p.dp},
            {"cp", p.cp},
            {"ep", p.ep},
            {"cp_comm", enum_name(cost::kCpCommNames, p.cp_comm)},
            {"zero_stage", p.zero_stage},
            {"micro_batch", p.micro_batch},
            {"virtual_stages", p.virtual_stages},
            {"recompute", cost::recompute_name(p.recompute)},
            {"sequence_parallel", p.sequence_parallel},
            {"precision", precision_name(p.precision)},
            {"attention", cost::attention_name(p.attention)},
            {"grad_accum_fp32", p.grad_accum_fp32},
            {"framework", framework_name(p.framework)},
            {"schedule", p.schedule == cost::Schedule::OneFOneB && p.virtual_stages > 1 ? "interleaved"
                                                                                       : cost::schedule_name(p.schedule)}};
}

json estimate_to_json(const Estimate& e) {
    const MemoryBreakdown& m = e.memory;
    const TimeBreakdown& t = e.time;
    auto link = [](bool in_node) { return in_node ? "intra_node" : "inter_node"; };
    return {{"feasible", e.feasible},
            {"reason", e.reason},
            {"policy", policy_to_json(e.policy)},
            {"micro_batches", e.micro_batches},
            {"fullest_stage", e.fullest_stage},
            {"memory_gb_per_gpu",
             {{"params", m.params / 1e9},
              {"grads", m.grads / 1e9},
              {"optimizer", m.optimizer / 1e9},
              {"activations", m.activations / 1e9},
              {"buffers", m.buffers / 1e9},
              {"total", m.total() / 1e9}}},
            {"time_s",
             {{"compute", t.compute},
              {"tp_comm", t.tp_comm},
              {"cp_comm", t.cp_comm},
              {"ep_comm", t.ep_comm},
              {"pp_bubble", t.pp_bubble},
              {"pp_comm", t.pp_comm},
              {"dp_comm", t.dp_comm},
              {"optimizer", t.optimizer}}},
            {"step_time_s", e.step_time_s},
            {"tokens_per_s", e.tokens_per_s},
            {"tokens_per_s_per_gpu", e.tokens_per_s_per_gpu},
            {"tflops_per_gpu", e.tflops_per_gpu},
            {"hfu_tflops_per_gpu", e.hfu_tflops_per_gpu},
            {"mfu", e.mfu},
            {"links", {{"tp", link(e.tp_in_node)}, {"dp", link(e.dp_in_node)}, {"pp", link(e.pp_in_node)}}}};
}

json chosen_json(const PolicyRequest& r, const Cluster& c, const Policy& resolved) {
    json out = json::object();
    if (r.open.framework)
        out["framework"] = {{"value", framework_name(resolved.framework)}, {"why", default_framework_reason(c, resolved)}};
    const char* fastest = "the fastest that fits, the rest of the policy as named (the leanest if none fits)";
    if (r.open.micro_batch) out["micro_batch"] = {{"value", resolved.micro_batch}, {"why", fastest}};
    if (r.open.virtual_stages) out["virtual_stages"] = {{"value", resolved.virtual_stages}, {"why", fastest}};
    if (r.open.recompute) out["recompute"] = {{"value", cost::recompute_name(resolved.recompute)}, {"why", fastest}};
    if (r.open.sequence_parallel) out["sequence_parallel"] = {{"value", resolved.sequence_parallel}, {"why", fastest}};
    return out;
}

json terms_to_json(const Terms& t, double step_time_s) {
    auto list = [&](const std::vector<Term>& terms) {
        json out = json::array();
        for (const Term& x : terms) {
            json j = {{"what", x.what}, {"seconds", x.seconds}, {"share", step_time_s > 0 ? x.seconds / step_time_s : 0}};
            if (!x.shape.empty()) j["shape"] = x.shape;
            if (x.efficiency > 0) j["efficiency"] = x.efficiency;
            out.push_back(j);
        }
        return out;
    };
    return {{"compute", list(t.compute)}, {"communication", list(t.communication)},
            {"pipeline_bubble_s", t.pipeline_bubble_s}, {"optimizer_s", t.optimizer_s}};
}

}  // namespace shardlm::planner
