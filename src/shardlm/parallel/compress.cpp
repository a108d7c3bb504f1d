// parallel/compress.cpp: the gradient compressors (see compress.h for the message layouts).
// Randomness comes from our own splitmix64 streams (not <random>'s distributions, whose draws may
// differ between standard libraries), so a message's bytes depend on (spec, x, n, seed) alone.
#include "shardlm/parallel/compress.h"

#include <algorithm>
#include <bit>
#include <charconv>
#include <climits>
#include <cmath>
#include <cstring>
#include <numeric>

#include "shardlm/core/check.h"

namespace shardlm::parallel {

namespace {

constexpr const char* kForms =
    "none, topk:F or randk:F (0 < F <= 1), qsgd:S (2 <= S <= 256) or qsgd:S:B (bucket of B >= 1 elements), "
    "sign, sign:vote, powersgd:R (R >= 1)";

[[noreturn]] void bad_text(const std::string& text, const std::string& why) {
    fail("--compress '", text, "': ", why, "\n---> HINT: valid forms are ", kForms);
}

// the whole of t as a number (from_chars: no leading '+' or spaces, locale-independent)
template <typename T>
bool parse_number(const std::string& t, T& v) {
    auto [p, ec] = std::from_chars(t.data(), t.data() + t.size(), v);
    return !t.empty() && ec == std::errc() && p == t.data() + t.size();
}

// splitmix64 (Steele et al. 2014) as a counter-based stream; its outputs pass BigCrush. The salts keep
// qsgd's, randk's and PowerSGD's streams apart when a caller passes them the same seed.
constexpr uint64_t kQsgdSalt = 0x51534744ull, kRandkSalt = 0x52414e444bull, kPowerSalt = 0x504f574552ull;
struct SplitMix64 {
    uint64_t s;
    uint64_t next() {
        uint64_t z = (s += 0x9e3779b97f4a7c15ull);
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
        return z ^ (z >> 31);
    }
    double uniform() { return double(next() >> 11) * 0x1.0p-53; }  // [0, 1), 53 random bits
    // [0, m) by Lemire's multiply-shift, without rejection: the bias is below m / 2^64
    uint64_t below(uint64_t m) { return uint64_t((static_cast<unsigned __int128>(next()) * m) >> 64); }
    // standard normal by Box-Muller (u1 in (0, 1] so the log is finite)
    double normal() {
        const double u1 = 1.0 - uniform(), u2 = uniform();
        return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2);
    }
};

// A little-endian bit stream: each value's b bits (b <= 24) follow the previous value's, LSB first.
struct BitWriter {
    unsigned char* p;
    uint64_t acc = 0;
    int fill = 0;
    void put(uint32_t v, int b) {
        acc |= uint64_t(v) << fill;
        for (fill += b; fill >= 8; fill -= 8, acc >>= 8) *p++ = static_cast<unsigned char>(acc);
    }
    void flush() { if (fill > 0) *p++ = static_cast<unsigned char>(acc); }
};
struct BitReader {
    const unsigned char* p;
    uint64_t acc = 0;
    int fill = 0;
    uint32_t get(int b) {  // reads a byte only when the value needs it: never past ceil(bits / 8)
        for (; fill < b; fill += 8) acc |= uint64_t(*p++) << fill;
        const uint32_t v = uint32_t(acc & ((1u << b) - 1));
        acc >>= b;
        fill -= b;
        return v;
    }
};

// fp32 at any alignment
float load_f32(const unsigned char* p) { float v; std::memcpy(&v, p, 4); return v; }
void store_f32(unsigned char* p, float v) { std::memcpy(p, &v, 4); }

// qsgd: bits per element, 1 (sign) + ceil(log2 S) (the level index l in [0, S-1]); ceil(log2 S) = bit_width(S-1)
int qsgd_bits(int S) { return 1 + std::bit_width(unsigned(S - 1)); }
size_t qsgd_buckets(const CompressSpec& s, size_t n) { return (n + s.bucket - 1) / s.bucket; }

// randk: k distinct indices of [0, n), ascending, by Floyd's algorithm (every k-subset equally
// likely): for j = n-k .. n-1 draw t in [0, j]; take t, or j if t was taken already.
std::vector<uint32_t> randk_indices(size_t n, size_t k, uint64_t seed) {
    SplitMix64 rng{seed ^ kRandkSalt};
    std::vector<bool> taken(n);
    std::vector<uint32_t> idx;
    idx.reserve(k);
    for (size_t j = n - k; j < n; j++) {
        size_t t = rng.below(j + 1);
        if (taken[t]) t = j;
        taken[t] = true;
        idx.push_back(uint32_t(t));
    }
    std::sort(idx.begin(), idx.end());
    return idx;
}

// topk: the k indices of largest |x_i| (ties: the lower index), ascending. NaN counts as infinite,
// so the order stays total.
std::vector<uint32_t> topk_indices(const float* x, size_t n, size_t k) {
    std::vector<uint32_t> idx(n);
    std::iota(idx.begin(), idx.end(), 0u);
    auto mag = [x](uint32_t i) { return std::isnan(x[i]) ? INFINITY : std::fabs(x[i]); };
    auto before = [&](uint32_t a, uint32_t b) { return mag(a) > mag(b) || (mag(a) == mag(b) && a < b); };
    if (k < n) std::nth_element(idx.begin(), idx.begin() + long(k), idx.end(), before);
    idx.resize(k);
    std::sort(idx.begin(), idx.end());
    return idx;
}

void qsgd_encode(const CompressSpec& s, const float* x, size_t n, uint64_t seed, unsigned char* msg) {
    const int S = s.levels, bits = qsgd_bits(S);
    const size_t nb = qsgd_buckets(s, n);
    SplitMix64 rng{seed ^ kQsgdSalt};
    BitWriter w{msg + 4 * nb};
    for (size_t b = 0; b < nb; b++) {
        const size_t i0 = b * s.bucket, i1 = std::min(n, i0 + s.bucket);
        double ss = 0;
        for (size_t i = i0; i < i1; i++) ss += double(x[i]) * x[i];
        const float norm = float(std::sqrt(ss));  // >= every |x_i| of the bucket (rounding is monotone)
        store_f32(msg + 4 * b, norm);
        for (size_t i = i0; i < i1; i++) {
            // r = |x_i| / norm (S-1) in [l, l+1]: l+1 with probability r - l, so E[level] = r (unbiased)
            double r = norm > 0 ? std::fabs(double(x[i])) / norm * (S - 1) : 0.0;
            if (!(r >= 0)) r = 0;  // NaN
            r = std::min(r, double(S - 1));
            uint32_t l = uint32_t(r);
            if (rng.uniform() < r - l) l++;  // one draw per element, whatever r is
            const uint32_t neg = l > 0 && x[i] < 0;
            w.put(l << 1 | neg, bits);
        }
    }
    w.flush();
}

void qsgd_decode(const CompressSpec& s, const unsigned char* msg, size_t n, float* cx) {
    const int S = s.levels, bits = qsgd_bits(S);
    const size_t nb = qsgd_buckets(s, n);
    BitReader rd{msg + 4 * nb};
    for (size_t b = 0; b < nb; b++) {
        const double norm = load_f32(msg + 4 * b);
        for (size_t i = b * s.bucket, i1 = std::min(n, i + s.bucket); i < i1; i++) {
            const uint32_t code = rd.get(bits);
            const float v = float(norm * double(code >> 1) / double(S - 1));
            cx[i] = (code & 1) ? -v : v;
        }
    }
}

}  // namespace

namespace {

// The compressor text names, or why it does not (*why).
bool read_compress(const std::string& text, CompressSpec* out, std::string* why) {
    auto bad = [&](const char* reason) { return *why = reason, false; };
    const size_t colon = text.find(':');
    const bool has_arg = colon != std::string::npos;
    const std::string name = text.substr(0, colon), arg = has_arg ? text.substr(colon + 1) : "";
    CompressSpec s;
    if (name == "none" && !has_arg) {
    } else if (name == "sign" && (!has_arg || arg == "vote")) {
        s.kind = has_arg ? CompressKind::SignVote : CompressKind::Sign;
    } else if (name == "topk" || name == "randk") {
        s.kind = name == "topk" ? CompressKind::TopK : CompressKind::RandK;
        if (!parse_number(arg, s.fraction)) return bad("the fraction F must be a number");
        if (!(s.fraction > 0 && s.fraction <= 1)) return bad("the fraction F must be in (0, 1]");
    } else if (name == "qsgd") {
        s.kind = CompressKind::Qsgd;
        const size_t c2 = arg.find(':');
        long long S = 0, B = 0;
        if (!parse_number(arg.substr(0, c2), S)) return bad("the levels S must be an integer");
        if (S < 2 || S > 256) return bad("the levels S must be in [2, 256]");
        s.levels = int(S);
        if (c2 != std::string::npos) {
            if (!parse_number(arg.substr(c2 + 1), B) || B < 1) return bad("the bucket B must be an integer >= 1");
            s.bucket = size_t(B);
        }
    } else if (name == "powersgd") {
        s.kind = CompressKind::PowerSgd;
        long long R = 0;
        if (!parse_number(arg, R)) return bad("the rank R must be an integer");
        if (R < 1 || R > INT_MAX) return bad("the rank R must be >= 1");
        s.rank = int(R);
    } else {
        return bad("unknown compressor");
    }
    *out = s;
    return true;
}

}  // namespace

CompressSpec parse_compress(const std::string& text) {
    CompressSpec s;
    std::string why;
    if (!read_compress(text, &s, &why)) bad_text(text, why);
    return s;
}

bool setting_parse(std::string_view text, Override<CompressSpec>* out) {
    if (text.empty()) return out->value.reset(), true;
    CompressSpec s;
    std::string why;
    if (!read_compress(std::string(text), &s, &why)) return false;
    out->value = s;
    return true;
}

std::string setting_problem(std::string_view text, const Override<CompressSpec>*) {
    CompressSpec s;
    std::string why;
    return read_compress(std::string(text), &s, &why) ? "" : why;
}

std::string setting_choices(const Override<CompressSpec>*) { return kForms; }

std::string compress_text(const CompressSpec& s) {
    char buf[32];
    switch (s.kind) {
    case CompressKind::None: return "none";
    case CompressKind::TopK:
    case CompressKind::RandK: {
        const auto r = std::to_chars(buf, buf + sizeof buf, s.fraction);  // shortest text that reads back
        return (s.kind == CompressKind::TopK ? "topk:" : "randk:") + std::string(buf, r.ptr);
    }
    case CompressKind::Qsgd:
        return cat("qsgd:", s.levels, s.bucket == CompressSpec{}.bucket ? "" : cat(":", s.bucket));
    case CompressKind::Sign: return "sign";
    case CompressKind::SignVote: return "sign:vote";
    case CompressKind::PowerSgd: return cat("powersgd:", s.rank);
    }
    fail("compress_text: unknown CompressKind ", int(s.kind));
}

bool is_unbiased(const CompressSpec& s) {
    return s.kind == CompressKind::None || s.kind == CompressKind::Qsgd || s.kind == CompressKind::RandK;
}

size_t compress_k(const CompressSpec& s, size_t n) {
    if (n == 0) return 0;
    const long long k = std::llround(s.fraction * double(n));
    return size_t(std::clamp<long long>(k, 1, (long long)n));
}

size_t message_bytes(const CompressSpec& s, size_t n) {
    switch (s.kind) {
    case CompressKind::None: return 4 * n;
    case CompressKind::TopK:
        SHARDLM_CHECK(n <= UINT32_MAX, "topk over ", n, " elements: the indices are uint32",
                      "\n---> HINT: compress the gradient in pieces of at most 2^32 - 1 elements");
        return 8 * compress_k(s, n);
    case CompressKind::RandK: return 4 * compress_k(s, n);
    case CompressKind::Qsgd:
        SHARDLM_CHECK(s.levels >= 2 && s.levels <= 256 && s.bucket >= 1, "qsgd with ", s.levels,
                      " levels and a bucket of ", s.bucket,
                      "\n---> HINT: 2 <= S <= 256 levels, bucket >= 1 (parse_compress checks both)");
        return 4 * qsgd_buckets(s, n) + (n * size_t(qsgd_bits(s.levels)) + 7) / 8;
    case CompressKind::Sign:
    case CompressKind::SignVote: return 4 + (n + 7) / 8;
    case CompressKind::PowerSgd: break;
    }
    fail("compress: powersgd is not an elementwise compressor\n---> HINT: reduce it with parallel::PowerSgd");
}

void compress(const CompressSpec& s, const float* x, size_t n, uint64_t seed, void* msg_, float* cx) {
    auto* msg = static_cast<unsigned char*>(msg_);
    const size_t k = compress_k(s, n);
    message_bytes(s, n);  // checks the spec
    switch (s.kind) {
    case CompressKind::None: std::memcpy(msg, x, 4 * n); break;
    case CompressKind::TopK: {
        const std::vector<uint32_t> idx = topk_indices(x, n, k);
        std::memcpy(msg, idx.data(), 4 * k);
        for (size_t j = 0; j < k; j++) store_f32(msg + 4 * (k + j), x[idx[j]]);
        break;
    }
    case CompressKind::RandK: {
        const std::vector<uint32_t> idx = randk_indices(n, k, seed);
        for (size_t j = 0; j < k; j++) store_f32(msg + 4 * j, float(double(x[idx[j]]) * double(n) / double(k)));
        break;
    }
    case CompressKind::Qsgd: qsgd_encode(s, x, n, seed, msg); break;
    case CompressKind::Sign:
    case CompressKind::SignVote: {
        // scale = ||x||_1 / n (0 when x = 0); sign(0) = +1 (bit 0): a zero element decodes to +scale
        double l1 = 0;
        for (size_t i = 0; i < n; i++) l1 += std::fabs(double(x[i]));
        store_f32(msg, n > 0 ? float(l1 / double(n)) : 0.0f);
        BitWriter w{msg + 4};
        for (size_t i = 0; i < n; i++) w.put(x[i] < 0, 1);
        w.flush();
        break;
    }
    case CompressKind::PowerSgd: break;  // message_bytes failed
    }
    decompress(s, msg, n, seed, cx);  // cx is exactly what every receiver decodes
}

void decompress(const CompressSpec& s, const void* msg_, size_t n, uint64_t seed, float* cx) {
    const auto* msg = static_cast<const unsigned char*>(msg_);
    const size_t k = compress_k(s, n);
    message_bytes(s, n);
    switch (s.kind) {
    case CompressKind::None: std::memcpy(cx, msg, 4 * n); break;
    case CompressKind::TopK:
        std::fill(cx, cx + n, 0.0f);
        for (size_t j = 0; j < k; j++) {
            uint32_t i;
            std::memcpy(&i, msg + 4 * j, 4);
            SHARDLM_CHECK(i < n, "topk message: index ", i, " of ", n,
                          " elements\n---> HINT: the message is corrupt, or was encoded for another n");
            cx[i] = load_f32(msg + 4 * (k + j));
        }
        break;
    case CompressKind::RandK: {
        std::fill(cx, cx + n, 0.0f);
        const std::vector<uint32_t> idx = randk_indices(n, k, seed);
        for (size_t j = 0; j < k; j++) cx[idx[j]] = load_f32(msg + 4 * j);
        break;
    }
    case CompressKind::Qsgd: qsgd_decode(s, msg, n, cx); break;
    case CompressKind::Sign:
    case CompressKind::SignVote: {
        const float scale = load_f32(msg);
        BitReader rd{msg + 4};
        for (size_t i = 0; i < n; i++) cx[i] = rd.get(1) ? -scale : scale;
        break;
    }
    case CompressKind::PowerSgd: break;
    }
}

void aggregate(const CompressSpec& s, const unsigned char* msgs, int ranks, size_t n, const uint64_t* seeds,
               float* out) {
    const size_t mb = message_bytes(s, n);
    SHARDLM_CHECK(ranks >= 1, "aggregate over ", ranks, " ranks\n---> HINT: ranks >= 1");
    SHARDLM_CHECK(seeds || s.kind != CompressKind::RandK, "aggregate of randk messages without seeds",
                  "\n---> HINT: pass every rank's seed: the indices come from it");
    if (s.kind == CompressKind::SignVote) {
        // out = mean scale * sign(sum of the ranks' signs); a tie -> 0
        std::vector<int> votes(n, 0);
        float scale_sum = 0;
        for (int r = 0; r < ranks; r++) {
            const unsigned char* m = msgs + size_t(r) * mb;
            scale_sum += load_f32(m);
            BitReader rd{m + 4};
            for (size_t i = 0; i < n; i++) votes[i] += rd.get(1) ? -1 : 1;
        }
        const float scale = scale_sum / float(ranks);
        for (size_t i = 0; i < n; i++) out[i] = votes[i] > 0 ? scale : votes[i] < 0 ? -scale : 0.0f;
        return;
    }
    std::vector<float> c(n);
    std::fill(out, out + n, 0.0f);
    for (int r = 0; r < ranks; r++) {
        decompress(s, msgs + size_t(r) * mb, n, seeds ? seeds[r] : 0, c.data());
        for (size_t i = 0; i < n; i++) out[i] += c[i];
    }
    for (size_t i = 0; i < n; i++) out[i] /= float(ranks);
}

// ------------------------------------------------------------------------------------------------
// PowerSGD

namespace {

// Gram-Schmidt on the columns of P (rows x r, row-major, rows >= r), each projection done twice
// ("twice is enough": orthonormal to rounding even when P is ill-conditioned). A column with nothing
// left after the projections (P of rank < r: M of rank < r, or zero) becomes the first unit vector e_e
// with a residual > 1/2 (else the one with the largest), so P^ is always orthonormal and Q = M^T P^
// keeps r columns for the next round.
void orthonormalise(double* P, size_t rows, size_t r) {
    std::vector<double> v(rows), best(rows);
    auto project_out = [&](size_t j) {
        for (int pass = 0; pass < 2; pass++)
            for (size_t c = 0; c < j; c++) {
                double d = 0;
                for (size_t a = 0; a < rows; a++) d += P[a * r + c] * v[a];
                for (size_t a = 0; a < rows; a++) v[a] -= d * P[a * r + c];
            }
    };
    auto norm = [&] { return std::sqrt(std::inner_product(v.begin(), v.end(), v.begin(), 0.0)); };
    for (size_t j = 0; j < r; j++) {
        for (size_t a = 0; a < rows; a++) v[a] = P[a * r + j];
        const double before = norm();
        project_out(j);
        double nv = norm();
        if (!(nv > 1e-10 * before && std::isfinite(nv))) {
            double best_nv = -1;
            for (size_t e = 0; e < rows && best_nv <= 0.5; e++) {
                std::fill(v.begin(), v.end(), 0.0);
                v[e] = 1;
                project_out(j);
                if (const double ne = norm(); ne > best_nv) best_nv = ne, best = v;
            }
            v = best, nv = best_nv;
        }
        for (size_t a = 0; a < rows; a++) P[a * r + j] = v[a] / nv;
    }
}

}  // namespace

PowerSgd::PowerSgd(int rank, std::vector<PowerSgdMatrix> matrices, size_t n, uint64_t seed) {
    SHARDLM_CHECK(rank >= 1, "PowerSgd at rank ", rank, "\n---> HINT: --compress powersgd:R takes R >= 1");
    for (const PowerSgdMatrix& m : matrices) {
        SHARDLM_CHECK(m.rows >= 1 && m.cols >= 1 && m.offset + m.rows * m.cols <= n, "PowerSgd: matrix [", m.rows,
                      ", ", m.cols, "] at offset ", m.offset, " is empty or past the buffer's ", n,
                      " elements\n---> HINT: matrices are row-major [rows, cols] pieces of the flat gradient");
        const size_t r = std::min({size_t(m.rank > 0 ? m.rank : rank), m.rows, m.cols});
        pieces_.push_back({m, r, p_floats_, q_floats_});
        p_floats_ += m.rows * r;
        q_floats_ += m.cols * r;
    }
    // the uncompressed ranges: the gaps between the matrices, in offset order
    std::sort(matrices.begin(), matrices.end(), [](auto& a, auto& b) { return a.offset < b.offset; });
    size_t at = 0;
    for (const PowerSgdMatrix& m : matrices) {
        SHARDLM_CHECK(m.offset >= at, "PowerSgd: the matrix at offset ", m.offset, " overlaps the one ending at ", at,
                      "\n---> HINT: each element of the flat gradient belongs to at most one matrix");
        if (m.offset > at) rest_.emplace_back(at, m.offset);
        at = m.offset + m.rows * m.cols;
    }
    if (n > at) rest_.emplace_back(at, n);
    for (auto [b, e] : rest_) rest_floats_ += e - b;
    // Q: a seeded standard normal, the same on every rank; each matrix's from its own key, so that two
    // copies of a tensor (the tied embedding on two pipeline stages) start, and stay, alike
    q_.resize(q_floats_);
    for (const Piece& pc : pieces_) {
        SplitMix64 rng{seed ^ kPowerSalt ^ (pc.m.key * 0x9e3779b97f4a7c15ULL)};
        for (size_t i = pc.q_at; i < pc.q_at + pc.m.cols * pc.r; i++) q_[i] = float(rng.normal());
    }
    send_.resize(std::max(p_floats_ + rest_floats_, q_floats_));
    phat_.resize(p_floats_);
}

void PowerSgd::reduce(const float* g, float* out, int ranks,
                      const std::function<void(float*, size_t)>& all_reduce_sum) {
    SHARDLM_CHECK(ranks >= 1, "PowerSgd::reduce over ", ranks, " ranks\n---> HINT: ranks >= 1");
    SHARDLM_CHECK(q_.size() == q_floats_, "PowerSgd: the Q state holds ", q_.size(), " floats, not ", q_floats_,
                  "\n---> HINT: a checkpoint's Q must come from the same matrices and rank");
    // 1. P_i = M_i Q_i (double sums, row by row) and the uncompressed elements, then their rank-mean.
    for (const Piece& p : pieces_) {
        const float* M = g + p.m.offset;
        const float* Q = q_.data() + p.q_at;
        std::vector<double> acc(p.r);
        for (size_t a = 0; a < p.m.rows; a++) {
            std::fill(acc.begin(), acc.end(), 0.0);
            for (size_t c = 0; c < p.m.cols; c++) {
                const double m = M[a * p.m.cols + c];
                for (size_t j = 0; j < p.r; j++) acc[j] += m * Q[c * p.r + j];
            }
            for (size_t j = 0; j < p.r; j++) send_[p.p_at + a * p.r + j] = float(acc[j]);
        }
    }
    float* rest = send_.data() + p_floats_;
    for (auto [b, e] : rest_) rest = std::copy(g + b, g + e, rest);
    const size_t n1 = p_floats_ + rest_floats_;
    if (n1 > 0) all_reduce_sum(send_.data(), n1);  // every rank skips an empty call alike
    for (size_t i = 0; i < n1; i++) send_[i] /= float(ranks);
    // the uncompressed part is done: write it now (g's elements there are read no more, so out may alias g)
    rest = send_.data() + p_floats_;
    for (auto [b, e] : rest_) {
        std::copy(rest, rest + (e - b), out + b);
        rest += e - b;
    }
    for (const Piece& p : pieces_) {
        for (size_t i = 0; i < p.m.rows * p.r; i++) phat_[p.p_at + i] = send_[p.p_at + i];
        orthonormalise(phat_.data() + p.p_at, p.m.rows, p.r);
    }
    // 2. Q_i = M_i^T P^_i (double sums, in row order), then its rank-mean: the new Q (warm start).
    for (const Piece& p : pieces_) {
        const float* M = g + p.m.offset;
        const double* P = phat_.data() + p.p_at;
        std::vector<double> acc(p.m.cols * p.r, 0.0);
        for (size_t a = 0; a < p.m.rows; a++)
            for (size_t c = 0; c < p.m.cols; c++) {
                const double m = M[a * p.m.cols + c];
                for (size_t j = 0; j < p.r; j++) acc[c * p.r + j] += m * P[a * p.r + j];
            }
        for (size_t i = 0; i < acc.size(); i++) send_[p.q_at + i] = float(acc[i]);
    }
    if (q_floats_ > 0) all_reduce_sum(send_.data(), q_floats_);
    for (size_t i = 0; i < q_floats_; i++) q_[i] = send_[i] / float(ranks);
    // out = P^ Q^T on every matrix
    for (const Piece& p : pieces_) {
        const double* P = phat_.data() + p.p_at;
        const float* Q = q_.data() + p.q_at;
        for (size_t a = 0; a < p.m.rows; a++)
            for (size_t c = 0; c < p.m.cols; c++) {
                double s = 0;
                for (size_t j = 0; j < p.r; j++) s += P[a * p.r + j] * double(Q[c * p.r + j]);
                out[p.m.offset + a * p.m.cols + c] = float(s);
            }
    }
}

std::vector<float>& PowerSgd::q_state() { return q_; }

size_t PowerSgd::floats_per_round() const { return p_floats_ + rest_floats_ + q_floats_; }

}  // namespace shardlm::parallel
