// kernels/gemm/tuner.cpp: --gemm auto's side of kernels/gemm/gemm.h: timing a shape on each library, the choice,
// and the cache file that every process on the machine agrees through (docs/DESIGN.md, kernels/: "GEMM
// libraries, chosen by measurement"). The products themselves are in gemm.cpp.
#include "shardlm/kernels/gemm/tuner.h"

#include <cblas.h>
#include <emmintrin.h>
#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <set>
#include <stdexcept>
#include <thread>
#include <unordered_map>

#include <oneapi/dnnl/dnnl.h>
#include <nlohmann/json.hpp>

#include "shardlm/core/check.h"
#include "shardlm/core/dtype.h"
#include "shardlm/core/timer.h"
#include "shardlm/io/atomic_file.h"
#include "shardlm/kernels/gemm/backend.h"
#include "shardlm/kernels/gemm/native.h"
#include "shardlm/platform/cpu.h"

namespace shardlm::kernels {

namespace {

// Part of every auto key: a change to the native kernels that moves their speed bumps it, so that the
// cache times them again
constexpr int kNativeVersion = 6;

// ---- auto's table and its cache file ------------------------------------------------------------------

struct Choice {
    GemmBackend backend = GemmBackend::OpenBlas;
    GemmTiming timing;
    std::string isa;  // what the chosen library ran it on
};

// The instruction set (and kernels) `b` runs the shape of `key` on, as the cache names it.
std::string choice_isa(GemmBackend b, const std::string& key, const GemmTiming& t) {
    const bool bf16 = key.rfind("bf16 ", 0) == 0;
    switch (b) {
        case GemmBackend::OneDnn: return t.onednn_impl.empty() ? cat("oneDNN ", platform::onednn_isa()) : t.onednn_impl;
        case GemmBackend::Native:
            if (bf16) return native::has_bf16() ? "native avx512_bf16" : "openblas (widened to fp32)";
#if defined(__AVX512F__)
            return "native avx512f";
#else
            return "native avx2";
#endif
        default: {
            const char* core = openblas_get_corename();
            return cat("openblas ", core ? core : "?", bf16 ? " (widened to fp32)" : "");
        }
    }
}

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
    const platform::CpuId& id = platform::cpu_id();
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
            c.isa = v.value("isa", std::string());
            c.timing.onednn_impl = v.value("onednn_impl", std::string());
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
                  {"native_ms", c.timing.native * 1e3},
                  {"onednn_impl", c.timing.onednn_impl},
                  {"isa", c.isa}};
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

void warn_once(Table& t, const std::string& what, const std::string& text) {
    if (t.warned.insert(what).second) std::fprintf(stderr, "shardlm: warning: %s\n", text.c_str());
}

thread_local const std::string* t_onednn_impl = nullptr;

}  // namespace

const std::string& onednn_last_impl() {
    static const std::string none;
    return t_onednn_impl ? *t_onednn_impl : none;
}
void note_onednn_impl(const std::string* impl) { t_onednn_impl = impl; }

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

std::string gemm_cache_path() { return cat(cache_dir(), "/gemm-", cpu_slug(), ".json"); }

namespace {
thread_local bool t_ragged = false;
int size_class(int n) {
    int c = 16;
    while (c < n && c < (1 << 30)) c *= 2;
    return c;
}
}  // namespace

RaggedGemmScope::RaggedGemmScope() : outer_(t_ragged) { t_ragged = true; }
RaggedGemmScope::~RaggedGemmScope() { t_ragged = outer_; }
bool gemm_onednn_candidate() { return !t_ragged; }

std::string gemm_key(GemmKind kind, char ta, char tb, int M, int N, int K, long lda, long ldb, long ldc, int threads,
                     const char* extra) {
    if (t_ragged) M = size_class(M), K = size_class(K);
    // what else decides the speeds: OpenBLAS's kernels, oneDNN's version, and the column blocks (their
    // count follows the CPUs and SHARDLM_GEMM_BLOCKS)
    static const std::string libs = [] {
        const char* c = openblas_get_corename();
        const dnnl_version_t* v = dnnl_version();
        return cat("openblas:", c ? c : "?", " onednn:", v->major, ".", v->minor, ".", v->patch, "/", platform::onednn_isa(), " native:",
                   kNativeVersion, " blocks:", gemm_blocks_per_cpu(), "x",
                   std::max(1u, std::thread::hardware_concurrency()));
    }();
    char buf[160];
    std::snprintf(buf, sizeof(buf), "%s %c%c %dx%dx%d ld %ld,%ld,%ld", kind == GemmKind::Fp32 ? "fp32" : "bf16", ta, tb, M,
                  N, K, lda, ldb, ldc);
    std::string key = buf;
    if (threads > 0) key += cat(" t", threads);
    if (*extra) key += cat(" ", extra);
    if (t_ragged) key += " ragged (oneDNN not a candidate)";
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
    c.isa = choice_isa(c.backend, key, c.timing);
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

}  // namespace shardlm::kernels
