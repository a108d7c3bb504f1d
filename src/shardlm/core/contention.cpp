#include "shardlm/core/contention.h"

#include "shardlm/core/timer.h"

#include <strings.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>

#if defined(__linux__)
#include <dirent.h>
#include <fcntl.h>
#include <unistd.h>
#endif

namespace shardlm {

namespace {

// The summed run-queue wait (ns) of this process's threads; -1 where it cannot be read.
double summed_wait_ns() {
#if defined(__linux__)
    DIR* d = opendir("/proc/self/task");
    if (!d) return -1;
    double sum = 0;
    bool any = false;
    while (const dirent* e = readdir(d)) {
        if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
        const std::string path = std::string("/proc/self/task/") + e->d_name + "/schedstat";
        const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
        if (fd < 0) continue;  // the thread ended between readdir and open
        char buf[96];
        const ssize_t n = read(fd, buf, sizeof(buf) - 1);
        close(fd);
        if (n <= 0) continue;
        buf[n] = '\0';
        // "<ns on a CPU> <ns waiting on a run queue> <time slices>"
        char* end = nullptr;
        const unsigned long long run = std::strtoull(buf, &end, 10);
        const unsigned long long wait = std::strtoull(end, nullptr, 10);
        if (run > 0) any = true;
        sum += double(wait);
    }
    closedir(d);
    return any ? sum : -1;  // all zeros: the kernel keeps no schedstats
#else
    return -1;
#endif
}

struct Sampler {
    std::mutex m;
    double t0 = 0, wait0 = -1;
    std::atomic<double> next{0}, waiting{0};

    void sample(double t) {
        std::unique_lock<std::mutex> lock(m, std::try_to_lock);
        if (!lock.owns_lock()) return;  // another thread samples now
        if (t < next.load(std::memory_order_relaxed)) return;
        const double w = summed_wait_ns();
        // (a thread that ended since the last sample takes its wait out of the sum: then this window reads 0)
        if (w >= 0 && wait0 >= 0 && t > t0)
            waiting.store(std::max(0.0, w - wait0) * 1e-9 / (t - t0), std::memory_order_relaxed);
        t0 = t, wait0 = w;
        next.store(t + kSampleSeconds, std::memory_order_relaxed);
    }
};

Sampler& sampler() {
    static Sampler s;
    return s;
}

int forced() {
    static const int f = [] {
        const char* v = std::getenv("SHARDLM_CONTENTION");
        if (!v || !*v || strcasecmp(v, "auto") == 0) return -1;
        if (strcasecmp(v, "on") == 0 || std::strcmp(v, "1") == 0) return 1;
        if (strcasecmp(v, "off") == 0 || std::strcmp(v, "0") == 0) return 0;
        std::fprintf(stderr, "warning: SHARDLM_CONTENTION=%s is not on, off or auto: measuring (auto)\n", v);
        return -1;
    }();
    return f;
}

}  // namespace

double cpu_waiting_threads() {
    Sampler& s = sampler();
    const double t = now_s();
    if (t >= s.next.load(std::memory_order_relaxed)) s.sample(t);
    return s.waiting.load(std::memory_order_relaxed);
}

bool cpu_contended() {
    if (const int f = forced(); f >= 0) return f == 1;
    return cpu_waiting_threads() > kContendedWaitingThreads;
}

}  // namespace shardlm
