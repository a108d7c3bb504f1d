#include "shardlm/train/engine.h"

#include <algorithm>
#include <cstdlib>

#include "shardlm/core/check.h"
#include "shardlm/core/runtime.h"
#include "shardlm/kernels/gemm/gemm.h"
#include "shardlm/parallel/stages.h"
#include "shardlm/train/memory_check.h"

namespace shardlm::train {

namespace {

// Lanes (--thread-split): auto takes them where they can balance their work (docs/DESIGN.md).
int lanes_of(const TrainConfig& cfg, const model::GptConfig& model, int threads, int tp) {
    const bool batch = cfg.runtime.thread_split == ThreadSplit::Batch ||
                       (cfg.runtime.thread_split == ThreadSplit::Auto && model::lane_groups(cfg.data.micro_batch, cfg.data.seq, threads) >= 2 * threads);
    return tp == 1 && cfg.parallel.cp == 1 && !cfg.data.doc_mask && !model.has_moe() && batch ? threads : 1;
}

// The data-parallel seam over this rank's part: the ZeRO stage, the dp algorithm, the tied embedding's
// group (the stages of the first and last model chunks; ZBV: one stage) and sequence parallelism's
// sum of replicated parameters' gradients before their reduction.
std::unique_ptr<parallel::GradSync> make_grad_sync(const TrainConfig& cfg, const model::GptConfig& model,
                                                   comm::Group& world, const Engine& e) {
    comm::Grid& g = *e.grid;
    const schedule::Schedule& s = e.schedule;
    parallel::GradSync::Options o;
    o.zero = cfg.parallel.zero;
    o.bucket_mb = cfg.parallel.bucket_mb;
    o.single_stage = g.pp_size() == 1;
    o.split_backward = s.splits_backward();
    o.reduce_dtype = cfg.precision.resolved().reduce;
    o.algorithm = parallel::DpAlgorithm::make(cfg.dp_algo_config(), g.dp_cp(), e.part->layout());
    if (g.ep_size() > 1) o.experts = &g.edp();
    if (g.pp_size() > 1 && model.tie_embeddings) {
        const int embedding_stage = s.rank_of(0), head_stage = s.rank_of(s.num_model_chunks() - 1);
        o.embedding_group = std::make_unique<comm::Group>(g.tied_embedding_group(world, embedding_stage, head_stage));
        o.embedding_group->set_name("embedding");
    }
    if (cfg.parallel.sequence_parallel && g.tp_size() > 1) {
        comm::Group* tpg = &g.tp();
        const model::Layout* layout = &e.part->layout();
        o.pre_reduce = [tpg, layout](int unit, float* grad) { parallel::sync_replicated_grads(*tpg, *layout, unit, grad); };
    }
    return std::make_unique<parallel::GradSync>(g.dp_cp(), *e.part, std::move(o));
}

// The dp x cp x tp x pp grid and its groups' names; the layout checked against the batch and the model.
void make_grid(Engine& e, const TrainConfig& cfg, const model::GptConfig& model, comm::Group& world) {
    e.grid = std::make_unique<comm::Grid>(
        comm::Grid::create(world, {cfg.parallel.dp, cfg.parallel.tp, cfg.parallel.pp, cfg.parallel.cp, cfg.parallel.ep}));
    comm::Grid& g = *e.grid;
    g.dp().set_name("dp");
    g.tp().set_name("tp");
    g.pp().set_name("pp");
    g.cp().set_name("cp");
    if (g.cp_size() > 1) g.dp_cp().set_name("dp-cp");
    if (g.ep_size() > 1) g.ep().set_name("ep"), g.edp().set_name("edp");
    SHARDLM_CHECK(g.ep_size() == 1 || model.has_moe(), "--ep ", g.ep_size(), " with a dense model: expert parallelism "
                  "splits the experts of MoE layers\n---> HINT: --n-experts N (or an MoE preset), or --ep 1");
    const int dp = g.dp_size(), tp = g.tp_size();
    e.seq_local = cfg.data.seq / g.cp_size();
    SHARDLM_CHECK(cfg.data.global_batch % (dp * cfg.data.micro_batch) == 0, "--global-batch (", cfg.data.global_batch,
                  ") must be a multiple of dp (", dp, ") x --micro-batch (", cfg.data.micro_batch,
                  "): each data-parallel rank runs whole micro-batches of its G/dp rows");
    e.micro = cfg.data.global_batch / (dp * cfg.data.micro_batch);
    SHARDLM_CHECK(cfg.data.seq <= model.n_ctx, "--seq ", cfg.data.seq, " exceeds the model's context length n_ctx = ", model.n_ctx,
                  "\n---> HINT: use --seq <= ", model.n_ctx);
    SHARDLM_CHECK(model.n_head % tp == 0, "--tp ", tp, " must divide the number of attention heads (", model.n_head,
                  "): each tensor-parallel rank computes whole heads");
    SHARDLM_CHECK(model.kv_heads() % tp == 0, "--tp ", tp, " must divide the number of key/value heads (n_kv_head ",
                  model.kv_heads(), "): each tensor-parallel rank holds whole key/value heads and the query heads ",
                  "that share them\n---> HINT: use a --tp that divides ", model.kv_heads());
    SHARDLM_CHECK(model.ffn() % tp == 0, "--tp ", tp, " must divide the MLP's inner size (ffn_hidden ", model.ffn(), ")");
}

// This rank's part: its chunks and slots of the schedule, tensor and context parallelism (their groups
// made here), precision, recomputation, attention, lanes.
model::ModelPart::Options part_options(Engine& e, const TrainConfig& cfg, const model::GptConfig& model) {
    comm::Grid& g = *e.grid;
    const schedule::Schedule& s = e.schedule;
    model::ModelPart::Options po;
    for (int c = 0; c < s.virtual_stages; c++) po.chunks.push_back(e.all_chunks[size_t(s.model_chunk(g.pp_rank(), c))]);
    po.slots = s.slots(g.pp_rank());
    po.defer_weight_grads = s.splits_backward(g.pp_rank());
    e.tp = std::make_unique<parallel::GroupTensorParallel>(g.tp());
    po.tp = e.tp.get();
    po.sequence_parallel = cfg.parallel.sequence_parallel;
    po.precision = cfg.precision.resolved();
    po.recompute = cfg.runtime.recompute;
    po.fused_attention = cfg.runtime.attention == AttentionKernel::Fused;
    po.unit_multiple = g.dp_cp_size();  // ZeRO's shards: one per rank of dp x cp
    po.doc_mask = cfg.data.doc_mask;
    if (g.cp_size() > 1) {
        e.cp = std::make_unique<parallel::GroupContextParallel>(g.cp());
        po.cp = e.cp.get();
        po.cp_comm = cfg.parallel.cp_comm;
    }
    if (g.ep_size() > 1) {
        e.ep = std::make_unique<parallel::GroupExpertParallel>(g.ep());
        po.ep = e.ep.get();
    }
    po.threads = get_threads();
    po.lanes = lanes_of(cfg, model, po.threads, g.tp_size());
    return po;
}

}  // namespace

Engine build_engine(const TrainConfig& cfg, const model::GptConfig& model, comm::Group& world) {
    SHARDLM_CHECK(!model.has_moe() || cfg.runtime.thread_split != ThreadSplit::Batch, "--thread-split batch with a mixture "
                  "of experts: the experts' products run over the whole micro-batch's tokens, one lane\n---> HINT: "
                  "--thread-split kernel (or auto)");
    Engine e;
    make_grid(e, cfg, model, world);
    comm::Grid& g = *e.grid;
    const int dp = g.dp_size(), tp = g.tp_size(), pp = g.pp_size(), cp = g.cp_size();
    // the pipeline: the step's schedule, and which model chunks this rank holds
    e.schedule = schedule::make_schedule(cfg.parallel.schedule, pp, e.micro, cfg.parallel.virtual_stages);
    e.all_chunks = parallel::split_stages(model, cfg.data.seq, pp * e.schedule.virtual_stages, cfg.parallel.pp_split);
    const model::ModelPart::Options po = part_options(e, cfg, model);
    {  // will it fit? (before anything large is allocated)
        model::LayoutSpec spec{po.chunks, tp, g.tp_rank(), po.unit_multiple};
        const MemoryNeed need =
            estimate_rank_memory(cfg, model, model::make_gpt2_layout(model, spec), dp, tp, cp, po.chunks, po.slots);
        const char* local = std::getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
        check_memory_fits(need, local ? std::max(1, std::atoi(local)) : 1, model.name);
    }
    e.part = std::make_unique<model::ModelPart>(model, po, cfg.data.micro_batch, e.seq_local);

    e.sync = make_grad_sync(cfg, model, world, e);
    e.sync->prepare(e.schedule);  // ZeRO-3 under a split backward: the chunks' Unshard/Reshard actions
    e.exec = std::make_unique<parallel::PipelineExecutor>(*e.part, g.pp(), e.sync->hooks());
    e.optimizer = std::make_unique<optim::Optimizer>(cfg.optim_config(), e.part->layout(), e.sync->store().owned_ranges());
    if (shards_optimizer(e.sync->zero()) && dp * cp > 1) {  // the optimiser owns slices: whole-tensor sums (Adafactor) over dp x cp
        comm::Group *dpg = &g.dp_cp(), *edp = &g.edp();  // (the experts' over the ranks holding the same experts)
        std::function<void(double*, size_t)> experts;
        if (g.ep_size() > 1) experts = [edp](double* x, size_t n) { if (edp->size() > 1) edp->all_reduce_sum(x, n); };
        e.optimizer->set_shard_sum([dpg](double* x, size_t n) { dpg->all_reduce_sum(x, n); }, std::move(experts));
    }
    if (e.sync->replicas_differ()) {
        e.dp_metrics = std::make_unique<comm::Group>(g.dp().split(0, g.dp().rank()));
        e.dp_metrics->set_name("dp-metrics");
    }
    return e;
}

}  // namespace shardlm::train
