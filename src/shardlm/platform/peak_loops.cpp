#include "shardlm/platform/peak_loops.h"

#include <cpuid.h>
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdint>

namespace shardlm::platform {

namespace {

// (_mm512_reduce_add_ps inside a target("avx512f") function trips a GCC 12 -Wuninitialized false alarm)
__attribute__((target("avx512f"))) float sum_lanes(const __m512 (&a)[16]) {
    alignas(64) float lanes[16];
    float s = 0;
    for (int i = 0; i < 16; i++) {
        _mm512_store_ps(lanes, a[i]);
        for (float x : lanes) s += x;
    }
    return s;
}

__attribute__((target("avx512f"))) float fma512(long iters) {
    __m512 a[16];
    for (int i = 0; i < 16; i++) a[i] = _mm512_set1_ps(1.0f + float(i) * 1e-3f);
    const __m512 b = _mm512_set1_ps(0.999999f), c = _mm512_set1_ps(1e-7f);
    for (long it = 0; it < iters; it++) {
#pragma GCC unroll 16
        for (int i = 0; i < 16; i++) a[i] = _mm512_fmadd_ps(a[i], b, c);
    }
    return sum_lanes(a);
}

// 12 chains: with b and c that leaves 2 of AVX2's 16 ymm registers (16 chains, as the AVX-512 loop has, spilled
// to the stack and measured 54 of a Zen 3 core's 76-93 GFLOP/s); 8 would do for a 4-cycle FMA on two pipes.
constexpr int kChains256 = 12;

__attribute__((target("avx2,fma"))) float fma256(long iters) {
    __m256 a[kChains256];
    for (int i = 0; i < kChains256; i++) a[i] = _mm256_set1_ps(1.0f + float(i) * 1e-3f);
    const __m256 b = _mm256_set1_ps(0.999999f), c = _mm256_set1_ps(1e-7f);
    for (long it = 0; it < iters; it++) {
#pragma GCC unroll 16
        for (int i = 0; i < kChains256; i++) a[i] = _mm256_fmadd_ps(a[i], b, c);
    }
    alignas(32) float lanes[8];
    float s = 0;
    for (int i = 0; i < kChains256; i++) {
        _mm256_store_ps(lanes, a[i]);
        for (float x : lanes) s += x;
    }
    return s;
}

__attribute__((target("avx512f,avx512bf16"))) float dpbf16(long iters) {
    __m512 a[16];
    for (int i = 0; i < 16; i++) a[i] = _mm512_set1_ps(1.0f + float(i) * 1e-3f);
    const __m512bh b = _mm512_cvtne2ps_pbh(_mm512_set1_ps(1e-3f), _mm512_set1_ps(-1e-3f));
    const __m512bh c = _mm512_cvtne2ps_pbh(_mm512_set1_ps(1e-4f), _mm512_set1_ps(1e-4f));
    for (long it = 0; it < iters; it++) {
#pragma GCC unroll 16
        for (int i = 0; i < 16; i++) a[i] = _mm512_dpbf16_ps(a[i], b, c);
    }
    return sum_lanes(a);
}

// ---- AMX ---------------------------------------------------------------------------------------------

constexpr long kArchReqXcompPerm = 0x1023;  // arch_prctl: ask for an extended state component (Linux 5.16)
constexpr long kXfeatureXtiledata = 18;

// CPUID leaf 7: AMX-BF16 (EDX bit 22) and AMX-TILE (bit 24); leaf 1's OSXSAVE (ECX bit 27) before XGETBV;
// XCR0 bits 17-18: the OS saves the tile state.
const char* amx_cpu_and_os() {
    unsigned a, b, c, d;
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d) || !(d & (1u << 22)) || !(d & (1u << 24)))
        return "the CPU has no AMX-TILE and AMX-BF16";
    if (!__get_cpuid(1, &a, &b, &c, &d) || !(c & (1u << 27))) return "the OS has not enabled XSAVE (OSXSAVE)";
    unsigned lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    if ((lo & (3u << 17)) != (3u << 17)) return "the kernel does not enable the AMX tile state (XCR0 bits 17-18)";
    return "";
}

// The 64-byte tile configuration of palette 1: every tile used 16 rows of 64 bytes.
struct alignas(64) TileConfig {
    uint8_t palette_id = 1, start_row = 0;
    uint8_t reserved[14] = {};
    uint16_t colsb[16] = {};
    uint8_t rows[16] = {};
};

__attribute__((target("amx-tile,amx-bf16"))) float tdpbf16(long iters) {
    TileConfig cfg;
    for (int t = 0; t < 8; t++) cfg.colsb[t] = 64, cfg.rows[t] = 16;
    __asm__ volatile("" ::: "memory");  // the whole 64 bytes are written before LDTILECFG reads them
    _tile_loadconfig(&cfg);
    alignas(64) uint16_t ab[16 * 32];
    alignas(64) float c[16 * 16] = {};
    for (int i = 0; i < 16 * 32; i++) ab[i] = 0x3a83;  // bf16 1e-3: the accumulators stay small
    __asm__ volatile("" ::: "memory");  // the tile loads are asm that reads memory GCC does not see them read
    _tile_loadd(0, c, 64);
    _tile_loadd(1, c, 64);
    _tile_loadd(2, c, 64);
    _tile_loadd(3, c, 64);
    _tile_loadd(4, ab, 64);
    _tile_loadd(5, ab, 64);
    _tile_loadd(6, ab, 64);
    _tile_loadd(7, ab, 64);
    for (long it = 0; it < iters; it++) {
        _tile_dpbf16ps(0, 4, 6);
        _tile_dpbf16ps(1, 4, 7);
        _tile_dpbf16ps(2, 5, 6);
        _tile_dpbf16ps(3, 5, 7);
    }
    float s = 0;
    _tile_stored(0, c, 64);
    for (float x : c) s += x;
    _tile_stored(3, c, 64);
    for (float x : c) s += x;
    _tile_release();
    return s;
}

}  // namespace

const char* amx_unavailable() {
    static const char* why = [] {
        const char* w = amx_cpu_and_os();
        if (*w) return w;
        if (syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) != 0)
            return "Linux refused this process the AMX tile data (arch_prctl ARCH_REQ_XCOMP_PERM)";
        return "";
    }();
    return why;
}
bool has_amx_bf16() { return *amx_unavailable() == '\0'; }
float amx_bf16_chains(long iters) { return has_amx_bf16() ? tdpbf16(iters) : 0.0f; }

float fp32_fma_chains(long iters) { return __builtin_cpu_supports("avx512f") ? fma512(iters) : fma256(iters); }
double fp32_fma_flops_per_iter() { return __builtin_cpu_supports("avx512f") ? 16.0 * 16 * 2 : kChains256 * 8.0 * 2; }
bool has_bf16_dot() { return __builtin_cpu_supports("avx512bf16"); }
float bf16_dot_chains(long iters) { return dpbf16(iters); }

}  // namespace shardlm::platform
