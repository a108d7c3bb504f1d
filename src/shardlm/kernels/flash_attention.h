// kernels/flash_attention.h: fused causal attention (FlashAttention-2's algorithm, Dao 2023, on the
// CPU): tiles of kFlashRows queries against tiles of kFlashCols keys, an online softmax (running row
// maximum and sum, the output rescaled as the maximum grows), no T x T buffer. Forward keeps only the
// output and each row's log-sum-exp; backward recomputes every tile's probabilities from them.
// Memory per sequence: O(T C) (the row statistics are NH T floats) instead of the materialized
// kernel's NH T^2 probabilities (kernels/attention.h). Layouts, grouped-query attention, the scale
// 1/sqrt(HS) and the causal mask are attention.h's; the result equals it to fp32 rounding (the
// softmax's sums are taken tile by tile).
#pragma once
#include <cstddef>

#include "shardlm/core/dtype.h"

namespace shardlm::kernels {

// Keys a tile: one of the native kernels' 64-column panels
inline constexpr int kFlashRows = 64, kFlashCols = 64;

// qkv (B,T,C + 2 KVC) as attention.h, stored as t; out (B,T,C) = in t; lse (B,NH,T) = fp32: row i's
// log sum_j exp(s_ij) over its visible keys, s the scaled scores.
void flash_attention_forward(void* out, float* lse, const void* qkv, DType t, int B, int T, int C, int NH, int NKV = 0);

// dqkv (B,T,C + 2 KVC) = fp32 (the query heads sharing a key/value head sum into its dk, dv); dout
// (B,T,C) fp32; out and lse: the forward's (out stored as t).
void flash_attention_backward(float* dqkv, const float* dout, const void* qkv, const void* out, const float* lse,
                              DType t, int B, int T, int C, int NH, int NKV = 0);

// ---- by blocks, for context parallelism ------------------------------------------------------------
// A rank that holds blocks of a sequence attends its queries to every block of keys in turn (ring
// attention): each (query block, key block) pair is a product at global positions, merged into the query
// block's running state, fp32. qpos (Tq) and kpos (Tk) are the rows' positions in the sequence, increasing
// within each block (a zigzag block, chunks r and 2cp-1-r, is); causal: key j is visible to query i iff
// kpos[j] <= qpos[i]. Packed documents: with qstart, query i of sequence b sees no key before position
// qstart[b Tq + i] (its document's first), which must not decrease along a sequence's rows.
// Operands are strided so that the queries and keys can be read where they lie: q (B, Tq) rows ldq apart
// (the block's qkv: C + 2 KVC), k and v from kv (B, Tk) rows ldkv apart (v KVC after k: the block's qkv
// at column C, or a received (B, Tk, 2 KVC) buffer). Over all key blocks the result equals flash_attention_forward /
// _backward of the whole sequence to fp32 rounding.

// The running state of B x NH x Tq query rows: the unnormalised output o (B, NH, Tq, HS), the row maxima
// m and sums l (B, NH, Tq).
struct FlashState {
    float* o;
    float* m;
    float* l;
};
void flash_state_reset(FlashState s, int B, int NH, int Tq, int HS);
// One (query block, key block) pair: the operands where they lie and the rows' positions.
struct FlashBlockPair {
    const void* q;   // (B, Tq) rows, ldq apart
    int ldq;
    const void* kv;  // (B, Tk) rows, ldkv apart: k, and v KVC after it
    int ldkv;
    DType t;         // of q and kv
    const int* qpos;  // (Tq) positions, increasing
    const int* kpos;  // (Tk)
    int B, Tq, Tk, C, NH, NKV;
    bool causal = true;
    const int* qstart = nullptr;  // (B, Tq) each query row's document start; null: no document mask
};
// The state takes one key block.
void flash_block_forward(FlashState s, const FlashBlockPair& p);
// After the last key block: out (B, Tq, C) as t and lse (B, NH, Tq), as flash_attention_forward's.
void flash_state_finish(void* out, float* lse, FlashState s, DType t, int B, int Tq, int C, int NH);
// D (B, NH, Tq) = each query row's dO . O, which every pair's backward of the block reads.
void flash_block_delta(float* D, const float* dout, const void* out, DType t, int B, int Tq, int C, int NH);
// The backward of one pair: dq (rows lddq apart) += and dkv (rows lddkv apart, dv KVC after dk) +=, fp32;
// dout (B, Tq, C) fp32, lse and D of the query block.
void flash_block_backward(float* dq, int lddq, float* dkv, int lddkv, const float* dout, const float* lse, const float* D,
                          const FlashBlockPair& p);

}  // namespace shardlm::kernels
