#include "shardlm/kernels/attention.h"

#include "shardlm/core/profile.h"

#include <omp.h>

#include <cmath>
#include <cstring>

#include "shardlm/core/dtype_simd.h"
#include "shardlm/core/scratch.h"
#include "shardlm/kernels/gemm/gemm.h"
#include "shardlm/kernels/vec_math.h"

namespace shardlm::kernels {

namespace {

// p[0..n) <- softmax(p[0..n)); p[n..end) <- 0.
void softmax_row(float* p, int n, int end) {
    using namespace simd;
    V16 mx = set1(-INFINITY);
    for (int j = 0; j < n; j += 16) {
        const M16 m = mask_below(size_t(j), size_t(n));
        mx = mask_max(mx, m, mx, load(m, p + j));
    }
    const V16 vm = set1(reduce_max(mx));
    V16 s = zero();
    for (int j = 0; j < n; j += 16) {
        const M16 m = mask_below(size_t(j), size_t(n));
        const V16 e = maskz(m, exp16(load(m, p + j) - vm));
        store(m, p + j, e);
        s = s + e;
    }
    const V16 inv = set1(1.0f / reduce_add(s));
    for (int j = 0; j < n; j += 16) {
        const M16 m = mask_below(size_t(j), size_t(n));
        store(m, p + j, load(m, p + j) * inv);
    }
    for (int j = n; j < end; j++) p[j] = 0.0f;
}

// The T rows (stride ld) of one key/value head's dk and dv, HS columns each, zeroed: the query heads
// that share the head accumulate into them.
void zero_head_rows(float* dk, float* dv, int T, int ld, int HS) {
    for (int t = 0; t < T; t++) {
        std::memset(dk + size_t(t) * ld, 0, sizeof(float) * HS);
        std::memset(dv + size_t(t) * ld, 0, sizeof(float) * HS);
    }
}

// ds[0..n) <- scale * p * (dp - sum(dp * p)); ds[n..end) <- 0. ds may alias dp.
void softmax_backward_row(float* ds, const float* dp, const float* p, int n, int end, float scale) {
    using namespace simd;
    V16 acc = zero();
    for (int j = 0; j < n; j += 16) {
        const M16 m = mask_below(size_t(j), size_t(n));
        acc = fmadd(load(m, dp + j), load(m, p + j), acc);
    }
    const V16 dot = set1(reduce_add(acc)), vs = set1(scale);
    for (int j = 0; j < n; j += 16) {
        const M16 m = mask_below(size_t(j), size_t(n));
        const V16 d = load(m, dp + j) - dot;
        store(m, ds + j, vs * (load(m, p + j) * d));
    }
    for (int j = n; j < end; j++) ds[j] = 0.0f;
}

}  // namespace

void attention_forward(float* out, float* att, const float* qkv, int B, int T, int C, int NH, int NKV) {
    profile::Scope prof_("attention forward", 2.0 * B * NH * double(T) * T * (C / NH), 4.0 * B * T * (2.0 * C + double(NH) * T / 2));
    if (NKV <= 0) NKV = NH;
    const int HS = C / NH, G = NH / NKV, KVC = NKV * HS, C3 = C + 2 * KVC;  // C3: the row width
    const float scale = 1.0f / std::sqrt(float(HS));
#pragma omp parallel for schedule(dynamic, 1)
    for (int bh = 0; bh < B * NH; bh++) {
        int b = bh / NH, h = bh % NH;
        const float* q = qkv + size_t(b) * T * C3 + h * HS;
        const float* k = qkv + size_t(b) * T * C3 + C + (h / G) * HS;
        const float* v = k + KVC;
        float* a = att + size_t(bh) * T * T;
        float* o = out + size_t(b) * T * C + h * HS;
        for (int r0 = 0; r0 < T; r0 += kAttnBlock) {
            int r1 = r0 + kAttnBlock < T ? r0 + kAttnBlock : T, M = r1 - r0;
            float* ab = a + size_t(r0) * T;
            sgemm_tile(CblasNoTrans, CblasTrans, M, r1, HS, scale, q + size_t(r0) * C3, C3, k, C3,
                        0.0f, ab, T);
            for (int i = r0; i < r1; i++) softmax_row(a + size_t(i) * T, i + 1, r1);
            sgemm_tile(CblasNoTrans, CblasNoTrans, M, HS, r1, 1.0f, ab, T, v, C3, 0.0f,
                        o + size_t(r0) * C, C);
        }
    }
}

size_t attention_scratch_floats(int T, int threads) { return size_t(kAttnBlock) * T * threads; }

void attention_backward(float* dqkv, float* scratch, const float* dout, const float* qkv,
                        const float* att, int B, int T, int C, int NH, int NKV) {
    profile::Scope prof_("attention backward", 4.0 * B * NH * double(T) * T * (C / NH), 4.0 * B * T * (4.0 * C + double(NH) * T));
    if (NKV <= 0) NKV = NH;
    const int HS = C / NH, G = NH / NKV, KVC = NKV * HS, C3 = C + 2 * KVC;
    const float scale = 1.0f / std::sqrt(float(HS));
    // one item per key/value head: the G query heads that share it sum into its dk, dv in order
#pragma omp parallel for schedule(dynamic, 1)
    for (int bg = 0; bg < B * NKV; bg++) {
      const int b = bg / NKV, kvh = bg % NKV;
      float* ds = scratch + size_t(omp_get_thread_num()) * kAttnBlock * T;
      const float* k = qkv + size_t(b) * T * C3 + C + kvh * HS;
      const float* v = k + KVC;
      float* dk = dqkv + size_t(b) * T * C3 + C + kvh * HS;
      float* dv = dk + KVC;
      zero_head_rows(dk, dv, T, C3, HS);
      for (int h = kvh * G; h < (kvh + 1) * G; h++) {
        const int bh = b * NH + h;
        const float* q = qkv + size_t(b) * T * C3 + h * HS;
        float* dq = dqkv + size_t(b) * T * C3 + h * HS;
        const float* a = att + size_t(bh) * T * T;
        const float* dO = dout + size_t(b) * T * C + h * HS;
        for (int r0 = 0; r0 < T; r0 += kAttnBlock) {
            int r1 = r0 + kAttnBlock < T ? r0 + kAttnBlock : T, M = r1 - r0;
            const float* p = a + size_t(r0) * T;
            const float* g = dO + size_t(r0) * C;
            // dP = dO V^T ; dV += P^T dO
            sgemm_tile(CblasNoTrans, CblasTrans, M, r1, HS, 1.0f, g, C, v, C3, 0.0f, ds, T);
            sgemm_tile(CblasTrans, CblasNoTrans, r1, HS, M, 1.0f, p, T, g, C, 1.0f, dv, C3);
            for (int i = 0; i < M; i++)
                softmax_backward_row(ds + size_t(i) * T, ds + size_t(i) * T, p + size_t(i) * T, r0 + i + 1, r1, scale);
            // dQ = dS K ; dK += dS^T Q
            sgemm_tile(CblasNoTrans, CblasNoTrans, M, HS, r1, 1.0f, ds, T, k, C3, 0.0f,
                        dq + size_t(r0) * C3, C3);
            sgemm_tile(CblasTrans, CblasNoTrans, r1, HS, M, 1.0f, ds, T, q + size_t(r0) * C3, C3,
                        1.0f, dk, C3);
        }
      }
    }
}

}  // namespace shardlm::kernels

namespace shardlm::kernels {

void attention_forward_cached(float* out, const float* qkv, float* k_cache, float* v_cache, int pos, int T, int C,
                              int NH, float* scores, int NKV) {
    if (NKV <= 0) NKV = NH;
    const int HS = C / NH, G = NH / NKV, KVC = NKV * HS, W = C + 2 * KVC;
    const float scale = 1.0f / std::sqrt(float(HS));
    for (int i = 0; i < T; i++) {
        std::memcpy(k_cache + size_t(pos + i) * KVC, qkv + size_t(i) * W + C, sizeof(float) * KVC);
        std::memcpy(v_cache + size_t(pos + i) * KVC, qkv + size_t(i) * W + C + KVC, sizeof(float) * KVC);
    }
    for (int i = 0; i < T; i++) {
        const int n = pos + i + 1;  // visible positions
        for (int h = 0; h < NH; h++) {
            const float* q = qkv + size_t(i) * W + h * HS;
            for (int j = 0; j < n; j++) {
                const float* k = k_cache + size_t(j) * KVC + (h / G) * HS;
                float s = 0;
                for (int e = 0; e < HS; e++) s += q[e] * k[e];
                scores[j] = s * scale;
            }
            softmax_row(scores, n, n);
            float* o = out + size_t(i) * C + h * HS;
            for (int e = 0; e < HS; e++) o[e] = 0.0f;
            for (int j = 0; j < n; j++) {
                const float* v = v_cache + size_t(j) * KVC + (h / G) * HS;
                const float p = scores[j];
                for (int e = 0; e < HS; e++) o[e] += p * v[e];
            }
        }
    }
}

}  // namespace shardlm::kernels

namespace shardlm::kernels {

namespace {

// Query head h's q and its key/value head's k, v (T x HS each, row stride W = C + 2 KVC in qkv)
// widened into contiguous fp32 buffers (k and v not when null: the group's are loaded already).
void widen_head(float* q, float* k, float* v, const void* qkv, DType t, int b, int h, int T, int C, int HS, int G,
                int KVC) {
    const size_t W = size_t(C) + 2 * size_t(KVC);
    const size_t base = size_t(b) * T * W;
    for (int i = 0; i < T; i++) {
        const size_t r = base + size_t(i) * W;
        load_row(q + size_t(i) * HS, at(qkv, t, r + size_t(h) * HS), t, size_t(HS));
        if (!k) continue;
        load_row(k + size_t(i) * HS, at(qkv, t, r + C + size_t(h / G) * HS), t, size_t(HS));
        load_row(v + size_t(i) * HS, at(qkv, t, r + C + KVC + size_t(h / G) * HS), t, size_t(HS));
    }
}

}  // namespace

void attention_forward(void* out, void* att, DType att_t, const void* qkv, DType t, int B, int T, int C, int NH,
                       int NKV) {
    profile::Scope prof_("attention forward", 2.0 * B * NH * double(T) * T * (C / NH), 4.0 * B * T * (2.0 * C + double(NH) * T / 2));
    if (t == DType::F32 && att_t == DType::F32) {
        attention_forward(static_cast<float*>(out), static_cast<float*>(att), static_cast<const float*>(qkv), B, T, C, NH,
                          NKV);
        return;
    }
    if (NKV <= 0) NKV = NH;
    const int HS = C / NH, G = NH / NKV, KVC = NKV * HS;
    const float scale = 1.0f / std::sqrt(float(HS));
#pragma omp parallel
    {
        const size_t th = size_t(T) * HS;
        float* q = thread_scratch(0, 4 * th + size_t(kAttnBlock) * T);
        float *k = q + th, *v = k + th, *o = v + th, *a = o + th;
#pragma omp for schedule(static)
        for (int bh = 0; bh < B * NH; bh++) {
            const int b = bh / NH, h = bh % NH;
            widen_head(q, k, v, qkv, t, b, h, T, C, HS, G, KVC);
            for (int r0 = 0; r0 < T; r0 += kAttnBlock) {
                const int r1 = r0 + kAttnBlock < T ? r0 + kAttnBlock : T, M = r1 - r0;
                sgemm_tile(CblasNoTrans, CblasTrans, M, r1, HS, scale, q + size_t(r0) * HS, HS, k, HS,
                            0.0f, a, T);
                for (int i = r0; i < r1; i++) {
                    float* row = a + size_t(i - r0) * T;
                    softmax_row(row, i + 1, r1);
                    // probabilities as stored: the product below uses the rounded values, as backward will
                    store_row(at(att, att_t, size_t(bh) * T * T + size_t(i) * T), att_t, row, size_t(r1));
                    load_row(row, at(att, att_t, size_t(bh) * T * T + size_t(i) * T), att_t, size_t(r1));
                }
                sgemm_tile(CblasNoTrans, CblasNoTrans, M, HS, r1, 1.0f, a, T, v, HS, 0.0f,
                            o + size_t(r0) * HS, HS);
            }
            for (int i = 0; i < T; i++)
                store_row(at(out, t, (size_t(b) * T + i) * C + size_t(h) * HS), t, o + size_t(i) * HS, size_t(HS));
        }
    }
}

void attention_backward(float* dqkv, float* scratch, const float* dout, const void* qkv, DType t, const void* att,
                        DType att_t, int B, int T, int C, int NH, int NKV) {
    profile::Scope prof_("attention backward", 4.0 * B * NH * double(T) * T * (C / NH), 4.0 * B * T * (4.0 * C + double(NH) * T));
    if (t == DType::F32 && att_t == DType::F32) {
        attention_backward(dqkv, scratch, dout, static_cast<const float*>(qkv), static_cast<const float*>(att), B, T, C,
                           NH, NKV);
        return;
    }
    if (NKV <= 0) NKV = NH;
    const int HS = C / NH, G = NH / NKV, KVC = NKV * HS, C3 = C + 2 * KVC;
    const float scale = 1.0f / std::sqrt(float(HS));
#pragma omp parallel
    {
        const size_t th = size_t(T) * HS;
        float* q = thread_scratch(0, 3 * th + size_t(kAttnBlock) * T);
        float *k = q + th, *v = k + th, *p = v + th;
        // one item per key/value head: the G query heads that share it sum into its dk, dv in order
#pragma omp for schedule(static)
        for (int bg = 0; bg < B * NKV; bg++) {
          const int b = bg / NKV, kvh = bg % NKV;
          float* ds = scratch + size_t(omp_get_thread_num()) * kAttnBlock * T;
          float* dk = dqkv + size_t(b) * T * C3 + C + kvh * HS;
          float* dv = dk + KVC;
          zero_head_rows(dk, dv, T, C3, HS);
          for (int h = kvh * G; h < (kvh + 1) * G; h++) {
            const int bh = b * NH + h;
            widen_head(q, h == kvh * G ? k : nullptr, v, qkv, t, b, h, T, C, HS, G, KVC);
            float* dq = dqkv + size_t(b) * T * C3 + h * HS;
            const float* dO = dout + size_t(b) * T * C + h * HS;
            for (int r0 = 0; r0 < T; r0 += kAttnBlock) {
                const int r1 = r0 + kAttnBlock < T ? r0 + kAttnBlock : T, M = r1 - r0;
                for (int i = r0; i < r1; i++)
                    load_row(p + size_t(i - r0) * T, at(att, att_t, size_t(bh) * T * T + size_t(i) * T), att_t, size_t(r1));
                const float* g = dO + size_t(r0) * C;
                // dP = dO V^T ; dV += P^T dO
                sgemm_tile(CblasNoTrans, CblasTrans, M, r1, HS, 1.0f, g, C, v, HS, 0.0f, ds, T);
                sgemm_tile(CblasTrans, CblasNoTrans, r1, HS, M, 1.0f, p, T, g, C, 1.0f, dv, C3);
                for (int i = 0; i < M; i++)
                    softmax_backward_row(ds + size_t(i) * T, ds + size_t(i) * T, p + size_t(i) * T, r0 + i + 1, r1, scale);
                // dQ = dS K ; dK += dS^T Q
                sgemm_tile(CblasNoTrans, CblasNoTrans, M, HS, r1, 1.0f, ds, T, k, HS, 0.0f,
                            dq + size_t(r0) * C3, C3);
                sgemm_tile(CblasTrans, CblasNoTrans, r1, HS, M, 1.0f, ds, T, q + size_t(r0) * HS, HS, 1.0f,
                            dk, C3);
            }
          }
        }
    }
}

}  // namespace shardlm::kernels
