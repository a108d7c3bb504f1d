// model/pieces.h: where a rank's elements sit in the HF tensors.
//
// A checkpoint (and an HF model file) is a set of *pieces*: rectangular boxes of HF tensors (HF
// names and shapes: Conv1D weights [in, out], true vocabulary), each stored in the box's row-major
// order. A whole tensor is one piece; a tensor-parallel column shard is one; c_attn's shard is three
// (its q, k and v columns); a ZeRO slice of a flattened local tensor is up to three per part (a partial
// first row, whole rows, a partial last row). Loading intersects the boxes a rank needs with the boxes
// stored, so any layout reads any other layout's files, and no rank ever holds a whole tensor it does
// not own.
//
// A Piece maps HF coordinates (i, j) inside its box to this rank's flat buffer: the element lives at
// local + i * stride_i + j * stride_j (an affine map: transposition and tensor-parallel offsets only
// change the strides and the base). 1-D tensors use j = 0 with hi[1] = 1.
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "shardlm/model/layout.h"

namespace shardlm::model {

struct Box {
    std::array<int64_t, 2> lo{0, 0}, hi{0, 1};  // [lo, hi) per HF axis (1-D: axis 1 is [0, 1))
    int64_t rows() const { return hi[0] - lo[0]; }
    int64_t cols() const { return hi[1] - lo[1]; }
    size_t numel() const { return size_t(rows()) * size_t(cols()); }
    bool empty() const { return rows() <= 0 || cols() <= 0; }
    bool whole(const std::vector<int64_t>& hf_shape) const;  // covers the whole tensor
    std::string str() const;                                  // "[0:768,128:192]" (1-D: "[0:768]")
};
Box intersect(const Box& a, const Box& b);
// Parses str()'s form; false if s is not one.
bool parse_box(const std::string& s, Box* out);

struct Piece {
    const ParamSpec* param = nullptr;
    Box box;                    // HF coordinates
    int64_t base = 0;           // flat-buffer element of HF (0, 0) (may be outside the box)
    int64_t stride_i = 0, stride_j = 0;
    // Flat-buffer index of HF element (i, j) of the box.
    int64_t at(int64_t i, int64_t j) const { return base + i * stride_i + j * stride_j; }
};

// Pieces of parameter p's elements [first, first + n) of its local flattened internal layout
// (positions relative to p.offset; the flat index of a piece is p.offset-based). Vocabulary padding
// rows are dropped.
std::vector<Piece> pieces_of(const ParamSpec& p, size_t first, size_t n);
// Pieces of every counted parameter element in the flat-buffer ranges [begin, end) (ascending):
// every parameter's intersection with them.
struct FlatRange {
    size_t begin = 0, end = 0;
};
std::vector<Piece> pieces_of(const Layout& layout, const std::vector<FlatRange>& ranges, bool include_tied = true);

// Copies the piece's elements between the flat buffer `flat` (indexed as Piece::at) and `box_data`
// (the box in row-major order).
void gather_piece(float* box_data, const float* flat, const Piece& pc);
// Copies the part of stored box `src` (data src_data, row-major over src) that intersects pc.box
// into flat; returns the number of elements copied.
size_t scatter_intersection(float* flat, const Piece& pc, const Box& src, const float* src_data);

}  // namespace shardlm::model
