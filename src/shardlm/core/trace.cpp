#include "shardlm/core/trace.h"

#include <atomic>
#include <mutex>

#include "shardlm/core/timer.h"

namespace shardlm::trace {

namespace {
std::atomic<bool> g_on{false};
std::mutex g_mu;
std::vector<Event> g_events;
}  // namespace

void enable(bool on) { g_on.store(on); }
bool enabled() { return g_on.load(std::memory_order_relaxed); }

void record(std::string name, std::string track, double t0, double t1, std::string args) {
    if (!enabled()) return;
    std::lock_guard lk(g_mu);
    g_events.push_back({std::move(name), std::move(track), t0, t1, std::move(args)});
}

std::vector<Event> take() {
    std::lock_guard lk(g_mu);
    std::vector<Event> out;
    out.swap(g_events);
    return out;
}

Scope::Scope(const char* name, const char* track, std::string args) : Scope(std::string(name), track, std::move(args)) {}

Scope::Scope(std::string name, const char* track, std::string args) : track_(track) {
    if (!enabled()) return;
    name_ = std::move(name);
    args_ = std::move(args);
    t0_ = now_s();
}

Scope::~Scope() {
    if (t0_ >= 0) record(std::move(name_), track_, t0_, now_s(), std::move(args_));
}

}  // namespace shardlm::trace
