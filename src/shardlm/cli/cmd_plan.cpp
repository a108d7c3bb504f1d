// cli/cmd_plan.cpp: `shardlm plan`: predict per-GPU memory and step time of parallel policies and
// search the best (planner/). Model: a planner preset (LLaMA, Llama-2/3, Megatron-LM's table), an
// engine preset (GPT-2, GPT-3; model/config.h, adapted here), a JSON file, or explicit shape flags.
// Cluster: --gpu PRESET --gpus-per-node N --nodes N, or --cluster FILE.json.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>

#include "shardlm/cli/commands.h"
#include "shardlm/core/check.h"
#include "shardlm/model/config.h"
#include "shardlm/planner/dp_algos.h"
#include "shardlm/planner/explain.h"
#include "shardlm/planner/model_presets.h"
#include "shardlm/planner/plan_io.h"
#include "shardlm/planner/plan_report.h"
#include "shardlm/train/train_config.h"

namespace shardlm::cli {

namespace {

struct PlanArgs {
    std::string model, cluster, gpu = "A100-80GB", policy, svg, arch, recompute, sp, precision = "bf16", schedule;
    std::string attention, framework, compile = "none", cp_comm;
    optim::Kind optimizer = optim::Kind::AdamW;
    int gpus_per_node = 8, nodes = 1, seq = -1, top = 5;  // seq -1: not given
    int64_t global_batch = 0;
    int layers = 0, hidden = 0, heads = 0, kv_heads = 0, ffn_hidden = 0, vocab = 0;
    int tp = 0, pp = 0, cp = 0, ep = 0, zero = -1, virtual_stages = 0;
    int64_t micro_batch = 0;
    bool json = false, list = false, dp_algos = false, explain = false;
};

// The engine's GPT-2/GPT-3 presets as planner shapes (one table of numbers: model/config.cpp).
const model::GptConfig* engine_preset(const std::string& name) {
    for (const auto& c : model::presets())
        if (c.name == name) return &c;
    return nullptr;
}

std::string preset_names() {
    std::string s;
    for (const auto& c : model::presets()) s += (s.empty() ? "" : ", ") + c.name;
    for (const auto& m : planner::model_presets())
        if (!engine_preset(m.name)) s += ", " + m.name;  // a name both know is listed once
    return s;
}

cost::ModelShape base_model(const PlanArgs& a) {
    if (a.model.empty()) {
        SHARDLM_CHECK(a.layers > 0 && a.hidden > 0 && a.heads > 0 && a.vocab > 0,
                      "no model\n---> HINT: give --model PRESET or FILE.json, or --layers --hidden --heads --vocab");
        cost::Arch arch = cost::Arch::Gpt;
        SHARDLM_CHECK(a.arch.empty() || cost::arch_from_name(a.arch, &arch), "--arch '", a.arch,
                      "' is not known\n---> HINT: use gpt or llama");
        const int seq = std::max(a.seq, 0);
        return arch == cost::Arch::Gpt ? cost::gpt_shape("custom", a.layers, a.hidden, a.heads, a.vocab, seq)
                                       : cost::llama_shape("custom", a.layers, a.hidden, a.heads, a.heads,
                                                           cost::llama_default_ffn(a.hidden), a.vocab, seq);
    }
    if (a.model.ends_with(".json") || std::filesystem::is_regular_file(a.model)) return planner::load_model_file(a.model);
    if (const cost::ModelShape* m = planner::find_model_preset(a.model)) return *m;
    if (const model::GptConfig* g = engine_preset(a.model)) {
        if (g->has_moe()) return model::cost_shape(*g, g->n_ctx);  // experts, top k, their width
        return cost::gpt_shape(g->name, g->n_layer, g->n_embd, g->n_head, g->vocab_size, g->n_ctx);
    }
    fail("unknown model '", a.model, "'\n---> HINT: use a JSON model file or one of ", preset_names());
}

cost::ModelShape resolve_model(const PlanArgs& a) {
    cost::ModelShape m = base_model(a);
    if (!a.model.empty()) {  // explicit flags reshape a preset or file
        if (a.layers) m.layers = a.layers;
        if (a.hidden) {  // the MLP follows the new width unless --ffn-hidden says otherwise
            m.hidden = a.hidden;
            m.ffn_hidden = m.arch == cost::Arch::Gpt ? 4 * a.hidden : cost::llama_default_ffn(a.hidden);
        }
        if (a.heads) m.heads = a.heads, m.kv_heads = a.kv_heads ? m.kv_heads : a.heads;
        if (a.vocab) m.vocab = a.vocab;
    }
    if (a.kv_heads) m.kv_heads = a.kv_heads;
    if (a.ffn_hidden) m.ffn_hidden = a.ffn_hidden;
    if (a.seq != -1) {
        SHARDLM_CHECK(a.seq > 0, "--seq must be > 0 (got ", a.seq, ")\n---> HINT: leave it out for the model's own (",
                      m.seq_len, ")");
        // learned positions: the model has a table of seq_len rows, and a longer sequence has no rows
        SHARDLM_CHECK(!m.learned_positions || m.seq_len <= 0 || a.seq <= m.seq_len || a.model.empty(), "--seq ", a.seq,
                      " is longer than ", m.name, "'s context of ", m.seq_len,
                      " tokens: its learned position table has no rows beyond that",
                      "\n---> HINT: --seq ", m.seq_len, " or less, or a model file with a larger seq_len (a different model), "
                      "or --arch llama (rotary positions)");
        m.seq_len = a.seq;
    }
    SHARDLM_CHECK(m.seq_len > 0, "no sequence length\n---> HINT: give --seq S (or seq_len in the model file)");
    return m;  // its shape is checked by the search (an error) or by evaluate (a reason in the answer)
}

planner::Cluster resolve_cluster(const PlanArgs& a) {
    if (!a.cluster.empty()) return planner::load_cluster_file(a.cluster);
    SHARDLM_CHECK(a.gpus_per_node > 0 && a.nodes > 0, "--gpus-per-node and --nodes must be > 0");
    SHARDLM_CHECK(int64_t(a.gpus_per_node) * a.nodes <= planner::kMaxGpus, "--nodes ", a.nodes, " x --gpus-per-node ",
                  a.gpus_per_node, " is ", int64_t(a.gpus_per_node) * a.nodes, " GPUs, above the planner's ",
                  planner::kMaxGpus);
    return planner::make_cluster(planner::find_gpu(a.gpu), a.gpus_per_node, a.nodes);
}

planner::SearchSpace resolve_space(const PlanArgs& a) {
    planner::SearchSpace s;
    SHARDLM_CHECK(planner::precision_from_name(a.precision, &s.precision), "--precision '", a.precision,
                  "' is not known\n---> HINT: use bf16, fp16, fp32 or fp8");
    cost::Attention att = cost::Attention::Flash;
    SHARDLM_CHECK(a.attention.empty() || cost::attention_from_name(a.attention, &att), "--attention '", a.attention,
                  "' is not known\n---> HINT: use flash or naive");
    if (!a.attention.empty()) s.attention = att;
    if (!a.framework.empty()) {
        planner::Framework f;
        SHARDLM_CHECK(planner::framework_from_name(a.framework, &f), "--framework '", a.framework,
                      "' is not known\n---> HINT: use megatron, megatron-deepspeed, megatron-core, pytorch or shardlm");
        s.framework = f;
    }
    SHARDLM_CHECK(enum_from_name(planner::kCompileNames, a.compile, &s.compile), "--compile '", a.compile,
                  "' is not known\n---> HINT: use ", names_list(planner::kCompileNames));
    if (a.tp) s.tp = {a.tp};
    if (a.pp) s.pp = {a.pp};
    if (a.cp) s.cp = {a.cp};
    if (a.ep) s.ep = {a.ep};
    if (!a.cp_comm.empty()) {
        cost::CpComm cc;
        SHARDLM_CHECK(enum_from_name(cost::kCpCommNames, a.cp_comm, &cc), "--cp-comm '", a.cp_comm,
                      "' is not known\n---> HINT: use ", names_list(cost::kCpCommNames));
        s.cp_comm = {cc};
    }
    if (a.zero >= 0) s.zero_stage = {a.zero};
    if (a.micro_batch) s.micro_batch = {a.micro_batch};
    if (a.virtual_stages) s.virtual_stages = {a.virtual_stages};
    if (!a.schedule.empty()) {
        const cost::Schedule k = cost::parse_schedule(a.schedule);  // names the known ones
        SHARDLM_CHECK(k != cost::Schedule::GPipe, "--schedule gpipe is not modelled by the planner"
                      "\n---> HINT: use 1f1b, interleaved, zb-h1 or zbv");
        s.schedule = {k == cost::Schedule::Interleaved ? cost::Schedule::OneFOneB : k};
    }
    if (!a.recompute.empty()) {
        cost::Recompute r;
        SHARDLM_CHECK(cost::recompute_from_name(a.recompute, &r), "--recompute '", a.recompute,
                      "' is not known\n---> HINT: use none, selective or full");
        s.recompute = {r};
    }
    if (!a.sp.empty()) {
        SHARDLM_CHECK(a.sp == "on" || a.sp == "off", "--sp '", a.sp, "' is not known\n---> HINT: use on or off");
        s.sequence_parallel = {a.sp == "on"};
    }
    return s;
}

void write_svg(const std::string& path, const std::string& svg) {
    std::fflush(stdout);  // keep the report and this note in order on a shared terminal
    std::ofstream f(path);
    SHARDLM_CHECK(f && (f << svg), "cannot write '", path, "'\n---> HINT: check that its directory exists");
    std::fprintf(stderr, "wrote %s\n", path.c_str());
}

nlohmann::json problem_json(const cost::ModelShape& m, const planner::Cluster& c, const planner::Job& job) {
    return {{"model", planner::model_to_json(m)},
            {"cluster", planner::cluster_to_json(c)},
            {"global_batch", job.global_batch},
            {"seq", job.seq},
            {"optimizer_state_bytes_per_param", job.optimizer_state}};
}

// --dp-algos: the data-parallel algorithms' bytes and time beside the policy's all-reduce
void print_dp_algos(const cost::ModelShape& m, const planner::Cluster& c, const planner::Estimate& e) {
    if (!e.feasible || e.policy.dp <= 1) {
        std::printf("\n--dp-algos: %s\n", e.feasible ? "the policy has one data-parallel rank: nothing to compare"
                                                        : "the policy does not fit: nothing to compare");
        return;
    }
    std::printf("\n%s", planner::dp_algos_table(planner::compare_dp_algos(m, c, e), e.policy.dp, e.dp_in_node).c_str());
}

void run_policy(const PlanArgs& a, const cost::ModelShape& m, const planner::Cluster& c, const planner::Job& job) {
    const planner::PolicyRequest request = planner::load_policy_request(a.policy);
    const planner::Estimate e = planner::evaluate_request(m, c, job, request);
    if (a.json) {
        nlohmann::json j = planner::estimate_to_json(e);
        j.update(problem_json(m, c, job));
        j["planner_chose"] = planner::chosen_json(request, c, e.policy);
        if (a.explain) {
            j["explanation"] = planner::dominant_terms(e);
            j["terms"] = planner::terms_to_json(planner::explain_terms(m, c, job, e), e.step_time_s);
        }
        std::printf("%s\n", j.dump(2).c_str());
    } else {
        std::printf("%s\n%s", planner::describe_problem(m, c, job, e.policy.precision).c_str(),
                    planner::format_estimate(e, c).c_str());
        if (e.consistent) std::printf("%s: %s\n", a.explain ? "explain" : "dominant terms",
                                      (a.explain ? planner::dominant_terms(e) : planner::dominant_summary(e)).c_str());
        if (e.consistent && a.explain) std::printf("\n%s", planner::format_terms(planner::explain_terms(m, c, job, e), e).c_str());
        if (a.dp_algos) print_dp_algos(m, c, e);
    }
    if (!a.svg.empty()) write_svg(a.svg, planner::plan_svg({e}, c, m.name + ": " + planner::describe(e.policy)));
    if (!e.feasible) throw CLI::RuntimeError(3);  // as the search's "no policy fits": the policy cannot run here
}

// Why a search found nothing: the leanest consistent policy's memory, or that no policy was consistent.
std::string no_fit_reason(const planner::SearchResult& r, const planner::Cluster& c) {
    if (r.leanest.consistent)
        return cat("the leanest, ", planner::describe(r.leanest.policy), ", needs ", r.leanest.memory.total() / 1e9,
                   " GB per GPU of ", c.gpu.memory_gb);
    return cat("no policy is consistent with the model, the global batch, the ", c.num_gpus,
               " GPUs and the restrictions given (each tp, pp, cp, micro-batch must divide what it splits)");
}

void run_search(const PlanArgs& a, const cost::ModelShape& m, const planner::Cluster& c, const planner::Job& job) {
    const std::string why = cost::check_shape(m);
    SHARDLM_CHECK(why.empty(), "model ", m.name, ": ", why,
                  "\n---> HINT: fix the shape (model file keys, or --layers --hidden --heads --kv-heads --ffn-hidden --vocab)");
    const planner::SearchSpace space = resolve_space(a);
    SHARDLM_CHECK(space.precision != planner::Precision::Fp8 || c.gpu.peak_tflops_fp8 > 0, "--precision fp8: the ",
                  c.gpu.name, " has no FP8 tensor cores (peak_tflops_fp8 0)",
                  "\n---> HINT: --precision bf16, a GPU with FP8 (--gpu H100-SXM or H200), or peak_tflops_fp8 in a "
                  "--cluster file");
    // a restriction no policy can meet is said before searching, with its reason
    if (a.tp) {
        const char* what = m.heads % a.tp ? "attention heads" : m.kv_heads % a.tp ? "KV heads" : m.ffn_hidden % a.tp ? "MLP columns" : "";
        const int64_t n = m.heads % a.tp ? m.heads : m.kv_heads % a.tp ? m.kv_heads : m.ffn_hidden;
        SHARDLM_CHECK(!*what, "--tp ", a.tp, " does not divide the ", n, " ", what, " of ", m.name,
                      ": no policy can use it\n---> HINT: a tensor-parallel size that divides ", m.heads, " heads, ",
                      m.kv_heads, " KV heads and ", m.ffn_hidden, " MLP columns, or leave --tp out");
        SHARDLM_CHECK(c.num_gpus % a.tp == 0, "--tp ", a.tp, " does not divide the cluster's ", c.num_gpus, " GPUs");
    }
    if (a.pp) {
        SHARDLM_CHECK(m.layers % a.pp == 0, "--pp ", a.pp, " does not divide the ", m.layers, " layers",
                      "\n---> HINT: a pipeline size that divides the layers, or leave --pp out");
        SHARDLM_CHECK(c.num_gpus % a.pp == 0, "--pp ", a.pp, " does not divide the cluster's ", c.num_gpus, " GPUs");
    }
    const planner::SearchResult r = planner::search(m, c, job, space, a.top);
    if (a.json) {
        nlohmann::json j = problem_json(m, c, job);
        j["evaluated"] = r.evaluated, j["feasible"] = r.feasible, j["search_time_s"] = r.seconds;
        j["explanation"] = r.explanation;
        j["policies"] = nlohmann::json::array();
        for (const auto& e : r.top) {
            j["policies"].push_back(planner::estimate_to_json(e));
            if (a.explain) j["policies"].back()["explanation"] = planner::dominant_terms(e);
        }
        if (r.top.empty()) j["reason"] = no_fit_reason(r, c);
        std::printf("%s\n", j.dump(2).c_str());
    } else {
        std::printf("%s", planner::describe_problem(m, c, job, space.precision).c_str());
        std::printf("searched %lld policies in %.2f s; %lld fit in memory", (long long)r.evaluated, r.seconds,
                    (long long)r.feasible);
        if (r.top.empty()) {
            std::printf(".\nno policy fits: %s", no_fit_reason(r, c).c_str());
            std::printf("\n---> HINT: more GPUs or GPUs with more memory, a shorter sequence, or fewer restrictions\n");
        } else {
            std::printf(". Top %zu by predicted throughput:\n\n%s\nwhy #1: %s\n", r.top.size(),
                        planner::format_table(r.top, c).c_str(), r.explanation.c_str());
            if (a.explain)
                for (size_t i = 0; i < r.top.size(); i++)
                    std::printf("explain #%zu: %s\n", i + 1, planner::dominant_terms(r.top[i]).c_str());
            if (a.dp_algos) print_dp_algos(m, c, r.top.front());
        }
    }
    if (!a.svg.empty())
        write_svg(a.svg, planner::plan_svg(r.top, c, cat(m.name, " on ", c.num_gpus, " x ", c.gpu.name, ": top ",
                                                          r.top.size(), " policies")));
    if (r.top.empty()) throw CLI::RuntimeError(3);  // nothing to run: a script must not go on as if a plan came out
}

void list_presets() {
    std::printf("GPUs:");
    for (const auto& g : planner::gpu_presets()) std::printf(" %s", g.name.c_str());
    std::printf("\nmodels: %s\n", preset_names().c_str());
}

}  // namespace

void add_plan_command(CLI::App& app) {
    auto a = std::make_shared<PlanArgs>();
    CLI::App* c = app.add_subcommand("plan", "Predict per-GPU memory and step time of parallel policies; search the best");
    c->add_option("--model", a->model, "Model preset or model JSON file");
    c->add_option("--cluster", a->cluster, "Cluster JSON file (instead of --gpu/--gpus-per-node/--nodes)");
    c->add_option("--gpu", a->gpu, "GPU preset (A100-40GB, A100-80GB, H100-SXM, H200)")->capture_default_str();
    c->add_option("--gpus-per-node", a->gpus_per_node, "GPUs per node")->capture_default_str();
    c->add_option("--nodes", a->nodes, "Nodes")->capture_default_str();
    c->add_option("--global-batch", a->global_batch, "Sequences per step (required)");
    c->add_option("--seq", a->seq, "Tokens per sequence (default: the model's)");
    c->add_option("--policy", a->policy, "Evaluate this policy JSON file instead of searching");
    c->add_option("--top", a->top, "How many policies to show")->capture_default_str();
    c->add_flag("--json", a->json, "Print JSON");
    c->add_option("--svg", a->svg, "Write an SVG: memory and step-time bars per policy");
    c->add_flag("--list", a->list, "List GPU and model presets");
    c->add_flag("--explain", a->explain,
                "Name every term of the step time and of memory, largest first, with its share (the dominant one is "
                "what to attack)");
    c->add_flag("--dp-algos", a->dp_algos,
                "Also show what train --dp-algo local-sgd, diloco, gossip and compressed would send and cost beside the "
                "(best) policy's all-reduce on this cluster's data-parallel link");
    c->add_option("--layers", a->layers, "Shape: layers");
    c->add_option("--hidden", a->hidden, "Shape: hidden size");
    c->add_option("--heads", a->heads, "Shape: attention heads");
    c->add_option("--kv-heads", a->kv_heads, "Shape: KV heads (GQA)");
    c->add_option("--ffn-hidden", a->ffn_hidden, "Shape: MLP inner size");
    c->add_option("--vocab", a->vocab, "Shape: vocabulary");
    c->add_option("--arch", a->arch, "Shape: gpt or llama");
    c->add_option("--precision", a->precision,
                  "bf16, fp16, fp32 or fp8 (search; fp8: the linear layers' GEMMs at the GPU's FP8 peak, the rest in bf16)")
        ->capture_default_str();
    c->add_option("--framework", a->framework,
                  "The software style whose costs apply (search): megatron (2021), megatron-deepspeed (its bf16 "
                  "optimiser keeps 16-bit gradients too), megatron-core (TP and pipeline transfers overlapped, fused "
                  "attention, FP8), pytorch (FSDP-style: FlashAttention-2, float8), shardlm; not given: the one each "
                  "policy runs with (ZeRO-3: pytorch; otherwise megatron-core on H100/H200, megatron on A100)");
    c->add_option("--compile", a->compile,
                  "What torch.compile covers in a pytorch-style run (search): none, blocks or blocks_and_loss (a "
                  "compiled loss keeps 4 bytes a logit)")
        ->capture_default_str();
    c->add_option("--attention", a->attention,
                  "flash (fused kernel: no s x s activations, the causal half computed) or naive (search); not given: "
                  "the framework's (naive for megatron and megatron-deepspeed, flash for the others)");
    c->add_option_function<std::string>(
           "--optimizer", [a](const std::string& s) { train::parse_setting("--optimizer", s, &a->optimizer); },
           "The optimiser whose state is counted (as `train --optimizer` with its defaults; sophia also adds its "
           "Hessian pass, a forward and backward every 10 steps): " +
               setting_choices(&a->optimizer))
        ->default_str("adamw");
    c->add_option("--tp", a->tp, "Search only this tensor-parallel size");
    c->add_option("--pp", a->pp, "Search only this pipeline size");
    c->add_option("--cp", a->cp, "Search only this context-parallel size");
    c->add_option("--ep", a->ep, "Search only this expert-parallel size (a mixture of experts: it divides dp and the experts)");
    c->add_option("--cp-comm", a->cp_comm,
                  "Search only this context-parallel exchange: ring (a block a step, overlapped with the attention "
                  "tiles) or allgather (default: both)");
    c->add_option("--zero", a->zero, "Search only this ZeRO stage");
    c->add_option("--micro-batch", a->micro_batch, "Search only this micro-batch");
    c->add_option("--virtual-stages", a->virtual_stages, "Search only this number of virtual stages");
    c->add_option("--schedule", a->schedule,
                  "Search only this pipeline schedule: 1f1b (interleaved with --virtual-stages > 1), zb-h1 or zbv"
                  " (zero-bubble; default: 1f1b and interleaved)");
    c->add_option("--recompute", a->recompute, "Search only none, selective or full");
    c->add_option("--sp", a->sp, "Search only sequence parallelism on or off");
    c->callback([a] {
        if (a->list) return list_presets();
        const cost::ModelShape m = resolve_model(*a);
        const planner::Cluster cl = resolve_cluster(*a);
        SHARDLM_CHECK(a->global_batch > 0, "--global-batch G is required and must be > 0 (got ", a->global_batch,
                      ")\n---> HINT: the number of sequences per optimiser step, e.g. --global-batch 1536");
        SHARDLM_CHECK(a->top > 0, "--top must be > 0 (got ", a->top, ")");
        train::TrainConfig t;  // the optimiser's state per parameter with `train`'s defaults
        t.optim.optimizer = a->optimizer;
        const optim::OptimConfig oc = t.optim_config();
        const planner::Job job{a->global_batch, m.seq_len, optim::Optimizer::state_bytes_per_param(oc),
                               oc.kind == optim::Kind::Sophia ? oc.hess_interval : 0};
        if (!a->policy.empty()) run_policy(*a, m, cl, job);
        else run_search(*a, m, cl, job);
    });
}

}  // namespace shardlm::cli
