// model/context_parallel.cpp: the zigzag split and ring / all-gather attention over the cp group
// (context_parallel.h), from the flash kernels' (query block, key block) pairs.
#include "shardlm/model/context_parallel.h"

#include <algorithm>
#include <cstring>

#include "shardlm/core/check.h"
#include "shardlm/kernels/flash_attention.h"

namespace shardlm::model {

using kernels::FlashBlockPair;
using kernels::FlashState;

SequenceSplit::SequenceSplit(int T, int cp) : T_(T), cp_(cp) {
    SHARDLM_CHECK(cp >= 1, "--cp must be >= 1 (got ", cp, ")");
    SHARDLM_CHECK(cp == 1 || T % (2 * cp) == 0, "--seq ", T, " is not a multiple of 2 x --cp = ", 2 * cp,
                  ": context parallelism cuts each sequence into 2 cp equal chunks (rank r keeps chunks r and 2cp-1-r)",
                  "\n---> HINT: --seq ", T / (2 * cp) * (2 * cp), " or ", (T / (2 * cp) + 1) * (2 * cp));
    const int L = cp == 1 ? T : T / (2 * cp);
    pos_.reserve(size_t(T));
    for (int r = 0; r < cp; r++) {
        const int chunks[2] = {r, 2 * cp - 1 - r};
        for (int k = 0; k < (cp == 1 ? 1 : 2); k++)
            for (int i = 0; i < L; i++) pos_.push_back(chunks[k] * L + i);
    }
}

void CpBuffers::allocate(CpComm mode, int cp, int B, int local, int NH, int HS, int KVC, DType t) {
    const size_t rows = size_t(B) * size_t(NH) * size_t(local), block = size_t(B) * size_t(local) * 2 * size_t(KVC);
    o.resize(rows * size_t(HS));
    m.resize(rows), l.resize(rows), D.resize(rows);
    if (cp == 1) return;  // one rank reads its keys and values where they lie
    const size_t blocks = mode == CpComm::Ring ? 1 : size_t(cp);
    kv[0].resize(blocks * block * dtype_bytes(t));
    kv[1].resize(mode == CpComm::Ring ? block * dtype_bytes(t) : 0);
    dkv[0].resize(blocks * block);
    dkv[1].resize(block);
}

size_t CpBuffers::bytes() const {
    return sizeof(float) * (o.size() + m.size() + l.size() + D.size() + dkv[0].size() + dkv[1].size()) + kv[0].size() +
           kv[1].size();
}

CpBytes cp_attention_bytes(CpComm mode, int cp, size_t block_elems, DType t) {
    if (cp <= 1) return {};
    const size_t kv = block_elems * dtype_bytes(t), dkv = block_elems * sizeof(float), n = size_t(cp - 1);
    return {n * kv, n * kv, (mode == CpComm::Ring ? size_t(cp) : n) * dkv};
}

namespace {

constexpr int kTagKv = 11, kTagDkv = 12;

struct Shape {
    int cp, r, B, L, C, NH, HS, KVC, W, KVW;
    size_t block() const { return size_t(B) * size_t(L) * size_t(KVW); }  // elements of one rank's K and V
};

Shape shape_of(const CpAttention& a) {
    const int NKV = a.NKV > 0 ? a.NKV : a.NH, HS = a.C / a.NH;
    return {a.group ? a.group->size() : 1, a.group ? a.group->rank() : 0, a.B, a.split->local(), a.C, a.NH, HS,
            NKV * HS, a.C + 2 * NKV * HS, 2 * NKV * HS};
}

// This rank's keys and values, (B, L, 2 KVC) of t, from its qkv rows.
void pack_kv(void* dst, const void* qkv, DType t, const Shape& s) {
    const size_t e = dtype_bytes(t);
    for (size_t row = 0; row < size_t(s.B) * size_t(s.L); row++)
        std::memcpy(static_cast<char*>(dst) + row * size_t(s.KVW) * e,
                    static_cast<const char*>(qkv) + (row * size_t(s.W) + size_t(s.C)) * e, size_t(s.KVW) * e);
}

// dqkv's key/value columns += dkv (B, L, 2 KVC)
void add_kv_grad(float* dqkv, const float* dkv, const Shape& s) {
    for (size_t row = 0; row < size_t(s.B) * size_t(s.L); row++) {
        float* d = dqkv + row * size_t(s.W) + size_t(s.C);
        const float* g = dkv + row * size_t(s.KVW);
        for (int j = 0; j < s.KVW; j++) d[j] += g[j];
    }
}

// this rank's queries against the keys and values of rank `src`, lying in kv (B, L) rows ldkv apart
FlashBlockPair pair_with(const CpAttention& a, const Shape& s, const void* qkv, const void* kv, int ldkv, int src) {
    return FlashBlockPair{qkv, s.W, kv, ldkv, a.t, a.split->positions(s.r), a.split->positions(src),
                          s.B, s.L, s.L, s.C, s.NH, a.NKV, a.causal, a.doc_start};
}
// ... of a block received: (B, L, 2 KVC)
FlashBlockPair pair_with(const CpAttention& a, const Shape& s, const void* qkv, const void* kv, int src) {
    return pair_with(a, s, qkv, kv, s.KVW, src);
}
// ... of its own rows, where they lie in qkv (from column C)
FlashBlockPair own_pair(const CpAttention& a, const Shape& s, const void* qkv) {
    return pair_with(a, s, qkv, static_cast<const char*>(qkv) + size_t(s.C) * dtype_bytes(a.t), s.W, s.r);
}

// the ring step's source: at step k a rank holds the keys of the rank k places before it
int source(const Shape& s, int k) { return (s.r - k + s.cp) % s.cp; }

// ring: step k computes with the block in hand while the next one arrives (step 0: this rank's own, read
// where it lies; packed only to be sent)
void ring_forward(const CpAttention& a, const Shape& s, FlashState st, const void* qkv) {
    CpBuffers& b = *a.buffers;
    const size_t bytes = s.block() * dtype_bytes(a.t);
    if (s.cp > 1) pack_kv(b.kv[0].data(), qkv, a.t, s);
    int cur = 0;
    for (int k = 0; k < s.cp; k++) {
        const int ticket = k + 1 < s.cp ? a.group->ring_start(b.kv[cur].data(), b.kv[1 - cur].data(), bytes, kTagKv) : -1;
        kernels::flash_block_forward(st, k == 0 ? own_pair(a, s, qkv) : pair_with(a, s, qkv, b.kv[cur].data(), source(s, k)));
        if (ticket >= 0) a.group->ring_wait(ticket), cur = 1 - cur;
    }
}

// allgather: every block at once, then the pairs in the ring's order
void gathered_forward(const CpAttention& a, const Shape& s, FlashState st, const void* qkv) {
    CpBuffers& b = *a.buffers;
    const size_t bytes = s.block() * dtype_bytes(a.t);
    pack_kv(b.kv[0].data() + size_t(s.r) * bytes, qkv, a.t, s);
    a.group->all_gather_bytes(b.kv[0].data() + size_t(s.r) * bytes, b.kv[0].data(), bytes);
    for (int k = 0; k < s.cp; k++) {
        const int src = source(s, k);
        kernels::flash_block_forward(st, pair_with(a, s, qkv, b.kv[0].data() + size_t(src) * bytes, src));
    }
}

// ring backward: the keys travel as in the forward; the dK/dV of the block in hand, after this rank's
// queries added theirs, travels on behind it and, after the last step, reaches its owner
void ring_backward(const CpAttention& a, const Shape& s, float* dqkv, const float* dout, const void* qkv,
                   const float* lse) {
    if (s.cp == 1) {  // one rank (document masks alone): its dK/dV straight into dqkv's columns
        kernels::flash_block_backward(dqkv, s.W, dqkv + s.C, s.W, dout, lse, a.buffers->D.data(), own_pair(a, s, qkv));
        return;
    }
    CpBuffers& b = *a.buffers;
    const size_t bytes = s.block() * dtype_bytes(a.t), dbytes = s.block() * sizeof(float);
    pack_kv(b.kv[0].data(), qkv, a.t, s);
    std::fill(b.dkv[0].begin(), b.dkv[0].end(), 0.0f);
    int cur = 0, dcur = 0, dticket = -1;
    for (int k = 0; k < s.cp; k++) {
        const int ticket = k + 1 < s.cp ? a.group->ring_start(b.kv[cur].data(), b.kv[1 - cur].data(), bytes, kTagKv) : -1;
        if (dticket >= 0) a.group->ring_wait(dticket), dcur = 1 - dcur;  // the dK/dV of this step's block
        kernels::flash_block_backward(dqkv, s.W, b.dkv[dcur].data(), s.KVW, dout, lse, b.D.data(),
                                      k == 0 ? own_pair(a, s, qkv) : pair_with(a, s, qkv, b.kv[cur].data(), source(s, k)));
        dticket = a.group->ring_start(b.dkv[dcur].data(), b.dkv[1 - dcur].data(), dbytes, kTagDkv);
        if (ticket >= 0) a.group->ring_wait(ticket), cur = 1 - cur;
    }
    a.group->ring_wait(dticket);  // this rank's own block, every rank's queries in it
    add_kv_grad(dqkv, b.dkv[1 - dcur].data(), s);
}

void gathered_backward(const CpAttention& a, const Shape& s, float* dqkv, const float* dout, const void* qkv,
                       const float* lse) {
    CpBuffers& b = *a.buffers;
    const size_t bytes = s.block() * dtype_bytes(a.t);
    pack_kv(b.kv[0].data() + size_t(s.r) * bytes, qkv, a.t, s);
    a.group->all_gather_bytes(b.kv[0].data() + size_t(s.r) * bytes, b.kv[0].data(), bytes);
    std::fill(b.dkv[0].begin(), b.dkv[0].end(), 0.0f);
    for (int k = 0; k < s.cp; k++) {
        const int src = source(s, k);
        kernels::flash_block_backward(dqkv, s.W, b.dkv[0].data() + size_t(src) * s.block(), s.KVW, dout, lse, b.D.data(),
                                      pair_with(a, s, qkv, b.kv[0].data() + size_t(src) * bytes, src));
    }
    a.group->reduce_scatter_sum(b.dkv[0].data(), b.dkv[1].data(), s.block());
    add_kv_grad(dqkv, b.dkv[1].data(), s);
}

}  // namespace

void cp_attention_forward(const CpAttention& a, void* out, float* lse, const void* qkv) {
    const Shape s = shape_of(a);
    CpBuffers& b = *a.buffers;
    const FlashState st{b.o.data(), b.m.data(), b.l.data()};
    kernels::flash_state_reset(st, s.B, s.NH, s.L, s.HS);
    if (a.mode == CpComm::Ring || s.cp == 1) ring_forward(a, s, st, qkv);
    else gathered_forward(a, s, st, qkv);
    kernels::flash_state_finish(out, lse, st, a.t, s.B, s.L, s.C, s.NH);
}

void cp_attention_backward(const CpAttention& a, float* dqkv, const float* dout, const void* qkv, const void* out,
                           const float* lse) {
    const Shape s = shape_of(a);
    std::fill(dqkv, dqkv + size_t(s.B) * size_t(s.L) * size_t(s.W), 0.0f);
    kernels::flash_block_delta(a.buffers->D.data(), dout, out, a.t, s.B, s.L, s.C, s.NH);
    if (a.mode == CpComm::Ring || s.cp == 1) ring_backward(a, s, dqkv, dout, qkv, lse);
    else gathered_backward(a, s, dqkv, dout, qkv, lse);
}

}  // namespace shardlm::model
