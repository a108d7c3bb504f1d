// train/reports.cpp: the Trainer's memory and communication reports (--memory-report,
// --comm-report: measured beside the formulas) and its timeline (--trace).
#include <sys/resource.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <map>

#include "shardlm/core/format.h"
#include "shardlm/core/trace.h"
#include "shardlm/cost/memory.h"
#include "shardlm/io/atomic_file.h"
#include "shardlm/parallel/comm_theory.h"
#include "shardlm/train/rank_text.h"
#include "shardlm/train/trainer.h"

namespace shardlm::train {

namespace {

double mib(double b) { return b / (1024.0 * 1024.0); }

std::string json_escape(const std::string& s) {
    std::string o;
    for (char c : s) {
        if (c == '"' || c == '\\') o += '\\';
        o += c;
    }
    return o;
}

// A group's operation of one kind in the last step: calls and bytes sent beside the formula's bytes.
void comm_row(std::string& out, const char* group, const comm::Group& grp, comm::OpKind k, size_t theory) {
    const comm::OpStats& o = grp.stats()[k];
    if (o.calls == 0 && theory == 0) return;
    out += shardlm::format("  %-9s %-15s calls %5llu  sent %14llu  theory %14zu  busy %.3f s\n", group,
                           std::string(comm::op_name(k)).c_str(), (unsigned long long)o.calls,
                           (unsigned long long)o.bytes_sent, theory, o.busy_seconds);
}

// Context parallelism's keys and values (and their gradients): per block and micro-batch (the part's
// cp_bytes), times the step's micro-batches and passes.
void cp_rows(std::string& out, const comm::Grid& g, const model::ModelPart& part, model::CpComm mode, size_t passes) {
    if (g.cp_size() == 1) return;
    const model::CpBytes b = part.cp_bytes();
    if (mode == model::CpComm::Ring) {
        comm_row(out, "cp", g.cp(), comm::OpKind::SendRecv, passes * (b.kv_forward + b.kv_backward + b.dkv_backward));
    } else {
        comm_row(out, "cp", g.cp(), comm::OpKind::AllGather, passes * (b.kv_forward + b.kv_backward));
        comm_row(out, "cp", g.cp(), comm::OpKind::ReduceScatter, passes * b.dkv_backward);
    }
}

// Expert parallelism's exchanges: the rows each all-to-all sent to the other ep ranks (times C and the row's
// type), and the all-gathers of E counts of 4 bytes.
void ep_rows(std::string& out, const comm::Grid& g, model::ModelPart& part, int experts) {
    if (g.ep_size() == 1) return;
    const model::MoeScratch& t = part.moe_traffic();
    comm_row(out, "ep", g.ep(), comm::OpKind::AllToAll, t.exchanged_bytes);
    comm_row(out, "ep", g.ep(), comm::OpKind::AllGather,
             t.count_gathers * comm::ring_bytes_rank(comm::OpKind::AllGather, size_t(g.ep_size()) * size_t(experts), 4,
                                                     g.ep_size(), g.ep().rank()));
}

}  // namespace

// One block's activations per micro-batch beside the shared cost model's count (no dropout here), and the
// norms' statistics outside it.
std::string Trainer::block_activation_report() const {
    const model::ModelPart::BlockBytes bb = e_.part->block_bytes();
    if (bb.values < 0) return "";
    // a context-parallel rank holds seq / cp rows of each sequence (the formula's cp)
    const int s = e_.seq_local;
    cost::ModelShape shape = model::cost_shape(model_cfg_, cfg_.data.seq);
    shape.dropout = false;
    cost::ActivationSpec spec;
    spec.micro_batch = cfg_.data.micro_batch;
    spec.seq = cfg_.data.seq;
    spec.cp = e_.grid->cp_size();
    spec.tp = e_.grid->tp_size();
    spec.ep = e_.grid->ep_size();
    spec.expert_rows_for_every_rank = true;
    spec.sequence_parallel = cfg_.parallel.sequence_parallel && spec.tp > 1;
    spec.attention = cfg_.runtime.attention == AttentionKernel::Fused ? cost::Attention::Flash : cost::Attention::Naive;
    // the engine's selective recomputation is the attention probabilities': with the fused kernel
    // there are none, and it keeps what no recomputation keeps (not the planner's op-level kind)
    const bool fused_selective = spec.attention == cost::Attention::Flash && cfg_.runtime.recompute == cost::Recompute::Selective;
    spec.recompute = fused_selective ? cost::Recompute::None : cfg_.runtime.recompute;
    spec.value_bytes = double(dtype_bytes(e_.part->precision().activation));
    const double f = cost::block_activation_bytes(shape, spec);
    std::string out = shardlm::format(
        "  %-22s %12lld %12.0f   bytes per block and micro-batch (recompute %s, %d-byte values): "
        "Korthikanti et al.'s count without dropout, s b h (32 + 2 a s / h) at 16 bits; seed 002's "
        "b (2 a s^2 + 14 s h) at 4 bytes would be %.0f\n",
        "block activations", bb.values, f, setting_text(cfg_.runtime.recompute).c_str(), int(spec.value_bytes),
        4.0 * cfg_.data.micro_batch * (2.0 * model_cfg_.n_head * s * cfg_.data.seq + 14.0 * s * model_cfg_.n_embd));
    if (bb.stats > 0)
        out += shardlm::format("  %-22s %12lld   bytes per block: the norms' %s (fp32, outside the formulas)\n",
                               "norm statistics", bb.stats, model_cfg_.norm == model::Norm::RMSNorm ? "1/rms" : "means and 1/std");
    return out;
}

std::string Trainer::memory_report() const {
    const comm::Grid& g = *e_.grid;
    std::string out = shardlm::format("memory report, rank %d of %d (dp %d/%d, tp %d/%d, pp %d/%d%s)\n", g.world_rank(),
                          g.world_size(), g.dp_rank(), g.dp_size(), g.tp_rank(), g.tp_size(), g.pp_rank(), g.pp_size(),
                          g.cp_size() > 1 ? shardlm::format(", cp %d/%d", g.cp_rank(), g.cp_size()).c_str() : "");
    out += e_.sync->memory_report(*e_.optimizer);
    // tensor parallelism: the matrices are cut in tp, the LayerNorms and row-parallel biases replicated
    size_t sharded = 0, replicated = 0, sharded_full = 0;
    for (const model::ParamSpec& p : e_.part->layout().params) {
        if (p.tied_copy) continue;
        size_t full = 1;
        for (int64_t d : p.full_shape) full *= size_t(d);
        if (p.tp_axis >= 0) sharded += p.numel, sharded_full += full;
        else replicated += p.numel;
    }
    out += shardlm::format("  %-22s %12zu %12zu   this rank's sharded elements = the part's whole tensors / tp (%zu / %d), "
               "plus %zu replicated\n",
               "tensor-parallel shard", sharded, sharded_full / size_t(g.tp_size()), sharded_full, g.tp_size(),
               replicated);
    // activations: one slot per micro-batch in flight (GPipe m, 1F1B at most p - stage, ZB-H1 p: a
    // micro-batch's activations live until its W)
    const int p = g.pp_size(), s = g.pp_rank();
    for (int c = 0; c < e_.part->num_chunks(); c++) {
        int theory = 1;
        const char* why = "from the schedule";
        switch (e_.schedule.kind) {
        case schedule::ScheduleKind::GPipe: theory = e_.micro, why = "GPipe holds all m micro-batches"; break;
        case schedule::ScheduleKind::OneFOneB: theory = std::min(p - s, e_.micro), why = "1F1B holds at most p - stage"; break;
        case schedule::ScheduleKind::ZeroBubbleH1:
            theory = std::min(p, e_.micro), why = "ZB-H1 holds each micro-batch until its deferred W: at most p";
            break;
        case schedule::ScheduleKind::Interleaved:
        case schedule::ScheduleKind::ZeroBubbleV: theory = e_.part->slots(c); break;
        }
        out += shardlm::format("  %-22s %12d %12d   activation slots of chunk %d (compute units %d..%d), %.2f MiB each; "
                   "theory: %s\n",
                   "micro-batches held", e_.part->slots(c), theory, c, e_.part->first_unit(c), e_.part->last_unit(c),
                   mib(double(e_.part->slot_bytes(c))), why);
    }
    out += shardlm::format("  %-22s %12.2f %12s   MiB of output gradients B keeps for W (%s)\n", "B -> W buffers",
               mib(double(e_.part->keep_bytes())), "-",
               e_.part->defers_weight_grads() ? "W deferred: one set per slot, inside the slots above"
                                            : "W follows B: one set, reused");
    out += block_activation_report();
    if (e_.part->recompute_bytes() > 0)
        out += shardlm::format("  %-22s %12.2f   (held once: the recomputed block or attention probabilities)\n", "recompute MiB",
                   mib(double(e_.part->recompute_bytes())));
    out += shardlm::format("  %-22s %12.2f   (all slots, boundary buffers and scratch)\n", "activations MiB",
               mib(double(e_.part->activation_bytes())));
    rusage ru{};
    getrusage(RUSAGE_SELF, &ru);
    out += shardlm::format("  %-22s %12.2f   (this process so far)\n", "peak RSS MiB", double(ru.ru_maxrss) / 1024.0);
    return out;
}

// The data-parallel group's rows of the communication report (and the experts' group's, with --ep): the ZeRO
// stage's reductions and gathers beside their formulas, or a dp algorithm's own traffic beside its formula.
void Trainer::dp_comm_rows(std::string& out) const {
    const comm::Grid& g = *e_.grid;
    auto row = [&](const char* group, const comm::Group& grp, comm::OpKind k, size_t theory) {
        comm_row(out, group, grp, k, theory);
    };
    const parallel::DpAlgorithm& algo = *e_.sync->algorithm();
    const int last = cfg_.data.last_step() - 1;
    const auto dpb = e_.sync->expected_step_bytes(e_.micro);
    if (algo.algo() == parallel::DpAlgo::AllReduce) {
        // Sophia's Hessian pass after this step: its backward's reductions again (and ZeRO-3's gathers)
        const size_t passes = e_.optimizer->hessian_due(last) ? 2 : 1;
        const comm::Group& dpg = g.dp_cp();  // the gradients' group: dp, or dp x cp
        const size_t gathers = shards_parameters(cfg_.parallel.zero) ? passes : 1;
        // with expert parallelism the experts' own group (the ranks holding the same experts) beside it
        const bool ep = g.ep_size() > 1;
        const auto own = ep ? e_.sync->expected_step_bytes(e_.micro, parallel::UnitGroup::Data) : dpb;
        row(dpg.name().c_str(), dpg, comm::OpKind::AllReduce, own[0] * passes);
        row(dpg.name().c_str(), dpg, comm::OpKind::ReduceScatter, own[1] * passes);
        row(dpg.name().c_str(), dpg, comm::OpKind::AllGather, own[2] * gathers);
        if (ep) {
            const auto x = e_.sync->expected_step_bytes(e_.micro, parallel::UnitGroup::Experts);
            row("edp", g.edp(), comm::OpKind::AllReduce, x[0] * passes);
            row("edp", g.edp(), comm::OpKind::ReduceScatter, x[1] * passes);
            row("edp", g.edp(), comm::OpKind::AllGather, x[2] * gathers);
        }
    } else {  // the algorithm's own traffic (and ZeRO-1's gather of the updated slices), beside its formula
        const comm::CommStats& st = g.dp().stats();
        const size_t gather = cfg_.parallel.zero == ZeroStage::Optimizer ? dpb[2] : 0;
        out += shardlm::format("  %-9s %-15s calls %5llu  sent %14llu  theory %14zu  (%s%s)\n", "dp",
                   setting_text(cfg_.dp_algo.algo).c_str(),
                   (unsigned long long)(st[comm::OpKind::AllReduce].calls + st[comm::OpKind::AllGather].calls +
                                        st[comm::OpKind::SendRecv].calls),
                   (unsigned long long)st.total_bytes_sent(), algo.expected_bytes(last) + gather, algo.formula().c_str(),
                   gather ? "; and ZeRO-1's all-gather of the updated slices, (N-1)/N of the parameters" : "");
        if (e_.dp_metrics && cfg_.dp_algo.consensus_every > 0 && (last + 1) % cfg_.dp_algo.consensus_every == 0)
            row("dp-metric", *e_.dp_metrics, comm::OpKind::AllReduce,
                comm::ring_bytes_rank(comm::OpKind::AllReduce, e_.part->layout().total, 4, g.dp_size(), g.dp_rank()));
    }
}

std::string Trainer::comm_report() const {
    const comm::Grid& g = *e_.grid;
    std::string out = shardlm::format("communication, rank %d of %d (bytes sent by this rank in the last step beside the formulas: "
                          "ring all-reduce 2(N-1)/N B, reduce-scatter and all-gather (N-1)/N B; Megatron's 2 + 2 "
                          "all-reduces of B T C per block; B T C per micro-batch per pipeline boundary)\n",
                          g.world_rank(), g.world_size());
    auto row = [&](const char* group, const comm::Group& grp, comm::OpKind k, size_t theory) {
        comm_row(out, group, grp, k, theory);
    };
    const parallel::DpAlgorithm& algo = *e_.sync->algorithm();
    const int last = cfg_.data.last_step() - 1;
    dp_comm_rows(out);
    const auto tpb = parallel::tp_step_bytes(*e_.part, e_.micro, cfg_.data.micro_batch, e_.seq_local, cfg_.parallel.zero);
    row("tp", g.tp(), comm::OpKind::AllReduce, tpb[0]);
    row("tp", g.tp(), comm::OpKind::ReduceScatter, tpb[1]);
    row("tp", g.tp(), comm::OpKind::AllGather, tpb[2]);
    row("pp", g.pp(), comm::OpKind::SendRecv,
        parallel::pp_step_bytes(*e_.part, e_.schedule, g.pp_rank(), cfg_.data.micro_batch, e_.seq_local));
    cp_rows(out, g, *e_.part, cfg_.parallel.cp_comm, size_t(e_.micro) * (e_.optimizer->hessian_due(last) ? 2 : 1));
    ep_rows(out, g, *e_.part, model_cfg_.moe.n_experts);
    if (const comm::Group* emb = e_.sync->tied().group()) {
        const int wte = e_.part->layout().unit_of(model::UnitKind::TokenEmbedding);
        size_t n = 0;
        if (wte >= 0 && emb->size() > 1) {
            const size_t unit = e_.part->layout().units[size_t(wte)].numel;
            n = cfg_.parallel.zero == ZeroStage::Replicate ? unit : unit / size_t(g.dp_cp_size());
        }
        row("embedding", *emb, comm::OpKind::AllReduce,
            comm::ring_bytes_rank(comm::OpKind::AllReduce, n, 4, emb->size(), emb->rank()));
    }
    // the loss, the squared gradient norm (each replica's where they differ) and the stop signals: one
    // all-reduce of doubles over every rank; and the consensus distance's parts, where measured
    const bool differ = algo.replicas_differ();
    // (and the MoE layers' loads and objective terms)
    // (and each unit's gradient norm; on a health step its outputs' squares, and the update's sums after it)
    const size_t sums = world_sums(health_due(last));
    size_t world_bytes = comm::ring_bytes_rank(comm::OpKind::AllReduce, sums, 8, world_->size(), world_->rank());
    if (health_due(last))
        world_bytes += comm::ring_bytes_rank(comm::OpKind::AllReduce, 2 * size_t(model_cfg_.n_layer + 2), 8, world_->size(),
                                             world_->rank());
    if (algo.local_gradients() && !differ)  // compressed: the finiteness check before compressing
        world_bytes += comm::ring_bytes_rank(comm::OpKind::AllReduce, 1, 8, world_->size(), world_->rank());
    if (differ && cfg_.dp_algo.consensus_every > 0 && (last + 1) % cfg_.dp_algo.consensus_every == 0)
        world_bytes += comm::ring_bytes_rank(comm::OpKind::AllReduce, size_t(g.dp_size() + 1), 8, world_->size(),
                                                    world_->rank());
    row("world", *world_, comm::OpKind::AllReduce, world_bytes);
    const comm::CommStats& st = g.dp_cp().stats();
    double busy = 0;
    for (auto k : {comm::OpKind::AllReduce, comm::OpKind::ReduceScatter, comm::OpKind::AllGather})
        busy += st[k].busy_seconds;
    out += shardlm::format("  data-parallel communication busy %.3f s, training thread waited %.3f s: %.0f %% hidden behind compute\n",
               busy, e_.sync->exposed_comm_s(), busy > 0 ? 100.0 * std::max(0.0, 1.0 - e_.sync->exposed_comm_s() / busy) : 0.0);
    return out;
}

void Trainer::write_trace(double bubble_mean) {
    const comm::Grid& g = *e_.grid;
    // Chrome trace events: one process per rank, one thread per track
    std::map<std::string, int> tracks;
    std::string ev;
    for (const trace::Event& e : trace::take()) {
        auto [it, fresh] = tracks.emplace(e.track, int(tracks.size()));
        if (!ev.empty()) ev += ",\n";
        ev += shardlm::format("{\"name\": \"%s\", \"cat\": \"%s\", \"ph\": \"X\", \"pid\": %d, \"tid\": %d, \"ts\": %.3f, "
                  "\"dur\": %.3f",
                  json_escape(e.name).c_str(), json_escape(e.track).c_str(), g.world_rank(), it->second, e.t0 * 1e6,
                  (e.t1 - e.t0) * 1e6);
        ev += e.args.empty() ? "}" : ", \"args\": {" + e.args + "}}";
    }
    std::string meta = shardlm::format("{\"name\": \"process_name\", \"ph\": \"M\", \"pid\": %d, \"args\": {\"name\": \"rank %d "
                           "(dp %d, tp %d, pp %d)\"}}",
                           g.world_rank(), g.world_rank(), g.dp_rank(), g.tp_rank(), g.pp_rank());
    meta += shardlm::format(",\n{\"name\": \"process_sort_index\", \"ph\": \"M\", \"pid\": %d, \"args\": {\"sort_index\": %d}}",
                g.world_rank(), g.world_rank());
    for (const auto& [name, id] : tracks)
        meta += shardlm::format(",\n{\"name\": \"thread_name\", \"ph\": \"M\", \"pid\": %d, \"tid\": %d, \"args\": {\"name\": \"%s\"}}",
                    g.world_rank(), id, json_escape(name).c_str());
    const std::string mine = meta + (ev.empty() ? "" : ",\n" + ev);
    const std::vector<std::string> all = gather_text(*world_, mine);
    if (!is_root()) return;
    std::string out = "{\"traceEvents\": [\n";
    for (size_t r = 0; r < all.size(); r++) out += (r ? ",\n" : "") + all[r];
    out += shardlm::format("\n], \"displayTimeUnit\": \"ms\", \"otherData\": {\"layout\": \"dp %d tp %d pp %d\", \"schedule\": \"%s\", "
               "\"micro_batches\": %d, \"bubble_measured\": %.4f, \"bubble_theory\": %.4f}}\n",
               g.dp_size(), g.tp_size(), g.pp_size(), setting_text(cfg_.parallel.schedule).c_str(), e_.micro, bubble_mean,
               schedule::bubble_fraction_theory(e_.schedule.kind, g.pp_size(), e_.micro, e_.schedule.virtual_stages));
    if (auto dir = std::filesystem::path(cfg_.output.trace).parent_path(); !dir.empty()) std::filesystem::create_directories(dir);
    io::write_file_atomic(cfg_.output.trace, out);
    std::printf("wrote the timeline of the last step to %s (chrome://tracing or ui.perfetto.dev)\n", cfg_.output.trace.c_str());
}

}  // namespace shardlm::train
