// kernels/optimizer_kernels.h: elementwise optimiser updates over flat slices (n elements each),
// so they apply to a whole buffer or to one rank's ZeRO slice alike. Each follows PyTorch's
// single-tensor algorithm (torch.optim, foreach=False) operation for operation. `wd` is the weight
// decay of this slice (0 for biases and norm gains): coupled L2 (g += wd p) for SGD, momentum,
// AdaGrad, Adam and RAdam (as PyTorch 1.13 applies it); decoupled (p *= 1 - lr wd) for AdamW, Lion and Sophia. `step` counts from 1. `gs` scales each
// gradient as it is read (gradient clipping), exactly as if the gradient had been scaled in place.
// Adam and AdamW are memory-bound (7 streams): they are AVX-512 loops with non-temporal stores.
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "shardlm/core/dtype.h"

namespace shardlm::kernels {

// The elementwise rules other than Adam's, over many slices at once: each element the bits of the one-slice calls
// below, the threads meeting once for all the slices instead of once per slice (a busy neighbour holds them).
enum class Rule { SGD, Momentum, AdaGrad, RAdam, Lion, Sophia, SophiaHessian };
struct RuleArgs {
    Rule rule = Rule::SGD;
    float lr = 0, beta1 = 0, beta2 = 0, eps = 0, momentum = 0, rho_bs = 0, gs = 1.0f;
    int step = 1;  // (RAdam's bias corrections)
};
// One slice: its parameters, gradients, the rule's state, length and weight decay. s0: the momentum buffer
// (Momentum), the sum (AdaGrad) or exp_avg (RAdam, Lion, Sophia); s1: exp_avg_sq (RAdam) or the Hessian
// (Sophia reads it, SophiaHessian updates it and leaves p alone). Unused ones may be null.
struct RuleSlice {
    float* p;
    const float* g;
    float* s0;
    float* s1;
    size_t n;
    float wd;
};
void rule_update_slices(const RuleArgs& a, const RuleSlice* slices, size_t count);

void sgd_update(float* p, const float* g, size_t n, float lr, float wd, float gs = 1.0f);
void momentum_update(float* p, const float* g, float* buf, size_t n, float lr, float mu, float wd, float gs = 1.0f);
void adagrad_update(float* p, const float* g, float* sum, size_t n, float lr, float eps, float wd, float gs = 1.0f);
// p16 (not null): the updated parameters also written rounded to t16 (BF16 or F16) there, in the same
// pass: the 16-bit copy a mixed-precision model reads (convert_from_f32's bits).
void adam_update(float* p, const float* g, float* m, float* v, size_t n, float lr, float beta1, float beta2,
                 float eps, float wd, int step, float gs = 1.0f, void* p16 = nullptr, DType t16 = DType::BF16);
void adamw_update(float* p, const float* g, float* m, float* v, size_t n, float lr, float beta1, float beta2,
                  float eps, float wd, int step, float gs = 1.0f, void* p16 = nullptr, DType t16 = DType::BF16);
// One slice of a step over many: its parameters, gradients, moments, length, weight decay and 16-bit copy (or null).
struct AdamSlice {
    float* p;
    const float* g;
    float* m;
    float* v;
    size_t n;
    float wd;
    void* p16 = nullptr;
};
// Adam (decoupled false) or AdamW over every slice at once: each element the bits of the one-slice call, the
// threads meeting once for all the slices instead of once per slice (an optimiser step of 148 tensors had 148
// meetings, where a busy neighbour holds the threads).
void adam_update_slices(const AdamSlice* slices, size_t count, bool decoupled, float lr, float beta1, float beta2, float eps,
                        int step, float gs = 1.0f, DType t16 = DType::BF16);
// torch.optim.RAdam (PyTorch 1.13): Adam's moments; while the length of the approximated SMA
// rho_t <= 5 the step is lr m / (1 - beta1^t) (no second moment), then rectified Adam.
void radam_update(float* p, const float* g, float* m, float* v, size_t n, float lr, float beta1, float beta2,
                  float eps, float wd, int step, float gs = 1.0f);
// Lion (Chen et al. 2023, Algorithm 2): c = beta1 m + (1 - beta1) g; p <- p (1 - lr wd) - lr sign(c);
// m <- beta2 m + (1 - beta2) g. sign(0) = 0.
void lion_update(float* p, const float* g, float* m, size_t n, float lr, float beta1, float beta2, float wd,
                 float gs = 1.0f);
// Sophia-G (Liu et al. 2023, Algorithm 3, as the authors' SophiaG writes it): p <- p (1 - lr wd);
// m <- beta1 m + (1 - beta1) g; p <- p - lr sign(m) min(|m| / (rho_bs h + kSophiaEps), 1), where
// rho_bs = rho B (B: the tokens of the step, the batch of the Hessian estimate) and h the EMA of the
// Gauss-Newton-Bartlett estimates (sophia_hessian_update: h <- beta2 h + (1 - beta2) (g gs)^2, with g
// the gradient of the loss on labels sampled from the model).
inline constexpr float kSophiaEps = 1e-15f;
void sophia_update(float* p, const float* g, float* m, const float* h, size_t n, float lr, float beta1, float rho_bs,
                   float wd, float gs = 1.0f);
void sophia_hessian_update(float* h, const float* g, size_t n, float beta2, float gs = 1.0f);
// 8-bit block-wise quantisation (Dettmers et al. 2022). A code is 256 sorted values: signed in
// [-1, 1] (first moments), unsigned in [0, 1] (second moments). Dynamic: bitsandbytes'
// create_dynamic_map (7 exponent bits; the signed one's most negative value made -1, so a block's
// largest magnitude of either sign is stored exactly); linear: create_linear_map with a zero. Both
// computed in double and rounded once (tools/reference/optim_torch.py builds the same values).
using Code8 = std::array<float, 256>;
Code8 dynamic_code(bool is_signed);
Code8 linear_code(bool is_signed);
// The index of the code value nearest x (the lower one on a tie).
uint8_t nearest_code(const Code8& code, float x);
// A code and tables that give nearest_code's answer without its search (whose 8 dependent loads per value had
// made adam8bit's step 40x AdamW's): for each bucket of y in [-1, 1] (a sign and the top 16 bits of |y|'s
// representation: 7 bits of mantissa), the code of every y there when they share one (most buckets); else, for each
// of the bucket's kFine parts (the next 6 bits), the part's code, or how many values are <= the part's least y, and a
// value's count is that plus its comparisons with the few values inside the part (at most kMaxExtra, checked as the
// tables are built). In kernels/optimizer_8bit.cpp.
class CodeIndex {
public:
    explicit CodeIndex(const Code8& code);
    uint8_t nearest(float y) const;  // nearest_code(code, y), for every y
    // q[i] = nearest(absmax > 0 ? x[i] / absmax : 0) for i < n, 16 values at a time (8 on AVX2): the tables and
    // the comparisons read by gathers, each level only for the lanes that need it
    void nearest_of(const float* x, size_t n, float absmax, uint8_t* q) const;
    Code8 code;

private:
    static constexpr uint32_t kSide = 0x3f81;  // buckets of |y| <= 1 (1.0f: 0x3f800000)
    static constexpr int kMaxExtra = 4;
    static constexpr int kFineBits = 6, kFineShift = 16 - kFineBits;
    static constexpr uint32_t kFine = 1u << kFineBits;  // parts of a bucket that holds a boundary between codes
    static constexpr uint16_t kOne = 0x8000;            // an entry kOne | c: every y of the bucket (part) has code c
    std::array<float, 256 + kMaxExtra> padded_;          // the code, then +inf
    // table_: per bucket, negative y's (descending |y|) then positive, kOne | c or the bucket's ordinal among those
    // that hold a boundary; fine_: their kFine parts' entries, kOne | c or a count. Each has one entry more, read by
    // the last one's 32-bit gather.
    std::vector<uint16_t> table_, fine_;
    // nearest_of's vector loops (defined where the build has the instructions): the elements done
    size_t nearest_of_avx512(const float* x, size_t n, float absmax, uint8_t* q) const;
    size_t nearest_of_avx2(const float* x, size_t n, float absmax, uint8_t* q) const;
};
// A block of n values: absmax = max |x|, q[i] = nearest_code(x[i] / absmax) (0's code when absmax = 0).
float quantize_block(const float* x, size_t n, const CodeIndex& code, uint8_t* q);
void dequantize_block(const uint8_t* q, size_t n, const Code8& code, float absmax, float* x);

// One block of 8-bit AdamW (bitsandbytes' blockwise kernels): m and v dequantised with their
// absmax (*am, *av), updated in fp32 exactly as adamw_update, the parameters stepped with those fp32
// values, then m and v requantised with the block's new absmax (returned in *am, *av). scratch: 2 n floats.
void adam8bit_block(float* p, const float* g, uint8_t* qm, uint8_t* qv, float* am, float* av, size_t n,
                    const CodeIndex& code_m, const CodeIndex& code_v, float lr, float beta1, float beta2, float eps,
                    float wd, int step, float gs, float* scratch);
// Adafactor (Shazeer & Stern 2018, as transformers.optimization.Adafactor), over every piece of a step in one
// parallel region a pass (the threads meet once a pass, not once a tensor: beside a busy process the step slowed
// 1.75x with a region per tensor). A piece is elements [i0, i0 + n) of a row-major [rows, cols] matrix (factored)
// or of a vector (cols = n, one row); rows at or past real_rows (the padded vocabulary) are skipped everywhere. gs
// scales each gradient as it is read. Every sum is taken in an order that depends on the pieces alone, not on the
// threads.
//
// How a pass applies the update u: p -= wd lr p; u = u / clip_div * lr; with a first moment
// m = beta1 m + (1 - beta1) u and u = m; p -= u.
struct AdafactorApply {
    float lr = 0, wd = 0, clip_div = 1, beta1 = 0;
    bool first_moment = false;
};
struct AdafactorPiece {
    float* p = nullptr;
    const float* g = nullptr;
    float* m = nullptr;  // the first moment, or null
    size_t i0 = 0, n = 0, cols = 1, real_rows = 1;
    bool factored = false;
    double *row = nullptr, *col = nullptr;         // factored: the sums of squares' targets
    const float *rf = nullptr, *cf = nullptr;      // factored: rsqrt(R / mean R), rsqrt(C)
    float* v = nullptr;                            // a vector's second moment
    AdafactorApply apply;                          // adafactor_update's second pass
};
// row[r] += the sum over the piece's row r of (g gs)^2, col[c] likewise over column c, for each factored piece
// (pieces with the same col follow one another, in order: each column's sum runs down them in turn)
void adafactor_square_sums(const AdafactorPiece* pieces, size_t count, float gs);
// u = (rf[r] cf[c]) g gs (factored), u = rsqrt(v) g gs (vectors). apply false: out[j] = the sum of u^2 over piece j,
// a vector's v = beta2t v + (1 - beta2t) ((g gs)^2 + eps1) first; true: applies u (v as the first pass left it).
void adafactor_update(const AdafactorPiece* pieces, size_t count, float gs, float beta2t, float eps1, bool apply,
                      double* out);

// sum of squares in double, over fixed chunks summed in order: bit-identical for any thread count.
double sum_squares(const float* x, size_t n);
// out[j] = sum_squares(xs[j]) (the same bits) for every slice, in one parallel region: the threads meet once.
void sum_squares(const std::span<const float>* xs, size_t count, double* out);

}  // namespace shardlm::kernels
