#include "shardlm/planner/validation.h"

#include <algorithm>
#include <cmath>
#include <functional>

#include "shardlm/core/check.h"
#include "shardlm/io/json_file.h"
#include "shardlm/planner/plan_io.h"
#include "shardlm/planner/search.h"

namespace shardlm::planner {

namespace {

constexpr const char* kConventions[] = {"megatron", "megatron-core", "6N+12lhs", "6Nne+12lhs", "6N"};

double number(const nlohmann::json& j, const char* key, const std::string& where) {
    if (!j.contains(key)) return 0;
    SHARDLM_CHECK(j[key].is_number() && j[key].get<double>() > 0, where, ": '", key, "' must be a number > 0 (got ",
                  j[key].dump(), ")");
    return j[key].get<double>();
}

void only_keys(const nlohmann::json& j, std::initializer_list<const char*> keys, const std::string& where) {
    SHARDLM_CHECK(j.is_object(), where, ": expected a JSON object");
    for (auto it = j.begin(); it != j.end(); ++it) {
        bool known = false;
        for (const char* k : keys) known = known || it.key() == k;
        std::string list;
        for (const char* k : keys) list += (list.empty() ? "" : ", ") + std::string(k);
        SHARDLM_CHECK(known, where, ": unknown key '", it.key(), "'\n---> HINT: keys are ", list);
    }
}

std::string text(const nlohmann::json& j, const char* key, const std::string& where, bool required = true) {
    if (!j.contains(key)) {
        SHARDLM_CHECK(!required, where, ": missing key '", key, "'\n---> HINT: every case needs \"", key, "\"");
        return "";
    }
    SHARDLM_CHECK(j[key].is_string(), where, ": '", key, "' must be a string (got ", j[key].dump(), ")");
    return j[key].get<std::string>();
}

}  // namespace

bool known_convention(const std::string& convention) {
    for (const char* c : kConventions)
        if (convention == c) return true;
    return false;
}

double published_flops_per_token(const std::string& convention, const cost::ModelShape& m, int seq) {
    const double l = m.layers, h = m.hidden, s = seq, V = m.vocab, a = m.heads, g = m.kv_heads, f = m.ffn_hidden;
    const double N = double(cost::total_params(m));
    if (convention == "megatron") return 96 * l * h * h * (1 + s / (6 * h) + V / (16 * l * h));
    if (convention == "megatron-core") {
        const double gated = m.arch == cost::Arch::Llama ? 1.5 : 1.0;
        return 12 * l * h * h * ((1 + g / a + s / h) + (f / h) * gated) + 6 * h * V;
    }
    if (convention == "6N+12lhs") return 6 * N + 12 * l * h * s;
    if (convention == "6Nne+12lhs") return 6 * (N - double(cost::unit_params(m).embedding)) + 12 * l * h * s;
    if (convention == "6N") return 6 * N;
    fail("unknown FLOP convention '", convention, "'\n---> HINT: use megatron, megatron-core, 6N+12lhs, 6Nne+12lhs or 6N");
}

namespace {

// The plan contract's policy keys (issue 12) and the cluster as a GPU preset by name.
nlohmann::json contract_policy(const nlohmann::json& policy) {
    nlohmann::json out = nlohmann::json::object();
    for (const char* k : {"tp", "pp", "dp", "cp", "zero_stage", "micro_batch", "virtual_stages", "recompute",
                          "sequence_parallel", "precision"})
        if (policy.contains(k) && !policy[k].is_null()) out[k] = policy[k];
    return out;
}

nlohmann::json contract_cluster(const nlohmann::json& cluster) {
    nlohmann::json out = nlohmann::json::object();
    for (const char* k : {"gpu", "num_gpus", "gpus_per_node"})
        if (cluster.contains(k)) out[k] = cluster[k];
    return out;
}

}  // namespace

std::vector<PublishedCase> load_published_cases(const std::string& path, Reading reading) {
    const nlohmann::json all = io::read_json_file(path);
    SHARDLM_CHECK(all.is_array(), path, ": expected a JSON array of cases");
    std::vector<PublishedCase> out;
    for (const nlohmann::json& j : all) {
        PublishedCase c;
        c.id = text(j, "id", path);
        const std::string where = path + ": case '" + c.id + "'";
        only_keys(j, {"id", "family", "split", "source", "url", "model", "cluster", "policy", "global_batch", "seq",
                      "published", "convention", "mfu_peak_tflops", "flops_convention", "assumed", "notes",
                      "memory_has_context"},
                  where);
        c.family = text(j, "family", where);
        c.source = text(j, "source", where);
        c.split = text(j, "split", where);
        SHARDLM_CHECK(c.split == "fit" || c.split == "held_out", where, ": split '", c.split,
                      "' is not known\n---> HINT: \"fit\" (the constants may be chosen on it) or \"held_out\"");
        c.assumed = text(j, "assumed", where, false);
        SHARDLM_CHECK(j.contains("model") && j.contains("cluster") && j.contains("policy"), where,
                      ": needs \"model\", \"cluster\" and \"policy\" objects");
        c.model = model_from_json(j["model"], where + " model");
        const bool contract = reading == Reading::Contract;
        c.cluster = cluster_from_json(contract ? contract_cluster(j["cluster"]) : j["cluster"], where + " cluster");
        SHARDLM_CHECK(j["policy"].is_object(), where, ": \"policy\" must be an object");
        PolicyRequest request =
            policy_request_from_json(contract ? contract_policy(j["policy"]) : j["policy"], where + " policy");
        c.policy = request.policy, c.open = request.open;
        c.job.global_batch = int64_t(number(j, "global_batch", where));
        c.job.seq = int(number(j, "seq", where));
        SHARDLM_CHECK(c.job.global_batch > 0 && c.job.seq > 0, where, ": needs global_batch and seq");
        c.model.seq_len = c.job.seq;
        SHARDLM_CHECK(j.contains("published") && j["published"].is_object(), where, ": needs a \"published\" object");
        const nlohmann::json& p = j["published"];
        only_keys(p, {"tokens_per_s_per_gpu", "tflops_per_gpu", "mfu", "hfu", "memory_gib", "memory_gb", "step_time_s"},
                  where + " published");
        const double tokens = number(p, "tokens_per_s_per_gpu", where), tflops = number(p, "tflops_per_gpu", where);
        const double mfu = number(p, "mfu", where);
        if (tokens > 0) {
            c.tokens_per_s_per_gpu = tokens;
        } else if (tflops > 0 || mfu > 0) {
            c.convention = text(j, "convention", where);
            SHARDLM_CHECK(known_convention(c.convention), where, ": convention '", c.convention,
                          "' is not known\n---> HINT: megatron, megatron-core, 6N+12lhs, 6Nne+12lhs or 6N");
            double achieved = tflops * 1e12;
            if (achieved == 0) {
                const double peak = number(j, "mfu_peak_tflops", where);
                SHARDLM_CHECK(peak > 0, where, ": an MFU needs \"mfu_peak_tflops\" (the peak the source divided by)");
                achieved = (mfu > 1 ? mfu / 100 : mfu) * peak * 1e12;
            }
            c.tokens_per_s_per_gpu = achieved / published_flops_per_token(c.convention, c.model, c.job.seq);
        }
        const double gib = number(p, "memory_gib", where), gb = number(p, "memory_gb", where);
        c.memory_bytes = gib > 0 ? gib * double(1ull << 30) : gb * 1e9;
        c.memory_has_context = j.value("memory_has_context", false);
        SHARDLM_CHECK(c.tokens_per_s_per_gpu > 0 || c.memory_bytes > 0, where,
                      ": published has no throughput (tokens_per_s_per_gpu, tflops_per_gpu, mfu) and no memory "
                      "(memory_gib, memory_gb)");
        out.push_back(std::move(c));
    }
    return out;
}

CaseResult predict(const PublishedCase& c) { return predict(c, c.cluster); }

CaseResult predict(const PublishedCase& c, const Cluster& cluster) {
    CaseResult r;
    r.estimate = evaluate_request(c.model, cluster, c.job, {c.policy, c.open});
    if (!r.estimate.consistent) return r;
    if (c.tokens_per_s_per_gpu > 0) r.throughput_ratio = r.estimate.tokens_per_s_per_gpu / c.tokens_per_s_per_gpu;
    if (c.memory_bytes > 0) {
        const double predicted = r.estimate.memory.total() - (c.memory_has_context ? 0 : cluster.reserve_gb * 1e9);
        r.memory_ratio = predicted / c.memory_bytes;
    }
    return r;
}

// ---- the fit ------------------------------------------------------------------------------------

void Score::add(double ratio, double bound) {
    if (ratio <= 0) return;
    total++;
    within += std::fabs(ratio - 1) <= bound;
    log_err += std::fabs(std::log(ratio));
    errors.push_back(std::fabs(ratio - 1));
}

double Score::median_error() const {
    if (errors.empty()) return 0;
    std::vector<double> e = errors;
    std::sort(e.begin(), e.end());
    const size_t n = e.size();
    return n % 2 ? e[n / 2] : (e[n / 2 - 1] + e[n / 2]) / 2;
}

double Score::mean_error() const {
    double sum = 0;
    for (double e : errors) sum += e;
    return errors.empty() ? 0 : sum / double(errors.size());
}

bool Score::better_than(const Score& o) const { return within != o.within ? within > o.within : log_err < o.log_err; }

namespace {

using Tweak = std::function<void(Cluster&)>;

Score score(const std::vector<const PublishedCase*>& cases, const Tweak& tweak, bool memory) {
    Score s;
    for (const PublishedCase* c : cases) {
        Cluster cl = c->cluster;
        tweak(cl);
        const CaseResult r = predict(*c, cl);
        if (memory) s.add(r.memory_ratio, 0.10);
        else s.add(r.throughput_ratio, 0.15);
    }
    return s;
}

std::vector<double> grid(double lo, double hi, double step) {
    std::vector<double> v;
    for (int i = 0; lo + i * step <= hi + 1e-9; i++) v.push_back(std::round((lo + i * step) * 1000) / 1000);
    return v;
}

// The grid value of one constant that scores best on `cases`; logs it.
double fit_one(const std::vector<const PublishedCase*>& cases, const std::vector<double>& values, const Tweak& base,
               const std::function<void(Cluster&, double)>& set, const std::string& what, std::string* log) {
    if (cases.empty()) return 0;
    Score top;
    top.within = -1;
    double best = values.front();
    for (double q : values) {
        const Score s = score(cases, [&](Cluster& c) { base(c), set(c, q); }, false);
        if (s.better_than(top)) top = s, best = q;
    }
    *log += cat(what, " ", best, ": ", top.within, " of ", top.total, " fit cases within 15 %\n");
    return best;
}

}  // namespace

FittedConstants fit_constants(const std::vector<PublishedCase>& cases) {
    FittedConstants f;
    // the allocator's overhead of each framework style, on that style's fit memory cases
    for (const bool pytorch : {false, true}) {
        std::vector<const PublishedCase*> mem;
        for (const PublishedCase& c : cases)
            if (c.split == "fit" && c.memory_bytes > 0 && (c.policy.framework == Framework::Pytorch) == pytorch)
                mem.push_back(&c);
        if (mem.empty()) continue;
        double& overhead = pytorch ? f.allocator_overhead_pytorch : f.allocator_overhead;
        Score top;
        top.within = -1;
        for (double a : grid(0.0, 0.30, 0.01)) {
            const Score s = score(mem, [&](Cluster& c) { c.allocator_overhead = c.allocator_overhead_pytorch = a; }, true);
            if (s.better_than(top)) top = s, overhead = a;
        }
        f.log += cat(pytorch ? "allocator_overhead_pytorch " : "allocator_overhead ", overhead, ": ", top.within, " of ",
                     top.total, " fit memory cases within 10 %\n");
    }
    for (const char* gen : {"ampere", "hopper"}) {
        std::vector<const PublishedCase*> sixteen, fp8, fp8_pt, pytorch;  // sixteen: Megatron styles'
        for (const PublishedCase& c : cases) {
            if (c.split != "fit" || generation(c.cluster) != gen || c.tokens_per_s_per_gpu <= 0) continue;
            const bool pt = c.policy.framework == Framework::Pytorch;
            if (c.policy.precision == Precision::Fp8) (pt ? fp8_pt : fp8).push_back(&c);
            else (pt ? pytorch : sixteen).push_back(&c);
        }
        if (sixteen.empty()) continue;
        FittedConstants::Generation& g = f.generations[gen];
        // the GEMM curve first, on the Megatron-style runs (their attention kernel's efficiency is a
        // source, not a fit; the PyTorch-style runs' attention is fitted next, on its own runs)
        Score top;
        top.within = -1;
        for (double gm : grid(0.40, 0.90, 0.01))
            for (double half : {16.0, 32.0, 64.0, 96.0, 128.0, 192.0, 256.0}) {
                const Score s = score(sixteen, [&](Cluster& c) {
                    c.efficiency.gemm_max = gm, c.efficiency.gemm_half_dim = half;
                    c.allocator_overhead = f.allocator_overhead, c.allocator_overhead_pytorch = f.allocator_overhead_pytorch;
                }, false);
                if (s.better_than(top)) top = s, g.gemm_max = gm, g.gemm_half_dim = half;
            }
        f.log += cat(gen, ": gemm_max ", g.gemm_max, ", gemm_half_dim ", g.gemm_half_dim, ": ", top.within, " of ",
                     top.total, " fit cases within 15 %\n");
        // the PyTorch style's attention at the Megatron style's until fitted, so that nothing depends on
        // the presets' fitted values
        auto base = [&](Cluster& c) {
            c.efficiency.flash_pytorch = c.efficiency.flash;
            c.efficiency.gemm_max = g.gemm_max, c.efficiency.gemm_half_dim = g.gemm_half_dim;
            c.allocator_overhead = f.allocator_overhead, c.allocator_overhead_pytorch = f.allocator_overhead_pytorch;
            if (g.flash_pytorch > 0) c.efficiency.flash_pytorch = g.flash_pytorch;
        };
        g.flash_pytorch = fit_one(pytorch, grid(0.15, 0.80, 0.01), base,
                                  [](Cluster& c, double q) { c.efficiency.flash_pytorch = q; },
                                  cat(gen, ": flash_pytorch"), &f.log);
        g.fp8_gemm_max = fit_one(fp8, grid(0.25, 0.90, 0.01), base,
                                 [](Cluster& c, double q) { c.efficiency.fp8_gemm_max = q; },
                                 cat(gen, ": fp8_gemm_max"), &f.log);
        g.fp8_gemm_max_pytorch = fit_one(fp8_pt, grid(0.25, 0.90, 0.01), base,
                                         [](Cluster& c, double q) { c.efficiency.fp8_gemm_max_pytorch = q; },
                                         cat(gen, ": fp8_gemm_max_pytorch"), &f.log);
    }
    return f;
}

Cluster with_constants(const Cluster& c, const FittedConstants& f) {
    Cluster out = c;
    out.allocator_overhead = f.allocator_overhead, out.allocator_overhead_pytorch = f.allocator_overhead_pytorch;
    const auto it = f.generations.find(generation(c));
    if (it == f.generations.end()) return out;
    const FittedConstants::Generation& g = it->second;
    if (g.gemm_max > 0) out.efficiency.gemm_max = g.gemm_max, out.efficiency.gemm_half_dim = g.gemm_half_dim;
    if (g.flash_pytorch > 0) out.efficiency.flash_pytorch = g.flash_pytorch;
    if (g.fp8_gemm_max > 0) out.efficiency.fp8_gemm_max = g.fp8_gemm_max;
    if (g.fp8_gemm_max_pytorch > 0) out.efficiency.fp8_gemm_max_pytorch = g.fp8_gemm_max_pytorch;
    return out;
}

}  // namespace shardlm::planner
