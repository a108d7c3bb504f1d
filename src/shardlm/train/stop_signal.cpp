#include "shardlm/train/stop_signal.h"

#include "shardlm/comm/flight.h"
#include "shardlm/core/timer.h"
#include "shardlm/train/run_lock.h"

#include <unistd.h>

#include <atomic>
#include <csignal>
#include <cstring>

namespace shardlm::train {

namespace {

std::atomic<int> g_signal{0};
struct sigaction g_old_int, g_old_term, g_old_usr2;

void write_stderr(const char* s) {
    ssize_t ignored = ::write(STDERR_FILENO, s, std::strlen(s));
    (void)ignored;
}

const char* stop_message(int sig) {
    switch (sig) {
    case SIGINT: return "\nshardlm: SIGINT: finishing this step, then a checkpoint if --out is set (press Ctrl-C again to exit at once)\n";
    case SIGUSR2: return "\nshardlm: launch asked to stop (SIGUSR2): finishing this step, then a checkpoint\n";
    case SIGHUP: return "\nshardlm: the launch that started this job is gone: finishing this step, then a checkpoint\n";
    default: return "\nshardlm: SIGTERM: finishing this step, then a checkpoint if --out is set\n";
    }
}

void on_signal(int sig) {
    comm::flight::poke(signal_name(sig));  // the flight recorder's dump (a pipe write)
    if (g_signal.exchange(sig) != 0) {
        write_stderr("\nshardlm: second interrupt: exiting now without a checkpoint "
                     "(the last complete checkpoint is intact)\n");
        ::_exit(128 + sig);
    }
    write_stderr(stop_message(sig));
}

}  // namespace

StopSignals::StopSignals() {
    g_signal.store(0);
    struct sigaction sa;
    std::memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    sigaction(SIGINT, &sa, &g_old_int);
    sigaction(SIGTERM, &sa, &g_old_term);
    sigaction(SIGUSR2, &sa, &g_old_usr2);
    // A shell starts background jobs with SIGINT ignored (nohup-like): keep it that way.
    if (g_old_int.sa_handler == SIG_IGN) sigaction(SIGINT, &g_old_int, nullptr);
}

StopSignals::~StopSignals() {
    sigaction(SIGINT, &g_old_int, nullptr);
    sigaction(SIGTERM, &g_old_term, nullptr);
    sigaction(SIGUSR2, &g_old_usr2, nullptr);
}

int stop_signal() { return g_signal.load(); }

int poll_stop() {
    static double last = 0;
    const double now = now_s();
    if (g_signal.load() == 0 && now - last >= 1.0) {
        last = now;
        if (supervisor_gone()) {
            int none = 0;
            if (g_signal.compare_exchange_strong(none, SIGHUP)) write_stderr(stop_message(SIGHUP));
        }
    }
    return g_signal.load();
}

const char* signal_name(int sig) {
    switch (sig) {
    case SIGINT: return "SIGINT";
    case SIGTERM: return "SIGTERM";
    case SIGUSR2: return "SIGUSR2 (a stop asked for by launch)";
    case SIGHUP: return "the loss of its launch";
    default: return "a signal";
    }
}

}  // namespace shardlm::train
