#include "shardlm/comm/settings.h"

#include <algorithm>
#include <atomic>

namespace shardlm::comm {

namespace {
std::atomic<WaitMode> g_wait_mode{WaitMode::Sleep};
std::atomic<double> g_timeout_s{0.0};
std::atomic<CollectivesBackend> g_collectives{CollectivesBackend::Ring};
// 256 KiB: the kSlots = 4 receive slots of a reduce step (1 MiB) stay in the 2 MiB L2.
std::atomic<size_t> g_segment_bytes{size_t(256) << 10};
}  // namespace

void set_background_wait(WaitMode m) { g_wait_mode.store(m); }
WaitMode background_wait() { return g_wait_mode.load(std::memory_order_relaxed); }
void set_timeout(double seconds) { g_timeout_s.store(seconds > 0 ? seconds : 0.0); }
double timeout() { return g_timeout_s.load(std::memory_order_relaxed); }
void set_collectives(CollectivesBackend b) { g_collectives.store(b); }
CollectivesBackend collectives() { return g_collectives.load(); }
void set_segment_bytes(size_t bytes) { g_segment_bytes.store(std::max<size_t>(bytes, 64)); }
size_t segment_bytes() { return g_segment_bytes.load(); }

}  // namespace shardlm::comm
