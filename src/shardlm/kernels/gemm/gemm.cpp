// kernels/gemm/gemm.cpp: the products of kernels/gemm/gemm.h on each library (OpenBLAS, oneDNN's fp32 matmul, the
// native kernels), balanced over the threads; --gemm auto's timing, choice and cache are in tuner.cpp.
#include "shardlm/kernels/gemm/gemm.h"
#include "shardlm/kernels/gemm/tuner.h"
#include "shardlm/kernels/gemm/tap.h"

#include <omp.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include <dnnl.hpp>

#include "shardlm/core/check.h"
#include "shardlm/core/dtype.h"
#include "shardlm/core/profile.h"
#include "shardlm/kernels/gemm/native.h"

namespace shardlm::kernels {

namespace {

thread_local GemmBackend t_last_library = GemmBackend::OpenBlas;

// ---- oneDNN's fp32 matmul, one thread ------------------------------------------------------------------

// The calling thread's OpenMP thread count set to 1 while it lives: oneDNN plans a primitive's work for
// the count current when it is made, and a primitive planned for two threads but run inside a parallel
// region (where oneDNN runs it on the calling thread alone) would do only the first thread's share.
struct OneThread {
    int saved = omp_get_max_threads();
    OneThread() { omp_set_num_threads(1); }
    ~OneThread() { omp_set_num_threads(saved); }
};

struct DnnlFp32 {
    dnnl::engine engine{dnnl::engine::kind::cpu, 0};
    dnnl::stream stream{engine};
    // (M, N, K, A not transposed, B not transposed, lda, ldb, alpha, beta); C is dense (ldc = N)
    using Key = std::tuple<int, int, int, bool, bool, long, long, float, float>;
    struct Entry {
        dnnl::memory::desc a, b, c;
        dnnl::matmul prim;
        std::string impl;  // oneDNN's name of the implementation it chose
    };
    std::map<Key, Entry> cache;
    std::vector<float> a, b, c;  // dense copies of strided operands
};

DnnlFp32& dnnl_fp32() {
    thread_local DnnlFp32 ctx;  // lanes run products at once: primitives and memory objects per thread
    return ctx;
}

// A rows x cols matrix copied from rows src_ld apart to rows dst_ld apart.
void copy_rows(float* dst, int dst_ld, const float* src, int src_ld, int rows, int cols) {
    for (int r = 0; r < rows; r++) std::memcpy(dst + size_t(r) * dst_ld, src + size_t(r) * src_ld, sizeof(float) * cols);
}

// buf grown to a dense rows x cols matrix; with src, src's rows (ld apart) copied into it.
float* dense(std::vector<float>& buf, int rows, int cols, const float* src = nullptr, int ld = 0) {
    if (buf.size() < size_t(rows) * cols) buf.resize(size_t(rows) * cols);
    if (src) copy_rows(buf.data(), cols, src, ld, rows, cols);
    return buf.data();
}

// oneDNN's attributes for C = alpha op(A) op(B) + beta C: alpha as an output scale, beta as a sum post-op
dnnl::primitive_attr scale_and_sum(float alpha, float beta) {
    dnnl::primitive_attr attr;
    if (alpha != 1.0f) attr.set_output_scales(0, {alpha});
    if (beta != 0.0f) {
        dnnl::post_ops po;
        po.append_sum(beta);
        attr.set_post_ops(po);
    }
    return attr;
}

// oneDNN's fp32 matmul for C = alpha op(A) op(B) + beta C with a dense C, op(A) (M x K) and op(B) (K x N) read
// through the strides of A and B as stored (lda, ldb floats a row): a transposed operand is read in place.
dnnl::matmul::primitive_desc fp32_matmul_pd(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int M, int N, int K, long lda, long ldb,
                                            float alpha, float beta, const dnnl::engine& engine) {
    using dnnl::memory;
    const long as0 = ta == CblasNoTrans ? lda : 1, as1 = ta == CblasNoTrans ? 1 : lda;
    const long bs0 = tb == CblasNoTrans ? ldb : 1, bs1 = tb == CblasNoTrans ? 1 : ldb;
    const memory::desc ad({M, K}, memory::data_type::f32, {as0, as1}), bd({K, N}, memory::data_type::f32, {bs0, bs1}),
        cd({M, N}, memory::data_type::f32, {N, 1});
    return dnnl::matmul::primitive_desc(dnnl::matmul::desc(ad, bd, cd), scale_and_sum(alpha, beta), engine);
}

// C = alpha op(A) op(B) + beta C on this thread alone. oneDNN 2.6's matmul gets dense operands only: with
// a leading dimension wider than the matrix (a column block of C or of B) its brgemm kernels corrupted
// the heap around their scratchpad now and then (a training run under SIGUSR1 dumps aborted in free()
// inside libdnnl: test Signals.FlightDumpsDuringOneDnnProductsLeaveTheHeapWhole), so such an operand
// is copied into (and C out of) a dense buffer of the thread's. The copies are part of what --gemm auto
// times.
void onednn_sgemm(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int M, int N, int K, float alpha, const float* A, int lda,
                  const float* B, int ldb, float beta, float* C, int ldc) {
    using dnnl::memory;
    OneThread one;
    DnnlFp32& ctx = dnnl_fp32();
    // as stored: A is M x K (K x M transposed), B is K x N (N x K transposed)
    const int a_rows = ta == CblasNoTrans ? M : K, a_cols = ta == CblasNoTrans ? K : M;
    const int b_rows = tb == CblasNoTrans ? K : N, b_cols = tb == CblasNoTrans ? N : K;
    if (lda != a_cols) A = dense(ctx.a, a_rows, a_cols, A, lda), lda = a_cols;
    if (ldb != b_cols) B = dense(ctx.b, b_rows, b_cols, B, ldb), ldb = b_cols;
    float* out = ldc == N ? C : dense(ctx.c, M, N, beta != 0.0f ? C : nullptr, ldc);
    const DnnlFp32::Key key{M, N, K, ta == CblasNoTrans, tb == CblasNoTrans, lda, ldb, alpha, beta};
    auto it = ctx.cache.find(key);
    if (it == ctx.cache.end()) {
        const auto pd = fp32_matmul_pd(ta, tb, M, N, K, lda, ldb, alpha, beta, ctx.engine);
        it = ctx.cache.emplace(key, DnnlFp32::Entry{pd.src_desc(), pd.weights_desc(), pd.dst_desc(), dnnl::matmul(pd),
                                                    pd.impl_info_str()})
                 .first;
    }
    const DnnlFp32::Entry& e = it->second;
    note_onednn_impl(&e.impl);
    auto mem = [&](const memory::desc& d, const void* p) { return memory(d, ctx.engine, const_cast<void*>(p)); };
    e.prim.execute(ctx.stream, {{DNNL_ARG_SRC, mem(e.a, A)}, {DNNL_ARG_WEIGHTS, mem(e.b, B)}, {DNNL_ARG_DST, mem(e.c, out)}});
    ctx.stream.wait();
    if (out != C) copy_rows(C, ldc, out, N, M, N);
}

// oneDNN's name for the implementation its fp32 matmul picks for C = alpha op(A) op(B) + beta C, with the dense
// operands onednn_sgemm gives it (an operand whose rows are wider than the matrix is copied dense first)
std::string onednn_sgemm_impl(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int M, int N, int K, float alpha, float beta) {
    OneThread one;
    const long lda = ta == CblasNoTrans ? K : M, ldb = tb == CblasNoTrans ? N : K;
    return fp32_matmul_pd(ta, tb, M, N, K, lda, ldb, alpha, beta, dnnl_fp32().engine).impl_info_str();
}

// op(X) of a row-major X (ld floats a row) for the native kernels
native::Operand operand(CBLAS_TRANSPOSE t, const float* X, int ld) {
    return t == CblasNoTrans ? native::Operand{X, DType::F32, ld, 1} : native::Operand{X, DType::F32, 1, ld};
}

void one_call(GemmBackend b, CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int M, int N, int K, float alpha, const float* A,
              int lda, const float* B, int ldb, float beta, float* C, int ldc) {
    if (b == GemmBackend::Native)
        native::sgemm(M, N, K, alpha, operand(ta, A, lda), operand(tb, B, ldb), beta, C, ldc);
    else if (b == GemmBackend::OneDnn)
        onednn_sgemm(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    else
        cblas_sgemm(CblasRowMajor, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

// sgemm_balanced_on's column blocks (OpenBLAS, oneDNN): whole AVX-512 microkernel panels,
// gemm_blocks_per_cpu a CPU of the machine
int balanced_width(int N) {
    constexpr int kAlign = 64;
    const int per = gemm_blocks_per_cpu();
    static const int procs = int(std::max(1u, std::thread::hardware_concurrency()));
    return std::max(kAlign, (N + per * procs - 1) / (per * procs) + kAlign - 1) / kAlign * kAlign;
}

}  // namespace

bool gemm_has_native_bf16() { return native::has_bf16(); }

GemmBackend gemm_last_library() { return t_last_library; }
void note_gemm_library(GemmBackend b) { t_last_library = b; }

void sgemm_balanced_on(GemmBackend be, CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int M, int N, int K, float alpha,
                       const float* A, int lda, const float* B, int ldb, float beta, float* C, int ldc, int cut_n) {
    if (be == GemmBackend::Native) {  // its own cut (native.h)
        one_call(be, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
        return;
    }
    // The cut depends on N and the machine only, never on the threads running or the CPUs this
    // process may use (mpirun binds a rank to one): OpenBLAS's AVX2 kernels round a column block
    // differently from the same columns inside a wider call, so a cut that followed the thread count
    // would make one thread's product differ from two threads', and a rank's from one process's.
    const int width = balanced_width(cut_n > 0 ? cut_n : N);
    const int blocks = (N + width - 1) / width;
    if (blocks < 2) {
        // too narrow to cut: OpenBLAS splits rows over its threads (never K); oneDNN runs it on one thread
        one_call(be, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
        return;
    }
    const bool parallel = !omp_in_parallel() && omp_get_max_threads() > 1;
#pragma omp parallel for schedule(dynamic, 1) if (parallel)
    for (int b = 0; b < blocks; b++) {
        const int j0 = b * width, n = std::min(width, N - j0);
        // columns j0.. of op(B): B's columns when not transposed, its rows when transposed
        const float* Bj = tb == CblasNoTrans ? B + j0 : B + size_t(j0) * size_t(ldb);
        one_call(be, ta, tb, M, n, K, alpha, A, lda, Bj, ldb, beta, C + j0, ldc);
    }
}

void sgemm_balanced(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int M, int N, int K, float alpha, const float* A, int lda,
                    const float* B, int ldb, float beta, float* C, int ldc) {
    profile::Scope prof_(profile::shape("fp32", ta == CblasNoTrans ? 'N' : 'T', tb == CblasNoTrans ? 'N' : 'T', M, N, K),
                         2.0 * M * N * K, 4.0 * (double(M) * K + double(K) * N + double(M) * N));
    tap_product({ProductPath::Balanced, M, N, K, operand(ta, A, lda), operand(tb, B, ldb), alpha, beta, C, DType::F32, ldc});
    GemmBackend be = gemm_backend();
    if (be == GemmBackend::Auto) {
        // Every block is one single-threaded product on either library, whatever the threads: the key
        // leaves them out, so a run with 1 or 2 threads, lanes or not, runs a shape on the same library
        // (and gets the same bits). A product of at most 64 columns is not cut (OpenBLAS and the native
        // kernels split its rows over the threads, oneDNN runs it on one): its bits do not depend on the
        // threads either, and it is timed like the others. (It went to OpenBLAS untimed before: on a Zen 3
        // a small model's products of 64 columns with K = 64 ran 1.45-1.9x faster on the native kernels.)
        const std::string key = gemm_key(GemmKind::Fp32, ta == CblasNoTrans ? 'N' : 'T', tb == CblasNoTrans ? 'N' : 'T',
                                         M, N, K, lda, ldb, ldc, 0, beta != 0.0f ? "acc" : "");
        be = gemm_choice(key, [&](GemmTiming* t) {
            // on the real operands (their first rows, gemm_timing_rows), into C's first rows when the
            // product overwrites C (beta 0: the call after the timing writes them again), else into a
            // scratch C: of a wide product's first column blocks (gemm_timing_cols), cut as the whole
            // product is, at least two (both threads busy)
            const int rows = std::min(M, gemm_timing_rows()), width = balanced_width(N);
            const bool overwrites = beta == 0.0f;
            const int cols = overwrites ? N : gemm_timing_cols(rows, N, width, 2 * width);
            const int ld = cols == N ? ldc : cols;
            std::vector<float> scratch(overwrites ? 0 : size_t(rows) * size_t(ld), 0.0f);
            float* out = overwrites ? C : scratch.data();
            const auto on = [&](GemmBackend b) {
                return [&, b] { sgemm_balanced_on(b, ta, tb, rows, cols, K, alpha, A, lda, B, ldb, beta, out, ld, N); };
            };
            // each run from memory, as the step meets its operands (the weight last read a layer ago)
            const auto cold = [&] {
                flush_from_caches(operand(ta, A, lda), rows, K);
                flush_from_caches(operand(tb, B, ldb), K, cols);
                flush_from_caches(operand(CblasNoTrans, out, ld), rows, cols);
            };
            const bool onednn = gemm_onednn_candidate();
            gemm_time_each(on(GemmBackend::OpenBlas), onednn ? on(GemmBackend::OneDnn) : std::function<void()>(),
                           on(GemmBackend::Native), t, cold);
            // the implementation oneDNN picks for this product's column blocks (the threads that ran them made
            // their own primitives: ask for the first block's shape on this thread)
            if (onednn) t->onednn_impl = onednn_sgemm_impl(ta, tb, rows, std::min(width, N), K, alpha, beta);
        });
    }
    note_gemm_library(be);
    sgemm_balanced_on(be, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

void sgemm_tile(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int M, int N, int K, float alpha, const float* A, int lda,
                const float* B, int ldb, float beta, float* C, int ldc) {
    tap_product({ProductPath::Tile, M, N, K, operand(ta, A, lda), operand(tb, B, ldb), alpha, beta, C, DType::F32, ldc});
    const GemmBackend b = gemm_backend();
    one_call(b == GemmBackend::OneDnn || b == GemmBackend::Native ? b : GemmBackend::OpenBlas, ta, tb, M, N, K, alpha, A,
             lda, B, ldb, beta, C, ldc);
}

void sgemm_tile_on(GemmBackend b, CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int M, int N, int K, float alpha, const float* A,
                   int lda, const float* B, int ldb, float beta, float* C, int ldc) {
    SHARDLM_CHECK(b != GemmBackend::Auto, "sgemm_tile_on: a library, not auto");
    one_call(b, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

}  // namespace shardlm::kernels
