#include "shardlm/kernels/flash_attention.h"

#include "shardlm/core/profile.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "shardlm/core/dtype_simd.h"
#include "shardlm/core/scratch.h"
#include "shardlm/kernels/gemm/gemm.h"
#include "shardlm/kernels/gemm/tap.h"
#include "shardlm/kernels/gemm/native.h"
#include "shardlm/kernels/vec_math.h"

namespace shardlm::kernels {

namespace {

// p[0, n) <- exp(s[0, n) - m), p[n, end) <- 0; returns the sum of p[0, n).
float exp_row(float* p, const float* s, int n, int end, float m) {
    using namespace simd;
    const V16 vm = set1(m);
    V16 sum = zero();
    for (int j = 0; j < n; j += 16) {
        const M16 k = mask_below(size_t(j), size_t(n));
        const V16 e = maskz(k, exp16(load(k, s + j) - vm));
        store(k, p + j, e);
        sum = sum + e;
    }
    for (int j = n; j < end; j++) p[j] = 0.0f;
    return reduce_add(sum);
}

void scale_row(float* x, int n, float a) {
    using namespace simd;
    const V16 va = set1(a);
    for (int j = 0; j < n; j += 16) {
        const M16 k = mask_below(size_t(j), size_t(n));
        store(k, x + j, load(k, x + j) * va);
    }
}

float dot_row(const float* a, const float* b, int n) {
    using namespace simd;
    V16 acc = zero();
    for (int j = 0; j < n; j += 16) {
        const M16 k = mask_below(size_t(j), size_t(n));
        acc = fmadd(load(k, a + j), load(k, b + j), acc);
    }
    return reduce_add(acc);
}

// ds[0, n) <- scale * p * (dp - d); ds[n, end) <- 0 (ds may alias dp).
void dscore_row(float* ds, const float* dp, const float* p, int n, int end, float d, float scale) {
    using namespace simd;
    const V16 vd = set1(d), vs = set1(scale);
    for (int j = 0; j < n; j += 16) {
        const M16 k = mask_below(size_t(j), size_t(n));
        store(k, ds + j, vs * (load(k, p + j) * (load(k, dp + j) - vd)));
    }
    for (int j = n; j < end; j++) ds[j] = 0.0f;
}

// rows [0, T) of head columns [col, col + HS) of a (T, W) matrix stored as t, into x (T, HS) fp32
void widen(float* x, const void* src, DType t, size_t base, int T, size_t W, size_t col, int HS) {
    for (int i = 0; i < T; i++) load_row(x + size_t(i) * HS, at(src, t, base + size_t(i) * W + col), t, size_t(HS));
}

// One head's operand that many tile products read (K^T, V, Q, ...): B(k, n) = x[k * rs + n * cs], K x N.
// Where the native kernels serve (an AVX-512 build, --gemm auto or native) it is packed once into their
// panels and every product reads the panels; otherwise each product is one sgemm_tile on x as it lies.
class TileOperand {
public:
    // packed into the calling thread's scratch slot (3-7)
    void set(int slot, const float* x, long rs, long cs, int K, int N) {
        x_ = x, rs_ = rs, cs_ = cs;
        if (native_)
            packed_ = native::pack_b({x, DType::F32, rs, cs}, K, N, thread_scratch(slot, native::packed_b_floats(K, N, 64)), 64);
    }
    // C(M x (n1 - n0)) = alpha A(M x (k1 - k0)) B[k0:k1, n0:n1] + beta C: A row-major (ta NoTrans: lda apart)
    // or its transpose (A's columns contiguous)
    void product(CBLAS_TRANSPOSE ta, int M, int k0, int k1, int n0, int n1, float alpha, const float* A, int lda,
                 float beta, float* C, int ldc) const {
        if (native_) {
            const native::Operand a = ta == CblasNoTrans ? native::Operand{A, DType::F32, lda, 1}
                                                          : native::Operand{A, DType::F32, 1, lda};
            tap_product({ProductPath::Packed, M, n1 - n0, k1 - k0, a, {x_ + k0 * rs_ + n0 * cs_, DType::F32, rs_, cs_}, alpha,
                         beta, C, DType::F32, ldc, nullptr, packed_.nr});
            native::gemm_packed(M, k0, k1, n0, n1, alpha, a, packed_, beta, C, ldc);
            return;
        }
        // B's block as sgemm reads it: its rows (cs 1) or, transposed, its columns (rs 1)
        const float* b = x_ + k0 * rs_ + n0 * cs_;
        const bool rows = cs_ == 1;
        sgemm_tile(ta, rows ? CblasNoTrans : CblasTrans, M, n1 - n0, k1 - k0, alpha, A, lda, b, int(rows ? rs_ : cs_),
                   beta, C, ldc);
    }

private:
    const bool native_ = (gemm_backend() == GemmBackend::Auto || gemm_backend() == GemmBackend::Native);
    const float* x_ = nullptr;
    long rs_ = 0, cs_ = 0;
    native::PackedB packed_{nullptr, 0, 0, 0};
};

struct Dims {
    int HS, G, KVC;
    size_t W;  // qkv's row width C + 2 KVC
    float scale;
    Dims(int C, int NH, int NKV) : HS(C / NH), G(NH / NKV), KVC(NKV * (C / NH)), W(size_t(C) + 2 * size_t(NKV * (C / NH))) {
        scale = 1.0f / std::sqrt(float(HS));
    }
};

}  // namespace

void flash_attention_forward(void* out, float* lse, const void* qkv, DType t, int B, int T, int C, int NH, int NKV) {
    profile::Scope prof_("attention forward", 2.0 * B * NH * double(T) * T * (C / NH), double(dtype_bytes(t)) * B * T * 4.0 * C);
    if (NKV <= 0) NKV = NH;
    const Dims d(C, NH, NKV);
    const int HS = d.HS;
#pragma omp parallel
    {
        const size_t th = size_t(T) * HS;
        // q, k, v of one head; the tile's scores/probabilities, output accumulator, row max and sum
        float* q = thread_scratch(0, 3 * th + size_t(kFlashRows) * (kFlashCols + HS + 2));
        float *k = q + th, *v = k + th, *s = v + th, *o = s + size_t(kFlashRows) * kFlashCols;
        float *mx = o + size_t(kFlashRows) * HS, *sum = mx + kFlashRows;
        TileOperand kt, vv;  // K^T (HS x T) for the scores, V (T x HS) for the output
#pragma omp for schedule(dynamic, 1)
        for (int bh = 0; bh < B * NH; bh++) {
            const int b = bh / NH, h = bh % NH, kvh = h / d.G;
            const size_t base = size_t(b) * T * d.W;
            widen(q, qkv, t, base, T, d.W, size_t(h) * HS, HS);
            widen(k, qkv, t, base, T, d.W, size_t(C) + size_t(kvh) * HS, HS);
            widen(v, qkv, t, base, T, d.W, size_t(C) + d.KVC + size_t(kvh) * HS, HS);
            kt.set(3, k, 1, HS, HS, T);
            vv.set(4, v, HS, 1, T, HS);
            for (int r0 = 0; r0 < T; r0 += kFlashRows) {
                const int r1 = std::min(r0 + kFlashRows, T), M = r1 - r0;
                std::fill(mx, mx + M, -INFINITY);
                std::fill(sum, sum + M, 0.0f);
                std::memset(o, 0, sizeof(float) * size_t(M) * HS);
                for (int c0 = 0; c0 < r1; c0 += kFlashCols) {
                    const int c1 = std::min(c0 + kFlashCols, r1), N = c1 - c0;
                    kt.product(CblasNoTrans, M, 0, HS, c0, c1, d.scale, q + size_t(r0) * HS, HS, 0.0f, s, kFlashCols);
                    for (int i = 0; i < M; i++) {
                        float* row = s + size_t(i) * kFlashCols;
                        const int n = std::min(c1, r0 + i + 1) - c0;  // keys row r0 + i sees in this tile
                        if (n <= 0) {
                            std::fill(row, row + N, 0.0f);
                            continue;
                        }
                        const float m_new = std::max(mx[i], row_max(row, n));
                        const float alpha = std::exp(mx[i] - m_new);  // 0 on the first tile (mx = -inf)
                        sum[i] = sum[i] * alpha + exp_row(row, row, n, N, m_new);
                        if (alpha != 1.0f) scale_row(o + size_t(i) * HS, HS, alpha);
                        mx[i] = m_new;
                    }
                    vv.product(CblasNoTrans, M, c0, c1, 0, HS, 1.0f, s, kFlashCols, 1.0f, o, HS);
                }
                for (int i = 0; i < M; i++) {
                    scale_row(o + size_t(i) * HS, HS, 1.0f / sum[i]);
                    lse[size_t(bh) * T + r0 + i] = mx[i] + std::log(sum[i]);
                    store_row(at(out, t, (size_t(b) * T + r0 + i) * C + size_t(h) * HS), t, o + size_t(i) * HS,
                              size_t(HS));
                }
            }
        }
    }
}

void flash_attention_backward(float* dqkv, const float* dout, const void* qkv, const void* out, const float* lse,
                              DType t, int B, int T, int C, int NH, int NKV) {
    profile::Scope prof_("attention backward", 5.0 * B * NH * double(T) * T * (C / NH), 4.0 * B * T * 8.0 * C);
    if (NKV <= 0) NKV = NH;
    const Dims d(C, NH, NKV);
    const int HS = d.HS;
    const size_t W = d.W;
#pragma omp parallel
    {
        const size_t th = size_t(T) * HS, tile = size_t(kFlashRows) * kFlashCols;
        // q, k, v of one head, each row's D = dO . O, a tile's probabilities and score gradients
        float* q = thread_scratch(0, 3 * th + size_t(T) + 2 * tile + size_t(HS));
        float *k = q + th, *v = k + th, *D = v + th, *p = D + T, *ds = p + tile, *orow = ds + tile;
        // K^T (scores), K (dQ), V^T (dP), Q (dK), dO (dV)
        TileOperand kt, kk, vt, qq, gg;
        // one item per key/value head: the G query heads that share it sum into its dk, dv in order
#pragma omp for schedule(dynamic, 1)
        for (int bg = 0; bg < B * NKV; bg++) {
            const int b = bg / NKV, kvh = bg % NKV;
            const size_t base = size_t(b) * T * W;
            float* dk = dqkv + base + C + size_t(kvh) * HS;
            float* dv = dk + d.KVC;
            for (int i = 0; i < T; i++) {
                std::memset(dk + size_t(i) * W, 0, sizeof(float) * HS);
                std::memset(dv + size_t(i) * W, 0, sizeof(float) * HS);
            }
            widen(k, qkv, t, base, T, W, size_t(C) + size_t(kvh) * HS, HS);
            widen(v, qkv, t, base, T, W, size_t(C) + d.KVC + size_t(kvh) * HS, HS);
            kt.set(3, k, 1, HS, HS, T);
            kk.set(4, k, HS, 1, T, HS);
            vt.set(5, v, 1, HS, HS, T);
            for (int h = kvh * d.G; h < (kvh + 1) * d.G; h++) {
                const int bh = b * NH + h;
                widen(q, qkv, t, base, T, W, size_t(h) * HS, HS);
                float* dq = dqkv + base + size_t(h) * HS;
                const float* dO = dout + size_t(b) * T * C + size_t(h) * HS;
                const float* L = lse + size_t(bh) * T;
                for (int i = 0; i < T; i++) {
                    load_row(orow, at(out, t, (size_t(b) * T + i) * C + size_t(h) * HS), t, size_t(HS));
                    D[i] = dot_row(dO + size_t(i) * C, orow, HS);
                    std::memset(dq + size_t(i) * W, 0, sizeof(float) * HS);
                }
                qq.set(6, q, HS, 1, T, HS);
                gg.set(7, dO, C, 1, T, HS);
                for (int c0 = 0; c0 < T; c0 += kFlashCols) {
                    const int c1 = std::min(c0 + kFlashCols, T), N = c1 - c0;
                    for (int r0 = c0 / kFlashRows * kFlashRows; r0 < T; r0 += kFlashRows) {
                        const int r1 = std::min(r0 + kFlashRows, T), M = r1 - r0;
                        // the tile's probabilities again, from the row statistics
                        kt.product(CblasNoTrans, M, 0, HS, c0, c1, d.scale, q + size_t(r0) * HS, HS, 0.0f, p, kFlashCols);
                        for (int i = 0; i < M; i++) {
                            float* row = p + size_t(i) * kFlashCols;
                            const int n = std::clamp(r0 + i + 1 - c0, 0, N);
                            exp_row(row, row, n, N, L[r0 + i]);
                        }
                        // dV += P^T dO ; dP = dO V^T
                        gg.product(CblasTrans, N, r0, r1, 0, HS, 1.0f, p, kFlashCols, 1.0f, dv + size_t(c0) * W, int(W));
                        vt.product(CblasNoTrans, M, 0, HS, c0, c1, 1.0f, dO + size_t(r0) * C, C, 0.0f, ds, kFlashCols);
                        for (int i = 0; i < M; i++) {
                            const int n = std::clamp(r0 + i + 1 - c0, 0, N);
                            dscore_row(ds + size_t(i) * kFlashCols, ds + size_t(i) * kFlashCols,
                                       p + size_t(i) * kFlashCols, n, N, D[r0 + i], d.scale);
                        }
                        // dQ += dS K ; dK += dS^T Q
                        kk.product(CblasNoTrans, M, c0, c1, 0, HS, 1.0f, ds, kFlashCols, 1.0f, dq + size_t(r0) * W, int(W));
                        qq.product(CblasTrans, N, r0, r1, 0, HS, 1.0f, ds, kFlashCols, 1.0f, dk + size_t(c0) * W, int(W));
                    }
                }
            }
        }
    }
}

// ---- by blocks ---------------------------------------------------------------------------------------

namespace {

// Per query row, the keys of the block it sees, [lo, hi): with positions increasing in both blocks a range
// (causal: the keys at positions <= its own, else all; with document starts, none before its document's
// start). Both ends grow with the row. One set for the batch, or one per sequence with document starts.
class VisibleKeys {
public:
    explicit VisibleKeys(const FlashBlockPair& p) : Tq_(p.Tq), per_seq_(p.qstart != nullptr) {
        const int n = per_seq_ ? p.B : 1;
        lo_.assign(size_t(n) * size_t(p.Tq), 0), hi_.assign(lo_.size(), p.Tk);
        for (int b = 0; b < n; b++) {
            int* lo = lo_.data() + size_t(b) * size_t(p.Tq);
            int* hi = hi_.data() + size_t(b) * size_t(p.Tq);
            for (int i = 0, j = 0; p.causal && i < p.Tq; i++) {
                while (j < p.Tk && p.kpos[j] <= p.qpos[i]) j++;
                hi[i] = j;
            }
            const int* start = per_seq_ ? p.qstart + size_t(b) * size_t(p.Tq) : nullptr;
            for (int i = 0, j = 0; start && i < p.Tq; i++) {
                while (j < p.Tk && p.kpos[j] < start[i]) j++;
                lo[i] = j;
            }
        }
    }
    const int* lo(int b) const { return lo_.data() + (per_seq_ ? size_t(b) * size_t(Tq_) : 0); }
    const int* hi(int b) const { return hi_.data() + (per_seq_ ? size_t(b) * size_t(Tq_) : 0); }

private:
    int Tq_;
    bool per_seq_;
    std::vector<int> lo_, hi_;
};

// Of the tile of keys [c0, c1): the columns [a, e) a row that sees keys [lo, hi) sees (a >= e: none).
struct TileSpan {
    int a, e;
    TileSpan(int lo, int hi, int c0, int c1) : a(std::clamp(lo - c0, 0, c1 - c0)), e(std::clamp(hi - c0, 0, c1 - c0)) {}
    bool empty() const { return e <= a; }
};
// Whether no row of rows [r0, r1) sees a key of the tile [c0, c1) (both ends grow with the row).
inline bool tile_hidden(const int* lo, const int* hi, int r0, int r1, int c0, int c1) {
    return c0 >= hi[r1 - 1] || c1 <= lo[r0];
}

// p[a, e) <- exp(s[a, e) - m), the rest of [0, end) <- 0; returns the sum of p[a, e).
float exp_span(float* p, const float* s, TileSpan t, int end, float m) {
    std::fill(p, p + t.a, 0.0f);
    return exp_row(p + t.a, s + t.a, t.e - t.a, end - t.a, m);
}
// ds[a, e) <- scale * p * (dp - d), the rest <- 0 (ds may alias dp)
void dscore_span(float* ds, const float* dp, const float* p, TileSpan t, int end, float d, float scale) {
    std::fill(ds, ds + t.a, 0.0f);
    dscore_row(ds + t.a, dp + t.a, p + t.a, t.e - t.a, end - t.a, d, scale);
}

// A pair's widths and each query row's visible keys.
struct PairDims {
    Dims d;
    VisibleKeys keys;
    explicit PairDims(const FlashBlockPair& p) : d(p.C, p.NH, p.NKV > 0 ? p.NKV : p.NH), keys(p) {}
};

}  // namespace

void flash_state_reset(FlashState s, int B, int NH, int Tq, int HS) {
    const size_t rows = size_t(B) * NH * Tq;
    std::fill(s.o, s.o + rows * HS, 0.0f);
    std::fill(s.m, s.m + rows, -INFINITY);
    std::fill(s.l, s.l + rows, 0.0f);
}

void flash_block_forward(FlashState s, const FlashBlockPair& p) {
    const PairDims pd(p);
    const Dims& d = pd.d;
    const int HS = d.HS, B = p.B, NH = p.NH, Tq = p.Tq, Tk = p.Tk, ldq = p.ldq, ldkv = p.ldkv;
    const DType t = p.t;
    const void *q = p.q, *kv = p.kv;
#pragma omp parallel
    {
        float* qb = thread_scratch(0, size_t(Tq + 2 * Tk) * HS + size_t(kFlashRows) * kFlashCols);
        float *k = qb + size_t(Tq) * HS, *v = k + size_t(Tk) * HS, *sc = v + size_t(Tk) * HS;
        TileOperand kt, vv;
#pragma omp for schedule(dynamic, 1)
        for (int bh = 0; bh < B * NH; bh++) {
            const int b = bh / NH, h = bh % NH, kvh = h / d.G;
            widen(qb, q, t, size_t(b) * Tq * ldq, Tq, size_t(ldq), size_t(h) * HS, HS);
            widen(k, kv, t, size_t(b) * Tk * ldkv, Tk, size_t(ldkv), size_t(kvh) * HS, HS);
            widen(v, kv, t, size_t(b) * Tk * ldkv, Tk, size_t(ldkv), d.KVC + size_t(kvh) * HS, HS);
            kt.set(3, k, 1, HS, HS, Tk);
            vv.set(4, v, HS, 1, Tk, HS);
            float *o = s.o + size_t(bh) * Tq * HS, *mx = s.m + size_t(bh) * Tq, *sum = s.l + size_t(bh) * Tq;
            const int *lo = pd.keys.lo(b), *hi = pd.keys.hi(b);
            for (int r0 = 0; r0 < Tq; r0 += kFlashRows) {
                const int r1 = std::min(r0 + kFlashRows, Tq), M = r1 - r0;
                for (int c0 = 0; c0 < Tk; c0 += kFlashCols) {
                    const int c1 = std::min(c0 + kFlashCols, Tk), N = c1 - c0;
                    if (c0 >= hi[r1 - 1]) break;  // nor any later tile (positions increase)
                    if (tile_hidden(lo, hi, r0, r1, c0, c1)) continue;
                    kt.product(CblasNoTrans, M, 0, HS, c0, c1, d.scale, qb + size_t(r0) * HS, HS, 0.0f, sc, kFlashCols);
                    for (int i = 0; i < M; i++) {
                        float* row = sc + size_t(i) * kFlashCols;
                        const int r = r0 + i;
                        const TileSpan span(lo[r], hi[r], c0, c1);
                        if (span.empty()) {
                            std::fill(row, row + N, 0.0f);
                            continue;
                        }
                        const float m_new = std::max(mx[r], row_max(row + span.a, span.e - span.a));
                        const float alpha = std::exp(mx[r] - m_new);  // 0 on the row's first keys (mx = -inf)
                        sum[r] = sum[r] * alpha + exp_span(row, row, span, N, m_new);
                        if (alpha != 1.0f) scale_row(o + size_t(r) * HS, HS, alpha);
                        mx[r] = m_new;
                    }
                    vv.product(CblasNoTrans, M, c0, c1, 0, HS, 1.0f, sc, kFlashCols, 1.0f, o + size_t(r0) * HS, HS);
                }
            }
        }
    }
}

void flash_state_finish(void* out, float* lse, FlashState s, DType t, int B, int Tq, int C, int NH) {
    const int HS = C / NH;
#pragma omp parallel for
    for (int bh = 0; bh < B * NH; bh++) {
        const int b = bh / NH, h = bh % NH;
        for (int i = 0; i < Tq; i++) {
            const size_t r = size_t(bh) * Tq + size_t(i);
            float* o = s.o + r * HS;
            // a row that saw no key (none visible in any block) is 0 with lse -inf
            scale_row(o, HS, s.l[r] > 0.0f ? 1.0f / s.l[r] : 0.0f);
            lse[r] = s.m[r] + std::log(s.l[r]);
            store_row(at(out, t, (size_t(b) * Tq + size_t(i)) * C + size_t(h) * HS), t, o, size_t(HS));
        }
    }
}

void flash_block_delta(float* D, const float* dout, const void* out, DType t, int B, int Tq, int C, int NH) {
    const int HS = C / NH;
#pragma omp parallel
    {
        float* orow = thread_scratch(0, size_t(HS));
#pragma omp for
        for (int bh = 0; bh < B * NH; bh++) {
            const int b = bh / NH, h = bh % NH;
            for (int i = 0; i < Tq; i++) {
                const size_t at_row = (size_t(b) * Tq + size_t(i)) * C + size_t(h) * HS;
                load_row(orow, at(out, t, at_row), t, size_t(HS));
                D[size_t(bh) * Tq + size_t(i)] = dot_row(dout + at_row, orow, HS);
            }
        }
    }
}

void flash_block_backward(float* dq, int lddq, float* dkv, int lddkv, const float* dout, const float* lse, const float* D,
                          const FlashBlockPair& p) {
    const PairDims pd(p);
    const Dims& d = pd.d;
    const int HS = d.HS, B = p.B, NH = p.NH, NKV = p.NH / d.G, Tq = p.Tq, Tk = p.Tk, C = p.C;
    const int ldq = p.ldq, ldkv = p.ldkv;
    const DType t = p.t;
    const void *q = p.q, *kv = p.kv;
#pragma omp parallel
    {
        const size_t tile = size_t(kFlashRows) * kFlashCols;
        float* qb = thread_scratch(0, size_t(Tq + 2 * Tk) * HS + 2 * tile);
        float *k = qb + size_t(Tq) * HS, *v = k + size_t(Tk) * HS, *p = v + size_t(Tk) * HS, *ds = p + tile;
        TileOperand kt, kk, vt, qq, gg;  // K^T (scores), K (dQ), V^T (dP), Q (dK), dO (dV)
        // one item per key/value head: the G query heads that share it add into its dk, dv in order
#pragma omp for schedule(dynamic, 1)
        for (int bg = 0; bg < B * NKV; bg++) {
            const int b = bg / NKV, kvh = bg % NKV;
            float* dk = dkv + size_t(b) * Tk * lddkv + size_t(kvh) * HS;
            float* dv = dk + d.KVC;
            widen(k, kv, t, size_t(b) * Tk * ldkv, Tk, size_t(ldkv), size_t(kvh) * HS, HS);
            widen(v, kv, t, size_t(b) * Tk * ldkv, Tk, size_t(ldkv), d.KVC + size_t(kvh) * HS, HS);
            kt.set(3, k, 1, HS, HS, Tk);
            kk.set(4, k, HS, 1, Tk, HS);
            vt.set(5, v, 1, HS, HS, Tk);
            const int *lo = pd.keys.lo(b), *hi = pd.keys.hi(b);
            for (int h = kvh * d.G; h < (kvh + 1) * d.G; h++) {
                const int bh = b * NH + h;
                widen(qb, q, t, size_t(b) * Tq * ldq, Tq, size_t(ldq), size_t(h) * HS, HS);
                float* dqh = dq + size_t(b) * Tq * lddq + size_t(h) * HS;
                const float* dO = dout + size_t(b) * Tq * C + size_t(h) * HS;
                const float *L = lse + size_t(bh) * Tq, *Dh = D + size_t(bh) * Tq;
                qq.set(6, qb, HS, 1, Tq, HS);
                gg.set(7, dO, C, 1, Tq, HS);
                for (int c0 = 0; c0 < Tk; c0 += kFlashCols) {
                    const int c1 = std::min(c0 + kFlashCols, Tk), N = c1 - c0;
                    for (int r0 = 0; r0 < Tq; r0 += kFlashRows) {
                        const int r1 = std::min(r0 + kFlashRows, Tq), M = r1 - r0;
                        if (tile_hidden(lo, hi, r0, r1, c0, c1)) continue;  // no row of the tile sees a key
                        kt.product(CblasNoTrans, M, 0, HS, c0, c1, d.scale, qb + size_t(r0) * HS, HS, 0.0f, p, kFlashCols);
                        for (int i = 0; i < M; i++)
                            exp_span(p + size_t(i) * kFlashCols, p + size_t(i) * kFlashCols,
                                     TileSpan(lo[r0 + i], hi[r0 + i], c0, c1), N, L[r0 + i]);
                        // dV += P^T dO ; dP = dO V^T
                        gg.product(CblasTrans, N, r0, r1, 0, HS, 1.0f, p, kFlashCols, 1.0f, dv + size_t(c0) * lddkv, lddkv);
                        vt.product(CblasNoTrans, M, 0, HS, c0, c1, 1.0f, dO + size_t(r0) * C, C, 0.0f, ds, kFlashCols);
                        for (int i = 0; i < M; i++)
                            dscore_span(ds + size_t(i) * kFlashCols, ds + size_t(i) * kFlashCols, p + size_t(i) * kFlashCols,
                                        TileSpan(lo[r0 + i], hi[r0 + i], c0, c1), N, Dh[r0 + i], d.scale);
                        // dQ += dS K ; dK += dS^T Q
                        kk.product(CblasNoTrans, M, c0, c1, 0, HS, 1.0f, ds, kFlashCols, 1.0f, dqh + size_t(r0) * lddq, lddq);
                        qq.product(CblasTrans, N, r0, r1, 0, HS, 1.0f, ds, kFlashCols, 1.0f, dk + size_t(c0) * lddkv, lddkv);
                    }
                }
            }
        }
    }
}

}  // namespace shardlm::kernels
