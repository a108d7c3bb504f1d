// A model part's chunks as lists of typed compute units (model/compute_unit.h): which kinds a pipeline
// split gives each chunk, which parameter units the hooks announce in which order around a forward and
// a backward (the tied wte's gradient final only after both its readers), and that a backward split into
// its B and W phases gives the same gradients to the bit as one backward, for a part of two chunks.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "shardlm/core/aligned_buffer.h"
#include "shardlm/model/part.h"
#include "shardlm/model/weights.h"

namespace {

using namespace shardlm;
using model::ComputeKind;

model::GptConfig tiny() {
    model::GptConfig c;
    c.name = "units-test";
    c.n_layer = 4;
    c.n_head = 2;
    c.n_embd = 32;
    c.vocab_size = 97;
    c.n_ctx = 16;
    return c;
}

std::vector<ComputeKind> kinds(const model::ModelPart& part, int chunk) {
    std::vector<ComputeKind> k;
    for (const auto& u : part.compute_units(chunk)) k.push_back(u->kind());
    return k;
}

TEST(ComputeUnits, NumberingNamesEachKind) {
    EXPECT_EQ(model::compute_kind(4, 0), ComputeKind::Embedding);
    EXPECT_EQ(model::compute_kind(4, 1), ComputeKind::Block);
    EXPECT_EQ(model::compute_kind(4, 4), ComputeKind::Block);
    EXPECT_EQ(model::compute_kind(4, 5), ComputeKind::Head);
    EXPECT_EQ(model::compute_layer(model::block_compute_unit(3)), 3);
}

TEST(ComputeUnits, ChunksAreTypedLists) {
    model::ModelPart::Options o;
    o.chunks = {{0, 2}, {3, 5}};
    model::ModelPart part(tiny(), o, 2, 8);
    EXPECT_EQ(kinds(part, 0), (std::vector<ComputeKind>{ComputeKind::Embedding, ComputeKind::Block, ComputeKind::Block}));
    EXPECT_EQ(kinds(part, 1), (std::vector<ComputeKind>{ComputeKind::Block, ComputeKind::Block, ComputeKind::Head}));
    EXPECT_TRUE(part.has_embedding(0) && !part.has_head(0) && part.blocks(0) == 2);
    EXPECT_TRUE(!part.has_embedding(1) && part.has_head(1) && part.blocks(1) == 2);
    for (int c = 0; c < 2; c++)
        for (size_t k = 0; k < part.compute_units(c).size(); k++) EXPECT_EQ(part.compute_units(c)[k]->in(), int(k));
}

// The hooks' calls as text: "f<unit>" before a forward reads a unit, "b<unit>" before a backward's W,
// "a<unit>" once its gradient is final.
struct Record final : model::UnitHooks {
    const model::Layout* layout;
    std::vector<std::string> calls;
    void before_forward(int u, int) override { calls.push_back("f " + layout->units[size_t(u)].name); }
    void before_backward(int u, int) override { calls.push_back("b " + layout->units[size_t(u)].name); }
    void after_backward(int u) override { calls.push_back("a " + layout->units[size_t(u)].name); }
};

struct Bound {
    AlignedBuffer<float> params, grads;
    explicit Bound(model::ModelPart& part) : params(part.layout().total), grads(part.layout().total) {
        model::init_gpt2_weights(params.data(), part.layout(), 3);
        part.bind(params.data(), grads.data());
    }
};

std::vector<int> tokens(int n, int salt) {
    std::vector<int> t(size_t(n) + 1);
    for (size_t i = 0; i < t.size(); i++) t[i] = int((i * 31 + size_t(salt) * 7) % 97);
    return t;
}

TEST(ComputeUnits, HooksFollowTheUnits) {
    model::GptConfig cfg = tiny();
    cfg.n_layer = 1;
    model::ModelPart part(cfg, {}, 2, 8);
    Bound b(part);
    Record r;
    r.layout = &part.layout();
    const std::vector<int> t = tokens(16, 0);
    part.forward(0, 0, t.data(), t.data() + 1, 2, 8, 1.0f / 16, &r);
    EXPECT_EQ(r.calls, (std::vector<std::string>{"f wte", "f wpe", "f h.0", "f head"}));
    r.calls.clear();
    part.backward(0, 0, &r, false);
    // the head writes the tied wte's gradient first; it is final after the embedding's backward
    EXPECT_EQ(r.calls, (std::vector<std::string>{"b head", "b wte", "a head", "b h.0", "a h.0", "b wpe", "a wpe",
                                                 "a wte"}));
}

TEST(ComputeUnits, SplitBackwardOfTwoChunksEqualsWholeToTheBit) {
    auto run = [](bool split) {
        model::ModelPart::Options o;
        o.chunks = {{0, 2}, {3, 5}};
        o.defer_weight_grads = split;
        o.slots = {2, 2};
        model::ModelPart part(tiny(), o, 2, 8);
        Bound b(part);
        const size_t boundary = part.boundary_bytes(2, 8), grad = part.grad_bytes(2, 8);
        for (int m = 0; m < 2; m++) {
            const std::vector<int> t = tokens(16, m);
            part.forward(0, m, t.data(), nullptr, 2, 8, 0.0f);
            std::memcpy(part.input(1, m), part.output(0, m), boundary);
            part.forward(1, m, nullptr, t.data() + 1, 2, 8, 1.0f / 16);
            if (split) {
                part.backward_input(1, m);
                std::memcpy(part.dres(0), part.dres(1), grad);
                part.backward_input(0, m);
            } else {
                part.backward(1, m, nullptr, m > 0);
                std::memcpy(part.dres(0), part.dres(1), grad);
                part.backward(0, m, nullptr, m > 0);
            }
        }
        if (split)
            for (int m = 0; m < 2; m++) {
                part.backward_weight(1, m, nullptr, m > 0);
                part.backward_weight(0, m, nullptr, m > 0);
            }
        return std::vector<float>(b.grads.data(), b.grads.data() + part.layout().total);
    };
    const std::vector<float> whole = run(false), split = run(true);
    ASSERT_EQ(whole.size(), split.size());
    size_t nonzero = 0;
    for (size_t i = 0; i < whole.size(); i++) {
        ASSERT_EQ(whole[i], split[i]) << "gradient element " << i;
        nonzero += whole[i] != 0.0f;
    }
    EXPECT_GT(nonzero, whole.size() / 2);
}

}  // namespace
