// model/unit_ops.cpp: the products and conjugate operators the units are written in, and the lanes'
// work items (model/unit_ops.h).
#include "shardlm/model/unit_ops.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "shardlm/core/check.h"
#include "shardlm/cost/shape.h"
#include "shardlm/kernels/layernorm.h"

namespace shardlm::model {

using namespace shardlm::kernels;

// ---- products and the conjugate operators (unit_ops.h) -------------------------------------------

namespace detail {

void linear(const UnitContext& u, void* out, DType out_t, const void* in, const void* W, const float* b, int N, int K,
            int OC, bool accumulate) {
    if (!u.mixed()) {
        matmul_forward(static_cast<float*>(out), static_cast<const float*>(in), static_cast<const float*>(W), b, N, K, OC,
                       accumulate, u.matmul());
        return;
    }
    SHARDLM_CHECK(!accumulate, "linear: mixed precision never accumulates onto its output");
    matmul_forward(out, out_t, in, W, u.prec.activation, b, N, K, OC);
}

void linear_backward(const UnitContext& u, float* dinp, float* dW, float* db, const float* dout, const void* in,
                     const void* W, int N, int K, int OC, bool acc, uint16_t* dout16) {
    if (!u.mixed())
        matmul_backward(dinp, dW, db, dout, static_cast<const float*>(in), static_cast<const float*>(W), N, K, OC, acc,
                        u.matmul(), dout16);
    else
        matmul_backward(dinp, dW, db, dout, in, W, u.prec.activation, N, K, OC, acc, dout16);
}

const void* gather_input(const UnitContext& u, const void* x_local, int N, DType t) {
    if (!u.sp) return x_local;
    const size_t Nl = size_t(u.rows(N)), C = size_t(u.cfg->n_embd);
    u.tp->all_gather_bytes(x_local, u.scratch->gathered.data(), Nl * C * dtype_bytes(t));
    return u.scratch->gathered.data();
}

const float* reduce_input_grad(const UnitContext& u, int N) {
    float* d = u.scratch->dln.data();
    const size_t C = size_t(u.cfg->n_embd);
    if (u.tp_size() == 1) return d;
    if (!u.sp) {
        u.tp->all_reduce_sum(d, size_t(N) * C);
        return d;
    }
    u.tp->reduce_scatter_sum(d, u.scratch->reduced.data(), size_t(u.rows(N)) * C);
    return u.scratch->reduced.data();
}

void row_parallel_residual(const UnitContext& u, void* out, float* partial, const void* in, const void* W,
                           const float* b, const void* resid, int N, int K) {
    const int C = u.cfg->n_embd;
    if (u.tp_size() == 1 && !u.mixed()) {
        if (out != resid) std::memcpy(out, resid, sizeof(float) * size_t(N) * C);
        linear(u, out, DType::F32, in, W, b, N, K, C, true);
        return;
    }
    linear(u, partial, DType::F32, in, W, nullptr, N, K, C);
    reduce_onto_residual(u, out, partial, b, resid, N);
}

void reduce_onto_residual(const UnitContext& u, void* out, float* partial, const float* b, const void* resid, int N) {
    const int C = u.cfg->n_embd, Nl = u.rows(N);
    if (u.sp) {
        u.tp->reduce_scatter_sum(partial, u.scratch->reduced.data(), size_t(Nl) * C);
        partial = u.scratch->reduced.data();
    } else if (u.tp_size() > 1) {
        u.tp->all_reduce_sum(partial, size_t(N) * C);
    }
    residual_add(out, resid, u.prec.activation, b, partial, Nl, C);
}

void row_parallel_dout(const UnitContext& u, float* dst, const float* dres, int N) {
    const size_t C = size_t(u.cfg->n_embd);
    if (u.sp)
        u.tp->all_gather_bytes(dres, dst, size_t(u.rows(N)) * C * sizeof(float));
    else
        std::memcpy(dst, dres, sizeof(float) * size_t(N) * C);
}

void norm_forward(const UnitContext& u, void* out, float* mean, float* rstd, const void* x, const float* w,
                  const float* b, int Nl) {
    const DType t = u.prec.activation;
    if (u.cfg->norm == Norm::RMSNorm) rmsnorm_forward(out, t, rstd, x, t, w, Nl, u.cfg->n_embd, u.cfg->ln_eps);
    else layernorm_forward(out, t, mean, rstd, x, t, w, b, Nl, u.cfg->n_embd, u.cfg->ln_eps);
}

void norm_backward_input(const UnitContext& u, float* dx, const float* dout, const void* x, const float* w,
                         const float* mean, const float* rstd, int Nl) {
    const DType t = u.prec.activation;
    if (u.cfg->norm == Norm::RMSNorm) rmsnorm_backward_input(dx, dout, x, t, w, rstd, Nl, u.cfg->n_embd);
    else layernorm_backward_input(dx, dout, x, t, w, mean, rstd, Nl, u.cfg->n_embd);
}

void norm_backward_params(const UnitContext& u, float* dw, float* db, const float* dout, const void* x,
                          const float* mean, const float* rstd, int Nl, int c0, int c1) {
    const DType t = u.prec.activation;
    if (u.cfg->norm == Norm::RMSNorm) rmsnorm_backward_params(dw, dout, x, t, rstd, Nl, u.cfg->n_embd, c0, c1);
    else layernorm_backward_params(dw, db, dout, x, t, mean, rstd, Nl, u.cfg->n_embd, c0, c1);
}

// ---- lanes (unit_ops.h) ----------------------------------------------------------------------------

namespace {

// A setting read once from the environment (for measuring: bench/RESULTS.md), def when unset or odd.
int env_int(const char* name, int def, int lo, int hi) {
    const char* e = std::getenv(name);
    const int v = e ? std::atoi(e) : 0;
    return v >= lo && v <= hi ? v : def;
}

}  // namespace

Groups sequence_groups(int B, int T, int lanes) {
    static const int rows = env_int("SHARDLM_LANE_ROWS", 256, 1, 1 << 20);
    const cost::LaneGroups g = cost::lane_groups(B, T, lanes, rows);  // the planner's rule too
    return {g.size, g.count};
}

OutputItems::OutputItems(const UnitContext& u, const int* sizes, int n_tasks) {
    static const int min_rows = env_int("SHARDLM_LANE_OUT_ROWS", 512, 16, 1 << 20);
    SHARDLM_CHECK(n_tasks <= kMaxTasks, "OutputItems: more than ", kMaxTasks, " tasks");
    for (int k = 0; k < n_tasks; k++) {
        const int n = sizes[k];
        // tensor parallelism (one lane, every product over the threads): whole tasks, so a weight gradient
        // whose input is all-gathered under sequence parallelism gathers it once
        const int blk = cost::weight_block_rows(n, u.tp_size(), min_rows);
        size_[tasks_] = n, block_[tasks_] = blk, first_[tasks_] = count_;
        count_ += (n + blk - 1) / blk;
        tasks_++;
    }
}

OutputItem OutputItems::operator[](int i) const {
    int t = tasks_ - 1;
    while (first_[t] > i) t--;
    const int b = (i - first_[t]) * block_[t];
    return {t, b, std::min(size_[t], b + block_[t])};
}

}  // namespace detail

using namespace detail;

int lane_groups(int B, int T, int lanes) { return sequence_groups(B, T, std::max(1, std::min(lanes, B))).count; }

}  // namespace shardlm::model
