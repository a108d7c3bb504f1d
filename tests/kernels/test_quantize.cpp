// The 8-bit block-wise quantisation of adam8bit (kernels/optimizer_kernels.h): the nearest code is
// the brute-force nearest (the lower on a tie), and a dequantised block requantises to the same codes
// and the same absmax, bit for bit: what makes a checkpoint (which stores dequantised fp32 m and v)
// resume to exactly the state that was saved.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "shardlm/kernels/optimizer_kernels.h"

namespace {

using namespace shardlm;

std::vector<kernels::Code8> all_codes() {
    return {kernels::dynamic_code(true), kernels::dynamic_code(false), kernels::linear_code(true),
            kernels::linear_code(false)};
}

TEST(Quantize, CodesAreSortedAndHoldZeroAndTheEnds) {
    for (bool sg : {true, false})
        for (const kernels::Code8& c : {kernels::dynamic_code(sg), kernels::linear_code(sg)}) {
            for (size_t i = 1; i < 256; i++) EXPECT_LE(c[i - 1], c[i]) << i;
            EXPECT_EQ(c[0], sg ? -1.0f : 0.0f);
            EXPECT_EQ(c[255], 1.0f);
            EXPECT_EQ(c[kernels::nearest_code(c, 0.0f)], 0.0f);
        }
}

TEST(Quantize, NearestCodeIsTheBruteForceNearest) {
    std::mt19937 rng(7);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    for (const kernels::Code8& c : all_codes()) {
        const kernels::CodeIndex index(c);
        std::vector<float> xs;
        for (int i = 0; i < 20000; i++) xs.push_back(c[0] < 0 ? u(rng) : std::fabs(u(rng)));
        for (size_t i = 0; i + 1 < 256; i++) xs.push_back((c[i] + c[i + 1]) / 2);  // the midpoints: ties
        for (size_t i = 0; i < 256; i++)  // each value and its neighbours (the search's comparisons turn there)
            for (float x : {c[i], std::nextafter(c[i], -2.0f), std::nextafter(c[i], 2.0f)}) xs.push_back(x);
        for (float x : {-3.0f, -1.0f, 1.0f, 3.0f}) xs.push_back(x);  // beyond the ends
        for (float x : xs) {
            size_t best = 0;  // argmin |x - c|, the first on a tie (torch.argmin's)
            for (size_t i = 1; i < 256; i++)
                if (std::fabs(x - c[i]) < std::fabs(x - c[best])) best = i;
            const uint8_t q = kernels::nearest_code(c, x);
            ASSERT_EQ(c[q], c[best]) << "x = " << x;
            ASSERT_EQ(index.nearest(x), q) << "x = " << x;
        }
    }
}

// CodeIndex's table gives the search's code for every float of [-1, 1] (a representation in 509 of each sign,
// each bucket's first and last, the ends, and the values near the codes in the test above)
TEST(Quantize, CodeIndexAgreesWithTheSearchAcrossMinusOneToOne) {
    for (const kernels::Code8& c : all_codes()) {
        const kernels::CodeIndex index(c);
        for (uint32_t bits = 0; bits <= 0x3f800000u; bits += 509)
            for (uint32_t sign : {0u, 0x80000000u}) {
                const float y = std::bit_cast<float>(bits | sign);
                ASSERT_EQ(index.nearest(y), kernels::nearest_code(c, y)) << "y = " << y;
            }
        for (uint32_t b = 0; b <= 0x3f80u; b++)  // every bucket's first and last representation, each sign
            for (uint32_t bits : {b << 16, (b << 16) | 0xffffu})
                for (uint32_t sign : {0u, 0x80000000u}) {
                    const float y = std::bit_cast<float>(bits | sign);
                    ASSERT_EQ(index.nearest(y), kernels::nearest_code(c, y)) << "y = " << y;
                }
        for (float y : {1.0f, -1.0f, 0.0f, -0.0f, std::nanf(""), 2.0f, -2.0f})
            ASSERT_EQ(index.nearest(y), kernels::nearest_code(c, y)) << "y = " << y;
    }
}

// quantize_block (through CodeIndex's table) gives each value the code nearest_code's search gives it
TEST(Quantize, QuantizedBlocksAreEachValuesNearestCode) {
    std::mt19937 rng(5);
    std::normal_distribution<float> n(0.0f, 1.0f);
    for (const kernels::Code8& c : all_codes()) {
        const kernels::CodeIndex index(c);
        for (int trial = 0; trial < 100; trial++) {
            const size_t len = 1 + size_t(rng() % 300);
            std::vector<float> x(len);
            for (float& v : x) v = std::clamp(c[0] < 0 ? n(rng) : std::fabs(n(rng) * n(rng)), -3.0f, 3.0f);
            x[0] = 4.0f;  // absmax 4: x / absmax exact, so the values below are codes and midpoints (ties) exactly
            for (size_t i = 1; i < len; i += 3) {
                const size_t k = rng() % 255;
                x[i] = 4.0f * (i % 2 ? c[k] : (c[k] + c[k + 1]) / 2);
            }
            if (trial % 10 == 3) x[rng() % len] = std::nanf("");          // NaN: the top code, as nearest_code
            std::vector<uint8_t> q(len);
            const float absmax = kernels::quantize_block(x.data(), len, index, q.data());
            for (size_t i = 0; i < len; i++)
                ASSERT_EQ(q[i], kernels::nearest_code(c, absmax > 0.0f ? x[i] / absmax : 0.0f))
                    << "trial " << trial << " element " << i << " of " << len << ": x = " << x[i];
        }
    }
}

// quantize_block's vector lanes (16 or 8 values at a time, gathers from CodeIndex's tables) give every y of
// [-1, 1] the code nearest_code's search gives it: blocks of absmax 1 (y = x exactly) over a representation in 509
// of each sign and both ends of every bucket's 64 parts (where the tables' entries change), in blocks of lengths
// that leave tails of every size; an infinite value (absmax inf: it becomes NaN, the others 0 of their sign) takes
// the top code as nearest_code does, and dequantising reads each code times absmax
TEST(Quantize, VectorLanesGiveTheSearchsCodes) {
    for (const kernels::Code8& c : all_codes()) {
        const kernels::CodeIndex index(c);
        std::vector<float> ys;
        for (uint32_t bits = 0; bits <= 0x3f800000u; bits += 509)
            for (uint32_t sign : {0u, 0x80000000u}) ys.push_back(std::bit_cast<float>(bits | sign));
        for (uint32_t part = 0; part <= 0x3f80u * 64; part++)  // a bucket's part: the top 22 bits of |y|
            for (uint32_t bits : {part << 10, (part << 10) | 0x3ffu})
                for (uint32_t sign : {0u, 0x80000000u})
                    if (bits <= 0x3f800000u) ys.push_back(std::bit_cast<float>(bits | sign));  // (|y| <= 1)
        size_t at = 0;
        for (size_t len = 1; at < ys.size(); len = len % 37 + 1) {
            std::vector<float> x(ys.begin() + long(at), ys.begin() + long(std::min(ys.size(), at + len)));
            at += len;
            x.push_back(1.0f);  // absmax 1
            std::rotate(x.begin(), x.end() - 1, x.end());
            std::vector<uint8_t> q(x.size());
            ASSERT_EQ(kernels::quantize_block(x.data(), x.size(), index, q.data()), 1.0f);
            for (size_t i = 0; i < x.size(); i++) ASSERT_EQ(q[i], kernels::nearest_code(c, x[i])) << "y = " << x[i];
            std::vector<float> d(x.size());
            kernels::dequantize_block(q.data(), q.size(), c, 0.75f, d.data());
            for (size_t i = 0; i < x.size(); i++) ASSERT_EQ(d[i], c[q[i]] * 0.75f);
        }
        std::vector<float> x(40, -0.5f);
        x[5] = 0.25f, x[17] = std::numeric_limits<float>::infinity(), x[33] = std::nanf("");
        std::vector<uint8_t> q(x.size());
        ASSERT_EQ(kernels::quantize_block(x.data(), x.size(), index, q.data()), std::numeric_limits<float>::infinity());
        for (size_t i = 0; i < x.size(); i++)
            ASSERT_EQ(q[i], kernels::nearest_code(c, x[i] / std::numeric_limits<float>::infinity())) << i;
        EXPECT_EQ(q[17], 255);
    }
}

TEST(Quantize, ADequantisedBlockRequantisesBitForBit) {
    std::mt19937 rng(11);
    std::normal_distribution<float> n(0.0f, 1.0f);
    for (const kernels::Code8& c : all_codes()) {
        const kernels::CodeIndex index(c);
        for (int trial = 0; trial < 200; trial++) {
            const size_t len = 1 + size_t(rng() % 700);
            const float scale = std::pow(10.0f, float(int(rng() % 12)) - 8.0f);
            std::vector<float> x(len);
            for (float& v : x) v = (c[0] < 0 ? n(rng) : n(rng) * n(rng)) * scale;
            if (c[0] >= 0)  // unsigned: second moments
                for (float& v : x) v = std::fabs(v);
            if (trial % 10 == 0) std::fill(x.begin(), x.end(), 0.0f);  // all zeros: absmax 0
            if (trial % 10 == 1 && c[0] < 0) x[0] = -std::fabs(x[0]) * 100;  // a negative largest magnitude
            std::vector<uint8_t> q(len), q2(len);
            std::vector<float> d(len);
            const float a = kernels::quantize_block(x.data(), len, index, q.data());
            kernels::dequantize_block(q.data(), len, c, a, d.data());
            const float a2 = kernels::quantize_block(d.data(), len, index, q2.data());
            ASSERT_EQ(a, a2) << "trial " << trial;
            for (size_t i = 0; i < len; i++) ASSERT_EQ(c[q[i]], c[q2[i]]) << "trial " << trial << " element " << i;
        }
    }
}

}  // namespace
