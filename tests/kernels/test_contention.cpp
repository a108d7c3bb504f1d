// core/contention.h: the process's threads waiting for a CPU, from the kernel's schedstats.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <fstream>
#include <thread>
#include <vector>

#include "shardlm/core/contention.h"

namespace {

bool have_schedstats() {
    std::ifstream f("/proc/thread-self/schedstat");
    unsigned long long run = 0;
    return bool(f >> run) && run > 0;
}

// More spinning threads than cores: the scheduler parks some of them, and the process counts as contended
// within a few sample windows; once they stop, it does not.
TEST(Contention, SeenWhileThreadsOutnumberTheCoresAndNotAfter) {
    if (!have_schedstats()) GTEST_SKIP() << "this kernel keeps no schedstats (/proc/thread-self/schedstat)";
    const int n = int(std::max(1u, std::thread::hardware_concurrency())) + 2;
    std::atomic<bool> stop{false};
    std::vector<std::thread> spin;
    for (int i = 0; i < n; i++)
        spin.emplace_back([&] {
            while (!stop.load(std::memory_order_relaxed)) {
            }
        });
    double most = 0;
    const auto t0 = std::chrono::steady_clock::now();
    while (std::chrono::steady_clock::now() - t0 < std::chrono::seconds(3) && most <= 1.0) {
        most = std::max(most, shardlm::cpu_waiting_threads());
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    stop = true;
    for (auto& t : spin) t.join();
    // n spinners on n - 2 CPUs: about two wait at any time
    EXPECT_GT(most, 1.0) << "threads waiting for a CPU, at most, over the sample windows";
    EXPECT_TRUE(most > shardlm::kContendedWaitingThreads);
    // the spinners gone: this thread alone, asleep between samples, waits for no CPU (a window of ours and
    // then a whole window after it; other processes' threads, e.g. tests run beside this one, do not count)
    std::this_thread::sleep_for(std::chrono::duration<double>(2.5 * shardlm::kSampleSeconds));
    shardlm::cpu_waiting_threads();
    std::this_thread::sleep_for(std::chrono::duration<double>(1.5 * shardlm::kSampleSeconds));
    EXPECT_LT(shardlm::cpu_waiting_threads(), 0.5 * most);
}

}  // namespace
