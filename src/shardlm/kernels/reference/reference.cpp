#include "shardlm/kernels/reference/reference.h"

#include <cmath>
#include <cstring>
#include <vector>

namespace shardlm::kernels::reference {

void matmul_forward(float* out, const float* inp, const float* weight, const float* bias, int N, int C, int OC,
                    bool accumulate) {
    for (int n = 0; n < N; n++)
        for (int o = 0; o < OC; o++) {
            double s = bias ? bias[o] : 0.0;
            for (int c = 0; c < C; c++) s += double(inp[size_t(n) * C + c]) * weight[size_t(o) * C + c];
            float& y = out[size_t(n) * OC + o];
            y = accumulate ? float(y + s) : float(s);
        }
}

void matmul_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                     const float* weight, int N, int C, int OC) {
    if (dinp)
        for (int n = 0; n < N; n++)
            for (int c = 0; c < C; c++) {
                double s = 0;
                for (int o = 0; o < OC; o++) s += double(dout[size_t(n) * OC + o]) * weight[size_t(o) * C + c];
                dinp[size_t(n) * C + c] = float(s);
            }
    if (dweight)
        for (int o = 0; o < OC; o++)
            for (int c = 0; c < C; c++) {
                double s = 0;
                for (int n = 0; n < N; n++) s += double(dout[size_t(n) * OC + o]) * inp[size_t(n) * C + c];
                dweight[size_t(o) * C + c] += float(s);
            }
    if (dbias)
        for (int o = 0; o < OC; o++) {
            double s = 0;
            for (int n = 0; n < N; n++) s += dout[size_t(n) * OC + o];
            dbias[o] += float(s);
        }
}

void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* weight,
                       const float* bias, int N, int C, float eps) {
    for (int n = 0; n < N; n++) {
        const float* x = inp + size_t(n) * C;
        double m = 0, v = 0;
        for (int i = 0; i < C; i++) m += x[i];
        m /= C;
        for (int i = 0; i < C; i++) v += (x[i] - m) * (x[i] - m);
        v /= C;
        double r = 1.0 / std::sqrt(v + eps);
        for (int i = 0; i < C; i++) out[size_t(n) * C + i] = float((x[i] - m) * r * weight[i] + bias[i]);
        mean[n] = float(m);
        rstd[n] = float(r);
    }
}

void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                        const float* weight, const float* mean, const float* rstd, int N, int C) {
    for (int n = 0; n < N; n++) {
        const float* x = inp + size_t(n) * C;
        const float* g = dout + size_t(n) * C;
        double a = 0, b = 0;
        for (int i = 0; i < C; i++) {
            double norm = (x[i] - mean[n]) * double(rstd[n]);
            a += g[i] * weight[i];
            b += g[i] * weight[i] * norm;
        }
        a /= C;
        b /= C;
        for (int i = 0; i < C; i++) {
            double norm = (x[i] - mean[n]) * double(rstd[n]);
            dinp[size_t(n) * C + i] += float(rstd[n] * (g[i] * weight[i] - a - norm * b));
            dweight[i] += float(g[i] * norm);
            dbias[i] += g[i];
        }
    }
}

static constexpr double kS = 0.7978845608028654, kA = 0.044715;

void gelu_forward(float* out, const float* inp, size_t n) {
    for (size_t i = 0; i < n; i++) {
        double x = inp[i];
        out[i] = float(0.5 * x * (1.0 + std::tanh(kS * (x + kA * x * x * x))));
    }
}

void gelu_backward(float* dinp, const float* inp, const float* dout, size_t n) {
    for (size_t i = 0; i < n; i++) {
        double x = inp[i], t = std::tanh(kS * (x + kA * x * x * x));
        double d = 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * kS * (1 + 3 * kA * x * x);
        dinp[i] = float(d * dout[i]);
    }
}

void encoder_forward(float* out, const int* tokens, const float* wte, const float* wpe, int B, int T, int C) {
    for (int bt = 0; bt < B * T; bt++)
        for (int i = 0; i < C; i++)
            out[size_t(bt) * C + i] = wte[size_t(tokens[bt]) * C + i] + wpe[size_t(bt % T) * C + i];
}

void encoder_backward(float* dwte, float* dwpe, const float* dout, const int* tokens, int B, int T, int C) {
    for (int bt = 0; bt < B * T; bt++)
        for (int i = 0; i < C; i++) {
            dwte[size_t(tokens[bt]) * C + i] += dout[size_t(bt) * C + i];
            dwpe[size_t(bt % T) * C + i] += dout[size_t(bt) * C + i];
        }
}

void crossentropy_forward_backward(float* logits, float* losses, const int* targets, int N, int V, int Vp, float dloss) {
    for (int n = 0; n < N; n++) {
        float* x = logits + size_t(n) * Vp;
        double mx = x[0];
        for (int j = 1; j < V; j++) mx = std::max(mx, double(x[j]));
        double s = 0;
        for (int j = 0; j < V; j++) s += std::exp(x[j] - mx);
        losses[n] = float(mx + std::log(s) - x[targets[n]]);
        for (int j = 0; j < V; j++) x[j] = float(dloss * (std::exp(x[j] - mx) / s - (j == targets[n])));
        for (int j = V; j < Vp; j++) x[j] = 0;
    }
}

void attention_forward(float* out, float* att, const float* qkv, int B, int T, int C, int NH) {
    const int HS = C / NH, C3 = 3 * C;
    const double scale = 1.0 / std::sqrt(double(HS));
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            for (int i = 0; i < T; i++) {
                const float* q = qkv + (size_t(b) * T + i) * C3 + h * HS;
                float* a = att + ((size_t(b) * NH + h) * T + i) * T;
                std::vector<double> s(size_t(i) + 1);
                double mx = -1e300;
                for (int j = 0; j <= i; j++) {
                    const float* k = qkv + (size_t(b) * T + j) * C3 + C + h * HS;
                    double d = 0;
                    for (int e = 0; e < HS; e++) d += double(q[e]) * k[e];
                    s[j] = d * scale;
                    mx = std::max(mx, s[j]);
                }
                double z = 0;
                for (int j = 0; j <= i; j++) z += std::exp(s[j] - mx);
                for (int j = 0; j < T; j++) a[j] = j <= i ? float(std::exp(s[j] - mx) / z) : 0.0f;
                float* o = out + (size_t(b) * T + i) * C + h * HS;
                for (int e = 0; e < HS; e++) {
                    double acc = 0;
                    for (int j = 0; j <= i; j++) acc += double(a[j]) * qkv[(size_t(b) * T + j) * C3 + 2 * C + h * HS + e];
                    o[e] = float(acc);
                }
            }
}

void attention_backward(float* dqkv, const float* dout, const float* qkv, const float* att, int B, int T, int C, int NH) {
    const int HS = C / NH, C3 = 3 * C;
    const double scale = 1.0 / std::sqrt(double(HS));
    std::memset(dqkv, 0, sizeof(float) * size_t(B) * T * C3);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            for (int i = 0; i < T; i++) {
                const float* a = att + ((size_t(b) * NH + h) * T + i) * T;
                const float* g = dout + (size_t(b) * T + i) * C + h * HS;
                std::vector<double> dp(size_t(i) + 1);
                double dot = 0;
                for (int j = 0; j <= i; j++) {
                    const float* v = qkv + (size_t(b) * T + j) * C3 + 2 * C + h * HS;
                    float* dv = dqkv + (size_t(b) * T + j) * C3 + 2 * C + h * HS;
                    double d = 0;
                    for (int e = 0; e < HS; e++) {
                        d += double(g[e]) * v[e];
                        dv[e] += a[j] * g[e];
                    }
                    dp[j] = d;
                    dot += d * a[j];
                }
                const float* q = qkv + (size_t(b) * T + i) * C3 + h * HS;
                float* dq = dqkv + (size_t(b) * T + i) * C3 + h * HS;
                for (int j = 0; j <= i; j++) {
                    double ds = a[j] * (dp[j] - dot) * scale;
                    const float* k = qkv + (size_t(b) * T + j) * C3 + C + h * HS;
                    float* dk = dqkv + (size_t(b) * T + j) * C3 + C + h * HS;
                    for (int e = 0; e < HS; e++) {
                        dq[e] += float(ds * k[e]);
                        dk[e] += float(ds * q[e]);
                    }
                }
            }
}

}  // namespace shardlm::kernels::reference
