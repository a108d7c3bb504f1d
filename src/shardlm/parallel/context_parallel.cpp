#include "shardlm/parallel/context_parallel.h"

#include "shardlm/core/check.h"

namespace shardlm::parallel {

int GroupContextParallel::ring_start(const void* send, void* recv, size_t bytes, int tag) {
    const int n = g_.size(), r = g_.rank();
    Exchange e;
    e.recv = g_.irecv(recv, bytes, (r - 1 + n) % n, tag);
    e.send = g_.isend(send, bytes, (r + 1) % n, tag);
    const int ticket = next_ticket_++;
    pending_.emplace(ticket, std::move(e));
    return ticket;
}

void GroupContextParallel::ring_wait(int ticket) {
    auto it = pending_.find(ticket);
    SHARDLM_CHECK(it != pending_.end(), "context parallelism: no ring exchange ", ticket, " in flight");
    Exchange e = std::move(it->second);
    pending_.erase(it);
    e.send.wait();
    e.recv.wait();
}

}  // namespace shardlm::parallel
