#include "shardlm/kernels/gemm/backend.h"

#include <atomic>
#include <cstdlib>

namespace shardlm::kernels {

namespace {
std::atomic<GemmBackend> g_backend{GemmBackend::OpenBlas};
}  // namespace

void set_gemm_backend(GemmBackend b) { g_backend.store(b); }
GemmBackend gemm_backend() { return g_backend.load(); }

int gemm_blocks_per_cpu() {
    static const int per = [] {
        const char* e = std::getenv("SHARDLM_GEMM_BLOCKS");
        const int v = e ? std::atoi(e) : 0;
        return v >= 1 && v <= 64 ? v : 2;
    }();
    return per;
}

}  // namespace shardlm::kernels
