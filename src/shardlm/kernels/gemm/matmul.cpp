#include "shardlm/kernels/gemm/gemm.h"

#include "shardlm/core/contention.h"
#include "shardlm/core/profile.h"

#include <cblas.h>
#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "shardlm/core/check.h"
#include "shardlm/core/dtype_simd.h"
#include "shardlm/core/scratch.h"


namespace shardlm::kernels {

std::string_view matmul_precision_name(MatmulPrecision p) { return p == MatmulPrecision::bf16 ? "bf16" : "fp32"; }

bool matmul_precision_from_name(std::string_view s, MatmulPrecision* out) {
    return enum_from_name(kMatmulPrecisionNames, s, out);
}

void matmul_forward(float* out, const float* inp, const float* weight, const float* bias,
                    int N, int C, int OC, bool accumulate, MatmulPrecision precision) {
    profile::Scope prof_(profile::kernel("matmul forward"), 2.0 * N * C * OC, 4.0 * (double(N) * C + double(OC) * C + double(N) * OC));
    float beta = accumulate ? 1.0f : 0.0f;
    if (bias) {
        if (accumulate) {
#pragma omp parallel for schedule(dynamic, 8) if (!cpu_contended())
            for (int n = 0; n < N; n++) {
                float* o = out + size_t(n) * OC;
                for (int j = 0; j < OC; j++) o[j] += bias[j];
            }
        } else {
#pragma omp parallel for schedule(dynamic, 8) if (!cpu_contended())
            for (int n = 0; n < N; n++) std::memcpy(out + size_t(n) * OC, bias, sizeof(float) * OC);
        }
        beta = 1.0f;
    }
    if (precision == MatmulPrecision::bf16)
        gemm_mixed(out, DType::F32, {inp, DType::F32, C, 1}, {weight, DType::F32, 1, C}, N, OC, C, beta != 0.0f, nullptr);
    else
        sgemm_balanced(CblasNoTrans, CblasTrans, N, OC, C, 1.0f, inp, C, weight, C, beta, out, OC);
}

// dbias(OC) += sum_n dout(n, :), parallel over column blocks of 128 (each row's 512 contiguous bytes at a
// time, not one cache line per row), rows summed in order: the same sums for any block and thread count.
void bias_backward(float* dbias, const float* dout, int N, int OC, int ld) {
    profile::Scope prof_("bias backward", 0, 4.0 * N * OC);
    if (ld == 0) ld = OC;
    constexpr int kVecs = 8, kCols = 16 * kVecs;
    const int nblk = (OC + kCols - 1) / kCols;
#pragma omp parallel for schedule(dynamic, 1) if (!cpu_contended())
    for (int b = 0; b < nblk; b++) {
        const int j0 = b * kCols, nv = std::min(kVecs, (OC - j0 + 15) / 16);
        simd::M16 m[kVecs];
        simd::V16 acc[kVecs];
        for (int v = 0; v < nv; v++) {
            m[v] = simd::mask_first(std::min(16, OC - j0 - 16 * v));
            acc[v] = simd::load(m[v], dbias + j0 + 16 * v);
        }
        if (nv == kVecs) {  // a whole block: the accumulators stay in registers (AVX-512)
            for (int n = 0; n < N; n++) {
                const float* row = dout + size_t(n) * ld + j0;
#pragma GCC unroll 8
                for (int v = 0; v < kVecs; v++) acc[v] = acc[v] + simd::load(m[v], row + 16 * v);
            }
        } else {
            for (int n = 0; n < N; n++) {
                const float* row = dout + size_t(n) * ld + j0;
                for (int v = 0; v < nv; v++) acc[v] = acc[v] + simd::load(m[v], row + 16 * v);
            }
        }
        for (int v = 0; v < nv; v++) simd::store(m[v], dbias + j0 + 16 * v, acc[v]);
    }
}

void residual_add(float* out, const float* x, const float* bias, const float* y, int N, int C) {
    profile::Scope prof_("residual add", 0, 12.0 * N * C);
#pragma omp parallel for schedule(dynamic, 8) if (!cpu_contended())
    for (int n = 0; n < N; n++) {
        const float* a = x + size_t(n) * C;
        const float* b = y + size_t(n) * C;
        float* o = out + size_t(n) * C;
        if (bias) {
#pragma omp simd
            for (int j = 0; j < C; j++) o[j] = (a[j] + bias[j]) + b[j];
        } else {
#pragma omp simd
            for (int j = 0; j < C; j++) o[j] = a[j] + b[j];
        }
    }
}

namespace {
// dout (N, OC) as a backward's bf16 products read it (rows for dinp, columns for dweight): rounded to bf16
// once when dinp is asked for (its rows of bf16 pairs then need no packing) or a caller keeps it (keep:
// there, else scratch 0), else fp32 (rounded as dweight's product packs it)
struct DoutOperands {
    native::Operand rows, cols;
};
DoutOperands dout_operands(const float* dout, int N, int OC, bool dinp, unsigned short* keep) {
    if (!dinp && !keep) return {{dout, DType::F32, OC, 1}, {dout, DType::F32, 1, OC}};
    profile::Scope prof_("bf16 rounding", 0, 6.0 * N * OC);
    const unsigned short* d = keep;
    if (keep) convert_from_f32(keep, DType::BF16, dout, size_t(N) * OC);
    else d = to_bf16_scratch(0, dout, size_t(N) * OC);
    return {{d, DType::BF16, OC, 1}, {d, DType::BF16, 1, OC}};
}
}  // namespace

void matmul_backward(float* dinp, float* dweight, float* dbias,
                     const float* dout, const float* inp, const float* weight,
                     int N, int C, int OC, bool accumulate_dweight, MatmulPrecision precision, unsigned short* dout16) {
    profile::Scope prof_(profile::kernel("matmul backward"), 2.0 * N * C * OC * ((dinp ? 1 : 0) + (dweight ? 1 : 0)), 8.0 * (double(N) * C + double(OC) * C + double(N) * OC));
    SHARDLM_CHECK(!dout16 || precision == MatmulPrecision::bf16, "matmul_backward: a bf16 copy of dout is for bf16 products");
    if (precision == MatmulPrecision::bf16) {
        // dout rounded to bf16 once for both products; inp and weight as the products read them
        const DoutOperands d = dout_operands(dout, N, OC, dinp != nullptr, dout16);
        if (dinp) gemm_mixed(dinp, DType::F32, d.rows, {weight, DType::F32, C, 1}, N, C, OC, false, nullptr);
        if (dweight)
            gemm_mixed(dweight, DType::F32, d.cols, {inp, DType::F32, C, 1}, OC, C, N, accumulate_dweight, nullptr);
    } else {
        if (dinp)
            sgemm_balanced(CblasNoTrans, CblasNoTrans, N, C, OC, 1.0f, dout, OC, weight, C, 0.0f, dinp, C);
        if (dweight)
            sgemm_balanced(CblasTrans, CblasNoTrans, OC, C, N, 1.0f, dout, OC, inp, C, accumulate_dweight ? 1.0f : 0.0f,
                           dweight, C);
    }
    if (dbias) bias_backward(dbias, dout, N, OC);
}

namespace {
template <DType D>
void residual_add_impl(void* out, const void* x, const float* bias, const float* y, int N, int C) {
#pragma omp parallel for schedule(dynamic, 8) if (!cpu_contended())
    for (int n = 0; n < N; n++) {
        const size_t row = size_t(n) * C;
        for (int j = 0; j < C; j += 16) {
            const simd::M16 m = simd::mask_below(size_t(j), size_t(C));
            const simd::V16 xv = load16<D>(x, row + j, m);
            const simd::V16 a = bias ? xv + simd::load(m, bias + j) : xv;
            store16<D>(out, row + j, m, a + simd::load(m, y + row + j));
        }
    }
}
}  // namespace

void residual_add(void* out, const void* x, DType t, const float* bias, const float* y, int N, int C) {
    profile::Scope prof_("residual add", 0, (2.0 * dtype_bytes(t) + 4) * N * C);
    if (t == DType::F32) {
        residual_add(static_cast<float*>(out), static_cast<const float*>(x), bias, y, N, C);
        return;
    }
    SHARDLM_DTYPE_SWITCH(t, D, residual_add_impl<D>(out, x, bias, y, N, C))
}

void matmul_forward(void* out, DType out_t, const void* inp, const void* weight, DType in_t, const float* bias, int N,
                    int C, int OC) {
    profile::Scope prof_(profile::kernel("matmul forward"), 2.0 * N * C * OC, double(dtype_bytes(in_t)) * (double(N) * C + double(OC) * C) + double(dtype_bytes(out_t)) * N * OC);
    if (in_t == DType::BF16) {
        // out(N,OC) = inp(N,C) @ weight(OC,C)^T: the weight read transposed through its strides
        const Bf16Matrix a{static_cast<const unsigned short*>(inp), C, 1};
        const Bf16Matrix b{static_cast<const unsigned short*>(weight), 1, C};
        gemm_bf16(out, out_t, a, b, N, OC, C, false, bias);
        return;
    }
    // fp32 operands, or fp16 ones widened to fp32
    const float* x = to_f32_scratch(0, inp, in_t, size_t(N) * C);
    const float* w = to_f32_scratch(1, weight, in_t, size_t(OC) * C);
    if (out_t == DType::F32) {
        matmul_forward(static_cast<float*>(out), x, w, bias, N, C, OC);
        return;
    }
    float* tmp = thread_scratch(2, size_t(N) * OC);
    matmul_forward(tmp, x, w, bias, N, C, OC);
    convert_from_f32(out, out_t, tmp, size_t(N) * OC);
}

void matmul_backward(float* dinp, float* dweight, float* dbias, const float* dout, const void* inp, const void* weight,
                     DType in_t, int N, int C, int OC, bool accumulate_dweight, unsigned short* dout16) {
    profile::Scope prof_(profile::kernel("matmul backward"), 2.0 * N * C * OC * ((dinp ? 1 : 0) + (dweight ? 1 : 0)), 8.0 * (double(N) * C + double(OC) * C + double(N) * OC));
    SHARDLM_CHECK(!dout16 || in_t == DType::BF16, "matmul_backward: a bf16 copy of dout is for bf16 products");
    if (in_t == DType::BF16) {  // dout rounded to bf16 once for both products (rows of bf16 pairs: no packing for dinp)
        const DoutOperands d = dout_operands(dout, N, OC, dinp != nullptr, dout16);
        if (dinp) gemm_mixed(dinp, DType::F32, d.rows, {weight, DType::BF16, C, 1}, N, C, OC, false, nullptr);
        if (dweight)
            gemm_mixed(dweight, DType::F32, d.cols, {inp, DType::BF16, C, 1}, OC, C, N, accumulate_dweight, nullptr);
        if (dbias) bias_backward(dbias, dout, N, OC);
        return;
    }
    // fp16: widened to fp32 (the input only when its product is asked for)
    matmul_backward(dinp, dweight, dbias, dout, dweight ? to_f32_scratch(0, inp, in_t, size_t(N) * C) : nullptr,
                    dinp ? to_f32_scratch(1, weight, in_t, size_t(OC) * C) : nullptr, N, C, OC, accumulate_dweight);
}

void matmul_backward_weight(float* dweight, float* dbias, const float* dout, const void* inp, DType in_t, int N, int C,
                            int OC, int oc0, int oc1, bool accumulate, MatmulPrecision precision,
                            const unsigned short* dout16) {
    profile::Scope prof_(profile::kernel("matmul backward"), 2.0 * N * C * (oc1 - oc0), 4.0 * (double(N) * (oc1 - oc0) + double(N) * C + double(oc1 - oc0) * C));
    const int w = oc1 - oc0;
    if (w <= 0) return;
    const bool bf16 = in_t == DType::BF16 || (in_t == DType::F32 && precision == MatmulPrecision::bf16);
    SHARDLM_CHECK(!dout16 || bf16, "matmul_backward_weight: a bf16 copy of dout is for bf16 products");
    float* dw = dweight + size_t(oc0) * size_t(C);
    const float* d = dout + oc0;
    if (bf16) {
        // bf16 products: dout's columns oc0.. kept in bf16, or rounded as the product reads them (and fp32 inp)
        const native::Operand a = dout16 ? native::Operand{dout16 + oc0, DType::BF16, 1, OC} : native::Operand{d, DType::F32, 1, OC};
        gemm_mixed(dw, DType::F32, a, {inp, in_t, C, 1}, w, C, N, accumulate, nullptr);
    } else {
        // fp32, or fp16 operands widened to fp32
        const float* x = to_f32_scratch(0, inp, in_t, size_t(N) * C);
        sgemm_balanced(CblasTrans, CblasNoTrans, w, C, N, 1.0f, d, OC, x, C, accumulate ? 1.0f : 0.0f, dw, C);
    }
    if (dbias) bias_backward(dbias + oc0, d, N, w, OC);
}

void matmul_backward_bf16(float* dinp, float* dweight, const unsigned short* d, const float* inp,
                          const float* weight, int N, int C, int OC, bool accumulate_dweight) {
    profile::Scope prof_(profile::kernel("matmul backward"), 2.0 * N * C * OC * ((dinp ? 1 : 0) + (dweight ? 1 : 0)), 8.0 * (double(N) * C + double(OC) * C + double(N) * OC));
    if (dinp) gemm_mixed(dinp, DType::F32, {d, DType::BF16, OC, 1}, {weight, DType::F32, C, 1}, N, C, OC, false, nullptr);
    if (dweight)
        gemm_mixed(dweight, DType::F32, {d, DType::BF16, 1, OC}, {inp, DType::F32, C, 1}, OC, C, N, accumulate_dweight,
                   nullptr);
}

}  // namespace shardlm::kernels
