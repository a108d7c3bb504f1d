// The pipeline executor in one process: pipeline stages are threads whose messages meet in memory
// (comm::Messages over mailboxes), each running its model chunks under a schedule, with a one-rank
// data-parallel group. Against one stage running the same micro-batches: the losses and every
// parameter's gradient equal to the bit (each unit sees the same inputs and accumulates its
// micro-batches in the same order), except the tied embedding, whose two halves (the embedding's and
// the head's copy) are summed after the step and agree to fp32 rounding. 1F1B, ZB-H1 and ZBV over two
// stages, GPipe and ZB-H1 over four, and ZeRO-3's per-chunk gathers. No MPI.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>
#include <vector>

#include "shardlm/comm/collectives.h"
#include "shardlm/comm/group.h"
#include "shardlm/core/check.h"
#include "shardlm/model/part.h"
#include "shardlm/model/weights.h"
#include "shardlm/parallel/grad_sync.h"
#include "shardlm/parallel/pipeline.h"
#include "shardlm/schedule/schedule.h"
#include "shardlm/parallel/stages.h"
#include "../thread_meeting.h"

namespace {

using namespace shardlm;

// Messages between thread-ranks: a send is copied into the (source, destination, tag) mailbox and
// completes at once; a receive waits for its mailbox (60 s, then fails: a schedule that deadlocks).
struct Mailboxes {
    std::mutex mu;
    std::condition_variable cv;
    std::map<std::tuple<int, int, int>, std::deque<std::vector<unsigned char>>> box;
};

class ThreadMessages final : public comm::Messages {
public:
    ThreadMessages(Mailboxes& m, int rank, int size) : m_(m), rank_(rank), size_(size) {}
    int rank() const override { return rank_; }
    int size() const override { return size_; }
    comm::Request isend(const void* data, size_t bytes, int dst, int tag) override {
        const auto* p = static_cast<const unsigned char*>(data);
        {
            std::lock_guard<std::mutex> lock(m_.mu);
            m_.box[{rank_, dst, tag}].emplace_back(p, p + bytes);
        }
        m_.cv.notify_all();
        return {};
    }
    void recv(void* data, size_t bytes, int src, int tag) override {
        std::unique_lock<std::mutex> lock(m_.mu);
        auto& q = m_.box[{src, rank_, tag}];
        SHARDLM_CHECK(m_.cv.wait_for(lock, std::chrono::seconds(60), [&] { return !q.empty(); }), "rank ", rank_,
                      " waited 60 s for tag ", tag, " from rank ", src);
        SHARDLM_CHECK(q.front().size() == bytes, "message of ", q.front().size(), " bytes received as ", bytes);
        std::memcpy(data, q.front().data(), bytes);
        q.pop_front();
    }

private:
    Mailboxes& m_;
    int rank_, size_;
};

// A one-rank data-parallel group (every collective is the identity).
class NoDataParallel final : public comm::Collectives {
public:
    int rank() const override { return 0; }
    int size() const override { return 1; }
    comm::Request iall_reduce_sum(void*, size_t, DType) override { return {}; }
    comm::Request ireduce_scatter_sum(const void* in, void* out, size_t n, DType t) override {
        if (in != out) std::memmove(out, in, n * dtype_bytes(t));
        return {};
    }
    comm::Request iall_gather_bytes(const void* in, void* out, size_t bytes) override {
        if (in != out) std::memmove(out, in, bytes);
        return {};
    }
};

model::GptConfig tiny() {
    return {.name = "pp-test", .n_layer = 4, .n_head = 2, .n_embd = 32, .vocab_size = 97, .n_ctx = 16};
}

constexpr int kB = 2, kT = 8, kMicro = 4;

struct StageRun {
    std::vector<double> loss_sum;  // per micro-batch (the head's stage)
    std::vector<model::ParamSpec> params;
    std::vector<float> grads;      // this stage's flat gradient buffer
};

// zero: the ZeRO stage (over a one-rank group); ZeRO-3 under a split backward gathers per chunk at the
// schedule's Unshard actions, as the engine does.
void run_stage(StageRun& out, comm::Messages& pp, schedule::ScheduleKind kind, int stages, int v, int zero = 0,
               const char* precision = "fp32") {
    const model::GptConfig mc = tiny();
    schedule::Schedule s = schedule::make_schedule(kind, stages, kMicro, v);
    const auto all_chunks = parallel::split_stages(mc, kT, stages * s.virtual_stages);
    model::ModelPart::Options o;
    for (int c = 0; c < s.virtual_stages; c++) o.chunks.push_back(all_chunks[size_t(s.model_chunk(pp.rank(), c))]);
    o.slots = s.slots(pp.rank());
    o.defer_weight_grads = s.splits_backward(pp.rank());
    EXPECT_TRUE(precision_policy_from_name(precision, &o.precision));
    model::ModelPart part(mc, o, kB, kT);
    const model::Layout& L = part.layout();
    NoDataParallel self;
    parallel::GradSync::Options so;
    so.zero = zero_stage(zero);
    so.single_stage = stages == 1;
    so.split_backward = s.splits_backward();
    // ZBV: the head's copy and the embedding on one rank, summed there
    so.embedding_group = std::make_unique<comm::Group>(comm::Group::self());
    parallel::GradSync dp(self, part, std::move(so));
    dp.prepare(s);
    for (auto& [range, storage] : dp.store().param_storage()) model::init_gpt2_weights(storage, L, range, 3);
    dp.params_loaded();
    parallel::PipelineExecutor exec(part, pp, dp.hooks());
    parallel::PipelineExecutor::Batch batch;
    batch.rows = [](int) { return kB; };
    batch.fill = [](int m, int* in, int* tgt) {
        for (int i = 0; i < kB * kT; i++) {
            in[i] = (i * 13 + m * 7 + i * i) % 97;
            tgt[i] = (i * 5 + m * 11 + 3) % 97;
        }
    };
    const parallel::PipelineExecutor::Result r = exec.run(s, batch, kB, kT, 1.0f / float(kMicro * kB * kT));
    dp.finish_reductions();
    out.loss_sum = r.loss_sum;
    out.params = L.params;
    out.grads.assign(dp.store().owned_grads()[0], dp.store().owned_grads()[0] + L.total);
}

std::vector<StageRun> run_pipeline(schedule::ScheduleKind kind, int stages, int v = 1, int zero = 0,
                                   const char* precision = "fp32") {
    Mailboxes boxes;
    std::vector<std::unique_ptr<ThreadMessages>> groups;
    for (int r = 0; r < stages; r++) groups.push_back(std::make_unique<ThreadMessages>(boxes, r, stages));
    std::vector<StageRun> runs(static_cast<size_t>(stages));
    test::run_ranks(stages,
                    [&](int r) { run_stage(runs[size_t(r)], *groups[size_t(r)], kind, stages, v, zero, precision); });
    return runs;
}

// Every stage's gradients against one stage's: to the bit, except wte (its halves summed first).
void expect_equal_to_one_stage(const std::vector<StageRun>& stages, const StageRun& one, const std::string& what) {
    const auto find = [&](const std::string& name) -> const model::ParamSpec& {
        for (const model::ParamSpec& p : one.params)
            if (p.name == name && !p.tied_copy) return p;
        throw Error("no " + name);
    };
    std::vector<double> losses(one.loss_sum.size(), 0.0);
    std::vector<float> wte;  // the tied embedding's gradient: every stage's share summed
    for (const StageRun& st : stages) {
        for (size_t m = 0; m < losses.size(); m++) losses[m] += st.loss_sum[m];
        bool has_wte = false;  // a stage with the embedding and the head's copy (ZBV) summed them already
        for (const model::ParamSpec& p : st.params) has_wte |= p.name == "transformer.wte.weight" && !p.tied_copy;
        for (const model::ParamSpec& p : st.params) {
            const model::ParamSpec& ref = find(p.name);
            ASSERT_EQ(p.numel, ref.numel) << what << " " << p.name;
            const float* g = st.grads.data() + p.offset;
            if (p.name == "transformer.wte.weight") {
                if (p.tied_copy && has_wte) continue;
                wte.resize(p.numel, 0.0f);
                for (size_t i = 0; i < p.numel; i++) wte[i] += g[i];
                continue;
            }
            EXPECT_EQ(0, std::memcmp(g, one.grads.data() + ref.offset, p.numel * sizeof(float))) << what << " " << p.name;
        }
    }
    EXPECT_EQ(losses, one.loss_sum) << what;
    const model::ParamSpec& w = find("transformer.wte.weight");
    float scale = 0, worst = 0;
    for (size_t i = 0; i < w.numel; i++) {
        scale = std::max(scale, std::fabs(one.grads[w.offset + i]));
        worst = std::max(worst, std::fabs(one.grads[w.offset + i] - wte[i]));
    }
    EXPECT_LE(worst, 1e-5f * scale) << what << " wte";
}

TEST(InProcessPipeline, StagesEqualOneStage) {
    const StageRun one = run_pipeline(schedule::ScheduleKind::OneFOneB, 1).front();
    using K = schedule::ScheduleKind;
    for (const auto& [kind, stages, v] : {std::tuple{K::OneFOneB, 2, 1}, std::tuple{K::ZeroBubbleH1, 2, 1},
                                          std::tuple{K::ZeroBubbleV, 2, 2}, std::tuple{K::GPipe, 4, 1},
                                          std::tuple{K::ZeroBubbleH1, 4, 1}, std::tuple{K::Interleaved, 2, 2}}) {
        const std::string what = std::string(schedule::schedule_name(kind)) + " over " + std::to_string(stages) + " stages";
        SCOPED_TRACE(what);
        expect_equal_to_one_stage(run_pipeline(kind, stages, v), one, what);
    }
}

TEST(InProcessPipeline, ZeroBubbleH1EqualsOneFOneBToTheBit) {
    for (int stages : {2, 4}) {
        const std::vector<StageRun> a = run_pipeline(schedule::ScheduleKind::OneFOneB, stages),
                                    b = run_pipeline(schedule::ScheduleKind::ZeroBubbleH1, stages);
        for (size_t r = 0; r < a.size(); r++) {
            EXPECT_EQ(a[r].loss_sum, b[r].loss_sum) << stages << " stages, rank " << r;
            ASSERT_EQ(a[r].grads.size(), b[r].grads.size());
            EXPECT_EQ(0, std::memcmp(a[r].grads.data(), b[r].grads.data(), a[r].grads.size() * sizeof(float)))
                << stages << " stages, rank " << r;
        }
    }
}

// ZeRO-3 under the zero-bubble schedules gathers each chunk once per step (Unshard / Reshard actions)
// where 1F1B gathers each unit around each pass: the same parameters and the same gradient sums, so
// the same bits, in fp32 and with the 16-bit copy.
TEST(InProcessPipeline, ZeroThreeByChunkEqualsZeroThreeByUnit) {
    for (const char* precision : {"fp32", "bf16"}) {
        const std::vector<StageRun> unit = run_pipeline(schedule::ScheduleKind::OneFOneB, 2, 1, 3, precision);
        const std::vector<StageRun> chunk = run_pipeline(schedule::ScheduleKind::ZeroBubbleH1, 2, 1, 3, precision);
        for (size_t r = 0; r < unit.size(); r++) {
            EXPECT_EQ(unit[r].loss_sum, chunk[r].loss_sum) << precision << " rank " << r;
            ASSERT_EQ(unit[r].grads.size(), chunk[r].grads.size());
            EXPECT_EQ(0, std::memcmp(unit[r].grads.data(), chunk[r].grads.data(), unit[r].grads.size() * sizeof(float)))
                << precision << " rank " << r;
        }
        // and ZBV's V, against the one-stage run of the same precision
        const StageRun one = run_pipeline(schedule::ScheduleKind::OneFOneB, 1, 1, 3, precision).front();
        expect_equal_to_one_stage(run_pipeline(schedule::ScheduleKind::ZeroBubbleV, 2, 2, 3, precision), one,
                                  std::string("zbv ZeRO-3 ") + precision);
    }
}

}  // namespace
