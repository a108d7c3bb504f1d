// planner/plan_io.h: the planner's JSON files (model, cluster, policy) and its JSON answers.
//
// Model file   {"layers", "hidden", "heads", "kv_heads", "ffn_hidden", "vocab", "seq_len", "arch"}
//              arch "gpt" (default) or "llama"; kv_heads defaults to heads, ffn_hidden to 4h (gpt) or
//              LLaMA's 8h/3 rounded up to 256; optional "name", "tied_embeddings", "dropout".
// Cluster file {"gpu", "num_gpus", "gpus_per_node", "peak_tflops", "memory_gb", "intra_node_GBps",
//              "inter_node_GBps"}: peak_tflops is the dense 16-bit peak, bandwidths are GB/s per GPU
//              and direction. If "gpu" names a preset (A100-80GB, ...) the hardware keys default to
//              it. Optional: "hbm_GBps" (default 6.5 GB/s per peak TFLOP/s, A100's ratio),
//              "peak_tflops_tf32" (peak/2), "peak_tflops_fp32" (peak/16), "intra_node_alpha_us",
//              "inter_node_alpha_us", "reserve_gb", "gemm_max", "gemm_half_dim", "memory_efficiency",
//              "comm_overlap"
//              (the measured constants `shardlm calibrate` writes, with the points behind them under
//              "measured", which the reader skips).
// Policy file  {"tp", "pp", "dp", "cp", "zero_stage", "micro_batch", "virtual_stages", "recompute",
//              "sequence_parallel", "precision"}; missing keys: dp = num_gpus/(tp pp cp), the rest
//              1 / 0 / "none" / false / "bf16".
// Unknown keys, wrong types and unknown names throw shardlm::Error naming the file, the key and the fix.
// Values that are well-typed but do not fit (tp = 3 for 32 heads, tp = 0) are not errors here:
// evaluate() answers them with feasible = false and a reason.
#pragma once
#include <string>

#include <nlohmann/json.hpp>

#include "shardlm/cost/shape.h"
#include "shardlm/planner/evaluate.h"
#include "shardlm/planner/search.h"

namespace shardlm::planner {

cost::ModelShape model_from_json(const nlohmann::json& j, const std::string& source);
Cluster cluster_from_json(const nlohmann::json& j, const std::string& source);
// Every named key (defaults for the rest: micro_batch 1, framework megatron, ...).
Policy policy_from_json(const nlohmann::json& j, const std::string& source);
// What a policy file asks for: the named keys, and open what it leaves to the planner (policy.h
// OpenChoices): micro_batch and framework when not named, and any of micro_batch, virtual_stages,
// recompute, sequence_parallel and framework named as null.
PolicyRequest policy_request_from_json(const nlohmann::json& j, const std::string& source);
cost::ModelShape load_model_file(const std::string& path);
Cluster load_cluster_file(const std::string& path);
Policy load_policy_file(const std::string& path);
PolicyRequest load_policy_request(const std::string& path);

nlohmann::json model_to_json(const cost::ModelShape& m);  // the model file format, plus "params"
nlohmann::json cluster_to_json(const Cluster& c);         // the cluster file format (every key)
nlohmann::json policy_to_json(const Policy& p);           // the policy file format
// One evaluated policy: feasible, reason, policy, memory_gb_per_gpu {...}, time_s {...}, step_time_s,
// tokens_per_s, tokens_per_s_per_gpu, tflops_per_gpu, hfu_tflops_per_gpu, mfu, ...
nlohmann::json estimate_to_json(const Estimate& e);
// `plan --explain --json`'s "terms": {"compute": [{"what", "seconds", "share", "shape", "efficiency"}, ...],
// "communication": [{"what", "seconds", "share"}, ...], "pipeline_bubble_s", "optimizer_s"}, largest first,
// shares of the step time (shape and efficiency for products and attention's kernel only).
nlohmann::json terms_to_json(const Terms& t, double step_time_s);
// What the planner chose for a request's open fields: {"framework": {"value", "why"}, "micro_batch": ...}
// (the "planner_chose" object of `plan --policy --json`).
nlohmann::json chosen_json(const PolicyRequest& r, const Cluster& c, const Policy& resolved);

}  // namespace shardlm::planner
