// launch/supervisor.cpp: `shardlm launch` (launch/supervisor.h): attempts under mpirun, what ended
// them, the layout of the next one, and the launch log.
#include "shardlm/launch/supervisor.h"

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
#include <map>
#include <regex>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "shardlm/comm/flight.h"
#include "shardlm/core/check.h"
#include "shardlm/core/timer.h"
#include "shardlm/train/checkpoint.h"
#include "shardlm/train/run_dir.h"

extern char** environ;

namespace shardlm::launch {

namespace fs = std::filesystem;

namespace {

std::atomic<int> g_interrupt{0};  // SIGINT/SIGTERM received by the supervisor
std::atomic<pid_t> g_child{0};

void on_interrupt(int sig) {
    g_interrupt.store(sig);
    const pid_t c = g_child.load();
    if (c > 0) ::kill(c, sig);  // mpirun forwards it to the ranks, which checkpoint and stop
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

// The largest step number in a metrics file plus one (the steps it records), or -1 without one.
int recorded_steps(const std::string& path) {
    std::ifstream in(path);
    std::string line;
    int best = -1;
    while (std::getline(in, line)) {
        auto j = nlohmann::json::parse(line, nullptr, false);
        if (!j.is_discarded() && j.is_object() && j.contains("step") && j["step"].is_number_integer())
            best = std::max(best, j["step"].get<int>() + 1);
    }
    return best;
}

int checkpoint_step(const std::string& dir) {
    if (dir.empty()) return 0;
    const std::string n = fs::path(dir).filename().string();
    return std::atoi(n.c_str() + 5);  // ckpt_<8 digits>
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
};

// Runs argv with stdout and stderr through a pipe: every line is copied to our stdout and the last
// kTail bytes are kept. SHARDLM_TEST_* variables are dropped unless keep_test_env.
AttemptResult run_attempt(const std::vector<std::string>& argv, bool keep_test_env, bool fast_kill) {
    constexpr size_t kTail = 64 * 1024;
    int fds[2];
    SHARDLM_CHECK(::pipe2(fds, O_CLOEXEC) == 0, "launch: pipe failed: ", std::strerror(errno));
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
    // With --comm-timeout the wait stays: after a hang, the waiting ranks need it to write the flight
    // records that name the stalled rank.
    if (!sigkill_set && fast_kill) env.push_back("OMPI_MCA_odls_base_sigkill_timeout=0");
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
        ::dup2(fds[1], STDOUT_FILENO);
        ::dup2(fds[1], STDERR_FILENO);
        ::execvpe(cargv[0], cargv.data(), cenv.data());
        const std::string msg = "launch: cannot run " + argv[0] + ": " + std::strerror(errno) + "\n";
        ssize_t ignored = ::write(STDERR_FILENO, msg.data(), msg.size());
        (void)ignored;
        ::_exit(127);
    }
    g_child.store(pid);
    ::close(fds[1]);
    AttemptResult r;
    char buf[4096];
    for (;;) {
        const ssize_t n = ::read(fds[0], buf, sizeof buf);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) break;
        std::fwrite(buf, 1, size_t(n), stdout);
        std::fflush(stdout);
        r.tail.append(buf, size_t(n));
        if (r.tail.size() > 2 * kTail) r.tail.erase(0, r.tail.size() - kTail);
    }
    ::close(fds[0]);
    int status = 0;
    while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
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
    std::map<std::string, int> lose;
    for (const std::string& n : lost_nodes) lose[n]++;
    static const std::regex line_re(R"(^\s*(\S+)(.*?)\bslots\s*=\s*(\d+)(.*)$)");
    std::istringstream in(text);
    std::string out;
    for (std::string line; std::getline(in, line);) {
        std::smatch m;
        const std::string body = line.substr(0, line.find('#'));
        if (std::regex_match(body, m, line_re) && lose.count(m[1].str())) {
            const int slots = std::stoi(m[3].str()) - lose[m[1].str()];
            lose.erase(m[1].str());
            if (slots <= 0) continue;
            out += m[1].str() + m[2].str() + "slots=" + std::to_string(slots) + m[4].str() + "\n";
            continue;
        }
        std::istringstream words(body);
        std::string host;
        if (words >> host && lose.count(host) && body.find("slots") == std::string::npos) {  // one slot
            lose.erase(host);
            continue;
        }
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

}  // namespace

int supervise(const LaunchOptions& o, const train::TrainConfig& cfg) {
    const Layout l0 = checked_first_layout(o, cfg);
    const model::GptConfig mc = cfg.model.config();
    const std::string metrics = cfg.output.metrics.empty() ? (fs::path(cfg.output.out) / "metrics.jsonl").string() : cfg.output.metrics;
    const std::string flight = train::flight_dir(cfg);

    catch_interrupts();
    Log log(cfg.output.out);
    Layout layout = l0;
    std::string hostfile = o.hostfile;
    std::vector<std::string> targs = o.train_args;
    const std::string exe = o.exe.empty() ? fs::read_symlink("/proc/self/exe").string() : o.exe;
    for (int attempt = 0;; attempt++) {
        const std::vector<std::string> argv = mpirun_argv(o, hostfile, layout, exe, targs);
        std::printf("launch: attempt %d on %d rank%s (%s)\n", attempt + 1, layout.ranks(), layout.ranks() > 1 ? "s" : "",
                    describe(layout).c_str());
        log.event({{"event", "start"}, {"attempt", attempt + 1}, {"np", layout.ranks()}, {"layout", describe(layout)}});
        const double t0 = now_s();
        const AttemptResult r = run_attempt(argv, attempt == 0, cfg.reliability.comm_timeout <= 0);
        if (r.exit_code == 0) {
            std::printf("launch: training finished on attempt %d (%s)%s\n", attempt + 1, describe(layout).c_str(),
                        attempt > 0 ? (", after " + std::to_string(attempt) + " restart" + (attempt > 1 ? "s" : "")).c_str() : "");
            log.event({{"event", "done"}, {"attempt", attempt + 1}, {"np", layout.ranks()}, {"layout", describe(layout)}});
            return 0;
        }
        if (const int sig = g_interrupt.load()) {
            std::printf("launch: interrupted by signal %d: not restarting (continue with the same command: train resumes "
                        "from the newest checkpoint)\n", sig);
            log.event({{"event", "gave_up"}, {"attempt", attempt + 1}, {"reason", "interrupted"}, {"exit_code", r.exit_code}});
            return 128 + sig;
        }
        const Failure f = diagnose(r.tail, flight);
        const int lost = f.rank_lost ? std::max<int>(1, int(f.lost.size())) : 0;
        std::printf("launch: attempt %d failed after %.1f s (exit code %d): %s\n", attempt + 1, now_s() - t0, r.exit_code,
                    f.reason.c_str());
        log.event({{"event", "failure"}, {"attempt", attempt + 1}, {"np", layout.ranks()}, {"layout", describe(layout)},
                   {"reason", f.reason}, {"lost_ranks", f.lost}, {"exit_code", r.exit_code}});
        auto give_up = [&](const std::string& why) {
            std::printf("launch: giving up: %s\n", why.c_str());
            log.event({{"event", "gave_up"}, {"attempt", attempt + 1}, {"reason", why}, {"exit_code", r.exit_code}});
            return r.exit_code != 0 ? r.exit_code : 1;
        };
        if (!f.rank_lost) return give_up("the failure is not a lost rank: a restart would fail the same way");
        if (attempt >= o.max_restarts)
            return give_up("--max-restarts " + std::to_string(o.max_restarts) + " reached");
        const int left = layout.ranks() - lost;
        if (left < o.min_np)
            return give_up(std::to_string(left) + " rank" + (left == 1 ? "" : "s") + " left, below --min-np " +
                           std::to_string(o.min_np));
        train::TrainConfig next = cfg;
        std::string why;
        const std::optional<Layout> nl = choose_layout(next, mc, left, available_bytes(), &why);
        if (!nl) return give_up(why);
        const int last = recorded_steps(metrics);
        const std::string ckpt = train::latest_checkpoint(cfg.output.out);
        const int resume = checkpoint_step(ckpt);
        const int steps_lost = std::max(0, last - resume);
        auto ranks = [](int n) { return std::to_string(n) + (n == 1 ? " rank" : " ranks"); };
        std::printf("launch: restart %d of at most %d: %s; layout %s (%s) -> %s (%s), global batch %d "
                    "unchanged; resuming from %s (step %d), %d step%s lost\n",
                    attempt + 1, o.max_restarts, f.reason.c_str(), describe(layout).c_str(), ranks(layout.ranks()).c_str(),
                    describe(*nl).c_str(), ranks(nl->ranks()).c_str(), cfg.data.global_batch,
                    ckpt.empty() ? "the start (no checkpoint yet)" : fs::path(ckpt).filename().string().c_str(), resume,
                    steps_lost, steps_lost == 1 ? "" : "s");
        std::fflush(stdout);
        log.event({{"event", "restart"}, {"attempt", attempt + 2}, {"reason", f.reason}, {"old_layout", describe(layout)},
                   {"new_layout", describe(*nl)}, {"np", nl->ranks()}, {"resume_step", resume}, {"last_step", last},
                   {"steps_lost", steps_lost}});
        targs = next_train_args(targs, *nl, nl->pp != layout.pp);
        layout = *nl;
        if (!hostfile.empty() && !f.nodes.empty()) {  // the lost ranks' slots are gone from their nodes
            hostfile = next_hostfile(hostfile, f.nodes, cfg.output.out, attempt + 2);
            std::printf("launch: hostfile for the next attempt: %s\n", hostfile.c_str());
        }
    }
}

}  // namespace shardlm::launch
