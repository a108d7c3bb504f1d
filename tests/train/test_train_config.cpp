// The typed settings of TrainConfig: every named field prints its name and reads it back (JSON,
// as config.json and the checkpoint's meta.json store it), and a name not in its table is refused
// naming the file, the key and the names that are known.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>
#include <tuple>
#include <vector>

#include "shardlm/core/check.h"
#include "shardlm/train/train_config.h"

namespace {

using namespace shardlm;
using train::TrainConfig;

TEST(TrainConfig, NamedSettingsRoundTripThroughJson) {
    TrainConfig c;
    c.model.preset = "tiny";
    c.data.train = "x.bin";
    c.data.data_order = data::Order::Random;
    c.optim.optimizer = optim::Kind::Momentum;
    c.optim.lr_schedule = optim::LrKind::Cosine;
    c.parallel.schedule = cost::Schedule::ZeroBubbleV;
    c.runtime.thread_split = train::ThreadSplit::Kernel;
    ASSERT_TRUE(precision_policy_from_name("fp32-bf16-products", &c.precision.policy));
    c.precision.reduce_dtype = train::ReduceType::BF16;
    c.precision.loss_scale = optim::LossScale::fixed(512);
    c.runtime.recompute = cost::Recompute::Selective;
    c.reliability.on_nan = train::OnNan::Skip;
    const nlohmann::json j = train::config_to_json(c);
    EXPECT_EQ(j["data_order"], "random");
    EXPECT_EQ(j["optimizer"], "momentum");
    EXPECT_EQ(j["lr_schedule"], "cosine");
    EXPECT_EQ(j["schedule"], "zbv");
    EXPECT_EQ(j["thread_split"], "kernel");
    EXPECT_FALSE(j.contains("matmul_precision"));  // one precision setting
    EXPECT_EQ(j["precision"], "fp32-bf16-products");
    EXPECT_EQ(j["reduce_dtype"], "bf16");
    EXPECT_EQ(j["loss_scale"], "512");
    EXPECT_EQ(j["recompute"], "selective");
    EXPECT_EQ(j["on_nan"], "skip");
    TrainConfig back;
    train::apply_config_json(back, j, "config.json");
    EXPECT_EQ(train::config_to_json(back), j);
    EXPECT_EQ(back.precision.resolved().products, DType::BF16);
    EXPECT_EQ(back.precision.resolved().reduce, DType::BF16);
    // the defaults print as before the settings were typed: "" for "the precision's default"
    const nlohmann::json d = train::config_to_json(TrainConfig{});
    EXPECT_EQ(d["reduce_dtype"], "");
    EXPECT_EQ(d["loss_scale"], "");
    EXPECT_EQ(d["schedule"], "1f1b");
    EXPECT_EQ(d["precision"], "fp32");
}

// --matmul-precision is an older spelling of --precision fp32-bf16-products: a config.json written before
// the two became one setting loads into the one policy, and is refused where the products are 16-bit.
TEST(TrainConfig, AnOlderMatmulPrecisionKeyFoldsIntoThePrecision) {
    for (const auto& [precision, matmul, expect] :
         {std::tuple{"fp32", "bf16", "fp32-bf16-products"}, std::tuple{"fp32", "fp32", "fp32"},
          std::tuple{"bf16", "fp32", "bf16"}, std::tuple{"fp32-bf16-products", "fp32", "fp32-bf16-products"}}) {
        TrainConfig c;
        train::apply_config_json(c, {{"precision", precision}, {"matmul_precision", matmul}}, "old/config.json");
        EXPECT_EQ(c.precision.policy.name(), expect) << precision << " + " << matmul;
        EXPECT_FALSE(c.precision.matmul_precision);
        EXPECT_FALSE(train::config_to_json(c).contains("matmul_precision"));
    }
    TrainConfig c;
    try {
        train::apply_config_json(c, {{"precision", "bf16"}, {"matmul_precision", "bf16"}}, "old/config.json");
        FAIL() << "bf16 storage with bf16 matmuls was accepted";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("drop --matmul-precision"), std::string::npos) << e.what();
    }
}

// The typed settings that are not names: a compressor and a pipeline split read back as written, and a
// bad one is refused naming the key and why.
TEST(TrainConfig, CompressorsAndPipelineSplitsAreTyped) {
    TrainConfig c;
    train::apply_config_json(c, {{"compress", "qsgd:8:128"}, {"compress_embedding", "topk:0.05"}, {"pp_split", "3,0,2"}},
                             "c.json");
    ASSERT_TRUE(c.dp_algo.compress && c.dp_algo.compress_embedding);
    EXPECT_EQ(c.dp_algo.compress->kind, parallel::CompressKind::Qsgd);
    EXPECT_EQ(c.dp_algo.compress->levels, 8);
    EXPECT_EQ(c.dp_algo.compress->bucket, 128u);
    EXPECT_EQ(c.dp_algo.compress_embedding->fraction, 0.05);
    EXPECT_EQ(c.parallel.pp_split.blocks, (std::vector<int>{3, 0, 2}));
    const nlohmann::json j = train::config_to_json(c);
    EXPECT_EQ(j["compress"], "qsgd:8:128");
    EXPECT_EQ(j["compress_embedding"], "topk:0.05");
    EXPECT_EQ(j["pp_split"], "3,0,2");
    train::apply_config_json(c, {{"pp_split", "3, 3,"}}, "c.json");  // as std::stoi and getline read it before
    EXPECT_EQ(c.parallel.pp_split.blocks, (std::vector<int>{3, 3}));
    EXPECT_EQ(train::config_to_json(TrainConfig{})["compress"], "");  // unset
    EXPECT_EQ(train::config_to_json(TrainConfig{})["pp_split"], "");
    for (const auto& [key, bad, why] : {std::tuple{"compress", "topk:2", "the fraction F must be in (0, 1]"},
                                        std::tuple{"compress_embedding", "powersgd:0", "the rank R must be >= 1"},
                                        std::tuple{"pp_split", "3,x", "'x' is not a number of blocks"},
                                        std::tuple{"pp_split", "3,-1", "'-1' is not a number of blocks"}}) {
        TrainConfig d;
        try {
            train::apply_config_json(d, {{key, bad}}, "c.json");
            ADD_FAILURE() << key << " " << bad << " was accepted";
        } catch (const Error& e) {
            const std::string m = e.what();
            EXPECT_NE(m.find("c.json"), std::string::npos) << m;
            EXPECT_NE(m.find(key), std::string::npos) << m;
            EXPECT_NE(m.find(why), std::string::npos) << m;
        }
    }
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
    EXPECT_EQ(c.precision.loss_scale_mode().mode, optim::LossScale::Mode::Default);
    ASSERT_TRUE(precision_policy_from_name("fp16", &c.precision.policy));
    EXPECT_EQ(c.precision.loss_scale_mode().mode, optim::LossScale::Mode::Dynamic);
    c.precision.loss_scale = optim::LossScale::fixed(8);
    EXPECT_EQ(c.precision.loss_scale_mode().scale, 8.0f);
}

// --beta1/--beta2/--eps default to -1, the chosen optimiser's own: Adam's 0.9/0.95/1e-8 as before,
// Lion's 0.9/0.99 (the paper's), Adafactor's none/-/1e-30; a value given is taken by every optimiser.
TEST(TrainConfig, BetasDefaultToTheOptimisersOwn) {
    TrainConfig c;
    EXPECT_EQ(c.optim_config().beta1, 0.9f);
    EXPECT_EQ(c.optim_config().beta2, 0.95f);
    EXPECT_EQ(c.optim_config().eps, 1e-8f);
    c.optim.optimizer = optim::Kind::Adafactor;  // no first moment, eps1 1e-30 (transformers')
    EXPECT_FALSE(c.optim_config().first_moment);
    EXPECT_EQ(c.optim_config().eps, 1e-30f);
    c.optim.beta1 = 0.9f;
    EXPECT_TRUE(c.optim_config().first_moment);
    c.optim.beta1 = -1.0f;
    c.optim.optimizer = optim::Kind::Lion;
    EXPECT_EQ(c.optim_config().beta1, 0.9f);
    EXPECT_EQ(c.optim_config().beta2, 0.99f);
    c.optim.beta2 = 0.95f, c.optim.beta1 = 0.8f;
    EXPECT_EQ(c.optim_config().beta2, 0.95f);
    EXPECT_EQ(c.optim_config().beta1, 0.8f);
    c.optim.beta2 = -0.5f;
    c.model.preset = "tiny", c.data.train = "x.bin";
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
        c.model.preset = "tiny", c.data.train = "x.bin";
        try {
            c.validate();
        } catch (const Error& e) {
            return e.what();
        }
        return "";
    };
    TrainConfig c;
    c.optim.optimizer = optim::Kind::Adafactor;
    EXPECT_EQ(error_of(c), "");
    TrainConfig tp = c;
    tp.parallel.tp = 2;
    EXPECT_NE(error_of(tp).find("--optimizer adafactor needs --tp 1"), std::string::npos) << error_of(tp);
    TrainConfig b2 = c;
    b2.optim.beta2 = 0.99f;
    EXPECT_NE(error_of(b2).find("--beta2 does not apply to --optimizer adafactor"), std::string::npos) << error_of(b2);
    TrainConfig rel = c;
    rel.optim.relative_step = true, rel.optim.lr_schedule = optim::LrKind::Cosine;
    EXPECT_NE(error_of(rel).find("--relative-step replaces --lr"), std::string::npos) << error_of(rel);
    TrainConfig adamw;
    adamw.optim.scale_parameter = true;
    EXPECT_NE(error_of(adamw).find("apply to --optimizer adafactor only"), std::string::npos) << error_of(adamw);
    TrainConfig dr = c;
    dr.optim.decay_rate = 0.5f;
    EXPECT_NE(error_of(dr).find("--decay-rate must be in [-1, 0)"), std::string::npos) << error_of(dr);
}

}  // namespace
