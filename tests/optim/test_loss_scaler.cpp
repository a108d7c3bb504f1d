// Dynamic loss scaling: starts at 2^16, doubles after `window` clean steps, halves and skips on a
// non-finite gradient (and restarts the window); static scales never move; bad specs are clear errors.
#include <gtest/gtest.h>

#include <string>

#include "shardlm/core/check.h"
#include "shardlm/optim/loss_scaler.h"

namespace {

using shardlm::optim::LossScaler;

TEST(LossScaler, DynamicDoublesAfterACleanWindowAndHalvesOnOverflow) {
    LossScaler s(shardlm::optim::LossScale::dynamic(), 3);
    EXPECT_TRUE(s.enabled());
    EXPECT_EQ(s.scale(), 65536.0f);
    EXPECT_TRUE(s.update(true));
    EXPECT_TRUE(s.update(true));
    EXPECT_EQ(s.scale(), 65536.0f);
    EXPECT_TRUE(s.update(true));  // third clean step: doubles
    EXPECT_EQ(s.scale(), 131072.0f);
    EXPECT_TRUE(s.update(true));
    EXPECT_FALSE(s.update(false));  // overflow: skip, halve, restart the window
    EXPECT_EQ(s.scale(), 65536.0f);
    EXPECT_EQ(s.clean_steps(), 0);
    EXPECT_TRUE(s.update(true));
    EXPECT_TRUE(s.update(true));
    EXPECT_EQ(s.scale(), 65536.0f);
    EXPECT_TRUE(s.update(true));
    EXPECT_EQ(s.scale(), 131072.0f);
    for (int i = 0; i < 40; i++) s.update(false);
    EXPECT_EQ(s.scale(), 1.0f);  // never below 1
    s.restore(1024.0f, 2);
    EXPECT_EQ(s.scale(), 1024.0f);
    EXPECT_TRUE(s.update(true));
    EXPECT_EQ(s.scale(), 2048.0f);
}

TEST(LossScaler, StaticAndOff) {
    LossScaler off({}, 1000);
    EXPECT_FALSE(off.enabled());
    EXPECT_EQ(off.scale(), 1.0f);
    EXPECT_TRUE(off.update(true));
    LossScaler fixed(shardlm::optim::LossScale::fixed(512), 2);
    EXPECT_TRUE(fixed.enabled());
    for (int i = 0; i < 5; i++) EXPECT_TRUE(fixed.update(true));
    EXPECT_FALSE(fixed.update(false));  // a non-finite step is still skipped
    EXPECT_EQ(fixed.scale(), 512.0f);
}

TEST(LossScaler, SpecsParseAndPrintBack) {
    using shardlm::optim::LossScale;
    LossScale s;
    for (const char* bad : {"dynamical", "-4", "0", "1e99999", "12x", "nan", "inf"})
        EXPECT_FALSE(setting_parse(bad, &s)) << bad;
    for (const char* good : {"", "dynamic", "1024", "0.5", "65536"}) {
        ASSERT_TRUE(setting_parse(good, &s)) << good;
        EXPECT_EQ(setting_text(s), good);
    }
    EXPECT_THROW(LossScaler(LossScale::dynamic(), 0), shardlm::Error);
}

}  // namespace
