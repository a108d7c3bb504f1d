// Every product the engine issues, on every GEMM library, against one fp64 reference.
//
// A tap on the GEMM layer (kernels/gemm/gemm.h: set_product_tap) records each distinct product a training step
// issues: its shape, the operands' types and strides, transposition, overwrite or accumulate, alpha, bias and
// C's type, with copies of its operands. The steps are those of GPT-2 and LLaMA blocks (grouped-query
// attention, SwiGLU, an untied head) at head dimensions 16, 32 and 64, the tied head, two tensor-parallel
// ranks (threads) with and without sequence parallelism, fused and materialized attention, in fp32, bf16,
// fp16 and fp32 storage with bf16 products (the weight gradients then read the B phase's kept bf16 copy of
// the output gradient), each run under --gemm native (attention's tiles on packed panels) and openblas (its
// tiles through sgemm_tile). Every recorded product is then run again on each library the build has:
// OpenBLAS (bf16 operands widened to fp32), oneDNN and the native kernels, exactly as the engine calls them
// (a balanced product cut into column blocks, one call for a tile, a packed tile, a mixed product).
//
// The reference is the product in fp64 of the operands as the product reads them: fp32 values, or for bf16
// products fp32 operands rounded to bf16 (nearest even) and bf16 ones as they are. The bound is fp32
// summation's (Higham, Accuracy and Stability of Numerical Algorithms, 3.1): any order of fp32 additions and
// fused or unfused multiplies of n = K + 3 terms (K products, C's old value, the bias, alpha's scaling) is
// within gamma_n = n u / (1 - n u) of the sum of the terms' magnitudes, u = 2^-24; a bf16 C adds one rounding
// of its own (u = 2^-8); for normal inputs (a denormal input flushed to zero loses its product). A library that truncates instead of rounding, drops a row, reads a wrong stride or
// sums in lower precision misses it by orders of magnitude: at K = 1024, gamma is 6e-5 of the magnitudes, a
// bf16 rounding 4e-3.
//
// A library the CPU cannot run a product on is skipped by name: bf16 products on the native kernels need
// AVX512_BF16, on oneDNN a CPU it has a bf16 matmul for (else both widen to OpenBLAS, which is tested).
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <vector>

#include "shardlm/core/aligned_buffer.h"
#include "shardlm/core/dtype.h"
#include "shardlm/kernels/gemm/gemm.h"
#include "shardlm/kernels/gemm/tuner.h"
#include "shardlm/kernels/gemm/tap.h"
#include "shardlm/kernels/gemm/native.h"
#include "shardlm/model/part.h"
#include "shardlm/model/weights.h"
#include "thread_tp.h"

namespace {

using namespace shardlm;
using kernels::GemmBackend;
using kernels::ProductCall;
using kernels::ProductPath;

// ---- recording ------------------------------------------------------------------------------------------

// A product with copies of its operands (the call's pointers point into them).
struct Recorded {
    ProductCall call;
    std::vector<unsigned char> a, b, c, bias;
    std::string where;  // the first step that issued it
};

const char* path_name(ProductPath p) {
    switch (p) {
        case ProductPath::Balanced: return "balanced";
        case ProductPath::Tile: return "tile";
        case ProductPath::Packed: return "packed tile";
        case ProductPath::Mixed: return "mixed";
    }
    return "?";
}

const char* type_name(DType t) { return t == DType::F32 ? "f32" : t == DType::BF16 ? "bf16" : "f16"; }

// What makes a product distinct: path, shape, operand types and strides, overwrite or accumulate, alpha,
// bias, C's type and row stride.
std::string describe(const ProductCall& c) {
    std::ostringstream s;
    s << path_name(c.path) << " " << c.M << "x" << c.N << "x" << c.K << " A " << type_name(c.a.t) << "(" << c.a.rs << ","
      << c.a.cs << ") B " << type_name(c.b.t) << "(" << c.b.rs << "," << c.b.cs << ") C " << type_name(c.c_t) << " ld "
      << c.ldc << " alpha " << c.alpha << (c.beta != 0 ? " accumulate" : " overwrite") << (c.bias ? " bias" : "");
    if (c.path == ProductPath::Packed) s << " nr " << c.nr;
    return s.str();
}

std::vector<unsigned char> copy_bytes(const void* p, size_t bytes) {
    const auto* b = static_cast<const unsigned char*>(p);
    return std::vector<unsigned char>(b, b + bytes);
}

size_t span(const kernels::native::Operand& x, long rows, long cols) {
    return kernels::operand_span(rows, cols, x.rs, x.cs, dtype_bytes(x.t));
}

class Recorder {
public:
    void operator()(const ProductCall& c) {
        if (c.M <= 0 || c.N <= 0 || c.K <= 0) return;
        const std::string key = describe(c);
        std::lock_guard<std::mutex> lock(mu_);
        if (products_.count(key)) return;
        auto r = std::make_unique<Recorded>();
        r->call = c;
        r->where = where_;
        r->a = copy_bytes(c.a.data, span(c.a, c.M, c.K));
        r->b = copy_bytes(c.b.data, span(c.b, c.K, c.N));
        if (c.beta != 0) r->c = copy_bytes(c.c, size_t((c.M - 1) * c.ldc + c.N) * dtype_bytes(c.c_t));
        if (c.bias) r->bias = copy_bytes(c.bias, sizeof(float) * size_t(c.N));
        r->call.a.data = r->a.data();
        r->call.b.data = r->b.data();
        r->call.c = nullptr;
        r->call.bias = c.bias ? reinterpret_cast<const float*>(r->bias.data()) : nullptr;
        products_.emplace(key, std::move(r));
    }
    void set_where(std::string w) {
        std::lock_guard<std::mutex> lock(mu_);
        where_ = std::move(w);
    }
    const std::map<std::string, std::unique_ptr<Recorded>>& products() const { return products_; }

private:
    std::mutex mu_;
    std::string where_;
    std::map<std::string, std::unique_ptr<Recorded>> products_;
};

// ---- the training steps whose products are recorded -------------------------------------------------------

struct Step {
    std::string name;
    model::GptConfig cfg;
    const char* precision;  // a --precision name
    int tp = 1;
    bool sp = false, fused = true;
};

model::GptConfig gpt2(int n_head, int n_embd) {
    model::GptConfig c;
    c.name = "products-gpt2";
    c.n_layer = 2;
    c.n_head = n_head;
    c.n_embd = n_embd;
    c.vocab_size = 211;  // padded to 256 (two ranks: 128 each, the last with padding)
    c.n_ctx = 80;
    return c;
}

model::GptConfig llama(int n_head, int n_embd) {
    model::GptConfig c = gpt2(n_head, n_embd);
    c.name = "products-llama";
    c.norm = model::Norm::RMSNorm;
    c.position = model::Position::Rope;
    c.mlp = model::Mlp::SwiGLU;
    c.ffn_hidden = 3 * n_embd;
    c.bias = false;
    c.tie_embeddings = false;
    c.n_kv_head = n_head / 2;  // grouped-query attention
    return c;
}

constexpr int kB = 2, kT = 80;  // 80 rows: attention's tiles of 64 leave ragged ones

// Two micro-batches (the second accumulates into the gradients) through one rank's part.
void run_rank(const Step& s, model::TensorParallel* tp) {
    model::ModelPart::Options o;
    o.tp = tp;
    o.sequence_parallel = s.sp;
    o.fused_attention = s.fused;
    o.threads = omp_get_max_threads();
    ASSERT_TRUE(precision_policy_from_name(s.precision, &o.precision)) << s.precision;
    model::ModelPart part(s.cfg, o, kB, kT);
    const model::Layout& L = part.layout();
    AlignedBuffer<float> params(L.total), grads(L.total);
    model::init_gpt2_weights(params.data(), L, model::FlatRange{0, L.total}, 5);
    AlignedBuffer<unsigned char> p16(L.total * dtype_bytes(o.precision.param));
    void* bound = params.data();
    if (o.precision.param != DType::F32) {
        convert_from_f32(p16.data(), o.precision.param, params.data(), L.total);
        bound = p16.data();
    }
    part.bind(bound, grads.data());
    std::vector<int> tokens(size_t(kB * kT) + 1);
    for (int m = 0; m < 2; m++) {
        for (size_t i = 0; i < tokens.size(); i++) tokens[i] = int((i * 31 + size_t(m) * 13 + i * i) % 211);
        part.forward(0, 0, tokens.data(), tokens.data() + 1, kB, kT, 1.0f / (kB * kT));
        part.backward(0, 0, nullptr, m > 0);
    }
}

void run_step(const Step& s) {
    if (s.tp == 1) {
        run_rank(s, nullptr);
        return;
    }
    test::Meeting meeting(s.tp);
    std::vector<test::ThreadTp> groups;
    for (int r = 0; r < s.tp; r++) groups.emplace_back(meeting, r);
    test::run_ranks(s.tp, [&](int r) { run_rank(s, &groups[size_t(r)]); });
}

std::vector<Step> steps() {
    std::vector<Step> v;
    v.push_back({"gpt2 head 16 fp32", gpt2(4, 64), "fp32"});
    v.push_back({"gpt2 head 16 fp32 materialized", gpt2(4, 64), "fp32", 1, false, false});
    v.push_back({"gpt2 head 32 bf16", gpt2(2, 64), "bf16"});
    v.push_back({"gpt2 head 64 fp32-bf16-products", gpt2(2, 128), "fp32-bf16-products"});
    v.push_back({"gpt2 head 16 fp16", gpt2(4, 64), "fp16"});
    v.push_back({"llama head 32 fp32", llama(4, 128), "fp32"});
    v.push_back({"llama head 64 bf16", llama(4, 256), "bf16"});
    v.push_back({"llama head 16 bf16 materialized", llama(4, 64), "bf16", 1, false, false});
    v.push_back({"gpt2 head 16 tp2 fp32", gpt2(4, 64), "fp32", 2});
    v.push_back({"gpt2 head 16 tp2 sp bf16", gpt2(4, 64), "bf16", 2, true});
    v.push_back({"llama head 32 tp2 sp fp32-bf16-products", llama(4, 128), "fp32-bf16-products", 2, true});
    return v;
}

// Every product of every step, run under --gemm native and openblas; recorded once per process.
const Recorder& recorded() {
    static const std::unique_ptr<Recorder> rec = [] {
        auto r = std::make_unique<Recorder>();
        const GemmBackend before = kernels::gemm_backend();
        kernels::set_product_tap([p = r.get()](const ProductCall& c) { (*p)(c); });
        for (GemmBackend lib : {GemmBackend::Native, GemmBackend::OpenBlas}) {
            kernels::set_gemm_backend(lib);
            for (const Step& s : steps()) {
                r->set_where(s.name + " under --gemm " + setting_text(lib));
                run_step(s);
            }
        }
        kernels::set_product_tap({});
        kernels::set_gemm_backend(before);
        return r;
    }();
    return *rec;
}

// ---- replay and reference -----------------------------------------------------------------------------

float element(const kernels::native::Operand& x, long r, long c) {
    const long i = r * x.rs + c * x.cs;
    if (x.t == DType::F32) return static_cast<const float*>(x.data)[i];
    const uint16_t h = static_cast<const uint16_t*>(x.data)[i];
    return x.t == DType::BF16 ? bf16_to_f32(h) : f16_to_f32(h);
}

// The operand as the product multiplies it: bf16 products round fp32 values to bf16 (nearest even).
float as_multiplied(const ProductCall& c, float v) {
    return c.path == ProductPath::Mixed ? bf16_to_f32(f32_to_bf16(v)) : v;
}

// C after the product on `lib`, from the recorded operands (C's old value where the product accumulates).
std::vector<float> replay(const Recorded& r, GemmBackend lib) {
    const ProductCall& c = r.call;
    const size_t n = size_t((c.M - 1) * c.ldc + c.N);
    std::vector<unsigned char> out(n * dtype_bytes(c.c_t), 0);
    if (!r.c.empty()) std::memcpy(out.data(), r.c.data(), r.c.size());
    auto trans = [](const kernels::native::Operand& x) { return x.cs == 1 ? CblasNoTrans : CblasTrans; };
    auto ld = [](const kernels::native::Operand& x) { return int(x.cs == 1 ? x.rs : x.cs); };
    auto* C = reinterpret_cast<float*>(out.data());
    const auto* A = static_cast<const float*>(c.a.data);
    const auto* B = static_cast<const float*>(c.b.data);
    switch (c.path) {
        case ProductPath::Balanced:
            kernels::sgemm_balanced_on(lib, trans(c.a), trans(c.b), c.M, c.N, c.K, c.alpha, A, ld(c.a), B, ld(c.b), c.beta, C,
                                       int(c.ldc));
            break;
        case ProductPath::Packed:
            if (lib == GemmBackend::Native) {
                AlignedBuffer<float> panels(kernels::native::packed_b_floats(c.K, c.N, c.nr));
                const kernels::native::PackedB pb = kernels::native::pack_b(c.b, c.K, c.N, panels.data(), c.nr);
                kernels::native::gemm_packed(c.M, 0, c.K, 0, c.N, c.alpha, c.a, pb, c.beta, C, c.ldc);
                break;
            }
            [[fallthrough]];  // the other libraries run attention's tiles as one call each
        case ProductPath::Tile:
            kernels::sgemm_tile_on(lib, trans(c.a), trans(c.b), c.M, c.N, c.K, c.alpha, A, ld(c.a), B, ld(c.b), c.beta, C,
                                   int(c.ldc));
            break;
        case ProductPath::Mixed:
            kernels::gemm_mixed_on(lib, out.data(), c.c_t, c.a, c.b, c.M, c.N, c.K, c.beta != 0, c.bias);
            break;
    }
    std::vector<float> f(n);
    convert_to_f32(f.data(), out.data(), c.c_t, n);
    return f;
}

struct Worst {
    double ratio = 0;  // |error| / bound
    std::string what;
};

// Every element of C on `lib` against the fp64 reference, within the bound; the worst ratio.
Worst check(const Recorded& r, GemmBackend lib) {
    const ProductCall& c = r.call;
    const std::vector<float> got = replay(r, lib);
    std::vector<float> old(got.size(), 0.0f);
    if (!r.c.empty()) convert_to_f32(old.data(), r.c.data(), c.c_t, old.size());
    const double u = std::ldexp(1.0, -24), n = c.K + 3.0, gamma = n * u / (1 - n * u);
    const double u_c = c.c_t == DType::BF16 ? std::ldexp(1.0, -8) : 0.0;
    // products flushed as denormals (AVX512_BF16 and AMX flush them): at most 2^-126 each
    const double floor = n * std::ldexp(1.0, -126);
    const float* bias = c.bias;
    Worst w;
    std::vector<double> arow(size_t(c.K));
    for (int i = 0; i < c.M; i++) {
        for (int k = 0; k < c.K; k++) arow[size_t(k)] = as_multiplied(c, element(c.a, i, k));
        for (int j = 0; j < c.N; j++) {
            double sum = 0, mag = 0;
            for (int k = 0; k < c.K; k++) {
                const double p = arow[size_t(k)] * as_multiplied(c, element(c.b, k, j));
                sum += p, mag += std::fabs(p);
            }
            const size_t at = size_t(i * c.ldc + j);
            double ref = c.alpha * sum;
            mag *= std::fabs(c.alpha);
            if (c.beta != 0) ref += c.beta * old[at], mag += std::fabs(c.beta * old[at]);
            if (bias) ref += bias[j], mag += std::fabs(bias[j]);
            const double bound = gamma * mag + u_c * (std::fabs(ref) + gamma * mag) + floor;
            const double err = std::fabs(double(got[at]) - ref);
            const double ratio = std::isfinite(err) ? err / bound : INFINITY;
            if (!(ratio <= w.ratio)) {
                std::ostringstream s;
                s << "C(" << i << "," << j << ") = " << got[at] << ", fp64 " << ref << ", bound " << bound;
                w = {ratio, s.str()};
            }
        }
    }
    return w;
}

// Whether `lib` makes this product itself on this CPU ("" if so), else why not (it would widen to OpenBLAS).
std::string unable(GemmBackend lib, const ProductCall& c) {
    if (c.path != ProductPath::Mixed) return "";
    if (lib == GemmBackend::Native && !kernels::gemm_has_native_bf16())
        return "the native kernels make no bf16 products on this CPU (no AVX512_BF16): they widen to OpenBLAS";
    if (lib == GemmBackend::OneDnn && !kernels::onednn_makes_bf16())
        return "oneDNN has no bf16 matmul for this CPU: it widens to OpenBLAS";
    return "";
}

class EveryLibrary : public ::testing::TestWithParam<GemmBackend> {};

TEST_P(EveryLibrary, MakesEveryProductOfTheStepWithinFp32SummationsBound) {
    const GemmBackend lib = GetParam();
    const Recorder& rec = recorded();
    // what the steps must have issued for the test to mean anything
    std::map<ProductPath, int> paths;
    int accumulating = 0, bf16_c = 0, kept_copy = 0, bias = 0;
    for (const auto& [key, r] : rec.products()) {
        const ProductCall& c = r->call;
        paths[c.path]++;
        accumulating += c.beta != 0;
        bf16_c += c.c_t == DType::BF16;
        bias += c.bias != nullptr;
        // a weight gradient reading a kept bf16 copy: a transposed bf16 A with fp32 B into fp32 C
        kept_copy += c.path == ProductPath::Mixed && c.a.t == DType::BF16 && c.a.rs == 1 && c.b.t == DType::F32;
    }
    ASSERT_GT(paths[ProductPath::Balanced], 0);
    ASSERT_GT(paths[ProductPath::Tile], 0);
    ASSERT_GT(paths[ProductPath::Packed], 0);
    ASSERT_GT(paths[ProductPath::Mixed], 0);
    ASSERT_GT(accumulating, 0);
    ASSERT_GT(bf16_c, 0);
    ASSERT_GT(bias, 0);
    ASSERT_GT(kept_copy, 0);
    int run = 0;
    Worst worst[2];  // fp32 C, bf16 C (whose rounding of its own makes the bound tight)
    std::string worst_key[2];
    std::map<std::string, int> skipped;
    for (const auto& [key, r] : rec.products()) {
        const std::string why = unable(lib, r->call);
        if (!why.empty()) {
            skipped[why]++;
            continue;
        }
        const Worst w = check(*r, lib);
        run++;
        const int bf16 = r->call.c_t == DType::BF16;
        if (w.ratio > worst[bf16].ratio) worst[bf16] = w, worst_key[bf16] = key;
        EXPECT_LE(w.ratio, 1.0) << key << " (first issued by " << r->where << "): " << w.what;
    }
    for (const auto& [why, count] : skipped) std::printf("[ SKIPPED  ] %d products on %s: %s\n", count, setting_text(lib).c_str(), why.c_str());
    std::printf("[ PRODUCTS ] %d of %zu distinct products run on %s; the largest error %.3g of its bound with fp32 C (%s), "
                "%.3g with bf16 C\n", run, rec.products().size(), setting_text(lib).c_str(), worst[0].ratio,
                worst_key[0].c_str(), worst[1].ratio);
    if (run == 0) GTEST_SKIP() << setting_text(lib) << " runs none of the products on this CPU";
}

INSTANTIATE_TEST_SUITE_P(Products, EveryLibrary,
                         ::testing::Values(GemmBackend::OpenBlas, GemmBackend::OneDnn, GemmBackend::Native),
                         [](const auto& info) { return setting_text(info.param); });

}  // namespace
