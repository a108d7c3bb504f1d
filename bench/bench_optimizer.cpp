// bench/bench_optimizer.cpp: the optimiser step alone (Optimizer::step over a preset's whole parameter
// layout, default GPT-2 124M: 148 tensors), on a quiet machine and beside one busy process (a child spinning
// on a core), alternated in one run. Prints one JSON line per optimiser: the median ms a step quiet and
// busy, their ratio, and GB/s of the state and parameter streams quiet against a STREAM triad measured now.
// Usage: bench_optimizer [--model gpt2] [--optimizer all|NAME[,NAME...]] [--threads K=2] [--steps N=10] [--reps R=3]
//                        [--busy 0|1] (1: also time beside the busy child; the default)
// Hold the build lock around it: flock /tmp/shardlm-build.lock ./build/bench_optimizer
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "bench_options.h"
#include "shardlm/core/aligned_buffer.h"
#include "shardlm/core/runtime.h"
#include "shardlm/core/timer.h"
#include "shardlm/model/layout.h"
#include "shardlm/optim/optimizer.h"
#include "shardlm/train/train_config.h"

namespace {

constexpr const char* kUsage =
    "usage: bench_optimizer [--model gpt2] [--optimizer all|NAME[,NAME...]] [--threads K=2] [--steps N=10] [--reps R=3]\n"
    "                       [--busy 0|1]\n"
    "(what each does: the comment at the top of bench/bench_optimizer.cpp)\n";

int whole(const std::string& k, const char* v, int lo) { return whole_or_exit("bench_optimizer", k, v, lo); }

// A child process that keeps one core busy, free to run on any CPU as an unrelated process is, started stopped.
// Forked before the buffers exist: forked later, every page the parent then wrote would be copied first (a
// step 10x slower). Each busy phase continues it, and stops it again.
pid_t start_busy() {
    const pid_t parent = getpid();
    const pid_t pid = fork();
    if (pid < 0) {
        std::perror("bench_optimizer: fork (the busy process)");
        std::exit(2);
    }
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);  // (ends with the benchmark, however that ends)
        if (getppid() != parent) _exit(0);
        cpu_set_t all;
        CPU_ZERO(&all);
        for (long c = 0; c < sysconf(_SC_NPROCESSORS_ONLN) && c < CPU_SETSIZE; c++) CPU_SET(size_t(c), &all);
        sched_setaffinity(0, sizeof(all), &all);
        raise(SIGSTOP);
        for (;;) asm volatile("");
    }
    waitpid(pid, nullptr, WUNTRACED);  // (stopped)
    return pid;
}

double median(std::vector<double> x) {
    std::sort(x.begin(), x.end());
    return x[x.size() / 2];
}

// Bytes one step moves per parameter, as the kernels count them (their profile scopes): p and g, the state
double bytes_per_param(shardlm::optim::Kind k) {
    using shardlm::optim::Kind;
    switch (k) {
        case Kind::SGD: return 12;
        case Kind::Momentum:
        case Kind::AdaGrad:
        case Kind::Lion: return 20;
        case Kind::Sophia: return 24;
        case Kind::Adam:
        case Kind::AdamW:
        case Kind::RAdam: return 28;
        case Kind::Adam8bit: return 16;  // p r/w, g, 8-bit m and v r/w
        case Kind::Adafactor: return 24;  // three passes over g, one over p r/w, roughly
    }
    return 0;
}

}  // namespace

int main(int argc, char** argv) {
    shardlm::ensure_blas_coretype(argc, argv);
    std::string model = "gpt2", which = "all";
    int threads = 2, steps = 10, reps = 3, busy = 1;
    for (int i = 1; i < argc; i++)
        if (std::strcmp(argv[i], "--help") == 0 || std::strcmp(argv[i], "-h") == 0) {
            std::fputs(kUsage, stdout);
            return 0;
        }
    if (!options_paired("bench_optimizer", argc, argv)) return 2;
    for (int i = 1; i + 1 < argc; i += 2) {
        const std::string k = argv[i];
        const char* v = argv[i + 1];
        if (k == "--model") model = v;
        else if (k == "--optimizer") which = v;
        else if (k == "--threads") threads = whole(k, v, 1);
        else if (k == "--steps") steps = whole(k, v, 1);
        else if (k == "--reps") reps = whole(k, v, 1);
        else if (k == "--busy") busy = whole(k, v, 0);
        else {
            std::fprintf(stderr, "bench_optimizer: unknown option %s\n%s", k.c_str(), kUsage);
            return 2;
        }
    }
    std::vector<shardlm::optim::Kind> kinds;
    if (which == "all") {
        for (const auto& e : shardlm::optim::kKindNames) kinds.push_back(e.value);
    } else {
        std::stringstream ss(which);
        for (std::string name; std::getline(ss, name, ',');) kinds.push_back(shardlm::optim::parse_kind(name));
    }
    const pid_t child = busy ? start_busy() : 0;
    shardlm::set_threads(threads);
    shardlm::bind_threads();

    shardlm::train::TrainConfig tc;
    tc.model.preset = model;
    tc.data.global_batch = 4, tc.data.seq = 64;  // (Sophia's B x T)
    tc.optim.weight_decay = 0.1f;
    const shardlm::model::Layout layout = shardlm::model::make_gpt2_layout(tc.model.config());
    shardlm::AlignedBuffer<float> p0(layout.total), p(layout.total), g(layout.total);
    std::mt19937 rng(1);
    std::normal_distribution<float> nd(0.0f, 0.02f);
    for (size_t i = 0; i < layout.total; i++) p0.data()[i] = nd(rng), g.data()[i] = nd(rng) * 0.1f;
    const double triad = triad_gbps();

    for (shardlm::optim::Kind kind : kinds) {
        tc.optim.optimizer = kind;
        std::copy_n(p0.data(), layout.total, p.data());
        shardlm::optim::Optimizer opt(tc.optim_config(), layout, shardlm::optim::Range{0, layout.total});
        if (kind == shardlm::optim::Kind::Sophia) opt.update_hessian(g.data(), 1.0f);
        auto time_steps = [&](std::vector<double>* ms) {
            for (int s = 0; s < steps; s++) {
                const double t0 = shardlm::now_s();
                opt.step(p.data(), g.data(), 1e-4f, 0.5f);
                ms->push_back((shardlm::now_s() - t0) * 1e3);
            }
        };
        std::vector<double> warm, quiet, loaded;
        time_steps(&warm);
        for (int r = 0; r < reps; r++) {
            time_steps(&quiet);
            if (!busy) continue;
            kill(child, SIGCONT);
            time_steps(&loaded);
            kill(child, SIGSTOP);
            waitpid(child, nullptr, WUNTRACED);
        }
        const double q = median(quiet), b = busy ? median(loaded) : 0.0;
        const double gbps = bytes_per_param(kind) * double(layout.total) / (q / 1e3) / 1e9;
        std::printf("{\"optimizer\": \"%s\", \"model\": \"%s\", \"params\": %zu, \"threads\": %d, \"quiet_ms\": %.2f, "
                    "\"busy_ms\": %.2f, \"busy_over_quiet\": %.2f, \"quiet_gbps\": %.1f, \"triad_gbps\": %.1f}\n",
                    shardlm::optim::kind_name(kind).c_str(), model.c_str(), layout.total, threads, q, b,
                    busy ? b / q : 0.0, gbps, triad);
        std::fflush(stdout);
    }
    if (busy) {
        kill(child, SIGKILL);
        rusage ru{};
        wait4(child, nullptr, 0, &ru);
        std::fprintf(stderr, "bench_optimizer: the busy process ran %.1f s\n", double(ru.ru_utime.tv_sec) + ru.ru_utime.tv_usec / 1e6);
    }
    return 0;
}
