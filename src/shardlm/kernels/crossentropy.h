// kernels/crossentropy.h: softmax + cross-entropy over the vocabulary, fused with its backward
// (llm.c's fused classifier): the (N, Vp) logits buffer is overwritten by its gradient, so the
// probabilities are never stored. Only the first V columns are real classes; columns V..Vp-1 are
// vocabulary padding, excluded from the softmax, and get gradient 0.
#pragma once
#include <cstddef>

namespace shardlm::kernels {

// losses(N) = logsumexp(logits[n, :V]) - logits[n, targets[n]]          (=)
// logits(N,Vp) <- dloss * (softmax(logits[n, :V]) - onehot(targets[n]))  (in place; padding -> 0)
// With dlogits_bf16 (N, Vp): the gradient is written there instead, rounded to bf16 (for the bf16
// head backward, matmul_backward_bf16), and logits is left holding scratch.
void crossentropy_forward_backward(float* logits, float* losses, const int* targets,
                                   int N, int V, int Vp, float dloss, unsigned short* dlogits_bf16 = nullptr);

// Forward only (evaluation): losses(N) =, logits untouched.
void crossentropy_forward(float* losses, const float* logits, const int* targets, int N, int V, int Vp);

// ---- A block of columns at a time (the chunked head of bf16 products, model/head.cpp) -------------
// The head computes a block of rows' logits a block of columns at a time, and each block's statistics are
// taken while its logits are still in cache (the online softmax of FlashAttention's rows): per row the
// running maximum m and sum s of exp(x - m) over the blocks so far, and each block's own maximum mb; the
// block's exponentials exp(x - mb) go straight to the bf16 gradient's place. Once every block is seen, a
// pass over the bf16 gradient alone scales each block's exponentials by dloss exp(mb - m) / s (the target's
// from its unrounded exponential, minus dloss). The fp32 logits never leave the cache and the gradient is
// written and read in bf16: about half the memory traffic of crossentropy_forward_backward's passes over
// whole rows. The losses equal its to fp32 rounding (not to the bit: the sum is taken per block, then
// rescaled), the gradient to bf16 rounding (it is rounded twice); each row's bits depend on the block
// width only, never on the rows around it or the threads.
struct CeRowStats {
    // per row: the running maximum, the sum of exp(x - m), the target's logit and its exp(x - mb)
    float *m, *s, *xt, *et;
};
void ce_rows_start(const CeRowStats& st, int rows);  // m = -inf, s = xt = et = 0
// x (rows, width): logits of columns [c0, c0 + width), of which the first n are real classes (V - c0, clamped
// to [0, width]). mb(rows) <- each row's maximum over the block; st updated; with e (rows, lde apart, the
// block's first column): e <- bf16(exp(x - mb)) over the real columns, 0 over the padding [n, width).
void ce_block_stats(const float* x, unsigned short* e, size_t lde, float* mb, const CeRowStats& st, const int* targets,
                    int rows, int n, int width, int c0);
// losses(rows) = m + log(s) - xt, after the last block
void ce_rows_loss(float* losses, const CeRowStats& st, int rows);
// After the last block, the gradient in place of e (rows, lde apart, the real columns [0, V) as ce_block_stats
// wrote them, block b at columns [b width, (b + 1) width) with its maxima at mb + b rows): bf16 of
// dloss * exp(x - m) / s, - dloss at the target
void ce_rows_grad(unsigned short* e, size_t lde, const float* mb, int width, const CeRowStats& st, const int* targets,
                  int rows, int V, float dloss);

// Vocabulary-parallel cross-entropy (Megatron): this rank holds columns [v0, v0 + Vp_loc) of the
// padded vocabulary, of which the first Vreal are real classes (V - v0, clamped to [0, Vp_loc]).
// The caller reduces across the tensor-parallel group between the steps:
//   1. vocab_parallel_max: mx(N) = max over this rank's real columns (-inf if none)  -> all-reduce max
//   2. vocab_parallel_sums: stats(2N) = [sum of exp(x - mx) over real columns | the target's logit if
//      this rank holds it, else 0]; with store_exp the exponentials overwrite the logits -> all-reduce sum
//   3. vocab_parallel_loss: losses(N) = mx + log(sum) - target logit
//   4. vocab_parallel_grad (after 2 with store_exp): logits <- dloss * (softmax - onehot), padding 0;
//      with dlogits_bf16 (N, Vp_loc) the gradient goes there in bf16 instead.
void vocab_parallel_max(float* mx, const float* logits, int N, int Vreal, int Vp_loc);
void vocab_parallel_sums(float* stats, float* logits, const int* targets, const float* mx, int N, int Vreal,
                         int Vp_loc, int v0, bool store_exp);
void vocab_parallel_loss(float* losses, const float* mx, const float* stats, int N);
void vocab_parallel_grad(float* logits, const int* targets, const float* stats, int N, int Vreal, int Vp_loc, int v0,
                         float dloss, unsigned short* dlogits_bf16 = nullptr);

}  // namespace shardlm::kernels
