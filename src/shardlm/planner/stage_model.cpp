#include "shardlm/planner/stage_model.h"

#include <algorithm>
#include <cmath>

#include "shardlm/cost/comm.h"

namespace shardlm::planner::detail {

using cost::Collective;
using cost::Recompute;

StageModel::StageModel(const cost::ModelShape& m, const Cluster& c, const Job& job, const Policy& p)
    : m(m), c(c), job(job), p(p), micro_batches(planner::micro_batches(job, p)) {}

double StageModel::padded_vocab() const {
    const double unit = 128.0 * p.tp;
    return std::ceil(m.vocab / unit) * unit;
}

cost::ActivationSpec StageModel::activation_spec(Recompute r) const {
    cost::ActivationSpec a;
    a.micro_batch = p.micro_batch, a.seq = job.seq, a.tp = p.tp, a.cp = p.cp, a.ep = p.ep;
    a.sequence_parallel = p.sequence_parallel && p.tp > 1;
    a.recompute = r;
    a.value_bytes = value_bytes();
    a.attention = p.attention;
    a.every_other_gemm = p.framework == Framework::Pytorch;  // torchtitan's op-level selective checkpointing
    a.fp8_linear_inputs = p.precision == Precision::Fp8 && p.framework != Framework::Pytorch;  // Transformer Engine
    a.expert_rows_for_every_rank = p.framework == Framework::Shardlm;
    return a;
}

// ---- memory -----------------------------------------------------------------------------------------

double StageModel::block_experts() const { return double(cost::expert_params_per_block(m)) / (double(p.tp) * p.ep); }

double StageModel::block_params() const {
    const double split = double(cost::block_params_split(m)), experts = double(cost::expert_params_per_block(m));
    return (split - experts) / p.tp + block_experts() + (double(cost::unit_params(m).block) - split);
}

double StageModel::stage_params(int stage) const {
    const double h = m.hidden, vocab_shard = double(m.vocab) * h / p.tp;
    double n = layers_per_stage() * block_params();
    if (stage == 0) n += vocab_shard + (m.learned_positions ? double(job.seq) * h : 0);
    if (stage == p.pp - 1) {
        n += double(cost::unit_params(m).final_norm);
        // an untied head; a tied one needs its own copy of the embedding on a later stage (Megatron)
        if (!m.tied_embeddings || p.pp > 1) n += vocab_shard;
    }
    return n;
}

MemoryBreakdown StageModel::memory(int stage) const {
    MemoryBreakdown mem;
    const cost::StateBytes sb = state_bytes();
    // the experts sharded over the ranks holding them, the rest over data and context ranks
    const double experts = stage_experts(stage);
    const cost::ModelStateBytes ms = cost::model_state_bytes(stage_params(stage) - experts, sb, p.zero_stage, zero_group());
    const cost::ModelStateBytes me = cost::model_state_bytes(experts, sb, p.zero_stage, expert_zero_group());
    mem.params = ms.params + me.params, mem.grads = ms.grads + me.grads, mem.optimizer = ms.optimizer + me.optimizer;
    // DeepSpeed's pipeline engine runs each micro-batch's backward between clear_lp_grads() and
    // update_hp_grads(clear_lp_grads=False) (deepspeed/runtime/pipe/engine.py, bf16_optimizer.py): the
    // 16-bit gradients of every parameter stay allocated beside the fp32 accumulation, unsharded
    if (p.framework == Framework::MegatronDeepspeed && p.grad_accum_fp32 && p.precision != Precision::Fp32)
        mem.grads += stage_params(stage) * 2;

    const double per_layer = cost::block_activation_bytes(m, activation_spec(p.recompute));
    const int64_t chunks = cost::in_flight_chunks(p.schedule, stage, p.pp, p.virtual_stages, micro_batches);
    mem.activations = double(chunks) * layers_per_chunk() * per_layer;
    // The backward of one block at a time: what recomputation dropped is rebuilt (full: all of it;
    // selective: the rest), and in the GPU frameworks the gradients of its activations are allocated
    // beside them (about as many bytes again; this engine writes them into the buffers it keeps)
    const double whole_block = cost::block_activation_bytes(m, activation_spec(Recompute::None));
    double block_backward = 0;
    if (p.framework != Framework::Shardlm) block_backward = (whole_block - per_layer) + whole_block;
    else if (p.recompute == Recompute::Full) block_backward = whole_block;
    const double tokens = double(p.micro_batch) * job.seq / p.cp;
    // the logits and the loss's copies of them (bytes a logit by framework: policy.h)
    const double loss = stage == p.pp - 1 ? tokens * padded_vocab() / p.tp * logits_bytes(p) : 0;

    mem.buffers = c.reserve_gb * 1e9;
    if (p.pp > 1) mem.buffers += 2 * cost::pp_bytes_per_microbatch(m, p.micro_batch, job.seq / p.cp, value_bytes(), p.tp);
    if (p.sequence_parallel && p.tp > 1) mem.buffers += tokens * m.hidden * value_bytes();  // gathered input
    // ZeRO-2/3's unit slots, the engine's rule (cost/memory.h): the embedding (or its tied copy) and two
    // of the largest other unit, for gathered parameters (stage 3) and gradients before reduce-scatter
    const double h = m.hidden, vocab_shard = double(m.vocab) * h / p.tp;
    const bool last = stage == p.pp - 1;
    cost::ZeroBufferSpec zb;
    zb.embedding_numel = stage == 0 || (last && m.tied_embeddings && p.pp > 1) ? vocab_shard : 0;
    zb.largest_unit = layers_per_stage() > 0 ? block_params() : 0;
    if (stage == 0 && m.learned_positions) zb.largest_unit = std::max(zb.largest_unit, double(job.seq) * h);
    if (last)
        zb.largest_unit = std::max(zb.largest_unit, double(cost::unit_params(m).final_norm) +
                                                        (m.tied_embeddings ? 0 : vocab_shard));
    zb.total_numel = stage_params(stage);
    zb.dp = zero_group(), zb.zero_stage = p.zero_stage;
    // the zero-bubble schedules gather ZeRO-3's parameters a chunk at a time (the engine's Unshard)
    zb.gathered_per_chunk = p.schedule == cost::Schedule::ZeroBubbleH1 || p.schedule == cost::Schedule::ZeroBubbleV;
    if (p.zero_stage == 3 && p.pp > 1) {
        // with pipelining, FSDP keeps a stage's parameters gathered from its first forward to its last
        // backward and its gradients unsharded until the step's one reduce-scatter (torchtitan:
        // reshard_after_forward off; the engine's Unshard actions): the whole stage in 16 bits, and its
        // gradients, which PyTorch's FSDP accumulates between micro-batches in its reduce dtype
        // (FSDPParam.to_accumulated_grad_if_needed; torchtitan's mixed_precision_reduce is float32)
        zb.gathered_per_chunk = true;
        mem.buffers += stage_params(stage) * (p.framework == Framework::Pytorch ? std::max(sb.grads, 4.0) : sb.grads);
    }
    zb.param_bytes = sb.params, zb.grad_bytes = zb.reduce_bytes = sb.grads;
    const double zero_grads = cost::zero_gradient_buffer_bytes(zb);
    mem.buffers += cost::zero_buffer_bytes(zb) - zero_grads + fp8_weight_bytes(stage);
    // Two phases that do not meet, in the GPU frameworks: the loss, whose tensors the output layer's
    // backward frees before the last block's backward begins (torchtitan's train.py @ 9dec370: `del
    // pred`, then loss.backward()), and the blocks' backward with ZeRO's gradient slots (filled and
    // reduce-scattered unit by unit; gathered per chunk, they live through the schedule); the fuller
    // one sets the peak. This engine keeps its logits and gradient buffers throughout: both counted.
    const bool gpu = p.framework != Framework::Shardlm;
    const double backward_grads = zb.gathered_per_chunk ? 0 : zero_grads;
    mem.buffers += zero_grads - backward_grads;
    if (gpu && loss > block_backward + backward_grads) {
        mem.activations += loss;
    } else {
        mem.activations += block_backward + (gpu ? 0 : loss);
        mem.buffers += backward_grads;
    }
    // the caching allocator's reserve over what the tensors take (not over the CUDA context), fitted
    // per framework style
    const double overhead = p.framework == Framework::Pytorch ? c.allocator_overhead_pytorch : c.allocator_overhead;
    mem.buffers += overhead * (mem.total() - c.reserve_gb * 1e9);
    return mem;
}

// The linear layers' weights cast to FP8 (1 byte each), cached from the first micro-batch's forward to
// the last backward: the stage's blocks, or under ZeRO-3 the units gathered at once (two slots).
double StageModel::fp8_weight_bytes(int /*stage*/) const {
    if (p.precision != Precision::Fp8) return 0;
    const double linear = double(cost::block_params_split(m)) / p.tp;
    return (p.zero_stage == 3 ? 2 : layers_per_stage()) * linear;
}

// ---- time -------------------------------------------------------------------------------------------

double StageModel::gemm_efficiency(double M, double N, double K, Precision prec) const {
    const bool lanes = c.threads_per_rank > 1 &&
                       cost::runs_lanes(int(p.micro_batch), job.seq / p.cp, c.threads_per_rank, p.tp);
    return gemm_efficiency_at(c, prec, M, N, K, lanes, p.framework == Framework::Pytorch);
}

double StageModel::gemm_s(double M, double N, double K, Precision prec) const {
    return 2 * M * N * K / (peak_flops(c, prec) * gemm_efficiency(M, N, K, prec));
}

double StageModel::block_gemm_s() const {
    const double M = double(p.micro_batch) * job.seq / p.cp, h = m.hidden, t = p.tp;
    const double qkv = (h + 2 * double(m.kv_dim())) / t;
    const Precision q = p.precision;
    return gemm_s(M, qkv, h, q) + gemm_s(M, h, h / t, q) + mlp_gemm_s();
}

// The dense MLP's two (SwiGLU: three) products; a mixture of experts': each of this rank's E / ep experts over
// its share of the ep ranks' M k choices (balanced: ep M k / E rows), the shared experts over all M rows, and
// the router.
double StageModel::mlp_gemm_s() const {
    const double M = double(p.micro_batch) * job.seq / p.cp, h = m.hidden, t = p.tp;
    const Precision q = p.precision;
    const double first = m.arch == cost::Arch::Llama ? 2 : 1;
    auto mlp = [&](double rows, double f) { return first * gemm_s(rows, f, h, q) + gemm_s(rows, h, f, q); };
    if (!m.moe()) return mlp(M, double(m.ffn_hidden) / t);
    const double local = double(m.experts) / p.ep, rows = double(p.ep) * M * m.top_k / m.experts;
    double s = local * mlp(rows, double(m.expert_ffn) / t) + gemm_s(M, m.experts, h, Precision::Fp32);
    if (m.shared_experts > 0) s += mlp(M, double(m.shared_experts) * m.expert_ffn / t);
    return s;
}

// Expert parallelism's all-to-alls of one layer and micro-batch, not overlapped: the dispatch (the activations'
// type) and the combination (fp32) forward, and their gradients backward (fp32), each an even exchange of this
// rank's M k rows of h over the ep group (once more forward with full recomputation).
double StageModel::ep_layer_s() const {
    if (!m.moe() || p.ep == 1) return 0.0;
    const double rows = double(p.micro_batch) * job.seq / p.cp * m.top_k, h = m.hidden;
    const cost::Link link = group_link(c, p.tp * p.cp * p.ep);
    auto a2a = [&](double bytes) { return cost::collective_time_s(Collective::AllToAll, rows * h * bytes, p.ep, link); };
    const double forward = a2a(value_bytes()) + a2a(4);
    return forward * (p.recompute == Recompute::Full ? 2 : 1) + 2 * a2a(4);
}

// FP8 GEMMs read per-tensor scaled casts: each linear's input (forward) and output gradient
// (backward) is read in 16 bits and written in 8 (3 bytes an element, plus its amax pass folded in),
// and its weight once per micro-batch.
double StageModel::fp8_cast_s(bool backward) const {
    if (p.precision != Precision::Fp8) return 0;
    const double M = double(p.micro_batch) * job.seq / p.cp, h = m.hidden, t = p.tp;
    const double f = double(m.ffn_hidden) / t, qkv = (h + 2 * double(m.kv_dim())) / t;
    const double inputs = M * (2 * h + h / t + f);                                 // QKV, proj, MLP in, MLP out
    const double grads = M * (qkv + h + (m.arch == cost::Arch::Llama ? 2 : 1) * f + h);  // their outputs
    const double weights = double(cost::block_params_split(m)) / t;
    return 3 * (backward ? grads : inputs + weights) / hbm_bytes_per_s(c);
}

double StageModel::attention_gemm_s() const {
    const double q = double(job.seq) / p.cp, s = job.seq, d = m.head_dim();
    const double heads = double(m.heads) / p.tp * double(p.micro_batch);
    const Precision prec = compute_precision(p.precision);
    const double flash_eff = p.framework == Framework::Pytorch ? c.efficiency.flash_pytorch : c.efficiency.flash;
    if (flash()) return heads * 0.5 * 4 * q * s * d / (peak_flops(c, prec) * flash_eff);
    return heads * (gemm_s(q, s, d, prec) + gemm_s(q, d, s, prec));  // Q K^T, then P V, per head and sequence
}

// Each saved tensor is written once by its producer and read once by its consumer: forward traffic is
// twice the bytes a block saves without recomputation.
double StageModel::block_memory_bound_s() const {
    return 2 * cost::block_activation_bytes(m, activation_spec(Recompute::None)) / hbm_bytes_per_s(c);
}

double StageModel::attention_memory_bound_s() const {
    return 2 * cost::attention_core_activation_bytes(m, activation_spec(Recompute::None)) / hbm_bytes_per_s(c);
}

double StageModel::head_forward_s() const {
    const double M = double(p.micro_batch) * job.seq / p.cp, v = padded_vocab() / p.tp;
    // fp32 logits written and read
    return gemm_s(M, v, m.hidden, compute_precision(p.precision)) + 2 * M * v * 4 / hbm_bytes_per_s(c);
}

std::vector<StageModel::Work> StageModel::compute_work(int stage) const {
    std::vector<Work> w = work_of(stage);
    const double factor = alone_factor(stage);
    if (factor != 1)  // (the efficiency against the peak measured with every rank busy: at most 1 shown)
        for (Work& x : w) x.forward *= factor, x.backward *= factor, x.efficiency = std::min(1.0, x.efficiency / factor);
    return w;
}

double StageModel::work_total_s(int stage) const {
    double s = 0;
    for (const Work& x : work_of(stage)) s += x.forward + x.backward;
    return s;
}

double StageModel::alone_factor(int stage) const {
    if (c.alone_speedup <= 1 || p.pp == 1) return 1;
    // the other stages' compute: the last carries the head; the first and the middle ones hold blocks only
    // (work_of differs between stages only by the head: every stage but the last is the first's)
    const double first = work_total_s(0), last = work_total_s(p.pp - 1), mine = stage == p.pp - 1 ? last : first;
    const double others = stage == p.pp - 1 ? first : p.pp > 2 ? std::max(first, last) : last;
    const double f = mine > 0 ? std::min(1.0, others / mine) : 1;
    // measured with one rank busy and the rest idle; a stage's ranks are 1 / pp of them
    const double ranks = c.num_gpus, idle = ranks > 1 ? (1 - 1.0 / p.pp) / (1 - 1 / ranks) : 1;
    const double speedup = 1 + (c.alone_speedup - 1) * std::min(1.0, idle);
    return f + (1 - f) / speedup;
}

std::vector<StageModel::Work> StageModel::work_of(int stage) const {
    const double L = layers_per_stage(), M = double(p.micro_batch) * job.seq / p.cp, h = m.hidden, t = p.tp;
    const bool full = p.recompute == Recompute::Full, selective = p.recompute == Recompute::Selective;
    const Precision q = p.precision;
    std::vector<Work> w;
    // a block's forward work of s seconds: L times forward, twice backward, once more when fully recomputed
    auto block = [&](const char* what, double s) {
        Work x;
        x.what = what, x.forward = L * s, x.backward = L * s * (full ? 3 : 2);
        return x;
    };
    auto product = [&](const char* what, double n, double k, double count) {
        Work x = block(what, count * gemm_s(M, n, k, q));
        x.M = M, x.N = n, x.K = k, x.efficiency = gemm_efficiency(M, n, k, q);
        w.push_back(x);
    };
    product("QKV projection", (h + 2 * double(m.kv_dim())) / t, h, 1);
    product("attention output projection", h, h / t, 1);
    if (m.moe()) {
        w.push_back(block("MLP: routed and shared experts, router", mlp_gemm_s()));
    } else {
        const double f = double(m.ffn_hidden) / t;
        product(m.arch == cost::Arch::Llama ? "MLP gate and up projections" : "MLP up projection", f, h,
                m.arch == cost::Arch::Llama ? 2 : 1);
        product("MLP down projection", h, f, 1);
    }
    // attention's core: the fused kernel (its backward recomputes Q K^T), or Q K^T and P V as products
    Work attention = block(flash() ? "attention (fused kernel)" : "attention Q K^T and P V", attention_gemm_s());
    if (flash()) {
        attention.backward += 0.5 * L * attention_gemm_s();
        attention.efficiency = p.framework == Framework::Pytorch ? c.efficiency.flash_pytorch : c.efficiency.flash;
    } else {
        attention.M = double(job.seq) / p.cp, attention.N = job.seq, attention.K = m.head_dim();
        attention.efficiency = gemm_efficiency(attention.M, attention.N, attention.K, compute_precision(q));
    }
    if (selective && !flash()) attention.backward += L * attention_gemm_s();  // the dropped core rebuilt
    w.push_back(attention);
    Work memory_bound = block("memory-bound work: norms, activations, softmax, residuals", block_memory_bound_s());
    if (selective && !flash()) memory_bound.backward += L * attention_memory_bound_s();
    // op-level selective recomputation (with flash): the dropped element-wise results rebuilt, read and written
    if (selective && flash() && p.framework != Framework::Pytorch)
        memory_bound.backward += L * 2 * cost::op_selective_recomputed_bytes(m, activation_spec(Recompute::None)) /
                                 hbm_bytes_per_s(c);
    w.push_back(memory_bound);
    if (selective && flash() && p.framework == Framework::Pytorch) {  // every other GEMM of the block run again
        const double dim = std::min<double>(h / t, M);
        Work again;
        again.what = "every other product recomputed (op-level selective checkpointing)";
        const double flops = gemm_flops(c, q, dim, false, true);
        again.backward = L * M * cost::every_other_gemm_recomputed_flops_per_token(m, p.tp) / flops;
        again.efficiency = flops / peak_flops(c, q);
        w.push_back(again);
    }
    if (q == Precision::Fp8) {
        Work casts;
        casts.what = "FP8 casts of the linear layers' inputs, gradients and weights";
        casts.forward = L * fp8_cast_s(false);
        casts.backward = L * (fp8_cast_s(true) + (full ? fp8_cast_s(false) : 0));
        w.push_back(casts);
    }
    if (stage == p.pp - 1) {
        Work head;
        head.what = "output layer: logits and cross-entropy";
        head.forward = head_forward_s(), head.backward = 2 * head_forward_s();
        head.M = M, head.N = padded_vocab() / p.tp, head.K = h;
        head.efficiency = gemm_efficiency(head.M, head.N, head.K, compute_precision(q));
        w.push_back(head);
    }
    return w;
}

StageModel::MicroBatch StageModel::micro_batch_time(int stage) const {
    const double L = layers_per_stage();
    const double attn = attention_gemm_s() + attention_memory_bound_s();
    MicroBatch t;
    for (const Work& w : compute_work(stage)) t.forward += w.forward, t.backward += w.backward;

    const cost::Link tp_link = group_link(c, p.tp);
    const double tp_one = cost::tp_block_time_s(
        cost::tp_block_comm(m, p.micro_batch, job.seq / p.cp, value_bytes(), p.tp, p.sequence_parallel), p.tp, tp_link);
    t.tp = L * tp_one * (p.recompute == Recompute::Full ? 3 : 2);  // forward, backward, recomputed forward
    // Megatron-Core's --tp-comm-overlap pipelines each collective with the GEMM next to it: what exceeds
    // the block's GEMMs stays exposed
    if (p.framework == Framework::MegatronCore && p.tp > 1)
        t.tp = std::max(0.0, t.tp - L * (p.recompute == Recompute::Full ? 4 : 3) * block_gemm_s());

    t.cp = L * cp_layer_s(attn);
    t.ep = L * ep_layer_s();
    return t;
}

// Context parallelism's exposed communication per layer and micro-batch. A rank's block of keys and values
// is micro_batch x seq/cp rows of 2 kv_dim / tp values. All-gather: the whole sequence's gathered forward
// (overlapping the attention), gathered again and its gradient reduce-scattered backward. Ring: cp - 1
// steps, each a block to the next rank while the tiles of the block in hand run (1/cp of the attention);
// backward the keys again and the dK/dV beside them (fp32 in this engine, the values' type elsewhere),
// the last dK/dV going home after the last tiles, exposed.
double StageModel::cp_layer_s(double attn) const {
    if (p.cp == 1) return 0.0;
    const double elems = double(p.micro_batch) * job.seq / p.cp * 2 * double(m.kv_dim()) / p.tp;
    const double kv = elems * value_bytes(), dkv = elems * (p.framework == Framework::Shardlm ? 4.0 : value_bytes());
    const cost::Link cp_link = group_link(c, p.tp * p.cp);
    auto left = [&](double x, double window) { return x - std::min(window, c.comm_overlap * x); };
    if (p.cp_comm == cost::CpComm::AllGather) {
        // only the local block's tiles can run while the gather moves the others'
        const double ag = cost::collective_time_s(Collective::AllGather, kv * p.cp, p.cp, cp_link);
        const double rs = cost::collective_time_s(Collective::ReduceScatter, dkv * p.cp, p.cp, cp_link);
        return left(ag, attn / p.cp) + left(ag + rs, 2 * attn / p.cp);
    }
    const double step_kv = cost::collective_time_s(Collective::SendRecv, kv, 2, cp_link);
    const double step_dkv = cost::collective_time_s(Collective::SendRecv, dkv, 2, cp_link);
    const double steps = p.cp - 1, window = attn / p.cp;
    return steps * (left(step_kv, window) + left(step_kv + step_dkv, 2 * window)) + step_dkv;
}

StageModel::DpExposed StageModel::dp_exposed(int stage, const MicroBatch& mb) const {
    const double experts = stage_experts(stage);
    const cost::Link link = group_link(c, p.tp * p.cp * p.dp);
    const DpExposed dense = reduction_exposed(stage_params(stage) - experts, zero_group(), link, mb);
    const DpExposed routed = reduction_exposed(experts, expert_zero_group(), link, mb);
    return {dense.all_reduce + routed.all_reduce, dense.reduce_scatter + routed.reduce_scatter,
            dense.all_gather + routed.all_gather};
}

StageModel::DpExposed StageModel::reduction_exposed(double numel, int n, const cost::Link& link,
                                                   const MicroBatch& mb) const {
    DpExposed out;
    if (n <= 1 || numel <= 0) return out;
    const cost::StateBytes sb = state_bytes();
    const double units = layers_per_stage() + 1;  // blocks, and the embedding or head
    // a collective of time x that may overlap a window w: the last unit's share is never hidden
    // (of which only the fraction comm_overlap can hide: on CPUs the communication needs the same cores)
    auto exposed = [&](double x, double window) {
        return std::max(x / units, x - std::min(window, c.comm_overlap * x));
    };
    // issued unit by unit (ZeRO) or bucket by bucket (~ a unit each): the latency is paid per unit
    auto time = [&](Collective k, double bytes) { return units * cost::collective_time_s(k, bytes / units, n, link); };
    const double grads = numel * sb.grads, params = numel * sb.params, m_count = double(micro_batches);
    const double bwd = mb.backward + mb.tp, fwd = mb.forward;
    const double rs = time(Collective::ReduceScatter, grads), ag = time(Collective::AllGather, params);
    switch (p.zero_stage) {
        case 0: out.all_reduce = exposed(time(Collective::AllReduce, grads), bwd); break;
        case 1: out.reduce_scatter = exposed(rs, bwd), out.all_gather = exposed(ag, fwd); break;
        case 2: out.reduce_scatter = m_count * exposed(rs, bwd), out.all_gather = exposed(ag, fwd); break;
        default:
            if (p.pp > 1) {  // the stage gathered once, its gradients reduce-scattered once (memory() above)
                out.all_gather = exposed(ag, fwd), out.reduce_scatter = exposed(rs, bwd);
                break;
            }
            // every micro-batch: the gather before the forward, and the backward's gather and reduce-scatter
            // sharing its window (what stays exposed split in proportion to their times)
            const double backward = exposed(ag + rs, bwd);
            out.all_gather = m_count * (exposed(ag, fwd) + backward * ag / (ag + rs));
            out.reduce_scatter = m_count * backward * rs / (ag + rs);
    }
    return out;
}

double StageModel::optimizer_s(int stage) const {
    const cost::StateBytes sb = state_bytes();
    const double experts = stage_experts(stage);
    const double owned = p.zero_stage >= 1 ? (stage_params(stage) - experts) / zero_group() + experts / expert_zero_group()
                                           : stage_params(stage);
    // read the gradient, read and write master weights and moments, write the 16-bit (or fp32) weights
    return owned * (sb.grads + 2 * sb.optimizer + sb.params) / hbm_bytes_per_s(c);
}

double StageModel::pp_comm_s() const {
    if (p.pp == 1) return 0;
    const cost::Link link = group_link(c, p.tp * p.cp * p.dp * p.pp);
    const double bytes = cost::pp_bytes_per_microbatch(m, p.micro_batch, job.seq / p.cp, value_bytes(), p.tp);
    const double one = cost::collective_time_s(Collective::SendRecv, bytes, 2, link);
    // Megatron-Core's --overlap-p2p-comm (interleaved schedule): the transfers hide behind the next
    // chunk's compute but for the warm-up's and the cool-down's
    if (p.framework == Framework::MegatronCore && p.virtual_stages > 1) return 2 * double(p.pp - 1) * one;
    return 2 * double(micro_batches * p.virtual_stages + p.pp - 1) * one;
}

}  // namespace shardlm::planner::detail
