#include "shardlm/model/pieces.h"

#include <algorithm>
#include <cstdio>
#include <cstring>

#include "shardlm/core/check.h"

namespace shardlm::model {

bool Box::whole(const std::vector<int64_t>& s) const {
    return lo[0] == 0 && lo[1] == 0 && hi[0] == s[0] && hi[1] == (s.size() > 1 ? s[1] : 1);
}

std::string Box::str() const {
    char buf[96];
    if (lo[1] == 0 && hi[1] == 1)
        std::snprintf(buf, sizeof(buf), "[%lld:%lld]", (long long)lo[0], (long long)hi[0]);
    else
        std::snprintf(buf, sizeof(buf), "[%lld:%lld,%lld:%lld]", (long long)lo[0], (long long)hi[0], (long long)lo[1],
                      (long long)hi[1]);
    return buf;
}

bool parse_box(const std::string& s, Box* out) {
    long long a, b, c, d;
    char tail;
    if (std::sscanf(s.c_str(), "[%lld:%lld,%lld:%lld]%c", &a, &b, &c, &d, &tail) == 4) {
        *out = Box{{a, c}, {b, d}};
        return a >= 0 && c >= 0 && a <= b && c <= d;
    }
    if (std::sscanf(s.c_str(), "[%lld:%lld]%c", &a, &b, &tail) == 2) {
        *out = Box{{a, 0}, {b, 1}};
        return a >= 0 && a <= b;
    }
    return false;
}

Box intersect(const Box& a, const Box& b) {
    Box r;
    for (int k = 0; k < 2; k++) {
        r.lo[size_t(k)] = std::max(a.lo[size_t(k)], b.lo[size_t(k)]);
        r.hi[size_t(k)] = std::max(r.lo[size_t(k)], std::min(a.hi[size_t(k)], b.hi[size_t(k)]));
    }
    return r;
}

namespace {

// Local internal rows [r0, r1) x columns [c0, c1) of p (a rectangle inside one tensor-parallel part)
// as a Piece in HF coordinates.
Piece rect_piece(const ParamSpec& p, int64_t r0, int64_t r1, int64_t c0, int64_t c1) {
    const bool two_d = p.shape.size() == 2;
    const int64_t W = two_d ? p.shape[1] : 1;  // local row length
    // local internal (r, c) -> full internal (R, C): R = r + row_shift(part), C = c + col_shift
    int64_t row_shift = 0, col_shift = 0;
    if (p.tp_axis == 0 && p.tp_size > 1) {
        const int64_t part_rows = p.shape[0] / p.tp_parts, full_part_rows = p.full_shape[0] / p.tp_parts;
        const int64_t part = r0 / part_rows;
        row_shift = part * full_part_rows + int64_t(p.tp_rank) * part_rows - part * part_rows;
    } else if (p.tp_axis == 1 && p.tp_size > 1) {
        col_shift = int64_t(p.tp_rank) * p.shape[1];
    }
    int64_t R0 = r0 + row_shift, R1 = r1 + row_shift;
    if (p.hf_rows >= 0) R1 = std::min(R1, p.hf_rows), R0 = std::min(R0, R1);  // vocabulary padding
    Piece pc;
    pc.param = &p;
    const int64_t base_local = int64_t(p.offset);  // flat index of local (0, 0)
    if (!p.hf_transposed || !two_d) {
        // HF (i, j) = full (R, C): local (R - row_shift, C - col_shift)
        pc.box = Box{{R0, c0 + col_shift}, {R1, two_d ? c1 + col_shift : 1}};
        pc.stride_i = W;
        pc.stride_j = 1;
        pc.base = base_local - row_shift * W - col_shift;
    } else {
        // HF (i, j) = full (C, R)
        pc.box = Box{{c0 + col_shift, R0}, {c1 + col_shift, R1}};
        pc.stride_i = 1;
        pc.stride_j = W;
        pc.base = base_local - row_shift * W - col_shift;
    }
    return pc;
}

}  // namespace

std::vector<Piece> pieces_of(const ParamSpec& p, size_t first, size_t n) {
    std::vector<Piece> out;
    if (n == 0) return out;
    const int64_t W = p.shape.size() == 2 ? p.shape[1] : 1;
    const int64_t part_rows = (p.tp_axis == 0 && p.tp_size > 1) ? p.shape[0] / p.tp_parts : p.shape[0];
    auto emit = [&](int64_t r0, int64_t r1, int64_t c0, int64_t c1) {
        // split at tensor-parallel part boundaries (c_attn's q | k | v)
        for (int64_t r = r0; r < r1;) {
            int64_t e = std::min(r1, (r / part_rows + 1) * part_rows);
            Piece pc = rect_piece(p, r, e, c0, c1);
            if (!pc.box.empty()) out.push_back(pc);
            r = e;
        }
    };
    const int64_t b = int64_t(first), e = int64_t(first + n);
    int64_t r0 = b / W, c0 = b % W;
    const int64_t r_end = e / W, c_end = e % W;
    if (r0 == r_end) {  // inside one row
        emit(r0, r0 + 1, c0, c_end);
        return out;
    }
    if (c0 != 0) {
        emit(r0, r0 + 1, c0, W);
        r0++;
    }
    if (r_end > r0) emit(r0, r_end, 0, W);
    if (c_end != 0) emit(r_end, r_end + 1, 0, c_end);
    return out;
}

std::vector<Piece> pieces_of(const Layout& layout, const std::vector<FlatRange>& ranges, bool include_tied) {
    std::vector<Piece> out;
    for (const FlatRange& r : ranges)
        for (const ParamSpec& p : layout.params) {
            if (p.tied_copy && !include_tied) continue;
            size_t b = std::max(p.offset, r.begin), e = std::min(p.offset + p.numel, r.end);
            if (b >= e) continue;
            for (Piece& pc : pieces_of(p, b - p.offset, e - b)) out.push_back(pc);
        }
    return out;
}

void gather_piece(float* box_data, const float* flat, const Piece& pc) {
    const int64_t R = pc.box.rows(), Cn = pc.box.cols();
#pragma omp parallel for schedule(static) if (pc.box.numel() > 65536)
    for (int64_t i = 0; i < R; i++) {
        float* d = box_data + i * Cn;
        const int64_t gi = pc.box.lo[0] + i;
        if (pc.stride_j == 1) {
            std::memcpy(d, flat + pc.at(gi, pc.box.lo[1]), size_t(Cn) * sizeof(float));
        } else {
            for (int64_t j = 0; j < Cn; j++) d[j] = flat[pc.at(gi, pc.box.lo[1] + j)];
        }
    }
}

size_t scatter_intersection(float* flat, const Piece& pc, const Box& src, const float* src_data) {
    const Box x = intersect(pc.box, src);
    if (x.empty()) return 0;
    const int64_t sw = src.cols(), R = x.rows(), Cn = x.cols();
#pragma omp parallel for schedule(static) if (x.numel() > 65536)
    for (int64_t i = 0; i < R; i++) {
        const int64_t gi = x.lo[0] + i;
        const float* s = src_data + (gi - src.lo[0]) * sw + (x.lo[1] - src.lo[1]);
        if (pc.stride_j == 1) {
            std::memcpy(flat + pc.at(gi, x.lo[1]), s, size_t(Cn) * sizeof(float));
        } else {
            for (int64_t j = 0; j < Cn; j++) flat[pc.at(gi, x.lo[1] + j)] = s[j];
        }
    }
    return x.numel();
}

}  // namespace shardlm::model
