// kernels/matmul_bf16.cpp: bf16 x bf16 -> fp32 products on oneDNN's matmul primitive.
// oneDNN picks its AVX512_BF16 brgemm kernels where the CPU has them (DNNL_VERBOSE=1 shows which);
// the operands are rounded from fp32 here, in one streaming pass each, into scratch buffers that
// keep the source's row/column orientation, so that no transposed copy is ever made.
#include <immintrin.h>

#include <map>
#include <tuple>
#include <vector>

#include <dnnl.hpp>

#include "shardlm/kernels/matmul.h"
#include "shardlm/kernels/vec_math.h"

namespace shardlm::kernels {

void convert_f32_to_bf16(unsigned short* dst, const float* src, size_t n) {
    const long nv = long(n / 16);
#pragma omp parallel for schedule(static)
    for (long v = 0; v < nv; v++)
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + v * 16), f32x16_to_bf16(_mm512_loadu_ps(src + v * 16)));
    if (size_t tail = n - size_t(nv) * 16) {
        __mmask16 m = tail_mask(int(tail));
        _mm256_mask_storeu_epi16(dst + nv * 16, m, f32x16_to_bf16(_mm512_maskz_loadu_ps(m, src + nv * 16)));
    }
}

namespace {

using dnnl::memory;

struct Bf16Context {
    dnnl::engine engine{dnnl::engine::kind::cpu, 0};
    dnnl::stream stream{engine};
    // (M, N, K, a strides, b strides, accumulate) -> primitive
    using Key = std::tuple<int, int, int, long, long, long, long, bool>;
    std::map<Key, dnnl::matmul> cache;
    std::vector<unsigned short> scratch[3];
};

Bf16Context& context() {
    static Bf16Context ctx;
    return ctx;
}

}  // namespace

const unsigned short* to_bf16_scratch(int slot, const float* src, size_t n) {
    std::vector<unsigned short>& buf = context().scratch[slot];
    if (buf.size() < n) buf.resize(n);
    convert_f32_to_bf16(buf.data(), src, n);
    return buf.data();
}

void gemm_bf16(float* c, const Bf16Matrix& a, const Bf16Matrix& b, int M, int N, int K, bool accumulate) {
    Bf16Context& ctx = context();
    Bf16Context::Key key{M, N, K, a.row_stride, a.col_stride, b.row_stride, b.col_stride, accumulate};
    memory::desc ad({M, K}, memory::data_type::bf16, {a.row_stride, a.col_stride});
    memory::desc bd({K, N}, memory::data_type::bf16, {b.row_stride, b.col_stride});
    memory::desc cd({M, N}, memory::data_type::f32, {N, 1});
    auto it = ctx.cache.find(key);
    if (it == ctx.cache.end()) {
        dnnl::primitive_attr attr;
        if (accumulate) {
            dnnl::post_ops po;
            po.append_sum(1.0f);
            attr.set_post_ops(po);
        }
        dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(ad, bd, cd), attr, ctx.engine);
        it = ctx.cache.emplace(key, dnnl::matmul(pd)).first;
    }
    auto mem = [&](const memory::desc& d, const void* p) { return memory(d, ctx.engine, const_cast<void*>(p)); };
    it->second.execute(ctx.stream, {{DNNL_ARG_SRC, mem(ad, a.data)}, {DNNL_ARG_WEIGHTS, mem(bd, b.data)},
                                    {DNNL_ARG_DST, mem(cd, c)}});
    ctx.stream.wait();
}

}  // namespace shardlm::kernels
