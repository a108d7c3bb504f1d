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

PipelineExecutor::Result PipelineExecutor::run(const Schedule& s, const Batch& batch, int max_rows, int T, float dloss,
                                               const std::function<void(const Result&)>& on_reduce,
                                               const std::function<void()>& on_step) {
    const int rank = pp_.rank();
    SHARDLM_CHECK(s.stages == pp_.size(), "schedule for ", s.stages, " stages on a pipeline group of ", pp_.size());
    SHARDLM_CHECK(s.virtual_stages == part_.num_chunks(), "schedule with ", s.virtual_stages,
                  " chunks per rank for a model part of ", part_.num_chunks());
    const size_t n = size_t(max_rows) * size_t(T);
    if (inputs_.size() < n) inputs_.resize(n), targets_.resize(n);
    Result res;
    res.loss_sum.assign(size_t(s.micro), 0.0);
    std::vector<int> fwd_count(size_t(part_.num_chunks()), 0), bwd_count(size_t(part_.num_chunks()), 0);
    std::vector<int> w_count(size_t(part_.num_chunks()), 0);
    // receive into / send from buf: over the pipeline group, or copied when the peer is this rank
    auto recv = [&](void* buf, size_t bytes, int peer, int tg) {
        if (peer == rank) recv_self(tg, buf, bytes);
        else pp_.recv(buf, bytes, peer, tg);
    };
    auto isend = [&](const void* buf, size_t bytes, int peer, int tg) {
        if (peer != rank) return pp_.isend(buf, bytes, peer, tg);
        send_self(tg, buf, bytes);
        return comm::Request{};
    };
    auto backward_pass = [&](const Action& a, int c, int slot, Op op) {
        const double t0 = now_s();
        {
            trace::Scope ts(pass_name(op == Op::BackwardWeight ? 'W' : 'B', a.micro, c, s.virtual_stages > 1),
                            "compute");
            if (op == Op::BackwardInput) {
                part_.backward_input(c, slot);
            } else {
                const int i = (op == Op::Backward ? bwd_count : w_count)[size_t(c)]++;
                dp_.begin_pass(c, false, i, s.micro);
                if (op == Op::Backward) part_.backward(c, slot, &dp_, dp_.backward_accumulates(i));
                else part_.backward_weight(c, slot, &dp_, dp_.backward_accumulates(i));
                dp_.end_pass(c, false);
            }
        }
        const double t1 = now_s();
        res.compute_s += t1 - t0;
        return t1;
    };
    const double t_begin = now_s();
    double t_last_pass = t_begin;
    for (const Action& a : s.ranks[size_t(rank)]) {
        const int c = a.chunk, mc = s.model_chunk(rank, c);
        const int slot = a.micro >= 0 ? a.micro % part_.slots(c) : 0;
        switch (a.op) {
        case Op::RecvAct: {
            const int rows = batch.rows(a.micro);
            trace::Scope ts("recv act " + std::to_string(a.micro), "pipeline");
            recv(part_.input(c, slot), part_.boundary_bytes(rows, T), a.peer, tag(s, a.micro, mc, false));
            break;
        }
        case Op::Forward: {
            const int rows = batch.rows(a.micro);
            // only the chunks that look the tokens up or compute the loss read them
            if (part_.has_embedding(c) || part_.has_head(c)) batch.fill(a.micro, inputs_.data(), targets_.data());
            act_sends_[size_t(c)][size_t(slot)].wait();  // the slot's output is written again
            const double t0 = now_s();
            {
                trace::Scope ts(pass_name('F', a.micro, c, s.virtual_stages > 1), "compute");
                dp_.begin_pass(c, true, fwd_count[size_t(c)], s.micro);
                fwd_count[size_t(c)]++;
                res.loss_sum[size_t(a.micro)] += part_.forward(c, slot, part_.has_embedding(c) ? inputs_.data() : nullptr,
                                                               part_.has_head(c) ? targets_.data() : nullptr, rows, T,
                                                               dloss, &dp_);
                dp_.end_pass(c, true);
            }
            t_last_pass = now_s();
            res.compute_s += t_last_pass - t0;
            break;
        }
        case Op::SendAct: {
            const int rows = batch.rows(a.micro);
            comm::Request& r = act_sends_[size_t(c)][size_t(slot)];
            r.wait();
            r = isend(part_.output(c, slot), part_.boundary_bytes(rows, T), a.peer, tag(s, a.micro, mc + 1, false));
            break;
        }
        case Op::RecvGrad: {
            const int rows = batch.rows(a.micro);
            grad_sends_[size_t(c)].wait();  // dres is free again
            trace::Scope ts("recv grad " + std::to_string(a.micro), "pipeline");
            recv(part_.dres(c), part_.grad_bytes(rows, T), a.peer, tag(s, a.micro, mc, true));
            break;
        }
        case Op::Backward:
        case Op::BackwardInput:
            grad_sends_[size_t(c)].wait();  // B writes d(input) into dres (the last stage receives none first)
            t_last_pass = backward_pass(a, c, slot, a.op);
            break;
        case Op::BackwardWeight: t_last_pass = backward_pass(a, c, slot, a.op); break;
        case Op::SendGrad: {
            const int rows = batch.rows(a.micro);
            grad_sends_[size_t(c)] = isend(part_.dres(c), part_.grad_bytes(rows, T), a.peer, tag(s, a.micro, mc - 1, true));
            break;
        }
        case Op::ReduceGrads:
            res.span_s = t_last_pass - t_begin;
            if (on_reduce) {
                trace::Scope ts("reduce grads", "compute");
                on_reduce(res);
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
    if (s.forward_only) res.span_s = t_last_pass - t_begin;
    wait_sends();
    return res;
}

}  // namespace shardlm::parallel
