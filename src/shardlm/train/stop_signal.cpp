#include "shardlm/train/stop_signal.h"

#include "shardlm/comm/flight.h"

#include <unistd.h>

#include <atomic>
#include <csignal>
#include <cstring>

namespace shardlm::train {

namespace {

std::atomic<int> g_signal{0};
struct sigaction g_old_int, g_old_term;

void write_stderr(const char* s) {
    ssize_t ignored = ::write(STDERR_FILENO, s, std::strlen(s));
    (void)ignored;
}

void on_signal(int sig) {
    comm::flight::poke(sig == SIGTERM ? "SIGTERM" : "SIGINT");  // the flight recorder's dump (a pipe write)
    if (g_signal.exchange(sig) != 0) {
        write_stderr("\nshardlm: second interrupt: exiting now without a checkpoint "
                     "(the last complete checkpoint is intact)\n");
        ::_exit(128 + sig);
    }
    write_stderr(sig == SIGINT ? "\nshardlm: SIGINT: finishing this step, then a checkpoint if --out is set "
                                 "(press Ctrl-C again to exit at once)\n"
                               : "\nshardlm: SIGTERM: finishing this step, then a checkpoint if --out is set\n");
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
    // A shell starts background jobs with SIGINT ignored (nohup-like): keep it that way.
    if (g_old_int.sa_handler == SIG_IGN) sigaction(SIGINT, &g_old_int, nullptr);
}

StopSignals::~StopSignals() {
    sigaction(SIGINT, &g_old_int, nullptr);
    sigaction(SIGTERM, &g_old_term, nullptr);
}

int stop_signal() { return g_signal.load(); }

const char* signal_name(int sig) { return sig == SIGINT ? "SIGINT" : sig == SIGTERM ? "SIGTERM" : "a signal"; }

}  // namespace shardlm::train
