// kernels/gemm/matmul_bf16.cpp: bf16 x bf16 -> fp32 products on oneDNN's matmul primitive.
// oneDNN picks its AVX512_BF16 brgemm kernels where the CPU has them (DNNL_VERBOSE=1 shows which);
// the operands are rounded from fp32 here, in one streaming pass each, into scratch buffers that
// keep the source's row/column orientation, so that no transposed copy is ever made.
// A CPU without AVX-512 (Zen 2/3, where oneDNN 2.7 has no bf16 matmul) gets the same products from
// sgemm on the operands widened to fp32: a product of two bf16 values is exact in fp32, so only the
// order of the fp32 sums differs (bf16_matmul_backend() says which one runs).
#include <algorithm>
#include <functional>
#include <map>
#include <string>
#include <unordered_map>
#include <tuple>
#include <vector>

#include <dnnl.hpp>
#include <omp.h>

#include "shardlm/core/check.h"
#include "shardlm/core/dtype.h"
#include "shardlm/core/profile.h"
#include "shardlm/core/runtime.h"
#include "shardlm/kernels/gemm/gemm.h"
#include "shardlm/kernels/gemm/tuner.h"
#include "shardlm/kernels/gemm/tap.h"
#include "shardlm/kernels/gemm/native.h"

namespace shardlm::kernels {

namespace {

using dnnl::memory;

struct Bf16Context {
    dnnl::engine engine{dnnl::engine::kind::cpu, 0};
    dnnl::stream stream{engine};
    // (M, N, K, a strides, b strides, accumulate, C is bf16, bias, threads) -> primitive and its operand
    // descriptions. oneDNN blocks a primitive's work for the thread count it is made with; inside a
    // parallel region (a lane, which sets the count to 1) it runs it on one thread: the count is part
    // of the key, so that lanes run primitives made for one thread.
    using Key = std::tuple<int, int, int, long, long, long, long, bool, bool, bool, int>;
    struct Entry {
        memory::desc a, b, c, bias;
        dnnl::matmul prim;
        std::string impl;  // oneDNN's name of the implementation it chose ("brg:avx512_core_bf16")
    };
    std::map<Key, Entry> cache;
    // 0-2: to_bf16_scratch's slots (the callers'); 3, 4: gemm_mixed's roundings of fp32 operands
    std::vector<unsigned short> scratch[5];
    std::vector<float> scratch32[3];
    std::vector<float> wide[3];  // the sgemm path's widened A, B and C
};

// Whether oneDNN makes bf16 matmuls on this CPU: asked once, with a small primitive.
bool onednn_has_bf16() {
    static const bool ok = [] {
        try {
            dnnl::engine engine{dnnl::engine::kind::cpu, 0};
            memory::desc ad({16, 16}, memory::data_type::bf16, {16, 1});
            memory::desc cd({16, 16}, memory::data_type::f32, {16, 1});
            dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(ad, ad, cd), engine);
            return true;
        } catch (const dnnl::error&) {
            return false;
        }
    }();
    return ok;
}

// Each thread's own: the lanes of a rank round operands and run products at the same time.
Bf16Context& context() {
    thread_local Bf16Context ctx;
    return ctx;
}

}  // namespace

const unsigned short* to_bf16_scratch(int slot, const float* src, size_t n) {
    std::vector<unsigned short>& buf = context().scratch[slot];
    if (buf.size() < n) buf.resize(n);
    convert_from_f32(buf.data(), DType::BF16, src, n);
    return buf.data();
}

const unsigned short* to_bf16_scratch(int slot, const float* src, size_t rows, size_t cols, size_t ld) {
    if (ld == cols) return to_bf16_scratch(slot, src, rows * cols);
    std::vector<unsigned short>& buf = context().scratch[slot];
    if (buf.size() < rows * cols) buf.resize(rows * cols);
    for (size_t r = 0; r < rows; r++) convert_from_f32(buf.data() + r * cols, DType::BF16, src + r * ld, cols);
    return buf.data();
}

const float* to_f32_scratch(int slot, const void* src, DType t, size_t n) {
    if (t == DType::F32) return static_cast<const float*>(src);
    std::vector<float>& buf = context().scratch32[slot];
    if (buf.size() < n) buf.resize(n);
    convert_to_f32(buf.data(), src, t, n);
    return buf.data();
}

void gemm_bf16(float* c, const Bf16Matrix& a, const Bf16Matrix& b, int M, int N, int K, bool accumulate) {
    gemm_bf16(c, DType::F32, a, b, M, N, K, accumulate, nullptr);
}

namespace {

// The (rows, cols) matrix m widened to fp32 in ctx.wide[slot], as sgemm reads it: row-major
// (trans false) or its transpose row-major (trans true), ld floats apart.
struct Wide {
    const float* data;
    bool trans;
    int ld;
};
Wide widen(Bf16Context& ctx, int slot, const Bf16Matrix& m, int rows, int cols) {
    std::vector<float>& w = ctx.wide[slot];
    if (w.size() < size_t(rows) * cols) w.resize(size_t(rows) * cols);
    if (m.col_stride == 1) {  // rows contiguous
        for (int r = 0; r < rows; r++) convert_to_f32(w.data() + size_t(r) * cols, m.data + r * m.row_stride, DType::BF16, size_t(cols));
        return {w.data(), false, cols};
    }
    if (m.row_stride == 1) {  // columns contiguous: the transpose is row-major
        for (int c = 0; c < cols; c++) convert_to_f32(w.data() + size_t(c) * rows, m.data + c * m.col_stride, DType::BF16, size_t(rows));
        return {w.data(), true, rows};
    }
    for (int r = 0; r < rows; r++)
        for (int c = 0; c < cols; c++) w[size_t(r) * cols + size_t(c)] = bf16_to_f32(m.data[r * m.row_stride + c * m.col_stride]);
    return {w.data(), false, cols};
}

void gemm_bf16_widened(Bf16Context& ctx, void* c, DType c_t, const Bf16Matrix& a, const Bf16Matrix& b, int M, int N, int K,
                       bool accumulate, const float* bias) {
    const Wide wa = widen(ctx, 0, a, M, K), wb = widen(ctx, 1, b, K, N);
    const bool c16 = c_t == DType::BF16;
    float* out = static_cast<float*>(c);
    if (c16) {
        std::vector<float>& w = ctx.wide[2];
        if (w.size() < size_t(M) * N) w.resize(size_t(M) * N);
        out = w.data();
        if (accumulate) convert_to_f32(out, c, DType::BF16, size_t(M) * N);
    }
    sgemm_balanced_on(GemmBackend::OpenBlas, wa.trans ? CblasTrans : CblasNoTrans, wb.trans ? CblasTrans : CblasNoTrans, M, N, K, 1.0f, wa.data,
                   wa.ld, wb.data, wb.ld, accumulate ? 1.0f : 0.0f, out, N);
    if (bias)
        for (int r = 0; r < M; r++)
            for (int j = 0; j < N; j++) out[size_t(r) * N + j] += bias[j];
    if (c16) convert_from_f32(c, DType::BF16, out, size_t(M) * N);
}


void gemm_bf16_onednn(Bf16Context& ctx, void* c, DType c_t, const Bf16Matrix& a, const Bf16Matrix& b, int M, int N, int K,
                      bool accumulate, const float* bias);

}  // namespace

bool onednn_makes_bf16() { return onednn_has_bf16(); }

const char* bf16_matmul_backend() {
    const GemmBackend b = gemm_backend();
    if (b == GemmBackend::Native && native::has_bf16()) return "native";
    if (!onednn_has_bf16() && !native::has_bf16()) return "sgemm-widened";
    switch (b) {
        case GemmBackend::OpenBlas: return "sgemm-widened";
        case GemmBackend::OneDnn: return onednn_has_bf16() ? "onednn" : "sgemm-widened";
        case GemmBackend::Native: return "sgemm-widened";
        default: return "auto";
    }
}

namespace {

// An operand as OpenBLAS and oneDNN take it: bf16 as it is, fp32 rounded into scratch `slot` (its rows,
// or its columns, kept contiguous as they were)
Bf16Matrix as_bf16(Bf16Context& ctx, int slot, const native::Operand& x, int rows, int cols) {
    if (x.t == DType::BF16) return {static_cast<const unsigned short*>(x.data), x.rs, x.cs};
    const float* src = static_cast<const float*>(x.data);
    std::vector<unsigned short>& buf = ctx.scratch[slot];
    if (buf.size() < size_t(rows) * cols) buf.resize(size_t(rows) * cols);
    if (x.cs == 1) {  // rows contiguous
        for (int r = 0; r < rows; r++) convert_from_f32(buf.data() + size_t(r) * cols, DType::BF16, src + r * x.rs, size_t(cols));
        return {buf.data(), cols, 1};
    }
    if (x.rs == 1) {  // columns contiguous
        for (int c = 0; c < cols; c++) convert_from_f32(buf.data() + size_t(c) * rows, DType::BF16, src + c * x.cs, size_t(rows));
        return {buf.data(), 1, rows};
    }
    for (int r = 0; r < rows; r++)
        for (int c = 0; c < cols; c++) buf[size_t(r) * cols + size_t(c)] = f32_to_bf16(src[r * x.rs + c * x.cs]);
    return {buf.data(), cols, 1};
}

// The product on one library
void mixed_on(GemmBackend be, Bf16Context& ctx, void* c, DType c_t, const native::Operand& a, const native::Operand& b,
                   int M, int N, int K, bool accumulate, const float* bias) {
    if (be == GemmBackend::Native && native::has_bf16()) {
        native::gemm_bf16(c, c_t, N, a, b, M, N, K, accumulate, bias);
        return;
    }
    const Bf16Matrix a16 = as_bf16(ctx, 3, a, M, K), b16 = as_bf16(ctx, 4, b, K, N);
    if (be == GemmBackend::OneDnn && onednn_has_bf16()) gemm_bf16_onednn(ctx, c, c_t, a16, b16, M, N, K, accumulate, bias);
    else gemm_bf16_widened(ctx, c, c_t, a16, b16, M, N, K, accumulate, bias);
}

char type_letter(DType t) { return t == DType::BF16 ? 'b' : 'f'; }

}  // namespace

void gemm_mixed(void* c, DType c_t, const native::Operand& a, const native::Operand& b, int M, int N, int K, bool accumulate,
                const float* bias) {
    const auto layout = [](const native::Operand& x) { return x.cs == 1 ? 'N' : x.rs == 1 ? 'T' : 'G'; };
    tap_product({ProductPath::Mixed, M, N, K, a, b, 1.0f, accumulate ? 1.0f : 0.0f, c, c_t, N, bias});
    Bf16Context& ctx = context();
    GemmBackend be = gemm_backend();
    if (be == GemmBackend::Auto) {
        const bool has_native = native::has_bf16(), has_onednn = onednn_has_bf16() && gemm_onednn_candidate();
        const int threads = team_threads();
        // oneDNN runs a bf16 product on its own threads, so their count is part of the key; fp32 operands are
        // rounded as part of the product (packed by the native kernels, a pass of their own for the others)
        const std::string extra = cat(c_t == DType::BF16 ? "c-bf16" : "c-fp32", bias ? " bias" : "", accumulate ? " acc" : "",
                                      " ab-", type_letter(a.t), type_letter(b.t));
        const auto leading = [](const native::Operand& x) { return x.cs == 1 ? x.rs : x.cs; };
        const std::string key = gemm_key(GemmKind::Bf16, layout(a), layout(b), M, N, K, leading(a), leading(b), N, threads,
                                         extra.c_str());
        be = gemm_choice(key, [&](GemmTiming* t) {
            // the first rows (gemm_timing_rows) into C's first rows when the product overwrites C (the
            // call after the timing writes them again), else into a scratch C of the first columns
            // (gemm_timing_cols: items of 192 columns, two at least)
            const int rows = std::min(M, gemm_timing_rows());
            const int cols = accumulate ? gemm_timing_cols(rows, N, 192, 384) : N;
            std::vector<float> scratch(accumulate ? size_t(rows) * size_t(cols) : 0, 0.0f);
            void* out = accumulate ? static_cast<void*>(scratch.data()) : c;
            auto on = [&](GemmBackend lib) {
                return [&, lib] { mixed_on(lib, ctx, out, c_t, a, b, rows, cols, K, accumulate, bias); };
            };
            // OpenBLAS (the operands widened to fp32) is not timed where the native bf16 kernels run: it
            // computes at most at the fp32 FMA rate, half the dot product's, and its fp32 copies of a
            // vocabulary-sized operand would add hundreds of MB to the run's peak
            // each run from memory, as the step meets its operands (the weight last read a layer ago)
            const auto cold = [&] {
                flush_from_caches(a, rows, K);
                flush_from_caches(b, K, cols);
                flush_from_caches({out, c_t, cols, 1}, rows, cols);
            };
            note_onednn_impl(nullptr);  // what the timing's oneDNN run names, not an earlier product's
            gemm_time_each(has_native ? std::function<void()>() : on(GemmBackend::OpenBlas),
                           has_onednn ? on(GemmBackend::OneDnn) : std::function<void()>(),
                           has_native ? on(GemmBackend::Native) : std::function<void()>(), t, cold);
            t->onednn_impl = has_onednn ? onednn_last_impl() : std::string();
            // the libraries' roundings and widenings of the timed operands go with the timing: the chosen
            // library makes its own at its next call
            for (int slot : {3, 4}) std::vector<unsigned short>().swap(ctx.scratch[slot]);
            for (std::vector<float>& w : ctx.wide) std::vector<float>().swap(w);
        });
    }
    note_gemm_library(be);
    // counted under its shape and the library that runs it (what its share of a peak is measured against)
    const char* name = profile::by_shape()
                           ? profile::shape(cat("bf16 ", type_letter(a.t), type_letter(b.t), ">", type_letter(c_t), " ",
                                                setting_text(be)).c_str(), layout(a), layout(b), M, N, K)
                           : nullptr;
    profile::Scope prof_(name, 2.0 * M * N * K,
                         double(dtype_bytes(a.t)) * M * K + double(dtype_bytes(b.t)) * K * N + double(dtype_bytes(c_t)) * M * N);
    mixed_on(be, ctx, c, c_t, a, b, M, N, K, accumulate, bias);
}

void gemm_mixed_on(GemmBackend be, void* c, DType c_t, const native::Operand& a, const native::Operand& b, int M, int N,
                   int K, bool accumulate, const float* bias) {
    SHARDLM_CHECK(be != GemmBackend::Auto, "gemm_mixed_on: a library, not auto");
    mixed_on(be, context(), c, c_t, a, b, M, N, K, accumulate, bias);
}

void gemm_bf16(void* c, DType c_t, const Bf16Matrix& a, const Bf16Matrix& b, int M, int N, int K, bool accumulate,
               const float* bias) {
    gemm_mixed(c, c_t, {a.data, DType::BF16, a.row_stride, a.col_stride}, {b.data, DType::BF16, b.row_stride, b.col_stride},
               M, N, K, accumulate, bias);
}

namespace {

void gemm_bf16_onednn(Bf16Context& ctx, void* c, DType c_t, const Bf16Matrix& a, const Bf16Matrix& b, int M, int N, int K,
                      bool accumulate, const float* bias) {
    const bool c16 = c_t == DType::BF16;
    Bf16Context::Key key{M, N, K, a.row_stride, a.col_stride, b.row_stride, b.col_stride, accumulate, c16, bias != nullptr,
                        omp_get_max_threads()};
    auto it = ctx.cache.find(key);
    if (it == ctx.cache.end()) {
        memory::desc ad({M, K}, memory::data_type::bf16, {a.row_stride, a.col_stride});
        memory::desc bd({K, N}, memory::data_type::bf16, {b.row_stride, b.col_stride});
        memory::desc cd({M, N}, c16 ? memory::data_type::bf16 : memory::data_type::f32, {N, 1});
        memory::desc biasd = bias ? memory::desc({1, N}, memory::data_type::f32, {N, 1}) : memory::desc();
        dnnl::primitive_attr attr;
        if (accumulate) {
            dnnl::post_ops po;
            po.append_sum(1.0f);
            attr.set_post_ops(po);
        }
        dnnl::matmul::primitive_desc pd(bias ? dnnl::matmul::desc(ad, bd, biasd, cd) : dnnl::matmul::desc(ad, bd, cd), attr,
                                        ctx.engine);
        it = ctx.cache.emplace(key, Bf16Context::Entry{ad, bd, cd, biasd, dnnl::matmul(pd), pd.impl_info_str()}).first;
    }
    const Bf16Context::Entry& e = it->second;
    note_onednn_impl(&e.impl);
    auto mem = [&](const memory::desc& d, const void* p) { return memory(d, ctx.engine, const_cast<void*>(p)); };
    std::unordered_map<int, memory> args = {
        {DNNL_ARG_SRC, mem(e.a, a.data)}, {DNNL_ARG_WEIGHTS, mem(e.b, b.data)}, {DNNL_ARG_DST, mem(e.c, c)}};
    if (bias) args.insert({DNNL_ARG_BIAS, mem(e.bias, bias)});
    e.prim.execute(ctx.stream, args);
    ctx.stream.wait();
}

}  // namespace

}  // namespace shardlm::kernels
