#include "shardlm/kernels/matmul.h"

#include <cblas.h>
#include <immintrin.h>

#include <cstring>

namespace shardlm::kernels {

std::string_view matmul_precision_name(MatmulPrecision p) { return p == MatmulPrecision::bf16 ? "bf16" : "fp32"; }

bool matmul_precision_from_name(std::string_view s, MatmulPrecision* out) {
    for (MatmulPrecision p : {MatmulPrecision::fp32, MatmulPrecision::bf16})
        if (s == matmul_precision_name(p)) {
            *out = p;
            return true;
        }
    return false;
}

void matmul_forward(float* out, const float* inp, const float* weight, const float* bias,
                    int N, int C, int OC, bool accumulate, MatmulPrecision precision) {
    float beta = accumulate ? 1.0f : 0.0f;
    if (bias) {
        if (accumulate) {
#pragma omp parallel for schedule(static)
            for (int n = 0; n < N; n++) {
                float* o = out + size_t(n) * OC;
                for (int j = 0; j < OC; j++) o[j] += bias[j];
            }
        } else {
#pragma omp parallel for schedule(static)
            for (int n = 0; n < N; n++) std::memcpy(out + size_t(n) * OC, bias, sizeof(float) * OC);
        }
        beta = 1.0f;
    }
    if (precision == MatmulPrecision::bf16)
        gemm_bf16(out, {to_bf16_scratch(0, inp, size_t(N) * C), C, 1}, {to_bf16_scratch(1, weight, size_t(OC) * C), 1, C},
                  N, OC, C, beta != 0.0f);
    else
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, N, OC, C, 1.0f, inp, C, weight, C, beta, out, OC);
}

// dbias(OC) += sum_n dout(n, :), parallel over column blocks of 16, rows summed in order.
void bias_backward(float* dbias, const float* dout, int N, int OC) {
    int nblk = (OC + 15) / 16;
#pragma omp parallel for schedule(static)
    for (int b = 0; b < nblk; b++) {
        int j = b * 16;
        int w = OC - j < 16 ? OC - j : 16;
        __mmask16 m = __mmask16((1u << w) - 1u);
        __m512 acc = _mm512_maskz_loadu_ps(m, dbias + j);
        for (int n = 0; n < N; n++) acc = _mm512_add_ps(acc, _mm512_maskz_loadu_ps(m, dout + size_t(n) * OC + j));
        _mm512_mask_storeu_ps(dbias + j, m, acc);
    }
}

void residual_add(float* out, const float* x, const float* bias, const float* y, int N, int C) {
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const float* a = x + size_t(n) * C;
        const float* b = y + size_t(n) * C;
        float* o = out + size_t(n) * C;
#pragma omp simd
        for (int j = 0; j < C; j++) o[j] = (a[j] + bias[j]) + b[j];
    }
}

void matmul_backward(float* dinp, float* dweight, float* dbias,
                     const float* dout, const float* inp, const float* weight,
                     int N, int C, int OC, bool accumulate_dweight, MatmulPrecision precision) {
    if (precision == MatmulPrecision::bf16) {
        matmul_backward_bf16(dinp, dweight, to_bf16_scratch(0, dout, size_t(N) * OC), inp, weight, N, C, OC,
                             accumulate_dweight);
    } else {
        if (dinp)
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, N, C, OC, 1.0f, dout, OC, weight, C, 0.0f, dinp, C);
        if (dweight)
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, OC, C, N, 1.0f, dout, OC, inp, C,
                        accumulate_dweight ? 1.0f : 0.0f, dweight, C);
    }
    if (dbias) bias_backward(dbias, dout, N, OC);
}

void matmul_backward_bf16(float* dinp, float* dweight, const unsigned short* d, const float* inp,
                          const float* weight, int N, int C, int OC, bool accumulate_dweight) {
    if (dinp) gemm_bf16(dinp, {d, OC, 1}, {to_bf16_scratch(1, weight, size_t(OC) * C), C, 1}, N, C, OC, false);
    if (dweight)
        gemm_bf16(dweight, {d, 1, OC}, {to_bf16_scratch(2, inp, size_t(N) * C), C, 1}, OC, C, N, accumulate_dweight);
}

}  // namespace shardlm::kernels
