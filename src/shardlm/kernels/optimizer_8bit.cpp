// kernels/optimizer_8bit.cpp: adam8bit's 8-bit block-wise quantisation (Dettmers et al. 2022): the codes,
// the nearest code of a value (a search, and the table that answers without one), blocks quantised and
// dequantised, and one block's step (kernels/optimizer_kernels.h).
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "shardlm/core/check.h"
#include "shardlm/kernels/optimizer_kernels.h"

namespace shardlm::kernels {

namespace {

// numpy.linspace(start, stop, n)[k]: k * step + start, two roundings (volatile: not fused into one
// FMA, which gives -1.4e-17 for linspace(-1, 1, 255)[127] instead of 0), the last point exactly stop
double linspace_at(double start, double stop, int n, int k) {
    if (k == n - 1) return stop;
    volatile double offset = k * ((stop - start) / (n - 1));
    return offset + start;
}

}  // namespace

Code8 dynamic_code(bool is_signed) {
    // bitsandbytes create_dynamic_map(signed, max_exponent_bits = 7, total_bits = 8): for exponent i,
    // the midpoints of linspace(0.1, 1, 2^i + 1) (signed) or linspace(0.1, 1, 2^(i+1) + 1) (unsigned)
    // scaled by 10^(i - 6), with their negatives when signed; then 0 and 1.
    std::vector<double> d;
    for (int i = 0; i < 7; i++) {
        const int items = is_signed ? (1 << i) + 1 : (1 << (i + 1)) + 1;
        const double scale = std::pow(10.0, i - 6);
        for (int k = 0; k + 1 < items; k++) {
            auto at = [&](int j) { return linspace_at(0.1, 1.0, items, j); };
            const double mean = (at(k) + at(k + 1)) / 2.0;
            d.push_back(scale * mean);
            if (is_signed) d.push_back(-scale * mean);
        }
    }
    d.push_back(0.0);
    d.push_back(1.0);
    std::sort(d.begin(), d.end());
    if (is_signed) d[0] = -1.0;
    Code8 c;
    for (size_t i = 0; i < 256; i++) c[i] = float(d[i]);
    return c;
}

Code8 linear_code(bool is_signed) {
    // bitsandbytes create_linear_map(signed, 8, add_zero = True): linspace(-1, 1, 255) and a second 0,
    // or linspace(0, 1, 256)
    std::vector<double> d;
    const int n = is_signed ? 255 : 256;
    const double lo = is_signed ? -1.0 : 0.0;
    for (int k = 0; k < n; k++) d.push_back(linspace_at(lo, 1.0, n, k));
    if (is_signed) d.push_back(0.0);
    std::sort(d.begin(), d.end());
    Code8 c;
    for (size_t i = 0; i < 256; i++) c[i] = float(d[i]);
    return c;
}

uint8_t nearest_code(const Code8& code, float x) {
    if (x != x) return 255;  // NaN: where a search of "the first value exceeding x" ends (none does)
    // lo: the first index whose value exceeds x (256 if none), by halving without branches: the comparisons of
    // an 8-bit state's values are as good as random, and a mispredicted branch at each of 8 levels had made
    // adam8bit's step 40x slower than AdamW's
    const float* base = code.data();
    for (size_t n = 256; n > 1;) {
        const size_t half = n / 2;
        base = base[half] <= x ? base + half : base;
        n -= half;
    }
    const int lo = int(base - code.data()) + (*base <= x ? 1 : 0);
    if (lo == 0) return 0;
    if (lo == 256) return 255;
    const float below = x - code[size_t(lo - 1)], above = code[size_t(lo)] - x;
    return uint8_t(above < below ? lo : lo - 1);
}

CodeIndex::CodeIndex(const Code8& c) : code(c) {
    std::fill(padded_.begin(), padded_.end(), std::numeric_limits<float>::infinity());  // (never <= a finite y)
    std::copy(c.begin(), c.end(), padded_.begin());
    first_.resize(2 * kSide);
    auto count = [&](float y) { return int(std::upper_bound(c.begin(), c.end(), y) - c.begin()); };  // values <= y
    auto at = [](uint32_t bits) { return std::bit_cast<float>(bits); };
    int extra = 0;  // the most code values inside one bucket
    for (uint32_t b = 0; b < kSide; b++) {
        // bucket b of |y|: representations [b 2^16, (b + 1) 2^16); y's least and greatest there, each sign
        const float small = at(b << 16), large = at((b << 16) | 0xffffu);
        const int pos_lo = count(small), pos_hi = count(large), neg_lo = count(-large), neg_hi = count(-small);
        first_[kSide + b] = uint16_t(pos_lo), first_[kSide - 1 - b] = uint16_t(neg_lo);
        extra = std::max({extra, pos_hi - pos_lo, neg_hi - neg_lo});
    }
    SHARDLM_CHECK(extra <= kMaxExtra, "CodeIndex: ", extra, " code values share one bucket (at most ", kMaxExtra, ")");
}

uint8_t CodeIndex::nearest(float y) const {
    const uint32_t bits = std::bit_cast<uint32_t>(y), mag = bits & 0x7fffffffu;
    if (mag > 0x3f800000u) return nearest_code(code, y);  // |y| > 1 or NaN (never in a block: y = x / absmax)
    const uint32_t b = mag >> 16;
    int lo = first_[bits >> 31 ? kSide - 1 - b : kSide + b];
    // lo: the number of values <= y (nearest_code's search's answer): the bucket's count, then its own values
    const int base = lo;
    for (int j = 0; j < kMaxExtra; j++) lo += padded_[size_t(base + j)] <= y ? 1 : 0;
    if (lo == 0) return 0;
    if (lo == 256) return 255;
    const float below = y - code[size_t(lo - 1)], above = code[size_t(lo)] - y;
    return uint8_t(above < below ? lo : lo - 1);
}

float quantize_block(const float* x, size_t n, const CodeIndex& index, uint8_t* q) {
    float absmax = 0.0f;
    for (size_t i = 0; i < n; i++) absmax = std::max(absmax, std::fabs(x[i]));
    for (size_t i = 0; i < n; i++) q[i] = index.nearest(absmax > 0.0f ? x[i] / absmax : 0.0f);
    return absmax;
}

void dequantize_block(const uint8_t* q, size_t n, const Code8& code, float absmax, float* x) {
    for (size_t i = 0; i < n; i++) x[i] = code[q[i]] * absmax;
}

void adam8bit_block(float* p, const float* g, uint8_t* qm, uint8_t* qv, float* am, float* av, size_t n,
                    const CodeIndex& code_m, const CodeIndex& code_v, float lr, float beta1, float beta2, float eps,
                    float wd, int step, float gs, float* scratch) {
    float *m = scratch, *v = scratch + n;
    dequantize_block(qm, n, code_m.code, *am, m);
    dequantize_block(qv, n, code_v.code, *av, v);
    adamw_update(p, g, m, v, n, lr, beta1, beta2, eps, wd, step, gs);
    *am = quantize_block(m, n, code_m, qm);
    *av = quantize_block(v, n, code_v, qv);
}

}  // namespace shardlm::kernels
