// parallel/expert_parallel.h: expert parallelism's messages (model::ExpertParallel) over the ep comm::Group
// (comm/grid.h: ep): the counts' all-gather and the tokens' all-to-all with counts. Bytes are counted by the
// group (--comm-report's ep rows).
#pragma once
#include "shardlm/comm/group.h"
#include "shardlm/model/moe.h"

namespace shardlm::parallel {

class GroupExpertParallel final : public model::ExpertParallel {
public:
    explicit GroupExpertParallel(comm::Group& g) : g_(g) {}
    int size() const override { return g_.size(); }
    int rank() const override { return g_.rank(); }
    void all_gather_bytes(const void* in, void* out, size_t bytes) override { g_.all_gather_bytes(in, out, bytes); }
    void all_to_all_bytes(const void* in, const size_t* send, const size_t* send_off, void* out, const size_t* recv,
                          const size_t* recv_off) override {
        g_.all_to_all_bytes(in, send, send_off, out, recv, recv_off);
    }

private:
    comm::Group& g_;
};

}  // namespace shardlm::parallel
