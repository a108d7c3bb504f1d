// The typed settings of TrainConfig: every named field prints its name and reads it back (JSON,
// as config.json and the checkpoint's meta.json store it), and a name not in its table is refused
// naming the file, the key and the names that are known.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "shardlm/core/check.h"
#include "shardlm/train/train_config.h"

namespace {

using namespace shardlm;
using train::TrainConfig;

TEST(TrainConfig, NamedSettingsRoundTripThroughJson) {
    TrainConfig c;
    c.model = "tiny";
    c.data = "x.bin";
    c.data_order = data::Order::Random;
    c.optimizer = optim::Kind::Momentum;
    c.lr_schedule = optim::LrKind::Cosine;
    c.schedule = cost::Schedule::ZeroBubbleV;
    c.thread_split = train::ThreadSplit::Kernel;
    c.matmul_precision = kernels::MatmulPrecision::bf16;
    ASSERT_TRUE(precision_policy_from_name("fp32", &c.precision));
    c.reduce_dtype = train::ReduceType::BF16;
    c.loss_scale = optim::LossScale::fixed(512);
    c.recompute = cost::Recompute::Selective;
    c.on_nan = train::OnNan::Skip;
    const nlohmann::json j = train::config_to_json(c);
    EXPECT_EQ(j["data_order"], "random");
    EXPECT_EQ(j["optimizer"], "momentum");
    EXPECT_EQ(j["lr_schedule"], "cosine");
    EXPECT_EQ(j["schedule"], "zbv");
    EXPECT_EQ(j["thread_split"], "kernel");
    EXPECT_EQ(j["matmul_precision"], "bf16");
    EXPECT_EQ(j["precision"], "fp32");
    EXPECT_EQ(j["reduce_dtype"], "bf16");
    EXPECT_EQ(j["loss_scale"], "512");
    EXPECT_EQ(j["recompute"], "selective");
    EXPECT_EQ(j["on_nan"], "skip");
    TrainConfig back;
    train::apply_config_json(back, j, "config.json");
    EXPECT_EQ(train::config_to_json(back), j);
    EXPECT_EQ(back.precision_policy().products, DType::BF16);  // --matmul-precision bf16
    EXPECT_EQ(back.precision_policy().reduce, DType::BF16);
    // the defaults print as before the settings were typed: "" for "the precision's default"
    const nlohmann::json d = train::config_to_json(TrainConfig{});
    EXPECT_EQ(d["reduce_dtype"], "");
    EXPECT_EQ(d["loss_scale"], "");
    EXPECT_EQ(d["schedule"], "1f1b");
    EXPECT_EQ(d["precision"], "fp32");
}

TEST(TrainConfig, AnUnknownNameIsRefusedNamingFileKeyAndChoices) {
    for (const auto& [key, bad, choice] : {std::tuple{"schedule", "zb-h2", "zbv"}, std::tuple{"optimizer", "adamx", "adamw"},
                                           std::tuple{"precision", "fp8", "fp32-bf16-products"},
                                           std::tuple{"loss_scale", "-1", "dynamic"}, std::tuple{"on_nan", "ignore", "skip"}}) {
        TrainConfig c;
        try {
            train::apply_config_json(c, nlohmann::json{{key, bad}}, "run.json");
            ADD_FAILURE() << key << " " << bad;
        } catch (const Error& e) {
            const std::string m = e.what();
            EXPECT_NE(m.find("run.json"), std::string::npos) << m;
            EXPECT_NE(m.find(std::string("'") + key + "'"), std::string::npos) << m;
            EXPECT_NE(m.find(std::string("'") + bad + "' is not known"), std::string::npos) << m;
            EXPECT_NE(m.find(choice), std::string::npos) << m;
        }
    }
    TrainConfig c;
    EXPECT_THROW(train::apply_config_json(c, nlohmann::json{{"schedule", 3}}, "run.json"), Error);
}

TEST(TrainConfig, TheLossScaleDefaultsToDynamicForFp16Only) {
    TrainConfig c;
    EXPECT_EQ(c.loss_scale_mode().mode, optim::LossScale::Mode::Default);
    ASSERT_TRUE(precision_policy_from_name("fp16", &c.precision));
    EXPECT_EQ(c.loss_scale_mode().mode, optim::LossScale::Mode::Dynamic);
    c.loss_scale = optim::LossScale::fixed(8);
    EXPECT_EQ(c.loss_scale_mode().scale, 8.0f);
}

// --beta1/--beta2/--eps default to -1, the chosen optimiser's own: Adam's 0.9/0.95/1e-8 as before,
// Lion's 0.9/0.99 (the paper's), Adafactor's none/-/1e-30; a value given is taken by every optimiser.
TEST(TrainConfig, BetasDefaultToTheOptimisersOwn) {
    TrainConfig c;
    EXPECT_EQ(c.optim_config().beta1, 0.9f);
    EXPECT_EQ(c.optim_config().beta2, 0.95f);
    EXPECT_EQ(c.optim_config().eps, 1e-8f);
    c.optimizer = optim::Kind::Adafactor;  // no first moment, eps1 1e-30 (transformers')
    EXPECT_FALSE(c.optim_config().first_moment);
    EXPECT_EQ(c.optim_config().eps, 1e-30f);
    c.beta1 = 0.9f;
    EXPECT_TRUE(c.optim_config().first_moment);
    c.beta1 = -1.0f;
    c.optimizer = optim::Kind::Lion;
    EXPECT_EQ(c.optim_config().beta1, 0.9f);
    EXPECT_EQ(c.optim_config().beta2, 0.99f);
    c.beta2 = 0.95f, c.beta1 = 0.8f;
    EXPECT_EQ(c.optim_config().beta2, 0.95f);
    EXPECT_EQ(c.optim_config().beta1, 0.8f);
    c.beta2 = -0.5f;
    c.model = "tiny", c.data = "x.bin";
    try {
        c.validate();
        ADD_FAILURE() << "--beta2 -0.5 accepted";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("--beta2 must be in [0, 1)"), std::string::npos) << e.what();
    }
}

// Adafactor's settings that cannot work are refused naming the flag and the way out.
TEST(TrainConfig, AdafactorRefusesWhatItCannotDo) {
    auto error_of = [](TrainConfig c) -> std::string {
        c.model = "tiny", c.data = "x.bin";
        try {
            c.validate();
        } catch (const Error& e) {
            return e.what();
        }
        return "";
    };
    TrainConfig c;
    c.optimizer = optim::Kind::Adafactor;
    EXPECT_EQ(error_of(c), "");
    TrainConfig tp = c;
    tp.tp = 2;
    EXPECT_NE(error_of(tp).find("--optimizer adafactor needs --tp 1"), std::string::npos) << error_of(tp);
    TrainConfig b2 = c;
    b2.beta2 = 0.99f;
    EXPECT_NE(error_of(b2).find("--beta2 does not apply to --optimizer adafactor"), std::string::npos) << error_of(b2);
    TrainConfig rel = c;
    rel.relative_step = true, rel.lr_schedule = optim::LrKind::Cosine;
    EXPECT_NE(error_of(rel).find("--relative-step replaces --lr"), std::string::npos) << error_of(rel);
    TrainConfig adamw;
    adamw.scale_parameter = true;
    EXPECT_NE(error_of(adamw).find("apply to --optimizer adafactor only"), std::string::npos) << error_of(adamw);
    TrainConfig dr = c;
    dr.decay_rate = 0.5f;
    EXPECT_NE(error_of(dr).find("--decay-rate must be in [-1, 0)"), std::string::npos) << error_of(dr);
}

}  // namespace
