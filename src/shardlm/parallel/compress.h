// parallel/compress.h: the gradient compressors of communication-efficient data parallelism
// (compressed SGD: x <- x - lr (1/ranks) sum_r C(g_r)). Pure computation: each rank encodes its
// gradient into a message, the caller moves the bytes (all-gather of equal-sized messages, or the
// all_reduce_sum callback of PowerSgd), and every rank decodes the same aggregate.
//
// Two classes of compressor (the course notes' assumptions 3 and 4):
//   unbiased     E[C(x)] = x, E||C(x) - x||^2 <= w ||x||^2          qsgd, randk (scaled by n/k), none
//   contractive  E||C(x) - x||^2 <= (1 - delta) ||x||^2, delta > 0  topk (delta = k/n), sign (delta =
//                ||x||_1^2 / (n ||x||^2) >= 1/n); powersgd is biased too (a rank-R projection)
// Biased (contractive) ones need error feedback: the caller keeps e = x - C(x) and adds it to the next
// step's gradient, which is why compress() also returns the decoded C(x).
//
// Messages (little-endian, no header: the size is a function of (spec, n) alone; read with memcpy,
// so the caller's buffers need no alignment):
//   none       n float values
//   topk       k uint32 indices (ascending), then the k float values x_i
//   randk      k float values x_i (n/k) at the seed's indices (ascending; indices are not sent)
//   qsgd       ceil(n / bucket) float norms, then n codes of 1 + ceil(log2 S) bits, LSB first:
//              code = level << 1 | negative (element i at bits [i b, (i+1) b) of the stream)
//   sign(vote) 1 float scale ||x||_1 / n, then ceil(n / 8) bytes of bits, LSB first (1: negative)
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "shardlm/core/enum_names.h"

namespace shardlm::parallel {

enum class CompressKind { None, TopK, RandK, Qsgd, Sign, SignVote, PowerSgd };
struct CompressSpec {
    CompressKind kind = CompressKind::None;
    double fraction = 0;   // topk, randk: k = max(1, llround(fraction * n)) of n elements
    int levels = 0;        // qsgd: S levels l/(S-1), l = 0..S-1, of |x_i| / ||x||_bucket (S >= 2)
    int rank = 0;          // powersgd: R
    size_t bucket = 512;   // qsgd: elements per bucket, each with its own norm (Alistarh et al.'s d)
};
// "topk:F" | "randk:F" (0 < F <= 1) | "qsgd:S" (2 <= S <= 256) | "sign" (scaled sign) | "sign:vote" (majority vote)
// | "powersgd:R" (R >= 1) | "none". Also "qsgd:S:B": a bucket of B elements instead of 512 (so that
// compress_text round-trips any spec). Bad text: an error naming `--compress`, the text and the valid forms.
CompressSpec parse_compress(const std::string& text);
std::string compress_text(const CompressSpec& s);   // back to the text form: parse_compress(compress_text(s)) == s
// A compressor setting (--compress, --compress-embedding): unset (""), or a spec in its text form
// (core/enum_names.h: TextSetting; setting_problem says why a text is not one).
inline std::string setting_text(const Override<CompressSpec>& o) { return o ? compress_text(*o) : ""; }
bool setting_parse(std::string_view text, Override<CompressSpec>* out);
std::string setting_problem(std::string_view text, const Override<CompressSpec>*);
std::string setting_choices(const Override<CompressSpec>*);
// qsgd, randk (scaled by n/k): E[C(x)] = x; also none (the identity, w = 0). They converge without error feedback.
bool is_unbiased(const CompressSpec& s);
// topk, randk: the k elements kept of n (0 when n = 0).
size_t compress_k(const CompressSpec& s, size_t n);

// Elementwise compressors (not PowerSgd) over a flat vector of n floats: a message of a fixed size
// for (spec, n), so ranks can all-gather messages of equal size.
size_t message_bytes(const CompressSpec& s, size_t n);
// Encodes x (n floats) into msg (message_bytes bytes) and writes the decoded C(x) into cx (n floats)
// (the caller's error feedback needs x - C(x)); cx is exactly decompress(msg). seed: the randomness:
// qsgd's stochastic rounding uses it (callers pass a different seed per rank and step); randk's k
// indices depend on the seed only, so ranks given the same seed pick the same indices.
// Deterministic: same inputs -> same bytes.
void compress(const CompressSpec& s, const float* x, size_t n, uint64_t seed, void* msg, float* cx);
// cx (n) = C(x) from the message alone (seed: the encoder's; only randk reads it). SignVote decodes
// as Sign: this rank's own scale * sign.
void decompress(const CompressSpec& s, const void* msg, size_t n, uint64_t seed, float* cx);
// The aggregate of `ranks` messages (msgs: ranks x message_bytes, rank-major), each encoded with
// seeds[r] (only randk reads them; may be null otherwise): out (n) = (1/ranks) sum_r C_r, each element
// summed in fp32 in rank order from 0, then divided by float(ranks) (so every rank computes the same
// bits). SignVote: out = (mean over ranks of each rank's scale) * sign(sum_r sign_r) (majority vote;
// a tie -> 0).
void aggregate(const CompressSpec& s, const unsigned char* msgs, int ranks, size_t n, const uint64_t* seeds,
               float* out);

// ------------------------------------------------------------------------------------------------
// PowerSGD (Vogels et al. 2019): rank-R approximations of the 2-D gradients, all-reduced as the
// factors P [rows, r] and Q [cols, r], r = min(R, rows, cols). Not elementwise: a class with state
// (Q, warm-started from round to round), reduced through a sum all-reduce.

// a row-major [rows, cols] matrix at offset of a flat buffer; key: its Q's random start (a tensor's
// name hashed: copies of one tensor on other ranks draw alike); rank: its own R (0: the class's)
struct PowerSgdMatrix {
    size_t offset, rows, cols;
    uint64_t key = 0;
    int rank = 0;
};
class PowerSgd {
public:
    // matrices: the 2-D tensors compressed at rank R, or at their own (min(R, rows, cols)); every element of the flat buffer of n
    // floats outside them is sent uncompressed. Q starts from a seeded standard normal (the same on every rank).
    // The matrices must lie within [0, n) and not overlap (any order).
    PowerSgd(int rank, std::vector<PowerSgdMatrix> matrices, size_t n, uint64_t seed);
    // One round (Vogels et al. Algorithm 1, with warm start): g (n): this rank's gradient (the caller adds
    // error feedback before). Two calls of all_reduce_sum (a sum over ranks, in place):
    //   1. [P_i = M_i Q_i for every matrix, then the uncompressed elements]   -> sum, / ranks
    //      P^_i = orthonormalise(P_i) (Gram-Schmidt on columns, in double, each projection twice; a
    //      column with nothing left after the projections -- M of rank < r, or zero -- is replaced by
    //      a unit vector e_j, so P^ stays orthonormal and Q keeps r columns for the next rounds)
    //   2. [Q_i = M_i^T P^_i for every matrix]                               -> sum, / ranks
    // out (n) = P^_i Q_i^T on the matrices, the rank-mean of g elsewhere. out may alias g. Products
    // are plain loops with double accumulation in a fixed order: every rank computes the same bits.
    void reduce(const float* g, float* out, int ranks, const std::function<void(float*, size_t)>& all_reduce_sum);
    // every matrix's Q (row-major [cols, r]), concatenated in the constructor's order (for checkpoints:
    // overwrite its values, keep its size)
    std::vector<float>& q_state();
    size_t floats_per_round() const; // floats this rank hands to all_reduce_sum per round (P's + Q's + uncompressed)

private:
    struct Piece { PowerSgdMatrix m; size_t r, p_at, q_at; };  // p_at, q_at: offsets in the P and Q buffers
    std::vector<Piece> pieces_;
    std::vector<std::pair<size_t, size_t>> rest_;  // the uncompressed ranges [begin, end) of the flat buffer
    size_t p_floats_ = 0, q_floats_ = 0, rest_floats_ = 0;
    std::vector<float> q_;                          // Q state, q_floats_
    std::vector<float> send_;                       // the buffer handed to all_reduce_sum
    std::vector<double> phat_;                      // P^ of every matrix, p_floats_
};

}  // namespace shardlm::parallel
