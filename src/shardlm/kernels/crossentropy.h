// kernels/crossentropy.h: softmax + cross-entropy over the vocabulary, fused with its backward
// (llm.c's fused classifier): the (N, Vp) logits buffer is overwritten by its gradient, so the
// probabilities are never stored. Only the first V columns are real classes; columns V..Vp-1 are
// vocabulary padding, excluded from the softmax, and get gradient 0.
#pragma once

namespace shardlm::kernels {

// losses(N) = logsumexp(logits[n, :V]) - logits[n, targets[n]]          (=)
// logits(N,Vp) <- dloss * (softmax(logits[n, :V]) - onehot(targets[n]))  (in place; padding -> 0)
// With dlogits_bf16 (N, Vp): the gradient is written there instead, rounded to bf16 (for the bf16
// head backward, matmul_backward_bf16), and logits is left holding scratch.
void crossentropy_forward_backward(float* logits, float* losses, const int* targets,
                                   int N, int V, int Vp, float dloss, unsigned short* dlogits_bf16 = nullptr);

// Forward only (evaluation): losses(N) =, logits untouched.
void crossentropy_forward(float* losses, const float* logits, const int* targets, int N, int V, int Vp);

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
