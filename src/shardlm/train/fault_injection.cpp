#include "shardlm/train/fault_injection.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <thread>

#include "shardlm/train/stop_signal.h"

namespace shardlm::train {

namespace {

void apply_test_poison(const char* kind, int step, int world_rank, const OwnedTensors& mine) {
    const char* env = std::getenv("SHARDLM_TEST_POISON");
    if (!env) return;
    char what[16], unit[64], value[32];
    int at_step = 0, rank = 0;
    if (std::sscanf(env, "%15[^:]:%d:%63[^:]:%d:%31s", what, &at_step, unit, &rank, value) != 5) return;
    if (std::string(what) != kind || at_step != step || (rank >= 0 && rank != world_rank)) return;
    const std::string v = value;
    const bool set = v == "nan" || v == "inf";
    const float x = v == "nan" ? NAN : v == "inf" ? INFINITY : float(std::atof(value));
    const model::Layout& l = *mine.layout;
    const int u = l.unit_index(unit);
    if (u < 0) return;
    const model::Unit& un = l.units[size_t(u)];
    for (size_t k = 0; k < mine.ranges.size(); k++) {
        float* data = std::string(kind) == "grad" ? const_cast<float*>(mine.grads[k]) : mine.params[k];
        const optim::Range& r = mine.ranges[k];
        for (int i = 0; i < un.num_params; i++) {
            const model::ParamSpec& p = l.params[size_t(un.first_param + i)];
            const size_t b = std::max(r.begin, p.offset), e = std::min(r.end, p.offset + p.numel);
            for (size_t j = b; j < e; j++) data[j - r.begin] = set ? x : data[j - r.begin] + x;
        }
    }
}

void apply_test_inf_grad(int step, int world_rank, const OwnedTensors& mine) {
    const char* env = std::getenv("SHARDLM_TEST_INF_GRAD");
    int at_step = -1, rank = -1;
    if (!env || std::sscanf(env, "%d:%d", &at_step, &rank) != 2 || at_step != step || rank != world_rank) return;
    if (!mine.grads.empty()) const_cast<float*>(mine.grads.front())[0] = INFINITY;
}

void apply_test_stall(int step, int world_rank) {
    const char* env = std::getenv("SHARDLM_TEST_STALL");
    int rank = -1, at_step = -1;
    if (!env || std::sscanf(env, "%d:%d", &rank, &at_step) != 2 || rank != world_rank || at_step != step) return;
    std::fprintf(stderr, "shardlm: SHARDLM_TEST_STALL: rank %d stalls before step %d\n", rank, step + 1);
    for (int i = 0; i < 3600; i++) ::sleep(1);
}

void apply_test_signal(int step, int world_rank) {
    const char* env = std::getenv("SHARDLM_TEST_SIGNAL");
    int rank = -1, at_step = -1, sig = 0;
    if (!env || std::sscanf(env, "%d:%d:%d", &rank, &at_step, &sig) != 3 || rank != world_rank || at_step != step) return;
    // to the process, as kill or mpirun sends it: this thread blocks the handled signals (the watcher thread
    // takes them, comm/flight.h), so raise() would leave it pending. Its handler runs there at once; wait
    // until it has, so the signal lands before this step as the variable says.
    ::kill(::getpid(), sig);
    struct sigaction cur {};
    ::sigaction(sig, nullptr, &cur);
    if ((sig != SIGINT && sig != SIGTERM) || cur.sa_handler == SIG_IGN) return;  // no stop to wait for
    for (int i = 0; i < 2000 && stop_signal() != sig; i++) std::this_thread::sleep_for(std::chrono::milliseconds(1));
}

int env_step(const char* name) {
    const char* e = std::getenv(name);
    return e ? std::atoi(e) : -1;
}

void apply_test_lose_node(int step, int world_rank, const std::string& node_memory) {
    const char* env = std::getenv("SHARDLM_TEST_LOSE_NODE");
    int rank = -1, at_step = -1;
    if (!env || std::sscanf(env, "%d:%d", &rank, &at_step) != 2 || rank != world_rank || at_step != step) return;
    std::error_code ec;
    if (!node_memory.empty()) std::filesystem::remove_all(node_memory, ec);
    std::raise(SIGKILL);
}

class EnvFaults : public FaultInjector {
public:
    EnvFaults(int rank, std::string node_memory) : rank_(rank), node_memory_(std::move(node_memory)) {}
    void before_step(int step) override {
        apply_test_stall(step, rank_);
        apply_test_signal(step, rank_);
        apply_test_lose_node(step, rank_, node_memory_);
    }
    void on_reduced_grads(int step, const OwnedTensors& mine) override {
        apply_test_poison("grad", step, rank_, mine);
        apply_test_inf_grad(step, rank_, mine);
    }
    void after_update(int step, const OwnedTensors& mine) override { apply_test_poison("param", step, rank_, mine); }
    void while_checkpointing(int step) override {
        if (env_step("SHARDLM_TEST_KILL_IN_CKPT") == step) std::raise(SIGKILL);
    }
    void after_checkpoint(int step) override {
        if (env_step("SHARDLM_TEST_KILL_AFTER_CKPT") == step) std::raise(SIGKILL);
    }

private:
    int rank_;
    std::string node_memory_;
};

}  // namespace

std::unique_ptr<FaultInjector> faults_from_env(int world_rank, const std::string& node_memory) {
    for (const char* v : {"SHARDLM_TEST_POISON", "SHARDLM_TEST_INF_GRAD", "SHARDLM_TEST_STALL", "SHARDLM_TEST_SIGNAL",
                          "SHARDLM_TEST_KILL_AFTER_CKPT", "SHARDLM_TEST_KILL_IN_CKPT", "SHARDLM_TEST_LOSE_NODE"})
        if (std::getenv(v)) return std::make_unique<EnvFaults>(world_rank, node_memory);
    return nullptr;
}

}  // namespace shardlm::train
