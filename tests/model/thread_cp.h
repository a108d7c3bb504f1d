// tests/model/thread_cp.h: a context-parallel group whose ranks are threads of one process
// (model::ContextParallel over tests/thread_meeting.h and a mailbox per rank), counting what each rank
// sends, for in-process tests of ring and all-gather attention.
#pragma once
#include <condition_variable>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <vector>

#include "shardlm/model/context_parallel.h"
#include "../thread_meeting.h"

namespace shardlm::test {

// Every rank's inbox: the messages sent to it, per tag, in order.
struct CpPost {
    explicit CpPost(int n) : meeting(n), inbox(size_t(n)) {}
    Meeting meeting;
    std::mutex mu;
    std::condition_variable cv;
    std::vector<std::map<int, std::deque<std::vector<char>>>> inbox;
};

class ThreadCp final : public model::ContextParallel {
public:
    ThreadCp(CpPost& post, int rank) : post_(post), rank_(rank) {}
    int size() const override { return post_.meeting.size; }
    int rank() const override { return rank_; }

    // the message is copied into the next rank's inbox at once; the wait takes the previous rank's
    int ring_start(const void* send, void* recv, size_t bytes, int tag) override {
        {
            std::lock_guard<std::mutex> lock(post_.mu);
            const auto* p = static_cast<const char*>(send);
            post_.inbox[size_t((rank_ + 1) % size())][tag].emplace_back(p, p + bytes);
        }
        post_.cv.notify_all();
        sends[tag]++;
        bytes_sent += bytes;
        pending_[next_] = {recv, bytes, tag};
        return next_++;
    }
    void ring_wait(int ticket) override {
        const Pending p = pending_.at(ticket);
        pending_.erase(ticket);
        std::unique_lock<std::mutex> lock(post_.mu);
        auto& q = post_.inbox[size_t(rank_)][p.tag];
        post_.cv.wait(lock, [&] { return !q.empty(); });
        if (q.front().size() != p.bytes) throw std::runtime_error("ThreadCp: a message of another size");
        std::memcpy(p.recv, q.front().data(), p.bytes);
        q.pop_front();
    }
    void all_gather_bytes(const void* in, void* out, size_t bytes) override {
        gathers++;
        bytes_sent += bytes * size_t(size() - 1);  // the ring all-gather's share
        post_.meeting.all_gather_bytes(rank_, in, out, bytes);
    }
    void reduce_scatter_sum(const float* in, float* out, size_t n) override {
        reduce_scatters++;
        bytes_sent += n * sizeof(float) * size_t(size() - 1);
        const std::vector<float> s = post_.meeting.sum(in, size_t(rank_) * n, n, DType::F32, rank_);
        std::copy(s.begin(), s.end(), out);
    }

    std::map<int, int> sends;  // ring messages per tag
    int gathers = 0, reduce_scatters = 0;
    size_t bytes_sent = 0;

private:
    struct Pending {
        void* recv;
        size_t bytes;
        int tag;
    };
    CpPost& post_;
    int rank_;
    std::map<int, Pending> pending_;
    int next_ = 0;
};

}  // namespace shardlm::test
