#include "shardlm/parallel/pipeline.h"

#include <cstring>
#include <string>

#include "shardlm/core/check.h"
#include "shardlm/core/timer.h"
#include "shardlm/core/trace.h"

namespace shardlm::parallel {

using schedule::Action;
using schedule::Op;
using schedule::Schedule;

namespace {

// The trace's name of a pass: "F3", "B3", "W3", or with virtual stages "F3.1".
std::string pass_name(char kind, int micro, int chunk, bool chunks) {
    std::string n(1, kind);
    n += std::to_string(micro);
    if (chunks) n += '.' + std::to_string(chunk);
    return n;
}

}  // namespace

PipelineExecutor::PipelineExecutor(model::ModelPart& part, comm::Messages& pp, StepHooks& dp)
    : part_(part), pp_(pp), dp_(dp) {
    act_sends_.resize(size_t(part.num_chunks()));
    for (int c = 0; c < part.num_chunks(); c++) act_sends_[size_t(c)].resize(size_t(part.slots(c)));
    grad_sends_.resize(size_t(part.num_chunks()));
}

PipelineExecutor::~PipelineExecutor() {
    try {
        wait_sends();
    } catch (...) {
    }
}

void PipelineExecutor::wait_sends() {
    for (auto& v : act_sends_)
        for (auto& r : v) r.wait();
    for (auto& r : grad_sends_) r.wait();
}

int PipelineExecutor::tag(const Schedule& s, int micro, int model_chunk, bool grad) const {
    // MPI matches messages of one (source, tag) in order, so tags only need to tell apart the
    // messages that can be in flight at once: unique within a window of many micro-batches.
    return 1 + (int(grad) + 2 * (model_chunk + s.num_model_chunks() * micro)) % 30000;
}

void PipelineExecutor::send_self(int tag, const void* data, size_t bytes) {
    for (Loopback& l : loopback_)  // a free one (its vector keeps its capacity: no allocation per step)
        if (l.tag < 0) {
            l.tag = tag;
            l.bytes.assign(static_cast<const unsigned char*>(data), static_cast<const unsigned char*>(data) + bytes);
            return;
        }
    loopback_.push_back({tag, {static_cast<const unsigned char*>(data), static_cast<const unsigned char*>(data) + bytes}});
}

void PipelineExecutor::recv_self(int tag, void* data, size_t bytes) {
    for (Loopback& l : loopback_)
        if (l.tag == tag) {
            SHARDLM_CHECK(l.bytes.size() == bytes, "pipeline: a message to itself of ", l.bytes.size(),
                          " bytes received as ", bytes);
            std::memcpy(data, l.bytes.data(), bytes);
            l.tag = -1;
            return;
        }
    fail("pipeline: rank ", pp_.rank(), " receives from itself (tag ", tag, ") what it never sent");
}

// One run of a schedule: its inputs and what it has counted so far.
struct PipelineExecutor::Pass {
    const Schedule& s;
    const Batch& batch;
    int T;
    float dloss;
    Result res;
    std::vector<int> fwd_count, bwd_count, w_count;  // per local chunk: passes begun this run
    double t_begin = 0, t_last_pass = 0;
};

PipelineExecutor::Result PipelineExecutor::run(const Schedule& s, const Batch& batch, int max_rows, int T, float dloss,
                                               const std::function<void(const Result&)>& on_reduce,
                                               const std::function<void()>& on_step) {
    const int rank = pp_.rank();
    SHARDLM_CHECK(s.stages == pp_.size(), "schedule for ", s.stages, " stages on a pipeline group of ", pp_.size());
    SHARDLM_CHECK(s.virtual_stages == part_.num_chunks(), "schedule with ", s.virtual_stages,
                  " chunks per rank for a model part of ", part_.num_chunks());
    const size_t n = size_t(max_rows) * size_t(T);
    if (inputs_.size() < n) inputs_.resize(n), targets_.resize(n);
    if (batch.doc_starts && doc_starts_.size() < n) doc_starts_.resize(n);
    const size_t chunks = size_t(part_.num_chunks());
    Pass p{s, batch, T, dloss, {}, std::vector<int>(chunks, 0), std::vector<int>(chunks, 0), std::vector<int>(chunks, 0)};
    p.res.loss_sum.assign(size_t(s.micro), 0.0);
    p.t_begin = p.t_last_pass = now_s();
    for (const Action& a : s.ranks[size_t(rank)]) {
        const int c = a.chunk;
        const int slot = a.micro >= 0 ? a.micro % part_.slots(c) : 0;
        switch (a.op) {
        case Op::RecvAct:
        case Op::SendAct:
        case Op::RecvGrad:
        case Op::SendGrad: message(p, a, slot); break;
        case Op::Forward: forward(p, a, slot); break;
        case Op::Backward:
        case Op::BackwardInput:
            grad_sends_[size_t(c)].wait();  // B writes d(input) into dres (the last stage receives none first)
            backward(p, a, slot);
            break;
        case Op::BackwardWeight: backward(p, a, slot); break;
        case Op::ReduceGrads:
            p.res.span_s = p.t_last_pass - p.t_begin;
            if (on_reduce) {
                trace::Scope ts("reduce grads", "compute");
                on_reduce(p.res);
            }
            break;
        case Op::OptimizerStep:
            if (on_step) {
                trace::Scope ts("optimizer step", "compute");
                on_step();
            }
            break;
        case Op::Unshard: {
            trace::Scope ts("unshard " + std::to_string(c), "pipeline");
            dp_.unshard(c);
            break;
        }
        case Op::Reshard: dp_.reshard(c); break;
        }
    }
    if (s.forward_only) p.res.span_s = p.t_last_pass - p.t_begin;
    wait_sends();
    return std::move(p.res);
}

// An activation or its gradient to or from the neighbouring stage: over the pipeline group, or
// copied when the peer is this rank (ZBV's turn).
void PipelineExecutor::message(Pass& p, const Action& a, int slot) {
    const int rank = pp_.rank(), c = a.chunk, mc = p.s.model_chunk(rank, c), rows = p.batch.rows(a.micro);
    auto recv = [&](void* buf, size_t bytes, int tg) {
        if (a.peer == rank) recv_self(tg, buf, bytes);
        else pp_.recv(buf, bytes, a.peer, tg);
    };
    auto isend = [&](const void* buf, size_t bytes, int tg) {
        if (a.peer != rank) return pp_.isend(buf, bytes, a.peer, tg);
        send_self(tg, buf, bytes);
        return comm::Request{};
    };
    switch (a.op) {
    case Op::RecvAct: {
        trace::Scope ts("recv act " + std::to_string(a.micro), "pipeline");
        recv(part_.input(c, slot), part_.boundary_bytes(rows, p.T), tag(p.s, a.micro, mc, false));
        break;
    }
    case Op::SendAct: {
        comm::Request& r = act_sends_[size_t(c)][size_t(slot)];
        r.wait();
        r = isend(part_.output(c, slot), part_.boundary_bytes(rows, p.T), tag(p.s, a.micro, mc + 1, false));
        break;
    }
    case Op::RecvGrad: {
        grad_sends_[size_t(c)].wait();  // dres is free again
        trace::Scope ts("recv grad " + std::to_string(a.micro), "pipeline");
        recv(part_.dres(c), part_.grad_bytes(rows, p.T), tag(p.s, a.micro, mc, true));
        break;
    }
    case Op::SendGrad:
        grad_sends_[size_t(c)] = isend(part_.dres(c), part_.grad_bytes(rows, p.T), tag(p.s, a.micro, mc - 1, true));
        break;
    default: fail("pipeline: action ", int(a.op), " is not a message");
    }
}

void PipelineExecutor::forward(Pass& p, const Action& a, int slot) {
    const int c = a.chunk, rows = p.batch.rows(a.micro);
    // only the chunks that look the tokens up or compute the loss read them
    if (part_.has_embedding(c) || part_.has_head(c)) p.batch.fill(a.micro, inputs_.data(), targets_.data());
    const bool starts = p.batch.doc_starts && part_.blocks(c) > 0;  // attention inside documents
    if (starts) p.batch.doc_starts(a.micro, doc_starts_.data());
    act_sends_[size_t(c)][size_t(slot)].wait();  // the slot's output is written again
    const double t0 = now_s();
    {
        trace::Scope ts(pass_name('F', a.micro, c, p.s.virtual_stages > 1), "compute");
        dp_.begin_pass(c, true, p.fwd_count[size_t(c)], p.s.micro);
        p.fwd_count[size_t(c)]++;
        p.res.loss_sum[size_t(a.micro)] += part_.forward(c, slot, part_.has_embedding(c) ? inputs_.data() : nullptr,
                                                         part_.has_head(c) ? targets_.data() : nullptr, rows, p.T,
                                                         p.dloss, &dp_, starts ? doc_starts_.data() : nullptr);
        dp_.end_pass(c, true);
    }
    p.t_last_pass = now_s();
    p.res.compute_s += p.t_last_pass - t0;
}

// A backward (B and W together), its B alone (no hooks: nothing of the gradients is touched) or its
// W alone (the data-parallel hooks around each unit, as a whole backward has them).
void PipelineExecutor::backward(Pass& p, const Action& a, int slot) {
    const int c = a.chunk;
    const double t0 = now_s();
    {
        trace::Scope ts(pass_name(a.op == Op::BackwardWeight ? 'W' : 'B', a.micro, c, p.s.virtual_stages > 1), "compute");
        if (a.op == Op::BackwardInput) {
            part_.backward_input(c, slot);
        } else {
            const int i = (a.op == Op::Backward ? p.bwd_count : p.w_count)[size_t(c)]++;
            dp_.begin_pass(c, false, i, p.s.micro);
            if (a.op == Op::Backward) part_.backward(c, slot, &dp_, dp_.backward_accumulates(i));
            else part_.backward_weight(c, slot, &dp_, dp_.backward_accumulates(i));
            dp_.end_pass(c, false);
        }
    }
    p.t_last_pass = now_s();
    p.res.compute_s += p.t_last_pass - t0;
}

}  // namespace shardlm::parallel
