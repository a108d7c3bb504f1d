#include "shardlm/train/fault_injection.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace shardlm::train {

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
    std::raise(sig);
}

}  // namespace shardlm::train
