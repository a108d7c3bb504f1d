#include "shardlm/kernels/rope.h"

#include <cmath>
#include <vector>

#include "shardlm/core/contention.h"
#include "shardlm/core/dtype_simd.h"

namespace shardlm::kernels {

namespace {

// cos and sin of positions pos0 .. pos0+T-1, or pos[0 .. T-1] (T x d/2 each), as HF's LlamaRotaryEmbedding computes
// them in fp32: inv_freq = 1 / theta^(2i/d), angle = position * inv_freq.
void tables(std::vector<float>& cs, std::vector<float>& sn, int T, int pos0, const int* pos, int HS, float theta) {
    const int h = HS / 2;
    cs.resize(size_t(T) * h), sn.resize(size_t(T) * h);
    std::vector<float> inv(static_cast<size_t>(h));
    for (int i = 0; i < h; i++) inv[size_t(i)] = 1.0f / std::pow(theta, float(2 * i) / float(HS));
    for (int t = 0; t < T; t++)
        for (int i = 0; i < h; i++) {
            const float a = float(pos ? pos[t] : pos0 + t) * inv[size_t(i)];
            cs[size_t(t) * h + i] = float(std::cos(double(a)));
            sn[size_t(t) * h + i] = float(std::sin(double(a)));
        }
}

// one row: every head rotated by +angle (sign 1) or -angle (sign -1)
inline void rotate(float* x, const float* c, const float* s, int n_heads, int HS, float sign) {
    const int h = HS / 2;
    for (int hd = 0; hd < n_heads; hd++) {
        float* a = x + size_t(hd) * HS;
        float* b = a + h;
#pragma omp simd
        for (int i = 0; i < h; i++) {
            const float x1 = a[i], x2 = b[i], si = sign * s[i];
            a[i] = x1 * c[i] - x2 * si;
            b[i] = x2 * c[i] + x1 * si;
        }
    }
}

void apply(void* x, DType t, int N, int T, int pos0, const int* positions, size_t stride, int col0, int n_heads, int HS,
           float theta, float sign) {
    std::vector<float> cs, sn;
    tables(cs, sn, T, pos0, positions, HS, theta);
    const int h = HS / 2, W = n_heads * HS;
#pragma omp parallel if (!cpu_contended())
    {
        std::vector<float> buf(t == DType::F32 ? 0 : size_t(W));
#pragma omp for schedule(static)
        for (int r = 0; r < N; r++) {
            const int row = r % T;  // its row of the tables
            const size_t off = size_t(r) * stride + size_t(col0);
            if (t == DType::F32) {
                rotate(static_cast<float*>(x) + off, &cs[size_t(row) * h], &sn[size_t(row) * h], n_heads, HS, sign);
            } else {
                load_row(buf.data(), at(x, t, off), t, size_t(W));
                rotate(buf.data(), &cs[size_t(row) * h], &sn[size_t(row) * h], n_heads, HS, sign);
                store_row(at(x, t, off), t, buf.data(), size_t(W));
            }
        }
    }
}

}  // namespace

void rope_forward(void* x, DType t, int N, int T, int pos0, size_t stride, int col0, int n_heads, int HS, float theta,
                  const int* pos) {
    apply(x, t, N, T, pos0, pos, stride, col0, n_heads, HS, theta, 1.0f);
}

void rope_backward(float* dx, int N, int T, int pos0, size_t stride, int col0, int n_heads, int HS, float theta,
                   const int* pos) {
    apply(dx, DType::F32, N, T, pos0, pos, stride, col0, n_heads, HS, theta, -1.0f);
}

}  // namespace shardlm::kernels
