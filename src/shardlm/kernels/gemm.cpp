#include "shardlm/kernels/gemm.h"

#include <emmintrin.h>
#include <fcntl.h>
#include <omp.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <set>
#include <thread>
#include <tuple>
#include <unordered_map>
#include <vector>

#include <dnnl.hpp>
#include <oneapi/dnnl/dnnl.h>
#include <nlohmann/json.hpp>

#include "shardlm/core/check.h"
#include "shardlm/core/timer.h"
#include "shardlm/io/atomic_file.h"
#include "shardlm/kernels/gemm_native.h"
#include "shardlm/kernels/machine.h"

namespace shardlm::kernels {

namespace {

std::atomic<GemmBackend> g_backend{GemmBackend::OpenBlas};

// Part of every auto key: a change to the native kernels that moves their speed bumps it, so that the
// cache times them again
constexpr int kNativeVersion = 2;

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
    // (M, N, K, A's strides, B's strides, alpha, beta); C is dense (ldc = N)
    using Key = std::tuple<int, int, int, long, long, long, long, float, float>;
    struct Entry {
        dnnl::memory::desc a, b, c;
        dnnl::matmul prim;
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
    // op(A)(m, k) and op(B)(k, n) through their strides: a transposed operand is read in place
    const long as0 = ta == CblasNoTrans ? lda : 1, as1 = ta == CblasNoTrans ? 1 : lda;
    const long bs0 = tb == CblasNoTrans ? ldb : 1, bs1 = tb == CblasNoTrans ? 1 : ldb;
    const DnnlFp32::Key key{M, N, K, as0, as1, bs0, bs1, alpha, beta};
    auto it = ctx.cache.find(key);
    if (it == ctx.cache.end()) {
        memory::desc ad({M, K}, memory::data_type::f32, {as0, as1});
        memory::desc bd({K, N}, memory::data_type::f32, {bs0, bs1});
        memory::desc cd({M, N}, memory::data_type::f32, {N, 1});
        dnnl::primitive_attr attr;
        if (alpha != 1.0f) attr.set_output_scales(0, {alpha});
        if (beta != 0.0f) {
            dnnl::post_ops po;
            po.append_sum(beta);
            attr.set_post_ops(po);
        }
        dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(ad, bd, cd), attr, ctx.engine);
        it = ctx.cache.emplace(key, DnnlFp32::Entry{ad, bd, cd, dnnl::matmul(pd)}).first;
    }
    const DnnlFp32::Entry& e = it->second;
    auto mem = [&](const memory::desc& d, const void* p) { return memory(d, ctx.engine, const_cast<void*>(p)); };
    e.prim.execute(ctx.stream, {{DNNL_ARG_SRC, mem(e.a, A)}, {DNNL_ARG_WEIGHTS, mem(e.b, B)}, {DNNL_ARG_DST, mem(e.c, out)}});
    ctx.stream.wait();
    if (out != C) copy_rows(C, ldc, out, N, M, N);
}

// op(X) of a row-major X (ld floats a row) for the native kernels
native::Operand operand(CBLAS_TRANSPOSE t, const float* X, int ld) {
    return t == CblasNoTrans ? native::Operand{X, DType::F32, ld, 1} : native::Operand{X, DType::F32, 1, ld};
}

void one_call(GemmBackend b, CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int M, int N, int K, float alpha, const float* A,
              int lda, const float* B, int ldb, float beta, float* C, int ldc) {
    if (b == GemmBackend::Native && native::has_fp32())
        native::sgemm(M, N, K, alpha, operand(ta, A, lda), operand(tb, B, ldb), beta, C, ldc);
    else if (b == GemmBackend::OneDnn)
        onednn_sgemm(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    else
        cblas_sgemm(CblasRowMajor, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

// ---- auto's table and its cache file ------------------------------------------------------------------

struct Choice {
    GemmBackend backend = GemmBackend::OpenBlas;
    GemmTiming timing;
};

struct Table {
    std::mutex mu;
    std::unordered_map<std::string, Choice> known;  // this process's choices (and what it read)
    std::set<std::string> used;                     // the keys this process ran
    int timed = 0;                                  // shapes this process timed itself
    std::set<std::string> warned;                   // each warning once a process
};
Table& table() {
    static Table t;
    return t;
}

std::string cpu_slug() {
    const CpuId& id = cpu_id();
    std::string slug;
    for (char c : id.name) {
        if (std::isalnum(static_cast<unsigned char>(c)))
            slug += char(std::tolower(static_cast<unsigned char>(c)));
        else if (!slug.empty() && slug.back() != '-')
            slug += '-';
    }
    while (!slug.empty() && slug.back() == '-') slug.pop_back();
    return cat(slug, "-f", id.family.empty() ? "0" : id.family, "m", id.model.empty() ? "0" : id.model);
}

std::string cache_dir() {
    if (const char* d = std::getenv("SHARDLM_CACHE_DIR"); d && *d) return d;
    if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x) return cat(x, "/shardlm");
    if (const char* h = std::getenv("HOME"); h && *h) return cat(h, "/.cache/shardlm");
    return cat("/tmp/shardlm-cache-", ::getuid());
}

std::string backend_text(GemmBackend b) { return setting_text(b); }

// The cache's shapes (empty if there is none yet; a file that is not ours, or that cannot be read, is
// named in *problem).
std::map<std::string, Choice> read_cache(const std::string& path, std::string* problem) {
    std::map<std::string, Choice> out;
    std::error_code ec;
    if (!std::filesystem::exists(path, ec)) return out;
    std::ifstream f(path);
    if (!f) {
        *problem = "cannot be read";
        return out;
    }
    try {
        const nlohmann::json j = nlohmann::json::parse(f);
        for (const auto& [key, v] : j.at("shapes").items()) {
            Choice c;
            if (!setting_parse(v.at("choice").get<std::string>(), &c.backend) || c.backend == GemmBackend::Auto)
                throw std::runtime_error(cat("shape '", key, "': choice must be openblas, onednn or native"));
            c.timing.openblas = v.value("openblas_ms", 0.0) / 1e3;
            c.timing.onednn = v.value("onednn_ms", 0.0) / 1e3;
            c.timing.native = v.value("native_ms", 0.0) / 1e3;
            out[key] = c;
        }
    } catch (const std::exception& e) {
        *problem = e.what();
        out.clear();
    }
    return out;
}

void write_cache(const std::string& path, const std::map<std::string, Choice>& shapes) {
    nlohmann::json j;
    j["what"] = "shardlm's GEMM library per shape (--gemm auto): the fastest of OpenBLAS, oneDNN and shardlm's native "
                "kernels, timed once on this CPU model; delete the file to time again";
    j["cpu"] = cpu_slug();
    nlohmann::json s = nlohmann::json::object();
    for (const auto& [key, c] : shapes)
        s[key] = {{"choice", backend_text(c.backend)},
                  {"openblas_ms", c.timing.openblas * 1e3},
                  {"onednn_ms", c.timing.onednn * 1e3},
                  {"native_ms", c.timing.native * 1e3}};
    j["shapes"] = s;
    io::write_file_atomic(path, j.dump(1) + "\n");
}

// An exclusive lock on the cache directory's lock file while it lives (no lock if it cannot be made).
struct CacheLock {
    int fd = -1;
    explicit CacheLock(const std::string& dir) {
        std::error_code ec;
        std::filesystem::create_directories(dir, ec);
        fd = ::open((dir + "/gemm.lock").c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
        if (fd < 0) return;
        int rc;
        while ((rc = ::flock(fd, LOCK_EX)) != 0 && errno == EINTR) {
        }
        if (rc != 0) {  // no lock (a file system without flock): as if there were no cache
            ::close(fd);
            fd = -1;
        }
    }
    ~CacheLock() {
        if (fd >= 0) ::close(fd);  // closing releases the lock
    }
};

// Column blocks per processor: 2 by default (bench/RESULTS.md); SHARDLM_GEMM_BLOCKS overrides it for measuring
int blocks_per_cpu() {
    static const int per = [] {
        const char* e = std::getenv("SHARDLM_GEMM_BLOCKS");
        const int v = e ? std::atoi(e) : 0;
        return v >= 1 && v <= 64 ? v : 2;
    }();
    return per;
}

// sgemm_balanced_on's column blocks (OpenBLAS, oneDNN): whole AVX-512 microkernel panels, blocks_per_cpu
// a CPU of the machine
int balanced_width(int N) {
    constexpr int kAlign = 64;
    const int per = blocks_per_cpu();
    static const int procs = int(std::max(1u, std::thread::hardware_concurrency()));
    return std::max(kAlign, (N + per * procs - 1) / (per * procs) + kAlign - 1) / kAlign * kAlign;
}

void warn_once(Table& t, const std::string& what, const std::string& text) {
    if (t.warned.insert(what).second) std::fprintf(stderr, "shardlm: warning: %s\n", text.c_str());
}

}  // namespace

double gemm_time_best(const std::function<void()>& run) {
    run();
    double best = 1e30, spent = 0;
    for (int r = 0; r < 3 && (r == 0 || spent < 0.02); r++) {
        const double t0 = now_s();
        run();
        const double t = now_s() - t0;
        best = std::min(best, t);
        spent += t;
    }
    return best;
}

int gemm_timing_rows() { return 1024; }

size_t gemm_timing_floats() { return size_t(4) << 20; }  // 16 MiB of scratch C

int gemm_timing_cols(int rows, int N, int step, int least) {
    if (size_t(rows) * size_t(N) <= gemm_timing_floats()) return N;
    const size_t fit = gemm_timing_floats() / size_t(std::max(rows, 1)) / size_t(step) * size_t(step);
    return int(std::min(size_t(N), std::max(size_t(least), fit)));
}

void gemm_time_each(const std::function<void()>& openblas, const std::function<void()>& onednn,
                    const std::function<void()>& native, GemmTiming* t, const std::function<void()>& cold) {
    const std::function<void()>* runs[3] = {&openblas, &onednn, &native};
    double* best[3] = {&t->openblas, &t->onednn, &t->native};
    for (int i = 0; i < 3; i++) {
        *best[i] = 0;
        if (*runs[i]) (*runs[i])();  // primitives made, pages touched
    }
    double spent = 0;
    for (int r = 0; r < 4 && (r < 2 || spent < 0.04); r++)
        for (int i = 0; i < 3; i++) {
            if (!*runs[i]) continue;
            if (cold) cold();
            const double t0 = now_s();
            (*runs[i])();
            const double dt = now_s() - t0;
            *best[i] = *best[i] == 0 ? dt : std::min(*best[i], dt);
            spent += dt;
        }
}

void flush_from_caches(const void* p, size_t bytes) {
    const uintptr_t first = reinterpret_cast<uintptr_t>(p) / 64 * 64, end = reinterpret_cast<uintptr_t>(p) + bytes;
    for (uintptr_t a = first; a < end; a += 64) _mm_clflush(reinterpret_cast<const void*>(a));
    _mm_mfence();
}

size_t operand_span(long rows, long cols, long rs, long cs, size_t elem) {
    return rows <= 0 || cols <= 0 ? 0 : size_t((rows - 1) * rs + (cols - 1) * cs + 1) * elem;
}

void flush_from_caches(const native::Operand& x, long rows, long cols) {
    flush_from_caches(x.data, operand_span(rows, cols, x.rs, x.cs, dtype_bytes(x.t)));
}

GemmBackend gemm_choose(const GemmTiming& t) {
    GemmBackend first = t.native > 0 ? GemmBackend::Native : GemmBackend::OpenBlas;
    double first_s = t.native > 0 ? t.native : t.openblas, best_s = first_s;
    GemmBackend best = first;
    for (auto [b, s] : {std::pair{GemmBackend::OpenBlas, t.openblas}, std::pair{GemmBackend::OneDnn, t.onednn},
                        std::pair{GemmBackend::Native, t.native}})
        if (s > 0 && s < best_s) best = b, best_s = s;
    // another library only when clearly faster: a tie keeps the first (a short timing on a shared machine is noisy)
    return best_s < 0.97 * first_s ? best : first;
}

bool gemm_has_native_fp32() { return native::has_fp32(); }
bool gemm_has_native_bf16() { return native::has_bf16(); }

void set_gemm_backend(GemmBackend b) { g_backend.store(b); }
GemmBackend gemm_backend() { return g_backend.load(); }

std::string gemm_cache_path() { return cat(cache_dir(), "/gemm-", cpu_slug(), ".json"); }

std::string gemm_key(GemmKind kind, char ta, char tb, int M, int N, int K, long lda, long ldb, long ldc, int threads,
                     const char* extra) {
    // what else decides the speeds: OpenBLAS's kernels, oneDNN's version, and the column blocks (their
    // count follows the CPUs and SHARDLM_GEMM_BLOCKS)
    static const std::string libs = [] {
        const char* c = openblas_get_corename();
        const dnnl_version_t* v = dnnl_version();
        return cat("openblas:", c ? c : "?", " onednn:", v->major, ".", v->minor, ".", v->patch, " native:",
                   native::has_fp32() ? kNativeVersion : 0, " blocks:", blocks_per_cpu(), "x",
                   std::max(1u, std::thread::hardware_concurrency()));
    }();
    char buf[160];
    std::snprintf(buf, sizeof(buf), "%s %c%c %dx%dx%d ld %ld,%ld,%ld", kind == GemmKind::Fp32 ? "fp32" : "bf16", ta, tb, M,
                  N, K, lda, ldb, ldc);
    std::string key = buf;
    if (threads > 0) key += cat(" t", threads);
    if (*extra) key += cat(" ", extra);
    return key + " " + libs;
}

GemmBackend gemm_choice(const std::string& key, const std::function<void(GemmTiming*)>& time) {
    Table& t = table();
    std::lock_guard<std::mutex> guard(t.mu);
    t.used.insert(key);
    if (auto it = t.known.find(key); it != t.known.end()) return it->second.backend;
    // A new shape for this process: the cache (another process may have timed it), else time it now.
    const std::string dir = cache_dir(), path = gemm_cache_path();
    CacheLock lock(dir);
    if (lock.fd < 0) {
        // No cache to agree through: timing here could choose differently from the job's other ranks or
        // from a resumed run, so keep OpenBLAS (the same choice everywhere), and say so once.
        warn_once(t, "dir", cat("cannot lock the GEMM cache in ", dir, ": --gemm auto runs every product on OpenBLAS",
                                " -- fix: a writable SHARDLM_CACHE_DIR on a local file system"));
        t.known[key] = Choice{};
        return GemmBackend::OpenBlas;
    }
    std::string problem;
    std::map<std::string, Choice> shapes = read_cache(path, &problem);
    if (!problem.empty())
        warn_once(t, "read", cat(path, ": ", problem, "; it is replaced by new timings (--gemm auto)"));
    for (const auto& [k, c] : shapes) t.known.emplace(k, c);
    if (auto it = t.known.find(key); it != t.known.end()) return it->second.backend;
    Choice c;
    time(&c.timing);
    c.backend = gemm_choose(c.timing);
    t.timed++;
    shapes[key] = c;
    try {
        write_cache(path, shapes);
        t.known[key] = c;
    } catch (const std::exception& e) {
        // not recorded: the next process could time it differently, so this one keeps OpenBLAS too
        warn_once(t, "write", cat("cannot write the GEMM choices to ", path, " (", e.what(),
                                  "): --gemm auto runs the shapes it cannot record on OpenBLAS -- fix: a writable ",
                                  "SHARDLM_CACHE_DIR"));
        t.known[key] = Choice{};
    }
    return t.known[key].backend;
}

std::string gemm_summary() {
    const GemmBackend b = gemm_backend();
    if (b != GemmBackend::Auto) return backend_text(b);
    Table& t = table();
    std::lock_guard<std::mutex> guard(t.mu);
    int n[4] = {0, 0, 0, 0};
    for (const std::string& k : t.used) n[int(t.known[k].backend)]++;
    return cat("auto: ", t.used.size(), t.used.size() == 1 ? " shape, " : " shapes, ", n[int(GemmBackend::OpenBlas)],
               " on OpenBLAS, ", n[int(GemmBackend::OneDnn)], " on oneDNN, ", n[int(GemmBackend::Native)], " native (",
               t.timed, " timed now; ", gemm_cache_path(), ")");
}

std::string gemm_cache_report() {
    const std::string path = gemm_cache_path();
    if (!std::filesystem::exists(path)) return cat(path, ": none yet (a run with --gemm auto times each new shape once)");
    std::string problem;
    const std::map<std::string, Choice> shapes = read_cache(path, &problem);
    if (!problem.empty()) return cat(path, ": unreadable (", problem, "); the next run replaces it");
    int n[4] = {0, 0, 0, 0};
    for (const auto& [k, c] : shapes) n[int(c.backend)]++;
    return cat(path, ": ", shapes.size(), " shapes timed on this CPU model, ", n[int(GemmBackend::OpenBlas)],
               " on OpenBLAS, ", n[int(GemmBackend::OneDnn)], " on oneDNN, ", n[int(GemmBackend::Native)], " native");
}

void gemm_forget_choices() {
    Table& t = table();
    std::lock_guard<std::mutex> guard(t.mu);
    t.known.clear();
    t.used.clear();
    t.timed = 0;
}

void sgemm_balanced_on(GemmBackend be, CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int M, int N, int K, float alpha,
                       const float* A, int lda, const float* B, int ldb, float beta, float* C, int ldc, int cut_n) {
    if (be == GemmBackend::Native && native::has_fp32()) {  // its own cut (gemm_native.h)
        one_call(be, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
        return;
    }
    if (be == GemmBackend::Native) be = GemmBackend::OpenBlas;  // a build without the native kernels
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
    GemmBackend be = gemm_backend();
    if (be == GemmBackend::Auto && N <= 64) {
        be = GemmBackend::OpenBlas;  // too narrow to cut into blocks: OpenBLAS splits its rows over the threads
    } else if (be == GemmBackend::Auto) {
        // Every block is one single-threaded product on either library, whatever the threads: the key
        // leaves them out, so a run with 1 or 2 threads, lanes or not, runs a shape on the same library
        // (and gets the same bits)
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
            gemm_time_each(on(GemmBackend::OpenBlas), on(GemmBackend::OneDnn),
                           native::has_fp32() ? on(GemmBackend::Native) : std::function<void()>(), t, cold);
        });
    }
    sgemm_balanced_on(be, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

void sgemm_tile(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int M, int N, int K, float alpha, const float* A, int lda,
                const float* B, int ldb, float beta, float* C, int ldc) {
    const GemmBackend b = gemm_backend();
    one_call(b == GemmBackend::OneDnn || b == GemmBackend::Native ? b : GemmBackend::OpenBlas, ta, tb, M, N, K, alpha, A,
             lda, B, ldb, beta, C, ldc);
}

}  // namespace shardlm::kernels
