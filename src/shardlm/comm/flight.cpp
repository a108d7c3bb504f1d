// comm/flight.cpp: the flight recorder's ring buffer, its dumps and the watcher thread. The analysis
// of the dumps is in comm/flight_analysis.cpp.
#include "shardlm/comm/flight.h"

#include <fcntl.h>
#include <omp.h>
#include <poll.h>
#include <pthread.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <map>
#include <mutex>
#include <thread>

#include "shardlm/comm/mpi_call.h"
#include "shardlm/comm/settings.h"
#include "shardlm/core/timer.h"

namespace shardlm::comm::flight {

namespace {

struct Record {
    uint64_t id = 0;  // 0: empty slot
    int group = -1;   // index into Recorder::groups
    uint64_t seq = 0;
    OpKind kind = OpKind::Barrier;
    uint64_t payload = 0;
    int peer = -1, tag = -1;  // point-to-point: peer's world rank
    bool p2p = false, send = false;
    State state = State::Queued;
    double t_issue = 0, t_start = 0, t_end = 0;
};

struct Recorder {
    std::mutex mu;
    std::vector<Record> ring = std::vector<Record>(4096);
    uint64_t next_id = 1;
    std::vector<GroupInfo> groups;
    std::map<std::pair<std::string, std::vector<int>>, int> group_index;
    std::string dir;
    std::string last_step;  // set_last_step(): a metrics row, parsed when a dump is written
    // the watcher's ticks that came late: the process did not run (SIGSTOP, a debugger, no CPU); the last few
    std::vector<std::pair<double, double>> pauses;  // (start, seconds)

    Record* find(uint64_t id, int64_t slot) {
        if (slot < 0 || size_t(slot) >= ring.size() || ring[size_t(slot)].id != id) return nullptr;  // overwritten
        return &ring[size_t(slot)];
    }
};

Recorder& rec() {
    static Recorder* r = new Recorder;  // never destroyed: the watcher thread may outlive statics
    return *r;
}

// The watcher thread sleeps in poll() on a pipe; a signal handler writes one byte (the reason's
// index) into it. It wakes every kTickS as well: a tick that comes kPauseS late or more means the
// process did not run in between (stopped by SIGSTOP or a debugger, or starved of CPU), which its dump
// then shows, so that the analysis names a stopped rank even where it stopped inside a collective.
constexpr int kTickMs = 100;
constexpr double kPauseS = 1.5;
int g_pipe[2] = {-1, -1};
const char* const kReasons[] = {"SIGUSR1", "SIGTERM", "SIGINT", "request"};
std::atomic<bool> g_watcher{false};

void on_usr1(int) { poke("SIGUSR1"); }

// An operation of this process that has waited half the --comm-timeout (0 if none, or already dumped
// for): its rank writes its record then, before any rank times out and mpirun kills the job, so that
// every rank that waits says for whom, even those killed before their own timeout.
uint64_t long_wait(double now) {
    static uint64_t dumped_for = 0;
    const double limit = timeout();
    if (limit <= 0) return 0;
    Recorder& r = rec();
    std::lock_guard lk(r.mu);
    if (r.dir.empty()) return 0;
    for (const Record& x : r.ring)
        if (x.id > dumped_for && (x.state == State::Running || x.state == State::Queued) &&
            now - (x.t_start > 0 ? x.t_start : x.t_issue) >= limit / 2)
            return dumped_for = x.id;
    return 0;
}

// The signals our handlers take: SIGUSR1 (here), SIGINT, SIGTERM and SIGUSR2 (train/stop_signal.cpp)
sigset_t handled_signals() {
    sigset_t set;
    sigemptyset(&set);
    for (int s : {SIGUSR1, SIGINT, SIGTERM, SIGUSR2}) sigaddset(&set, s);
    return set;
}

}  // namespace

const char* state_name(State s) {
    switch (s) {
    case State::Queued: return "queued";
    case State::Running: return "running";
    case State::Done: return "done";
    case State::Failed: return "failed";
    }
    return "?";
}

void set_capacity(size_t n) {
    std::lock_guard lk(rec().mu);
    rec().ring.assign(n, Record{});
}

void set_dump_dir(const std::string& dir) {
    std::lock_guard lk(rec().mu);
    rec().dir = dir;
}

const std::string& dump_dir() { return rec().dir; }

void poke(const char* reason) {
    if (g_pipe[1] < 0) return;
    unsigned char code = 3;
    for (unsigned char i = 0; i < 4; i++)
        if (std::strcmp(kReasons[i], reason) == 0) code = i;
    ssize_t ignored = ::write(g_pipe[1], &code, 1);
    (void)ignored;
}

void install_signal_dump() {
    if (g_watcher.exchange(true)) return;
    if (::pipe2(g_pipe, O_CLOEXEC) != 0) {
        g_watcher = false;
        return;
    }
    // The handled signals go to the watcher thread: the threads that compute block them, so a handler never
    // runs on one. oneDNN 2.6's AVX2 sgemm sets the stack pointer to the start of a heap block
    // of its own while it runs (valgrind: "client switching stacks? SP change: 0x1ffeffc278 --> 0x1c1c5000",
    // the block's first byte), so the frame of a signal delivered there was written over the heap below it:
    // on a Zen 3, Signals.FlightDumpsDuringOneDnnProductsLeaveTheHeapWhole aborted in free() inside libdnnl
    // in every run. The threads that exist block them here (this one and its OpenMP team); the threads
    // started later (OpenMP, oneDNN, the checkpoint writer) inherit this thread's mask.
    const sigset_t set = handled_signals();
    std::thread([set] {
        pthread_sigmask(SIG_UNBLOCK, &set, nullptr);
        double last_tick = now_s();
        for (;;) {
            struct pollfd pfd = {g_pipe[0], POLLIN, 0};
            const int ready = ::poll(&pfd, 1, kTickMs);
            const double t = now_s();
            if (t - last_tick >= kPauseS) {
                std::lock_guard lk(rec().mu);
                std::vector<std::pair<double, double>>& p = rec().pauses;
                if (p.size() >= 8) p.erase(p.begin());
                p.emplace_back(last_tick, t - last_tick);
            }
            last_tick = t;
            if (ready <= 0) {  // a tick (or EINTR)
                if (long_wait(t) != 0) dump("waited half the --comm-timeout");
                continue;
            }
            unsigned char code = 0;
            const ssize_t n = ::read(g_pipe[0], &code, 1);
            if (n < 0 && errno == EINTR) continue;
            if (n <= 0) {  // (cannot happen: the write end stays open) stay, to take the signals
                for (;;) ::pause();
            }
            try {
                const std::string f = dump(kReasons[code < 4 ? code : 3]);
                if (!f.empty()) {
                    const std::string msg = "shardlm: flight record written to " + f + " (" + kReasons[code < 4 ? code : 3] + ")\n";
                    ssize_t ignored = ::write(STDERR_FILENO, msg.data(), msg.size());
                    (void)ignored;
                }
            } catch (...) {
            }
        }
    }).detach();
    pthread_sigmask(SIG_BLOCK, &set, nullptr);
    if (!omp_in_parallel()) {
#pragma omp parallel
        pthread_sigmask(SIG_BLOCK, &set, nullptr);
    }
    struct sigaction sa;
    std::memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_usr1;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    sigaction(SIGUSR1, &sa, nullptr);
}

int register_group(const GroupInfo& g) {
    Recorder& r = rec();
    std::lock_guard lk(r.mu);
    auto [it, fresh] = r.group_index.emplace(std::make_pair(g.name, g.members), int(r.groups.size()));
    if (fresh) r.groups.push_back(g);
    return it->second;
}

void issued(detail::Op& op, int group, uint64_t seq, uint64_t payload, int peer, int tag, bool send) {
    Recorder& r = rec();
    std::lock_guard lk(r.mu);
    if (r.ring.empty()) return;
    const uint64_t id = r.next_id++;
    const int64_t slot = int64_t(id % r.ring.size());
    Record& x = r.ring[size_t(slot)];
    x = Record{};
    x.id = id;
    x.group = group;
    x.seq = seq;
    x.kind = op.kind;
    x.payload = payload;
    x.p2p = op.p2p || op.kind == OpKind::SendRecv;
    x.peer = x.p2p ? peer : -1;
    x.tag = tag;
    x.send = send;
    x.t_issue = now_s();
    op.flight_id = id;
    op.flight_slot = slot;
}

void started(const detail::Op& op) {
    if (op.flight_id == 0) return;
    std::lock_guard lk(rec().mu);
    if (Record* x = rec().find(op.flight_id, op.flight_slot)) {
        x->state = State::Running;
        x->t_start = now_s();
    }
}

void finished(const detail::Op& op, bool ok) {
    if (op.flight_id == 0) return;
    std::lock_guard lk(rec().mu);
    if (Record* x = rec().find(op.flight_id, op.flight_slot)) {
        if (x->state == State::Queued) x->t_start = now_s();
        x->state = ok ? State::Done : State::Failed;
        x->t_end = now_s();
    }
}

nlohmann::json snapshot(const std::string& reason) {
    using nlohmann::json;
    Recorder& r = rec();
    std::vector<Record> recs;
    json groups = json::array();
    std::string last_step;
    std::vector<std::pair<double, double>> pauses;
    {
        std::lock_guard lk(r.mu);
        pauses = r.pauses;
        for (const Record& x : r.ring)
            if (x.id != 0) recs.push_back(x);
        for (const GroupInfo& g : r.groups) groups.push_back({{"name", g.name}, {"members", g.members}});
        last_step = r.last_step;
    }
    std::sort(recs.begin(), recs.end(), [](const Record& a, const Record& b) { return a.id < b.id; });
    json ops = json::array();
    for (const Record& x : recs) {
        json o = {{"id", x.id},
                  {"group", x.group},
                  {"seq", x.seq},
                  {"op", std::string(op_name(x.kind))},
                  {"bytes", x.payload},
                  {"state", state_name(x.state)},
                  {"t_issue", x.t_issue},
                  {"t_start", x.t_start},
                  {"t_end", x.t_end}};
        if (x.p2p) {
            o["peer"] = x.peer;
            o["tag"] = x.tag;
            o["dir"] = x.send ? "send" : "recv";
        }
        ops.push_back(std::move(o));
    }
    char host[256] = {0};
    ::gethostname(host, sizeof(host) - 1);
    json out{{"flight_record", 1},      {"world_rank", world_rank()}, {"pid", int(::getpid())},
             {"host", std::string(host)}, {"reason", reason},         {"now", now_s()},
             {"unix_time", double(std::time(nullptr))}, {"groups", groups}, {"ops", ops}};
    if (json row = json::parse(last_step, nullptr, /*allow_exceptions=*/false); row.is_object()) out["last_step"] = std::move(row);
    json p = json::array();
    for (const auto& [start, seconds] : pauses) p.push_back({{"t", start}, {"seconds", seconds}});
    out["pauses"] = std::move(p);
    return out;
}

void set_last_step(std::string metrics_row) {
    std::lock_guard lk(rec().mu);
    rec().last_step = std::move(metrics_row);
}

std::string dump(const std::string& reason) {
    std::string dir;
    {
        std::lock_guard lk(rec().mu);
        dir = rec().dir;
    }
    if (dir.empty()) return "";
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    const std::string path = dir + "/rank" + std::to_string(world_rank()) + ".json";
    const std::string text = snapshot(reason).dump(1) + "\n";
    // One dump at a time: the watcher thread (SIGTERM while going down) and the main thread (a
    // timeout's dump) once wrote this process's temporary file at once, each through its own
    // descriptor, and a shorter record over a longer one left the longer one's tail (invalid JSON).
    static std::mutex dump_mu;
    std::lock_guard dump_lk(dump_mu);
    const std::string tmp = path + ".tmp." + std::to_string(::getpid());
    // plain POSIX calls: this may run while the process is going down
    const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) return "";
    size_t off = 0;
    while (off < text.size()) {
        const ssize_t n = ::write(fd, text.data() + off, text.size() - off);
        if (n <= 0) {
            ::close(fd);
            ::unlink(tmp.c_str());
            return "";
        }
        off += size_t(n);
    }
    ::fsync(fd);
    ::close(fd);
    if (::rename(tmp.c_str(), path.c_str()) != 0) return "";
    return path;
}

}  // namespace shardlm::comm::flight
