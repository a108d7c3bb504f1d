// model/embedding.cpp: the embedding unit (token and learned position tables), forward and backward.
#include <cstring>

#include "shardlm/core/check.h"
#include "shardlm/kernels/encoder.h"
#include "shardlm/model/unit_ops.h"
#include "shardlm/model/units.h"

namespace shardlm::model {

using namespace shardlm::kernels;
using namespace detail;

// ---- embedding ----------------------------------------------------------------------------------

void embedding_forward(const UnitContext& u, const void* wte, const void* wpe, const int* tokens, void* x0, int B,
                       int T) {
    const int C = u.cfg->n_embd, tp = u.tp_size(), N = B * T, Nl = u.rows(N);
    if (tp == 1 && wpe) {
        encoder_forward(x0, u.prec.activation, tokens, wte, wpe, u.prec.param, B, T, C, u.positions());
        return;
    }
    // vocabulary-parallel: each rank looks up the tokens in its rows (zeros elsewhere), then g sums
    // them (one non-zero term per row: exact); the position embedding (if learned) is added after.
    const int Vt = u.cfg->padded_vocab(tp) / tp, v0 = u.tp->rank() * Vt;
    float* sum = u.mixed() ? u.scratch->dln.data() : static_cast<float*>(x0);  // fp32 until the end
    if (!u.sp) {
        kernels::embedding_forward(sum, tokens, wte, u.prec.param, v0, v0 + Vt, N, C);
        if (tp > 1) u.tp->all_reduce_sum(sum, size_t(N) * C);
        if (wpe) position_forward(sum, wpe, u.prec.param, 0, N, T, C, u.positions());
    } else {
        float* full = u.scratch->dln.data();
        if (u.mixed()) sum = u.scratch->reduced.data();
        kernels::embedding_forward(full, tokens, wte, u.prec.param, v0, v0 + Vt, N, C);
        u.tp->reduce_scatter_sum(full, sum, size_t(Nl) * C);
        if (wpe) position_forward(sum, wpe, u.prec.param, u.tp->rank() * Nl, Nl, T, C, u.positions());
    }
    if (u.mixed()) convert_from_f32(x0, u.prec.activation, sum, size_t(Nl) * C);
}

void embedding_backward(const UnitContext& u, float* dwte, float* dwpe, const float* dx0, const int* tokens, int B,
                        int T) {
    const int C = u.cfg->n_embd, tp = u.tp_size(), N = B * T, Nl = u.rows(N);
    if (tp == 1 && dwpe) {
        encoder_backward(dwte, dwpe, dx0, tokens, B, T, C, u.positions());
        return;
    }
    const int Vt = u.cfg->padded_vocab(tp) / tp, v0 = u.tp->rank() * Vt;
    kernels::embedding_backward(dwte, static_cast<const float*>(gather_input(u, dx0, N, DType::F32)), tokens, v0,
                                v0 + Vt, N, C);
    if (dwpe) position_backward(dwpe, dx0, u.sp ? u.tp->rank() * Nl : 0, Nl, T, C, u.positions());
}

}  // namespace shardlm::model
