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

}  // namespace shardlm::kernels
