// launch/supervisor.cpp: `shardlm launch` (launch/supervisor.h): attempts under mpirun, what ended
// them, the layout of the next one, and the launch log.
#include "shardlm/launch/supervisor.h"
#include "shardlm/launch/hosts.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <regex>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "shardlm/comm/flight.h"
#include "shardlm/core/check.h"
#include "shardlm/core/timer.h"
#include "shardlm/train/checkpoint.h"
#include "shardlm/train/memory_checkpoint.h"
#include "shardlm/train/run_dir.h"
#include "shardlm/train/run_lock.h"

extern char** environ;

namespace shardlm::launch {

namespace fs = std::filesystem;

namespace {

std::atomic<int> g_interrupt{0};  // SIGINT/SIGTERM received by the supervisor
std::atomic<pid_t> g_child{0};

// The first SIGINT/SIGTERM asks the ranks to stop after a checkpoint: SIGUSR2 to mpirun, which forwards it
// (a SIGTERM to mpirun would kill them at once). A second one ends the attempt now: SIGTERM to mpirun.
void on_interrupt(int sig) {
    const bool again = g_interrupt.exchange(sig) != 0;
    const pid_t c = g_child.load();
    if (c > 0) ::kill(c, again ? SIGTERM : SIGUSR2);
    static const char first[] = "\nlaunch: stopping: the ranks finish this step and write a checkpoint (again to stop at once)\n";
    static const char second[] = "\nlaunch: stopping at once, without a checkpoint\n";
    ssize_t ignored = again ? ::write(STDOUT_FILENO, second, sizeof(second) - 1) : ::write(STDOUT_FILENO, first, sizeof(first) - 1);
    (void)ignored;
}

bool flag_is(const std::string& a, const char* name) { return a == name || a.rfind(std::string(name) + "=", 0) == 0; }

// The flags of `shardlm train` that take no value (they must not swallow the next argument).
bool is_bool_flag(const std::string& a) {
    static const std::set<std::string> names = [] {
        std::set<std::string> s;
        train::TrainConfig c;
        train::for_each_input(c, [&](const char* key, auto& ref, const char*) {
            if constexpr (std::is_same_v<std::decay_t<decltype(ref)>, bool>) {
                std::string f = std::string("--") + key;
                for (auto& ch : f) ch = ch == '_' ? '-' : ch;
                s.insert(f);
            }
        });
        return s;
    }();
    return names.count(a.substr(0, a.find('='))) > 0;
}

double unix_now() {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return double(ts.tv_sec) + double(ts.tv_nsec) * 1e-9;
}

// Machine memory the ranks may share: MemAvailable (0 when unknown: memory is not checked).
double available_bytes() {
    std::ifstream in("/proc/meminfo");
    std::string key;
    double kb = 0;
    std::string unit;
    while (in >> key >> kb >> unit)
        if (key == "MemAvailable:") return kb * 1024.0;
    return 0;
}

class Log {
public:
    explicit Log(const std::string& out) : path_(out.empty() ? "" : (fs::path(out) / "launch.jsonl").string()) {}
    void event(nlohmann::json j) {
        j["time"] = unix_now();
        if (path_.empty()) return;
        std::error_code ec;
        fs::create_directories(fs::path(path_).parent_path(), ec);
        if (FILE* f = std::fopen(path_.c_str(), "a")) {
            const std::string s = j.dump() + "\n";
            const bool ok = std::fwrite(s.data(), 1, s.size(), f) == s.size();
            if (std::fclose(f) != 0 || !ok)
                std::fprintf(stderr, "launch: warning: could not append to %s: %s\n", path_.c_str(), std::strerror(errno));
        }
    }

private:
    std::string path_;
};

struct AttemptResult {
    int exit_code = 0;  // the shell convention: 128 + signal when mpirun itself was killed
    std::string tail;   // the last lines of its output
    bool stopped = false;  // the supervisor asked the ranks to stop (stop_when): a checkpoint ends it
};

// Runs argv with stdout and stderr into log (a file, not a pipe: mpirun aborts the job when a pipe's
// reader dies, and the ranks must outlive a killed supervisor long enough to checkpoint), copying every
// line to our stdout as it grows and keeping the last kTail bytes. SHARDLM_TEST_* variables are dropped
// unless keep_test_env. stop_when is asked about once a second: once it says yes, the ranks are asked to stop
// after a checkpoint (SIGUSR2 to mpirun, as on an interrupt).
AttemptResult run_attempt(const std::vector<std::string>& argv, const std::string& log, bool keep_test_env, bool fast_kill,
                          const std::function<bool()>& stop_when) {
    constexpr size_t kTail = 64 * 1024;
    const int wfd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC, 0644);
    SHARDLM_CHECK(wfd >= 0, "launch: cannot write the attempt's log '", log, "': ", std::strerror(errno));
    const int rfd = ::open(log.c_str(), O_RDONLY | O_CLOEXEC);
    SHARDLM_CHECK(rfd >= 0, "launch: cannot read the attempt's log '", log, "': ", std::strerror(errno));
    std::vector<std::string> env;
    bool sigkill_set = false;
    for (char** e = environ; *e; e++) {
        const std::string v = *e;
        if (!keep_test_env && v.rfind("SHARDLM_TEST_", 0) == 0) continue;
        sigkill_set |= v.rfind("OMPI_MCA_odls_base_sigkill_timeout=", 0) == 0;
        env.push_back(v);
    }
    // When a rank dies, mpirun SIGTERMs the others and waits this long before SIGKILL (default 1 s):
    // ranks whose peer died cannot finish a step or a checkpoint, so the wait only delays the restart.
    // With --comm-timeout and a hostfile the wait stays: after a hang a rank that began to wait less than half
    // the timeout before (comm/flight.h dumps at half) writes its flight record in it, and the records decide
    // which node loses a slot. On one machine no slot is lost: the records only name the rank in the log.
    if (!sigkill_set && fast_kill) env.push_back("OMPI_MCA_odls_base_sigkill_timeout=0");
    // the ranks answer to this process: they stop after a checkpoint when it is gone (train/stop_signal.h)
    env.push_back(std::string(train::kSupervisorEnv) + "=" + train::supervisor_env_value());
    std::vector<char*> cargv, cenv;
    for (const std::string& a : argv) cargv.push_back(const_cast<char*>(a.c_str()));
    cargv.push_back(nullptr);
    for (const std::string& v : env) cenv.push_back(const_cast<char*>(v.c_str()));
    cenv.push_back(nullptr);
    std::fflush(stdout);
    std::fflush(stderr);
    const pid_t pid = ::fork();
    SHARDLM_CHECK(pid >= 0, "launch: fork failed: ", std::strerror(errno));
    if (pid == 0) {
        sigset_t none;  // mpirun starts with no signal blocked, whatever this process blocks (comm/flight.h)
        sigemptyset(&none);
        ::sigprocmask(SIG_SETMASK, &none, nullptr);
        // A process group of its own: a terminal's Ctrl-C reaches this supervisor alone, which asks the
        // ranks for a checkpoint (mpirun would kill them at once); and no terminal input (the group is
        // in the background: a read would stop it).
        ::setpgid(0, 0);
        if (const int null = ::open("/dev/null", O_RDONLY); null >= 0) ::dup2(null, STDIN_FILENO);
        ::dup2(wfd, STDOUT_FILENO);
        ::dup2(wfd, STDERR_FILENO);
        ::execvpe(cargv[0], cargv.data(), cenv.data());
        const std::string msg = "launch: cannot run " + argv[0] + ": " + std::strerror(errno) + "\n";
        ssize_t ignored = ::write(STDERR_FILENO, msg.data(), msg.size());
        (void)ignored;
        ::_exit(127);
    }
    g_child.store(pid);
    ::close(wfd);
    AttemptResult r;
    char buf[4096];
    int status = 0;
    double asked = now_s();
    for (bool exited = false;;) {
        if (!exited && !r.stopped && stop_when && now_s() - asked >= 1.0) {
            asked = now_s();
            if (stop_when()) r.stopped = ::kill(pid, SIGUSR2) == 0;
        }
        const ssize_t n = ::read(rfd, buf, sizeof buf);
        if (n < 0 && errno == EINTR) continue;
        if (n > 0) {
            std::fwrite(buf, 1, size_t(n), stdout);
            std::fflush(stdout);
            r.tail.append(buf, size_t(n));
            if (r.tail.size() > 2 * kTail) r.tail.erase(0, r.tail.size() - kTail);
            continue;
        }
        if (exited) break;  // the log read to its end after mpirun ended
        const pid_t w = ::waitpid(pid, &status, WNOHANG);
        if (w == pid) exited = true;
        else ::usleep(50 * 1000);
    }
    ::close(rfd);
    g_child.store(0);
    r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    return r;
}

}  // namespace

Failure diagnose(const std::string& output, const std::string& flight_dir) {
    Failure f;
    // A timeout first: the ranks mpirun kills after one aborted are its consequence, not its cause.
    // Open MPI: "mpirun noticed that process rank 1 with PID 123 on node h exited on signal 9 (Killed)."
    static const std::regex killed(R"(process rank (\d+) with PID \d+ on node (\S+) exited on signal (\d+)(?: \(([^)]*)\))?)");
    std::set<int> lost;
    std::string first;
    for (auto it = std::sregex_iterator(output.begin(), output.end(), killed); it != std::sregex_iterator(); ++it) {
        const int sig = std::stoi((*it)[3]);
        if (sig == SIGTERM) continue;  // how mpirun ends the others
        if (lost.insert(std::stoi((*it)[1])).second) f.nodes.push_back((*it)[2].str());
        if (first.empty())
            first = "world rank " + (*it)[1].str() + " on " + (*it)[2].str() + " was killed by signal " + (*it)[3].str() +
                    ((*it)[4].matched ? " (" + (*it)[4].str() + ")" : "");
    }
    if (output.find("did not finish within --comm-timeout") != std::string::npos) {
        f.rank_lost = true;
        std::vector<int> stalled;
        if (!flight_dir.empty() && fs::is_directory(flight_dir)) {
            try {
                comm::flight::analyse(flight_dir, &stalled);
            } catch (const std::exception&) {
            }
        }
        f.lost = stalled;
        std::string who;
        for (size_t i = 0; i < stalled.size(); i++) {
            if (i) who += ',';
            who += std::to_string(stalled[i]);
        }
        f.reason = "a collective did not finish within --comm-timeout" +
                   (who.empty() ? std::string(" (no flight record names the stalled rank)")
                                : "; the flight records name world rank" + std::string(stalled.size() > 1 ? "s " : " ") + who +
                                      " as stalled");
        return f;
    }
    if (!lost.empty()) {
        f.rank_lost = true;
        f.lost.assign(lost.begin(), lost.end());
        f.reason = first + (lost.size() > 1 ? " (and " + std::to_string(lost.size() - 1) + " more)" : "");
        return f;
    }
    // the ranks' own last words
    static const std::regex err(R"(shardlm: error[^:\n]*: ([^\n]*))");
    std::smatch m;
    f.reason = std::regex_search(output, m, err) ? "error: " + m[1].str() : "the job failed (no lost rank was reported)";
    return f;
}

std::vector<std::string> next_train_args(const std::vector<std::string>& args, const Layout& l, bool pp_changed) {
    std::vector<std::string> out;
    for (size_t i = 0; i < args.size(); i++) {
        const std::string& a = args[i];
        const bool with_value = a.find('=') == std::string::npos && !is_bool_flag(a);
        auto drop = [&](const char* name) {
            if (!flag_is(a, name)) return false;
            if (with_value) i++;  // and its value
            return true;
        };
        if (drop("--dp") || drop("--tp") || drop("--pp") || (pp_changed && drop("--pp-split"))) continue;
        if (flag_is(a, "--overwrite") || flag_is(a, "--resume")) continue;
        out.push_back(a);
    }
    for (const std::string& x : {std::string("--dp"), std::to_string(l.dp), std::string("--tp"), std::to_string(l.tp),
                                 std::string("--pp"), std::to_string(l.pp), std::string("--resume")})
        out.push_back(x);
    return out;
}

std::string shrink_hostfile(const std::string& text, const std::vector<std::string>& lost_nodes) {
    std::map<std::string, int> lose;  // as mpirun names the nodes
    for (const std::string& n : lost_nodes) lose[n]++;
    // the lost slots of the node a hostfile line names, however it spells it (launch/hosts.h); taken once
    auto take = [&](const std::string& host) {
        for (auto it = lose.begin(); it != lose.end(); ++it)
            if (same_host(host, it->first)) {
                const int n = it->second;
                lose.erase(it);
                return n;
            }
        return 0;
    };
    static const std::regex line_re(R"(^\s*(\S+)(.*?)\bslots\s*=\s*(\d+)(.*)$)");
    std::istringstream in(text);
    std::string out;
    for (std::string line; std::getline(in, line);) {
        std::smatch m;
        const std::string body = line.substr(0, line.find('#'));
        if (std::regex_match(body, m, line_re)) {
            if (const int lost = take(m[1].str())) {
                const int slots = std::stoi(m[3].str()) - lost;
                if (slots <= 0) continue;
                out += m[1].str() + m[2].str() + "slots=" + std::to_string(slots) + m[4].str() + "\n";
                continue;
            }
        }
        std::istringstream words(body);
        std::string host;
        if (words >> host && body.find("slots") == std::string::npos && take(host)) continue;  // one slot
        out += line + "\n";
    }
    return out;
}

Layout first_layout(const train::TrainConfig& cfg, int np) {
    const int cp = cfg.parallel.cp;
    Layout l{cfg.parallel.dp > 0 ? cfg.parallel.dp : np / std::max(1, cfg.parallel.tp * cfg.parallel.pp * cp), cfg.parallel.tp,
             cfg.parallel.pp, cp};
    return l;
}

namespace {

// The first layout, after the launch's own settings are checked against the train command's.
Layout checked_first_layout(const LaunchOptions& o, const train::TrainConfig& cfg) {
    SHARDLM_CHECK(!cfg.output.out.empty(), "launch: the train command has no --out",
                  "\n---> HINT: a restart resumes from the run directory's checkpoints: give train --out DIR (and --ckpt-every N "
                  "or --ckpt-every-seconds S so that little is lost)");
    SHARDLM_CHECK(o.np >= 1, "launch: -np must be at least 1 (got ", o.np, ")");
    SHARDLM_CHECK(o.min_np >= 1 && o.min_np <= o.np, "launch: --min-np must be in 1..", o.np, " (got ", o.min_np, ")");
    SHARDLM_CHECK(o.max_restarts >= 0, "launch: --max-restarts must be >= 0 (got ", o.max_restarts, ")");
    SHARDLM_CHECK(o.max_np == 0 || o.max_np >= o.np, "launch: --max-np must be at least -np ", o.np, " (got ", o.max_np, ")");
    const Layout l0 = first_layout(cfg, o.np);
    SHARDLM_CHECK(l0.ranks() == o.np, "launch: -np ", o.np, " does not equal the train command's layout ", describe(l0), " (",
                  l0.ranks(), " ranks)", "\n---> HINT: -np ", l0.ranks(), ", or --dp ", o.np / std::max(1, cfg.parallel.tp * cfg.parallel.pp * cfg.parallel.cp));
    return l0;
}

void catch_interrupts() {
    struct sigaction sa;
    std::memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_interrupt;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, nullptr);
    sigaction(SIGTERM, &sa, nullptr);
}

// mpirun's command line for one attempt.
std::vector<std::string> mpirun_argv(const LaunchOptions& o, const std::string& hostfile, const Layout& layout,
                                     const std::string& exe, const std::vector<std::string>& train_args) {
    std::vector<std::string> argv;
    std::istringstream mr(o.mpirun);
    for (std::string w; mr >> w;) argv.push_back(w);
    if (::geteuid() == 0) argv.push_back("--allow-run-as-root");
    for (const std::string& a : o.mpi_args) argv.push_back(a);
    if (!hostfile.empty()) argv.insert(argv.end(), {"--hostfile", hostfile});
    argv.insert(argv.end(), {"-np", std::to_string(layout.ranks()), exe, "train"});
    argv.insert(argv.end(), train_args.begin(), train_args.end());
    return argv;
}

// The next attempt's hostfile: the lost ranks' slots gone from their nodes, in <out>/launch.hostfile.<attempt>.
std::string next_hostfile(const std::string& hostfile, const std::vector<std::string>& nodes, const std::string& out,
                          int next_attempt) {
    std::ifstream in(hostfile);
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    const std::string next = (fs::path(out) / ("launch.hostfile." + std::to_string(next_attempt))).string();
    std::ofstream(next) << shrink_hostfile(text, nodes);
    return next;
}

// The job's lock on its run directory for the supervisor's life (train/run_lock.h): a second job is refused.
std::unique_ptr<train::RunLock> lock_job(const std::string& out) {
    std::string holder;
    std::unique_ptr<train::RunLock> lock = train::RunLock::try_take(out, train::RunLockKind::Job, &holder);
    SHARDLM_CHECK(lock, "launch: run directory '", out, "' is in use by another job: ", holder,
                  "; two jobs in one directory would mix their checkpoints and metrics",
                  "\n---> HINT: wait for it to end (SIGTERM to that PID ends it after a checkpoint), or another --out");
    if (!holder.empty()) std::printf("launch: %s: the lock of %s, no longer running, is taken over\n", out.c_str(), holder.c_str());
    return lock;
}

// Ranks of an earlier job may still be finishing in the directory (their launch was killed: they stop
// after a checkpoint). Waits up to a minute for them, then refuses.
void wait_for_earlier_ranks(const std::string& out) {
    for (int i = 0;; i++) {
        const std::string holder = train::run_lock_holder(out, train::RunLockKind::Ranks);
        if (holder.empty()) return;
        if (i == 0) std::printf("launch: waiting for the ranks of an earlier job to stop (%s)\n", holder.c_str()), std::fflush(stdout);
        SHARDLM_CHECK(i < 120 && !g_interrupt.load(), "launch: the training processes of another job still run in '", out, "' (",
                      holder, ") after a minute", "\n---> HINT: stop them (SIGTERM to that PID ends it after a checkpoint), or another --out");
        ::usleep(500 * 1000);
    }
}

// The number of this directory's next attempt, counted over every launch that ran there (their logs stay):
// 1 + the largest n of a launch.attempt-<n>.log.
int next_attempt_number(const std::string& out) {
    int n = 0;
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(out, ec)) {
        const std::string f = e.path().filename().string();
        if (f.rfind("launch.attempt-", 0) == 0 && e.path().extension() == ".log") n = std::max(n, std::atoi(f.c_str() + 15));
    }
    return n + 1;
}

// A failed attempt's flight records, copied to <flight>/attempt-<n>/ (the next attempt replaces the
// ranks' files in <flight>): `report --flight <flight>/attempt-<n>` reads them later.
void keep_flight_records(const std::string& flight, int attempt) {
    std::error_code ec;
    if (flight.empty() || !fs::is_directory(flight, ec)) return;
    const fs::path to = fs::path(flight) / ("attempt-" + std::to_string(attempt));
    for (const auto& e : fs::directory_iterator(flight, ec))
        if (e.is_regular_file() && e.path().filename().string().rfind("rank", 0) == 0 && e.path().extension() == ".json") {
            fs::create_directories(to, ec);
            fs::copy_file(e.path(), to / e.path().filename(), fs::copy_options::overwrite_existing, ec);
        }
}

// What an interrupted attempt left: "the ranks wrote ckpt_00000012" or why there is none new.
std::string stop_outcome(const std::string& out, const std::string& before) {
    const std::string now = train::latest_checkpoint(out);
    if (!now.empty() && now != before) return "the ranks wrote " + fs::path(now).filename().string() + " before stopping";
    return now.empty() ? "no checkpoint was written" : "no new checkpoint (the newest is " + fs::path(now).filename().string() + ")";
}

}  // namespace

namespace {

// One `launch`: its attempts, each on the layout the failures before it left, and the launch log.
class Supervisor {
public:
    Supervisor(const LaunchOptions& o, const train::TrainConfig& cfg)
        : o_(o), cfg_(cfg), mc_(cfg.model.config()), layout_(checked_first_layout(o, cfg)), log_(cfg.output.out),
          hostfile_(o.hostfile), targs_(o.train_args),
          exe_(o.exe.empty() ? fs::read_symlink("/proc/self/exe").string() : o.exe) {}

    int run() {
        const std::unique_ptr<train::RunLock> job = lock_job(cfg_.output.out);
        catch_interrupts();
        for (attempt_ = 0;; attempt_++) {
            const Attempt a = start();
            if (a.r.exit_code == 0) return finished();
            if (const int sig = g_interrupt.load()) return interrupted(a, sig);
            if (a.r.stopped && grow_ && !train::latest_checkpoint(cfg_.output.out).empty()) {
                grow(*grow_);
                continue;
            }
            if (const std::optional<int> code = restart_after(a)) return *code;
        }
    }

private:
    struct Attempt {
        int number = 0;           // across every launch in the directory (launch.attempt-<n>.log)
        std::string ckpt_before;  // the newest checkpoint when it started
        double t0 = 0;
        AttemptResult r;
    };

    std::string layout_text() const { return describe(layout_); }

    // Runs one attempt on layout_ to its end.
    Attempt start() {
        Attempt a;
        a.number = next_attempt_number(cfg_.output.out);
        const std::string path = (fs::path(cfg_.output.out) / ("launch.attempt-" + std::to_string(a.number) + ".log")).string();
        std::printf("launch: attempt %d on %d rank%s (%s); its output also in %s\n", attempt_ + 1, layout_.ranks(),
                    layout_.ranks() > 1 ? "s" : "", layout_text().c_str(), path.c_str());
        wait_for_earlier_ranks(cfg_.output.out);
        log_.event({{"event", "start"}, {"attempt", attempt_ + 1}, {"np", layout_.ranks()}, {"layout", layout_text()}, {"log", path}});
        a.ckpt_before = train::latest_checkpoint(cfg_.output.out);
        a.t0 = now_s();
        grow_.reset();
        a.r = run_attempt(mpirun_argv(o_, hostfile_, layout_, exe_, targs_), path, attempt_ == 0,
                          cfg_.reliability.comm_timeout <= 0 || o_.hostfile.empty(), [&] { return growth_due(a.ckpt_before); });
        return a;
    }

    // Whether to stop the attempt and grow: fewer ranks than --max-np, a checkpoint newer than the attempt's
    // start, and a larger layout that fits the ranks available now (asked once per checkpoint).
    bool growth_due(const std::string& ckpt_before) {
        if (max_np_ <= 0 || layout_.ranks() >= max_np_) return false;
        const std::string ckpt = train::latest_checkpoint(cfg_.output.out);
        if (ckpt.empty() || ckpt == ckpt_before || ckpt == asked_at_) return false;
        asked_at_ = ckpt;
        if (!lost_nodes_.empty() && !lost_nodes_answer()) return false;
        train::TrainConfig next = cfg_;
        std::string why;
        const std::optional<Layout> nl = choose_layout(next, mc_, max_np_, available_bytes(), &why);
        if (!nl || nl->ranks() <= layout_.ranks()) return false;
        grow_ = *nl;
        std::printf("launch: %s written; %d rank%s can run again: the ranks stop after a checkpoint, then %s\n",
                    fs::path(ckpt).filename().c_str(), nl->ranks(), nl->ranks() > 1 ? "s" : "", describe(*nl).c_str());
        std::fflush(stdout);
        return true;
    }

    // Every lost node runs a process again (mpirun --host NODE -np 1 true, within 20 s).
    bool lost_nodes_answer() const {
        for (const std::string& node : lost_nodes_) {
            std::string cmd = "timeout 20 " + o_.mpirun + (::geteuid() == 0 ? " --allow-run-as-root" : "") + " --host " + node +
                              " -np 1 true > /dev/null 2>&1";
            if (std::system(cmd.c_str()) != 0) return false;
        }
        return true;
    }

    void grow(const Layout& nl) {
        const std::string ckpt = train::latest_checkpoint(cfg_.output.out);
        const int resume = train::checkpoint_step(ckpt);
        std::printf("launch: growing back: layout %s (%d rank%s) -> %s (%d ranks), global batch %d unchanged; resuming from %s "
                    "(step %d), no step lost\n",
                    layout_text().c_str(), layout_.ranks(), layout_.ranks() > 1 ? "s" : "", describe(nl).c_str(), nl.ranks(),
                    cfg_.data.global_batch, fs::path(ckpt).filename().c_str(), resume);
        std::fflush(stdout);
        log_.event({{"event", "grow"}, {"attempt", attempt_ + 2}, {"old_layout", layout_text()}, {"new_layout", describe(nl)},
                    {"np", nl.ranks()}, {"resume_step", resume}});
        targs_ = next_train_args(targs_, nl, nl.pp != layout_.pp);
        layout_ = nl;
        if (!lost_nodes_.empty()) hostfile_ = o_.hostfile, lost_nodes_.clear();  // every node answered
    }

    int finished() {
        std::printf("launch: training finished on attempt %d (%s)%s\n", attempt_ + 1, layout_text().c_str(),
                    restarts_ > 0 ? (", after " + std::to_string(restarts_) + " restart" + (restarts_ > 1 ? "s" : "")).c_str() : "");
        log_.event({{"event", "done"}, {"attempt", attempt_ + 1}, {"np", layout_.ranks()}, {"layout", layout_text()}});
        return 0;
    }

    int interrupted(const Attempt& a, int sig) {
        const std::string outcome = stop_outcome(cfg_.output.out, a.ckpt_before);
        std::printf("launch: interrupted by %s: %s; not restarting (continue with the same command: train resumes "
                    "from the newest checkpoint)\n", sig == SIGINT ? "SIGINT" : "SIGTERM", outcome.c_str());
        log_.event({{"event", "gave_up"}, {"attempt", attempt_ + 1}, {"reason", "interrupted: " + outcome},
                    {"exit_code", a.r.exit_code}});
        return 128 + sig;
    }

    int give_up(const Attempt& a, const std::string& why) {
        std::printf("launch: giving up: %s\n", why.c_str());
        log_.event({{"event", "gave_up"}, {"attempt", attempt_ + 1}, {"reason", why}, {"exit_code", a.r.exit_code}});
        return a.r.exit_code != 0 ? a.r.exit_code : 1;
    }

    // After a failed attempt: the next layout (and hostfile), or the exit code when there is none.
    std::optional<int> restart_after(const Attempt& a) {
        const std::string flight = train::flight_dir(cfg_);
        const Failure f = diagnose(a.r.tail, flight);
        keep_flight_records(flight, a.number);
        std::printf("launch: attempt %d failed after %.1f s (exit code %d): %s\n", attempt_ + 1, now_s() - a.t0, a.r.exit_code,
                    f.reason.c_str());
        log_.event({{"event", "failure"}, {"attempt", attempt_ + 1}, {"np", layout_.ranks()}, {"layout", layout_text()},
                    {"reason", f.reason}, {"lost_ranks", f.lost}, {"exit_code", a.r.exit_code}});
        if (!f.rank_lost) return give_up(a, "the failure is not a lost rank: a restart would fail the same way");
        if (restarts_ >= o_.max_restarts) return give_up(a, "--max-restarts " + std::to_string(o_.max_restarts) + " reached");
        // a rank lost on this machine (no --hostfile, and mpirun names no other node) leaves its CPU free again at
        // once: with --max-np the restart takes it back (under a scheduler's allocation mpirun may span nodes)
        const int lost = std::max<int>(1, int(f.lost.size()));
        const bool here = o_.hostfile.empty() && std::all_of(f.nodes.begin(), f.nodes.end(), [](const std::string& n) {
            return same_host(n, "localhost");
        });
        const int left = max_np_ > 0 && here ? std::max(layout_.ranks() - lost, max_np_) : layout_.ranks() - lost;
        if (left < o_.min_np)
            return give_up(a, std::to_string(left) + " rank" + (left == 1 ? "" : "s") + " left, below --min-np " +
                                  std::to_string(o_.min_np));
        train::TrainConfig next = cfg_;
        std::string why;
        const std::optional<Layout> nl = choose_layout(next, mc_, left, available_bytes(), &why);
        if (!nl) return give_up(a, why);
        announce_restart(f, *nl);
        restarts_++;
        targs_ = next_train_args(targs_, *nl, nl->pp != layout_.pp);
        layout_ = *nl;
        if (!hostfile_.empty() && !f.nodes.empty()) {  // the lost ranks' slots are gone from their nodes
            lost_nodes_.insert(lost_nodes_.end(), f.nodes.begin(), f.nodes.end());
            hostfile_ = next_hostfile(hostfile_, f.nodes, cfg_.output.out, attempt_ + 2);
            std::printf("launch: hostfile for the next attempt: %s\n", hostfile_.c_str());
        }
        return std::nullopt;
    }

    void announce_restart(const Failure& f, const Layout& nl) {
        // the steps the metrics record (-1 without a row), read as a resume reads them
        const train::MetricsFile m = train::read_metrics_file(train::metrics_path(cfg_));
        const int last = m.rows.empty() ? -1 : m.steps();
        // the newest checkpoint, on disk or kept in memory (train/memory_checkpoint.h: the ranks take the newer)
        const std::string on_disk = train::latest_checkpoint(cfg_.output.out);
        const int in_memory = train::newest_memory_checkpoint_step(cfg_);
        const bool memory = in_memory > train::checkpoint_step(on_disk);
        const std::string ckpt = memory ? "memory" : on_disk;
        const int resume = memory ? in_memory : train::checkpoint_step(on_disk);
        const int steps_lost = std::max(0, last - resume);
        auto ranks = [](int n) { return std::to_string(n) + (n == 1 ? " rank" : " ranks"); };
        std::printf("launch: restart %d of at most %d: %s; layout %s (%s) -> %s (%s), global batch %d "
                    "unchanged; resuming from %s (step %d), %d step%s lost\n",
                    restarts_ + 1, o_.max_restarts, f.reason.c_str(), layout_text().c_str(), ranks(layout_.ranks()).c_str(),
                    describe(nl).c_str(), ranks(nl.ranks()).c_str(), cfg_.data.global_batch,
                    ckpt.empty() ? "the start (no checkpoint yet)" : memory ? "the checkpoint kept in memory" : fs::path(ckpt).filename().string().c_str(), resume,
                    steps_lost, steps_lost == 1 ? "" : "s");
        std::fflush(stdout);
        log_.event({{"event", "restart"}, {"attempt", attempt_ + 2}, {"reason", f.reason}, {"old_layout", layout_text()},
                    {"new_layout", describe(nl)}, {"np", nl.ranks()}, {"resume_step", resume},
                    {"resume_from", memory ? "memory" : "disk"}, {"last_step", last},
                    {"steps_lost", steps_lost}});
    }

    const LaunchOptions& o_;
    const train::TrainConfig& cfg_;
    const model::GptConfig mc_;
    Layout layout_;
    Log log_;
    std::string hostfile_;
    std::vector<std::string> targs_;
    const std::string exe_;
    const int max_np_ = o_.max_np;          // 0: never grows
    int attempt_ = 0, restarts_ = 0;       // attempts started, restarts after a failure (growing is neither)
    std::vector<std::string> lost_nodes_;  // the nodes the hostfile lost slots on (growing back probes them)
    std::optional<Layout> grow_;           // the layout the running attempt stops for
    std::string asked_at_;                 // the checkpoint growth was last looked at
};

}  // namespace

int supervise(const LaunchOptions& o, const train::TrainConfig& cfg) { return Supervisor(o, cfg).run(); }

}  // namespace shardlm::launch
