// Mixed precision widens a unit's vectors to fp32 as the unit reads them (model/param_binding.h). A role names
// the first vector of a packed run (LLaMA's q, k and v biases, SwiGLU's gate and up biases, OLMoE's q and k
// norms' gains), and the unit reads the whole run from the pointer: every element must be the stored one.
#include <gtest/gtest.h>

#include <vector>

#include "shardlm/core/dtype.h"
#include "shardlm/model/config.h"
#include "shardlm/model/layout.h"
#include "shardlm/model/param_binding.h"

namespace {

using namespace shardlm;
using namespace shardlm::model;

TEST(ParamBinding, MixedPrecisionWidensEveryVectorOfAPackedRun) {
    GptConfig c = find_preset("llama-tiny");
    c.bias = true, c.qk_norm = true, c.n_layer = 2;
    const Layout L = make_gpt2_layout(c);
    std::vector<float> master(L.total);
    for (size_t i = 0; i < master.size(); i++) master[i] = float(i % 251) - 125.0f;  // exact in bf16
    std::vector<uint16_t> stored(L.total);
    convert_from_f32(stored.data(), DType::BF16, master.data(), master.size());
    std::vector<float> grads(L.total);
    ParamBinding b(L, DType::BF16, /*mixed=*/true);
    b.bind(stored.data(), grads.data());
    const ParamUnits units(L, c);
    for (int l = 0; l < c.n_layer; l++) {
        const int u = units.block[size_t(l)];
        const Unit& un = L.units[size_t(u)];
        for (int role : {kQkvB, kFcB, kQkNormW}) {
            SCOPED_TRACE("block " + std::to_string(l) + " role " + std::to_string(role));
            ASSERT_GE(un.role[role], 0);
            // the run: the role's vector and the packed ones after it
            size_t n = 0;
            for (int k = un.role[role]; k < un.first_param + un.num_params; k++) {
                if (k > un.role[role] && !L.params[size_t(k)].packed) break;
                n += L.params[size_t(k)].numel;
            }
            EXPECT_GT(n, L.params[size_t(un.role[role])].numel);  // more than the role's own vector
            const float* v = b.vec(u, role);
            const size_t first = L.params[size_t(un.role[role])].offset;
            for (size_t i = 0; i < n; i++) ASSERT_EQ(v[i], master[first + i]) << "element " << i;
        }
    }
}

}  // namespace
