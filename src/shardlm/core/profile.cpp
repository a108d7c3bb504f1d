#include "shardlm/core/profile.h"

#include <omp.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "shardlm/core/timer.h"

namespace shardlm::profile {

namespace {

std::atomic<bool> g_on{false};
std::atomic<bool> g_by_shape{false};

struct ThreadTable {
    std::unordered_map<const char*, Totals> totals;
    int depth = 0;
};

struct Registry {
    std::mutex mu;
    std::vector<std::shared_ptr<ThreadTable>> tables;  // shared: a table outlives its thread until taken
};
Registry& registry() {
    static Registry r;
    return r;
}

ThreadTable& mine() {
    thread_local std::shared_ptr<ThreadTable> t = [] {
        auto p = std::make_shared<ThreadTable>();
        std::lock_guard<std::mutex> g(registry().mu);
        registry().tables.push_back(p);
        return p;
    }();
    return *t;
}

}  // namespace

void enable(bool on) { g_on.store(on, std::memory_order_relaxed); }
bool enabled() { return g_on.load(std::memory_order_relaxed); }
void set_by_shape(bool on) { g_by_shape.store(on, std::memory_order_relaxed); }
bool by_shape() { return enabled() && g_by_shape.load(std::memory_order_relaxed); }

const char* shape(const char* kind, char a_layout, char b_layout, int M, int N, int K) {
    if (!by_shape()) return nullptr;
    static std::mutex mu;
    static std::set<std::string> names;  // the names' storage: a set never moves its strings
    thread_local std::unordered_map<std::string, const char*> mine;  // this thread's, without the lock
    char buf[96];
    std::snprintf(buf, sizeof buf, "%s %c%c %dx%dx%d", kind, a_layout, b_layout, M, N, K);
    auto it = mine.find(buf);
    if (it != mine.end()) return it->second;
    std::lock_guard<std::mutex> g(mu);
    const char* name = names.insert(buf).first->c_str();
    mine.emplace(buf, name);
    return name;
}

Scope::Scope(const char* name, double flops, double bytes) {
    if (!name || !enabled()) return;
    ThreadTable& t = mine();
    table_ = &t;
    if (t.depth++ > 0) return;  // inside another kernel: counted as that one
    name_ = name, flops_ = flops, bytes_ = bytes;
    share_ = omp_in_parallel() ? 1.0 / std::max(1, omp_get_num_threads()) : 1.0;
    t0_ = now_s();
}

Scope::~Scope() {
    if (!table_) return;
    auto& t = *static_cast<ThreadTable*>(table_);
    t.depth--;
    if (!name_) return;
    Totals& x = t.totals[name_];
    const double dt = now_s() - t0_;
    x.seconds += dt;
    x.wall += dt * share_;
    x.flops += flops_;
    x.bytes += bytes_;
    x.calls++;
}

std::map<std::string, Totals> take() {
    std::map<std::string, Totals> out;
    std::lock_guard<std::mutex> g(registry().mu);
    for (const auto& table : registry().tables) {
        for (const auto& [name, x] : table->totals) {
            Totals& o = out[name];
            o.seconds += x.seconds, o.wall += x.wall, o.flops += x.flops, o.bytes += x.bytes, o.calls += x.calls;
        }
        table->totals.clear();
    }
    return out;
}

}  // namespace shardlm::profile
