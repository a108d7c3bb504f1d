#include "shardlm/kernels/gemm/tap.h"

#include <atomic>
#include <utility>

namespace shardlm::kernels {

namespace {
std::atomic<bool> g_tap_on{false};
ProductTap g_tap;
}  // namespace

void set_product_tap(ProductTap tap) {
    g_tap_on.store(false, std::memory_order_release);
    g_tap = std::move(tap);
    g_tap_on.store(bool(g_tap), std::memory_order_release);
}

void tap_product(const ProductCall& call) {
    if (g_tap_on.load(std::memory_order_acquire)) g_tap(call);
}

}  // namespace shardlm::kernels
