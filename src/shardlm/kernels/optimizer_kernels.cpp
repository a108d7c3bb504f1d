#include "shardlm/kernels/optimizer_kernels.h"

#include "shardlm/core/contention.h"
#include "shardlm/core/profile.h"

#include "shardlm/core/dtype_simd.h"
#include "shardlm/core/simd.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

namespace shardlm::kernels {

namespace {

struct AdamArgs {
    float beta1, beta2, eps, step_size, bc2_sqrt, l2, decay, gs;
    void* p16 = nullptr;  // the 16-bit copy of p to write too (elements indexed as p's), or null
    DType t16 = DType::BF16;
};

// One Adam/AdamW update of 16 lanes (masked) at element i of the slice. coupled: g += l2 p (Adam);
// decay: p *= decay (AdamW).
template <bool kStream>
inline void adam16(float* p, const float* g, float* m, float* v, simd::M16 k, const AdamArgs& a, size_t i) {
    using namespace simd;
    V16 pv = load(k, p), gv = load(k, g);
    V16 mv = load(k, m), vv = load(k, v);
    const V16 d = fmadd(set1(a.l2), pv, gv * set1(a.gs));
    mv = fmadd(set1(1.0f - a.beta1), d, set1(a.beta1) * mv);
    vv = fmadd(set1(1.0f - a.beta2) * d, d, set1(a.beta2) * vv);
    const V16 denom = sqrt(vv) / set1(a.bc2_sqrt) + set1(a.eps);
    pv = fnmadd(set1(a.step_size), mv / denom, pv * set1(a.decay));
    if (a.p16) {
        if (a.t16 == DType::BF16) store16<DType::BF16>(a.p16, i, k, pv);
        else store16<DType::F16>(a.p16, i, k, pv);
    }
    if constexpr (kStream) {
        stream(p, pv);
        stream(m, mv);
        stream(v, vv);
    } else {
        store(k, p, pv);
        store(k, m, mv);
        store(k, v, vv);
    }
}

// Adam or AdamW over every slice (a: each slice's arguments), in one parallel region. Non-temporal stores need
// p, m, v at the same 64-byte alignment: a slice's head is peeled until p is aligned, then its body is streamed
// if m and v are aligned too. The items: each slice's head and tail (under 16 elements, masked) and its body in
// runs of kRun elements, taken by the threads as they come. Every element gets the same operations whichever
// item holds it, so the bits depend on neither the threads nor the slicing; the threads meet once for all the
// slices (once per slice, a busy neighbour had held them 148 times a GPT-2 step: AdamW 1.82x slower beside it).
void adam_common(const AdamSlice* slices, const AdamArgs* args, size_t count) {
    constexpr size_t kRun = 2048 * 16;
    struct Item {
        size_t slice, b, e;  // elements [b, e) of the slice
        bool stream;
    };
    thread_local std::vector<Item> items;  // (the caller's, kept: adam8bit calls this once per block)
    items.clear();
    for (size_t j = 0; j < count; j++) {
        const AdamSlice& x = slices[j];
        const bool aligned_together =
            ((uintptr_t(x.p) ^ uintptr_t(x.m)) % 64 == 0) && ((uintptr_t(x.p) ^ uintptr_t(x.v)) % 64 == 0);
        const size_t head = std::min(x.n, aligned_together ? ((64 - uintptr_t(x.p) % 64) % 64) / 4 : size_t(0));
        const size_t done = head + (x.n - head) / 16 * 16;
        if (head) items.push_back({j, 0, head, false});
        for (size_t b = head; b < done; b += kRun) items.push_back({j, b, std::min(done, b + kRun), aligned_together});
        if (done < x.n) items.push_back({j, done, x.n, false});
    }
    // (inside the region every thread has its own thread_local: the workers read the caller's through these)
    const Item* list = items.data();
    const size_t n_items = items.size();
#pragma omp parallel
    {
#pragma omp for schedule(dynamic, 1) nowait
        for (size_t t = 0; t < n_items; t++) {
            const Item it = list[t];
            const AdamSlice x = slices[it.slice];
            const AdamArgs a = args[it.slice];  // (copies: the stores through p, m, v cannot change them)
            if (it.e - it.b < 16) {
                adam16<false>(x.p + it.b, x.g + it.b, x.m + it.b, x.v + it.b, simd::mask_first(int(it.e - it.b)), a, it.b);
            } else if (it.stream) {
                for (size_t i = it.b; i < it.e; i += 16)
                    adam16<true>(x.p + i, x.g + i, x.m + i, x.v + i, simd::mask_all(), a, i);
            } else {
                for (size_t i = it.b; i < it.e; i += 16)
                    adam16<false>(x.p + i, x.g + i, x.m + i, x.v + i, simd::mask_all(), a, i);
            }
        }
        simd::stream_fence();  // this thread's streamed stores complete before the team joins
    }
}

AdamArgs adam_args(float lr, float beta1, float beta2, float eps, int step, float gs) {
    // Bias corrections in double, as PyTorch computes them in Python floats.
    double bc1 = 1.0 - std::pow(double(beta1), step);
    AdamArgs a;
    a.beta1 = beta1, a.beta2 = beta2, a.eps = eps, a.gs = gs;
    a.step_size = float(double(lr) / bc1);
    a.bc2_sqrt = float(std::sqrt(1.0 - std::pow(double(beta2), step)));
    a.l2 = 0.0f, a.decay = 1.0f;
    return a;
}

}  // namespace

void adam_update_slices(const AdamSlice* slices, size_t count, bool decoupled, float lr, float beta1, float beta2, float eps,
                        int step, float gs, DType t16) {
    double bytes = 0;
    thread_local std::vector<AdamArgs> args;
    args.resize(count);
    for (size_t j = 0; j < count; j++) {
        const AdamSlice& x = slices[j];
        bytes += (x.p16 ? 30.0 : 28.0) * double(x.n);
        AdamArgs& a = args[j];
        a = adam_args(lr, beta1, beta2, eps, step, gs);
        a.p16 = x.p16, a.t16 = t16;
        if (decoupled) a.decay = 1.0f - lr * x.wd;  // decoupled: p *= 1 - lr wd
        else a.l2 = x.wd;                            // coupled L2: d = g + wd p
    }
    profile::Scope prof_(decoupled ? "adamw" : "adam", 0, bytes);
    adam_common(slices, args.data(), count);
}

void adam_update(float* p, const float* g, float* m, float* v, size_t n, float lr, float beta1, float beta2,
                 float eps, float wd, int step, float gs, void* p16, DType t16) {
    const AdamSlice x{p, g, m, v, n, wd, p16};
    adam_update_slices(&x, 1, false, lr, beta1, beta2, eps, step, gs, t16);
}

void adamw_update(float* p, const float* g, float* m, float* v, size_t n, float lr, float beta1, float beta2,
                  float eps, float wd, int step, float gs, void* p16, DType t16) {
    const AdamSlice x{p, g, m, v, n, wd, p16};
    adam_update_slices(&x, 1, true, lr, beta1, beta2, eps, step, gs, t16);
}

namespace {

// The scalars of a rule's step that every slice shares (RAdam's computed in double, as PyTorch computes them in
// Python floats).
struct RuleScalars {
    float a1 = 0, a2 = 0;                     // 1 - beta1, 1 - beta2
    float bc1 = 1, bc2_sqrt = 1, rect = 1;    // RAdam's bias corrections and rectification
    bool rectified = false;
};

RuleScalars rule_scalars(const RuleArgs& a) {
    RuleScalars k;
    k.a1 = 1.0f - a.beta1, k.a2 = 1.0f - a.beta2;
    if (a.rule == Rule::RAdam) {
        const double bc1 = 1.0 - std::pow(double(a.beta1), a.step), bc2 = 1.0 - std::pow(double(a.beta2), a.step);
        const double rho_inf = 2.0 / (1.0 - a.beta2) - 1.0;
        const double rho_t = rho_inf - 2.0 * a.step * std::pow(double(a.beta2), a.step) / bc2;
        k.rectified = rho_t > 5.0;
        if (k.rectified) k.rect = float(std::sqrt((rho_t - 4) * (rho_t - 2) * rho_inf / ((rho_inf - 4) * (rho_inf - 2) * rho_t)));
        k.bc1 = float(bc1), k.bc2_sqrt = float(std::sqrt(bc2));
    }
    return k;
}

// The rules, one function each (rule_run below picks one): elements [b, e) of slice x, each element's
// operations in PyTorch's order (the tensor operations of its single-tensor algorithm), whichever run
// holds it, so the bits depend on neither the threads nor the runs. Lion and Sophia decay the parameters
// (decoupled, p *= 1 - lr wd); the others add wd p to the gradient.
namespace {

float decoupled_decay(const RuleArgs& a, const RuleSlice& x) { return float(1.0 - double(a.lr) * x.wd); }

void run_sgd_rule(const RuleArgs& a, const RuleScalars&, const RuleSlice& x, size_t b, size_t e) {
    float* p = x.p;
    const float* g = x.g;
    const float lr = a.lr, gs = a.gs, wd = x.wd;
#pragma omp simd
    for (size_t i = b; i < e; i++) {
        const float d = g[i] * gs + wd * p[i];
        p[i] -= lr * d;
    }
}

// PyTorch: buf = g on the first step, then mu buf + g; a zero-initialised buf gives the same
void run_momentum_rule(const RuleArgs& a, const RuleScalars&, const RuleSlice& x, size_t b, size_t e) {
    float* p = x.p;
    const float* g = x.g;
    float* s0 = x.s0;
    const float lr = a.lr, gs = a.gs, wd = x.wd;
    const float mu = a.momentum;
#pragma omp simd
    for (size_t i = b; i < e; i++) {
        const float d = g[i] * gs + wd * p[i];
        const float bi = mu * s0[i] + d;
        s0[i] = bi;
        p[i] -= lr * bi;
    }
}

void run_adagrad_rule(const RuleArgs& a, const RuleScalars&, const RuleSlice& x, size_t b, size_t e) {
    float* p = x.p;
    const float* g = x.g;
    float* s0 = x.s0;
    const float lr = a.lr, gs = a.gs, wd = x.wd;
    const float eps = a.eps;
#pragma omp simd
    for (size_t i = b; i < e; i++) {
        const float d = g[i] * gs + wd * p[i];
        const float s = s0[i] + d * d;
        s0[i] = s;
        p[i] -= lr * (d / (std::sqrt(s) + eps));
    }
}

void run_radam_rule(const RuleArgs& a, const RuleScalars& k, const RuleSlice& x, size_t b, size_t e) {
    float* p = x.p;
    const float* g = x.g;
    float* s0 = x.s0;
    float* s1 = x.s1;
    const float lr = a.lr, gs = a.gs, wd = x.wd, beta1 = a.beta1, beta2 = a.beta2, a1 = k.a1, a2 = k.a2;
    // d = g + wd p; m = beta1 m + (1 - beta1) d; v = beta2 v + (1 - beta2) d^2;
    // p -= (m / bc1) * lr * (sqrt(bc2) / (sqrt(v) + eps)) * rect, or p -= (m / bc1) * lr
    const float eps = a.eps, bc1 = k.bc1, bc2_sqrt = k.bc2_sqrt, rect = k.rect;
    const bool rectified = k.rectified;
#pragma omp simd
    for (size_t i = b; i < e; i++) {
        const float d = g[i] * gs + wd * p[i];
        const float mi = beta1 * s0[i] + a1 * d, vi = beta2 * s1[i] + a2 * d * d;
        s0[i] = mi, s1[i] = vi;
        const float step_i = (mi / bc1) * lr;
        p[i] -= rectified ? step_i * (bc2_sqrt / (std::sqrt(vi) + eps)) * rect : step_i;
    }
}

void run_lion_rule(const RuleArgs& a, const RuleScalars& k, const RuleSlice& x, size_t b, size_t e) {
    float* p = x.p;
    const float* g = x.g;
    float* s0 = x.s0;
    const float lr = a.lr, gs = a.gs, beta1 = a.beta1, beta2 = a.beta2, a1 = k.a1, a2 = k.a2;
    const float decay = decoupled_decay(a, x);
#pragma omp simd
    for (size_t i = b; i < e; i++) {
        const float gi = g[i] * gs, mi = s0[i];
        const float c = beta1 * mi + a1 * gi;
        const float sign = float(c > 0.0f) - float(c < 0.0f);
        p[i] = p[i] * decay - lr * sign;
        s0[i] = beta2 * mi + a2 * gi;
    }
}

void run_sophia_rule(const RuleArgs& a, const RuleScalars& k, const RuleSlice& x, size_t b, size_t e) {
    float* p = x.p;
    const float* g = x.g;
    float* s0 = x.s0;
    float* s1 = x.s1;
    const float lr = a.lr, gs = a.gs, beta1 = a.beta1, a1 = k.a1;
    const float decay = decoupled_decay(a, x);
    const float rho_bs = a.rho_bs;
#pragma omp simd
    for (size_t i = b; i < e; i++) {
        const float mi = beta1 * s0[i] + a1 * (g[i] * gs);
        s0[i] = mi;
        const float ratio = std::min(std::fabs(mi) / (rho_bs * s1[i] + kSophiaEps), 1.0f);
        const float sign = float(mi > 0.0f) - float(mi < 0.0f);
        p[i] = p[i] * decay - lr * (sign * ratio);
    }
}

void run_sophia_hessian_rule(const RuleArgs& a, const RuleScalars& k, const RuleSlice& x, size_t b, size_t e) {
    const float* g = x.g;
    float* s1 = x.s1;
    const float gs = a.gs, beta2 = a.beta2, a2 = k.a2;
#pragma omp simd
    for (size_t i = b; i < e; i++) {
        const float gi = g[i] * gs;
        s1[i] = beta2 * s1[i] + a2 * (gi * gi);
    }
}

}  // namespace

void rule_run(const RuleArgs& a, const RuleScalars& k, const RuleSlice& x, size_t b, size_t e) {
    switch (a.rule) {
        case Rule::SGD: run_sgd_rule(a, k, x, b, e); break;
        case Rule::Momentum: run_momentum_rule(a, k, x, b, e); break;
        case Rule::AdaGrad: run_adagrad_rule(a, k, x, b, e); break;
        case Rule::RAdam: run_radam_rule(a, k, x, b, e); break;
        case Rule::Lion: run_lion_rule(a, k, x, b, e); break;
        case Rule::Sophia: run_sophia_rule(a, k, x, b, e); break;
        case Rule::SophiaHessian: run_sophia_hessian_rule(a, k, x, b, e); break;
    }
}

const char* rule_name(Rule r) {
    switch (r) {
        case Rule::SGD: return "sgd";
        case Rule::Momentum: return "momentum";
        case Rule::AdaGrad: return "adagrad";
        case Rule::RAdam: return "radam";
        case Rule::Lion: return "lion";
        case Rule::Sophia: return "sophia";
        case Rule::SophiaHessian: return "sophia hessian";
    }
    return "?";
}

// Bytes an element moves: 4 for each stream read and each written (p, g, the state)
double rule_bytes(Rule r) {
    switch (r) {
        case Rule::SGD: return 12;
        case Rule::Momentum:
        case Rule::AdaGrad:
        case Rule::Lion: return 20;
        case Rule::RAdam: return 28;
        case Rule::Sophia: return 24;
        case Rule::SophiaHessian: return 12;
    }
    return 0;
}

}  // namespace

void rule_update_slices(const RuleArgs& a, const RuleSlice* slices, size_t count) {
    constexpr size_t kRun = 32768;  // elements a thread takes at a time (as the one-tensor loops' chunks)
    struct Item {
        size_t slice, b, e;  // elements [b, e) of the slice
    };
    thread_local std::vector<Item> items;  // (the caller's, kept: no allocation each step)
    items.clear();
    double bytes = 0;
    for (size_t j = 0; j < count; j++) {
        for (size_t b = 0; b < slices[j].n; b += kRun) items.push_back({j, b, std::min(slices[j].n, b + kRun)});
        bytes += rule_bytes(a.rule) * double(slices[j].n);
    }
    profile::Scope prof_(rule_name(a.rule), 0, bytes);
    const RuleScalars k = rule_scalars(a);
    // (inside the region every thread has its own thread_local: the workers read the caller's through this)
    const Item* list = items.data();
    const size_t n_items = items.size();
    // one region for every slice: the threads meet once a step, not once a tensor (a busy neighbour holds them)
#pragma omp parallel for schedule(dynamic, 1)
    for (size_t t = 0; t < n_items; t++) {
        const Item it = list[t];
        rule_run(a, k, slices[it.slice], it.b, it.e);
    }
}

namespace {

RuleArgs rule_args(Rule r, float lr, float gs) {
    RuleArgs a;
    a.rule = r, a.lr = lr, a.gs = gs;
    return a;
}

}  // namespace

void sgd_update(float* p, const float* g, size_t n, float lr, float wd, float gs) {
    const RuleSlice x{p, g, nullptr, nullptr, n, wd};
    rule_update_slices(rule_args(Rule::SGD, lr, gs), &x, 1);
}

void momentum_update(float* p, const float* g, float* buf, size_t n, float lr, float mu, float wd, float gs) {
    RuleArgs a = rule_args(Rule::Momentum, lr, gs);
    a.momentum = mu;
    const RuleSlice x{p, g, buf, nullptr, n, wd};
    rule_update_slices(a, &x, 1);
}

void adagrad_update(float* p, const float* g, float* sum, size_t n, float lr, float eps, float wd, float gs) {
    RuleArgs a = rule_args(Rule::AdaGrad, lr, gs);
    a.eps = eps;
    const RuleSlice x{p, g, sum, nullptr, n, wd};
    rule_update_slices(a, &x, 1);
}

void radam_update(float* p, const float* g, float* m, float* v, size_t n, float lr, float beta1, float beta2,
                  float eps, float wd, int step, float gs) {
    RuleArgs a = rule_args(Rule::RAdam, lr, gs);
    a.beta1 = beta1, a.beta2 = beta2, a.eps = eps, a.step = step;
    const RuleSlice x{p, g, m, v, n, wd};
    rule_update_slices(a, &x, 1);
}

void lion_update(float* p, const float* g, float* m, size_t n, float lr, float beta1, float beta2, float wd,
                 float gs) {
    RuleArgs a = rule_args(Rule::Lion, lr, gs);
    a.beta1 = beta1, a.beta2 = beta2;
    const RuleSlice x{p, g, m, nullptr, n, wd};
    rule_update_slices(a, &x, 1);
}

void sophia_update(float* p, const float* g, float* m, const float* h, size_t n, float lr, float beta1, float rho_bs,
                   float wd, float gs) {
    RuleArgs a = rule_args(Rule::Sophia, lr, gs);
    a.beta1 = beta1, a.rho_bs = rho_bs;
    const RuleSlice x{p, g, m, const_cast<float*>(h), n, wd};  // (Sophia reads h: only the Hessian rule writes s1)
    rule_update_slices(a, &x, 1);
}

void sophia_hessian_update(float* h, const float* g, size_t n, float beta2, float gs) {
    RuleArgs a = rule_args(Rule::SophiaHessian, 0.0f, gs);
    a.beta2 = beta2;
    const RuleSlice x{nullptr, g, nullptr, h, n, 0.0f};
    rule_update_slices(a, &x, 1);
}

namespace {

// The sum of x[i]^2 over one chunk, in double: one function (never inlined), so every caller gets the same
// vectorisation and the same bits.
__attribute__((noinline)) double chunk_squares(const float* x, size_t n) {
    double s = 0.0;
#pragma omp simd reduction(+ : s)
    for (size_t i = 0; i < n; i++) s += double(x[i]) * double(x[i]);
    return s;
}

}  // namespace

void sum_squares(const std::span<const float>* xs, size_t count, double* out) {
    constexpr size_t kChunk = 1 << 16;
    struct Chunk {
        const float* x;
        size_t n;
    };
    thread_local std::vector<Chunk> chunks;  // (the caller's, kept: no allocation each step)
    thread_local std::vector<size_t> first;  // slice j's chunks: [first[j], first[j + 1])
    thread_local std::vector<double> part;
    chunks.clear();
    first.resize(count + 1);
    double bytes = 0;
    for (size_t j = 0; j < count; j++) {
        first[j] = chunks.size();
        for (size_t i = 0; i < xs[j].size(); i += kChunk) chunks.push_back({xs[j].data() + i, std::min(kChunk, xs[j].size() - i)});
        bytes += 4.0 * double(xs[j].size());
    }
    first[count] = chunks.size();
    profile::Scope prof_("gradient norm", bytes / 2, bytes);
    part.resize(chunks.size());
    const Chunk* chunk = chunks.data();  // (the caller's: inside the region each thread has its own thread_local)
    double* sums = part.data();
    const long n_chunks = long(chunks.size());
    // Beside a busy neighbour a pass over many tensors keeps both threads (one meeting at the end, the items
    // balance); one tensor's sum alone runs on the calling thread, as it did
#pragma omp parallel for schedule(dynamic, 1) if (count > 1 || !cpu_contended())
    for (long c = 0; c < n_chunks; c++) sums[c] = chunk_squares(chunk[c].x, chunk[c].n);
    for (size_t j = 0; j < count; j++) {
        double s = 0.0;
        for (size_t c = first[j]; c < first[j + 1]; c++) s += part[c];
        out[j] = s;
    }
}

double sum_squares(const float* x, size_t n) {
    const std::span<const float> xs(x, n);
    double s = 0;
    sum_squares(&xs, 1, &s);
    return s;
}

}  // namespace shardlm::kernels
