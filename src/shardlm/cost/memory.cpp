#include "shardlm/cost/memory.h"

#include <algorithm>
#include <vector>

#include "shardlm/core/check.h"
#include "shardlm/core/zero_stage.h"

namespace shardlm::cost {

namespace {

// A stage number as the cost model receives it (the planner searches numbers): above 3 is 3, as before.
ZeroStage zero_stage_of(int n) { return ZeroStage(std::clamp(n, 0, 3)); }

}  // namespace

ModelStateBytes model_state_bytes(double numel, StateBytes per_param, int zero_stage, int dp) {
    const double n = dp > 0 ? dp : 1;
    const ZeroStage z = zero_stage_of(zero_stage);  // what the stage shards: core/zero_stage.h, as the engine
    ModelStateBytes b;
    b.params = numel * per_param.params / (shards_parameters(z) ? n : 1);
    b.grads = numel * per_param.grads / (shards_gradients(z) ? n : 1);
    b.optimizer = numel * per_param.optimizer / (shards_optimizer(z) ? n : 1);
    return b;
}

namespace {

// One block's saved tensors for one micro-batch, in elements (values) and mask bytes, grouped by how
// tensor parallelism divides them. s is the local sequence (seq / cp).
struct SavedTensors {
    double replicated_values = 0, replicated_masks = 0;  // split only by sequence parallelism
    double split_values = 0;                             // split t ways
    double core_values = 0, core_masks = 0;              // attention core, split t ways
    double core_stats = 0;                               // flash: fp32 row statistics (bytes), split t ways
};

SavedTensors saved_tensors(const ModelShape& m, const ActivationSpec& a) {
    const double b = double(a.micro_batch), s_local = double(a.seq) / a.cp, s_full = a.seq;
    const double sbh = s_local * b * m.hidden, sb = s_local * b;
    SavedTensors t;
    t.replicated_values = 4 * sbh;                     // 2 norm inputs, QKV input, MLP input
    t.replicated_masks = m.dropout ? 2 * sbh : 0;      // after the projection and after the MLP
    t.split_values = sbh + 2 * sb * double(m.kv_dim()) + sbh;  // Q, K, V, projection input
    t.split_values += (m.arch == Arch::Llama ? 3 : 2) * sb * m.ffn_hidden;
    const double scores = double(m.heads) * s_local * s_full * b;  // a s^2 b
    if (a.attention == Attention::Flash) {
        t.core_stats = 4.0 * m.heads * s_local * b;  // the log-sum-exp of each query row, per head
        return t;
    }
    t.core_values = m.dropout ? 2 * scores : scores;   // softmax output (+ dropout output)
    t.core_masks = m.dropout ? scores : 0;
    return t;
}

}  // namespace

double attention_core_activation_bytes(const ModelShape& m, const ActivationSpec& a) {
    const SavedTensors t = saved_tensors(m, a);
    return (t.core_values * a.value_bytes + t.core_masks + t.core_stats) / a.tp;
}

double block_activation_bytes(const ModelShape& m, const ActivationSpec& a) {
    if (m.moe() && a.recompute != Recompute::Full) {
        // a mixture of experts: the MLP's tensors as a dense MLP of the k chosen and the shared experts' width
        // (balanced), and beside them each choice's dispatched input (act) and output (fp32), whole rows on every
        // tensor-parallel rank, and the router's logits and probabilities (fp32) (model/moe.h: MoeActs); under
        // expert parallelism the rows an expert's rank received (balanced: as many as it sent) again, as inputs
        // (act) and outputs (fp32)
        ModelShape dense = m;
        dense.experts = 0, dense.ffn_hidden = (m.top_k + m.shared_experts) * m.expert_ffn;
        const double tokens = double(a.micro_batch) * (double(a.seq) / a.cp), copies = a.ep > 1 ? 2 : 1;
        // room for every ep rank's rows: ep - 1 more of each received row's input and output, and of its
        // expert_ffn-wide tensors (the first product, SwiGLU's two, and the activation), beyond the balanced count
        const double wide = (m.arch == Arch::Llama ? 3.0 : 2.0) * m.expert_ffn / a.tp;
        const double room = a.expert_rows_for_every_rank && a.ep > 1
                                ? (a.ep - 1) * m.top_k * (m.hidden * (a.value_bytes + 4) + wide * a.value_bytes)
                                : 0;
        return block_activation_bytes(dense, a) +
               tokens * (copies * m.top_k * m.hidden * (a.value_bytes + 4) + 2.0 * m.experts * 4 + room);
    }
    const double sp_div = a.sequence_parallel ? a.tp : 1;
    if (a.recompute == Recompute::Full) {
        const double input = double(a.micro_batch) * (double(a.seq) / a.cp) * m.hidden;
        return input * a.value_bytes / sp_div;
    }
    if (a.recompute == Recompute::Selective && a.attention == Attention::Flash && a.every_other_gemm)
        return every_other_gemm_saved_bytes(m, a);
    const SavedTensors t = saved_tensors(m, a);
    double bytes = (t.replicated_values * a.value_bytes + t.replicated_masks) / sp_div;
    bytes += t.split_values * a.value_bytes / a.tp;
    if (m.qk_norm) {  // the q and k columns before their norms, and each row's two scales (fp32)
        const double sb = double(a.micro_batch) * (double(a.seq) / a.cp);
        bytes += sb * (double(m.hidden + m.kv_dim()) * a.value_bytes / a.tp + 2 * 4);
    }
    if (a.recompute == Recompute::None || a.attention == Attention::Flash) bytes += attention_core_activation_bytes(m, a);
    const bool op_selective = a.recompute == Recompute::Selective && a.attention == Attention::Flash;
    if (op_selective) bytes -= op_selective_recomputed_bytes(m, a);
    if (a.fp8_linear_inputs) {
        // the projection's input, and unless recomputed the QKV and MLP inputs (the norms' outputs) and the
        // MLP-down input (the activation's output), one byte a value in place of value_bytes
        const double sb = double(a.micro_batch) * (double(a.seq) / a.cp), h = m.hidden, f = m.ffn_hidden;
        const double values = sb * h / a.tp + (op_selective ? 0 : sb * (2 * h / sp_div + f / a.tp));
        bytes -= values * (a.value_bytes - 1);
    }
    return bytes;
}

double op_selective_recomputed_bytes(const ModelShape& m, const ActivationSpec& a) {
    const double b = double(a.micro_batch), s_local = double(a.seq) / a.cp;
    const double sbh = s_local * b * m.hidden, sbf = s_local * b * m.ffn_hidden;
    const double sp_div = a.sequence_parallel ? a.tp : 1;
    // the two norms' outputs (the QKV and MLP inputs), and the MLP activation's output (GELU's, or
    // SwiGLU's product)
    return (2 * sbh / sp_div + sbf / a.tp) * a.value_bytes;
}

namespace {
// A block's GEMMs in forward order: output width per token (split t ways, or full: row-parallel partial
// sums) and FLOPs per token.
struct BlockGemm {
    double out_width;
    double flops;
};
std::vector<BlockGemm> block_gemms(const ModelShape& m, int tp) {
    const double h = m.hidden, kv = double(m.kv_dim()), f = m.ffn_hidden, t = tp;
    if (m.arch == Arch::Llama)
        return {{h / t, 2 * h * h / t},  {kv / t, 2 * h * kv / t}, {kv / t, 2 * h * kv / t}, {h, 2 * h * h / t},
                {f / t, 2 * h * f / t},  {f / t, 2 * h * f / t},   {h, 2 * h * f / t}};
    return {{(h + 2 * kv) / t, 2 * h * (h + 2 * kv) / t}, {h, 2 * h * h / t}, {f / t, 2 * h * f / t}, {h, 2 * h * f / t}};
}
}  // namespace

double every_other_gemm_saved_bytes(const ModelShape& m, const ActivationSpec& a) {
    const double tokens = double(a.micro_batch) * double(a.seq) / a.cp, h = m.hidden, t = a.tp;
    const bool sp = a.sequence_parallel && a.tp > 1;
    double width = sp ? h / t : h;  // the block's input
    const std::vector<BlockGemm> g = block_gemms(m, a.tp);
    for (size_t i = 0; i < g.size(); i += 2) width += g[i].out_width;
    width += h / t;                  // the attention output
    if (sp) width += 2 * h / t;      // the reduce-scatters after the two row-parallel GEMMs
    const double stats = 4.0 * m.heads / t;  // the fp32 log-sum-exp of each query row, per head
    return tokens * (width * a.value_bytes + stats);
}

double every_other_gemm_recomputed_flops_per_token(const ModelShape& m, int tp) {
    double flops = 0;
    const std::vector<BlockGemm> g = block_gemms(m, tp);
    for (size_t i = 1; i < g.size(); i += 2) flops += g[i].flops;
    return flops;
}

double activation_bytes_seed002(const ModelShape& m, int64_t batch, int seq, double value_bytes) {
    const double b = double(batch), l = m.layers, s = seq, a = m.heads, h = m.hidden;
    return b * l * (2 * s * s * a + 14 * s * h) * value_bytes;
}

Schedule parse_schedule(const std::string& name) {
    Schedule s;
    if (!enum_from_name(kScheduleNames, name, &s))
        fail("unknown pipeline schedule '", name, "'\n---> HINT: use ", names_list(kScheduleNames));
    return s;
}

const char* schedule_name(Schedule s) {
    for (const auto& e : kScheduleNames)
        if (e.value == s) return e.name;
    return "?";
}

int64_t in_flight_chunks(Schedule s, int stage, int pp, int virtual_stages, int64_t micro_batches) {
    const int64_t v = virtual_stages, m = micro_batches;
    if (s == Schedule::GPipe) return m * v;
    if (s == Schedule::ZeroBubbleH1) return std::min<int64_t>(pp, m);
    if (s == Schedule::ZeroBubbleV) return std::min<int64_t>(2 * int64_t(pp), 2 * m);
    if (v == 1) return std::min<int64_t>(pp - stage, m);
    return std::min<int64_t>(m * v, 2 * int64_t(pp - stage - 1) + (v - 1) * pp + 1);
}

double zero_gradient_buffer_bytes(const ZeroBufferSpec& z) {
    const double slots = z.embedding_numel + 2 * z.largest_unit, n = z.dp;
    const bool staged = z.reduce_bytes < z.grad_bytes;
    if (shards_gradients(zero_stage_of(z.zero_stage))) return (slots + slots / n) * (z.grad_bytes + (staged ? z.reduce_bytes : 0));
    return staged ? z.total_numel * z.reduce_bytes : 0;
}

double zero_buffer_bytes(const ZeroBufferSpec& z) {
    const double slots = z.embedding_numel + 2 * z.largest_unit;
    const double params = shards_parameters(zero_stage_of(z.zero_stage)) ? (z.gathered_per_chunk ? z.total_numel : slots) * z.param_bytes : 0;
    return params + zero_gradient_buffer_bytes(z);
}

namespace {
struct OptimizerState {
    const char* name;
    double bytes;  // per parameter; adam8bit's absmax added by block
};
// adafactor: its factored second moment is a row and a column per matrix (about 0 per parameter), and
// no first moment unless beta1 is given (then 4); sophia: m and the diagonal Hessian estimate h
constexpr OptimizerState kOptimizerState[] = {{"sgd", 0},   {"momentum", 4}, {"adagrad", 4},  {"adam", 8},
                                              {"adamw", 8},  {"radam", 8},    {"lion", 4},     {"adam8bit", 2},
                                              {"adafactor", 0}, {"sophia", 8}};
}  // namespace

double optimizer_state_bytes(std::string_view optimizer, int block) {
    for (const OptimizerState& o : kOptimizerState)
        if (optimizer == o.name) return o.bytes + (optimizer == "adam8bit" ? 8.0 / std::max(1, block) : 0.0);
    return -1;
}

}  // namespace shardlm::cost
