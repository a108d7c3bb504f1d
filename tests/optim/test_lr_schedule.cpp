// Learning-rate schedules: constant; linear warm-up, then a cosine or a linear decay to lr_min at `total` (and
// lr_min after it), each against its formula written out here in double.
#include <gtest/gtest.h>

#include <cmath>

#include "shardlm/optim/optimizer.h"

namespace {

using shardlm::optim::LrKind;
using shardlm::optim::LrSchedule;

TEST(LrSchedule, ConstantIgnoresWarmupAndTotal) {
    const LrSchedule s{LrKind::Constant, 3e-3f, 1e-4f, 10, 100};
    for (int step : {0, 5, 10, 99, 100, 500}) EXPECT_EQ(s.at(step), 3e-3f) << step;
}

TEST(LrSchedule, WarmupRisesLinearlyToThePeakForBothDecays) {
    for (LrKind k : {LrKind::Cosine, LrKind::Linear}) {
        const LrSchedule s{k, 8e-3f, 3e-5f, 60, 2600};
        EXPECT_FLOAT_EQ(s.at(0), 8e-3f / 60.0f);
        EXPECT_FLOAT_EQ(s.at(29), 8e-3f * 30.0f / 60.0f);
        EXPECT_FLOAT_EQ(s.at(59), 8e-3f);
        EXPECT_FLOAT_EQ(s.at(60), 8e-3f);  // the decay starts at the peak
    }
}

TEST(LrSchedule, CosineAndLinearDecayToLrMinAndStayThere) {
    const double lr = 8e-3, lr_min = 3e-5;
    const int warmup = 60, total = 2600;
    const LrSchedule cosine{LrKind::Cosine, float(lr), float(lr_min), warmup, total};
    const LrSchedule linear{LrKind::Linear, float(lr), float(lr_min), warmup, total};
    for (int step = warmup; step < total; step += 37) {
        const double p = double(step - warmup) / double(total - warmup);
        EXPECT_FLOAT_EQ(cosine.at(step), float(lr_min + 0.5 * (lr - lr_min) * (1.0 + std::cos(M_PI * p)))) << step;
        EXPECT_FLOAT_EQ(linear.at(step), float(lr_min + (lr - lr_min) * (1.0 - p))) << step;
    }
    // halfway through the decay: the two agree (the cosine's midpoint is the line's)
    const int mid = warmup + (total - warmup) / 2;
    EXPECT_FLOAT_EQ(cosine.at(mid), float(0.5 * (lr + lr_min)));
    EXPECT_FLOAT_EQ(linear.at(mid), float(0.5 * (lr + lr_min)));
    // a quarter in, the cosine is still above the line; three quarters in, below it
    EXPECT_GT(cosine.at(warmup + (total - warmup) / 4), linear.at(warmup + (total - warmup) / 4));
    EXPECT_LT(cosine.at(warmup + 3 * (total - warmup) / 4), linear.at(warmup + 3 * (total - warmup) / 4));
    for (int step : {total, total + 1, 10 * total}) {
        EXPECT_EQ(cosine.at(step), float(lr_min));
        EXPECT_EQ(linear.at(step), float(lr_min));
    }
}

TEST(LrSchedule, LinearToZeroReachesZeroAtTheEnd) {
    const LrSchedule s{LrKind::Linear, 1e-2f, 0.0f, 0, 100};
    EXPECT_FLOAT_EQ(s.at(0), 1e-2f);
    EXPECT_FLOAT_EQ(s.at(99), 1e-4f);  // one step of the hundred left
    EXPECT_EQ(s.at(100), 0.0f);
}

}  // namespace
