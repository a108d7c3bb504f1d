// parallel/context_parallel.h: context parallelism's messages (model::ContextParallel) over the cp
// comm::Group: a ring exchange is an isend to the next rank and an irecv from the previous one, posted
// on the communication thread (comm/progress.h) so that they move while the training thread computes the
// attention tiles of the block in hand; the all-gather mode's collectives are the group's rings. Bytes
// are counted by the group (--comm-report's cp rows).
#pragma once
#include <map>

#include "shardlm/comm/group.h"
#include "shardlm/model/context_parallel.h"

namespace shardlm::parallel {

class GroupContextParallel final : public model::ContextParallel {
public:
    explicit GroupContextParallel(comm::Group& g) : g_(g) {}
    int size() const override { return g_.size(); }
    int rank() const override { return g_.rank(); }
    int ring_start(const void* send, void* recv, size_t bytes, int tag) override;
    void ring_wait(int ticket) override;
    void all_gather_bytes(const void* in, void* out, size_t bytes) override { g_.all_gather_bytes(in, out, bytes); }
    void reduce_scatter_sum(const float* in, float* out, size_t n) override { g_.reduce_scatter_sum(in, out, n); }

private:
    struct Exchange {
        comm::Request send, recv;
    };
    comm::Group& g_;
    std::map<int, Exchange> pending_;
    int next_ticket_ = 0;
};

}  // namespace shardlm::parallel
