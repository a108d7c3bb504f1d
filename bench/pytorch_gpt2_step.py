#!/usr/bin/python3
"""PyTorch peer benchmark: GPT-2 124M training step on CPU (random tokens), fp32 or bf16 autocast.

    OPENBLAS_CORETYPE=... /usr/bin/python3 bench/pytorch_gpt2_step.py \
        --batch 4 --seq 64 --threads 2 --steps 10 --warmup 2

Uses the same model definition as the C++ reference fixtures
(tools/reference/gpt2_torch.py). Each timed step: zero_grad(set_to_none=True),
forward, loss, backward, clip_grad_norm_(1.0), AdamW step (foreach=True). With --autocast bf16 the
forward and loss run under torch.autocast("cpu", dtype=torch.bfloat16) (PyTorch's mixed precision on
CPU: bf16 matmuls on oneDNN, fp32 parameters, gradients and optimiser). Prints one JSON line.
Environment (OPENBLAS_CORETYPE, GLIBC_TUNABLES, OMP_WAIT_POLICY) is the caller's.
"""
import argparse
import json
import os
import resource
import statistics
import sys
import time

import torch

sys.dont_write_bytecode = True  # keep the source tree clean
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..",
                                "tools", "reference"))
import gpt2_torch as G  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--seq", type=int, default=64)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--autocast", choices=["none", "bf16"], default="none")
    ap.add_argument("--attn", choices=["manual", "sdpa"], default="manual",
                    help="manual: the reference model's (B, nh, T, T) softmax; sdpa: 1.13's private "
                         "F._scaled_dot_product_attention(is_causal=True) (1.13 has no public SDPA)")
    ap.add_argument("--n-positions", type=int, default=1024)
    args = ap.parse_args()
    if args.attn == "sdpa":
        import torch.nn.functional as F

        def sdpa_forward(self, x):
            B, T, C = x.shape
            nh, hs = self.n_head, C // self.n_head
            q, k, v = self.c_attn(x).split(C, dim=2)
            q, k, v = (t.view(B, T, nh, hs).transpose(1, 2) for t in (q, k, v))
            y = F._scaled_dot_product_attention(q, k, v, None, 0.0, False, True)[0]
            return self.c_proj(y.transpose(1, 2).contiguous().view(B, T, C))
        G.CausalSelfAttention.forward = sdpa_forward

    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    cfg = G.GPTConfig(n_layer=12, n_head=12, n_embd=768, vocab_size=50257, n_positions=args.n_positions)
    assert args.seq <= cfg.n_positions
    model = G.GPT(cfg).train()
    opt = torch.optim.AdamW(G.param_groups(model, 0.1), lr=6e-4, betas=(0.9, 0.95),
                            eps=1e-8, foreach=True)
    B, T = args.batch, args.seq
    gen = torch.Generator().manual_seed(args.seed + 1)

    def batch():
        d = torch.randint(0, cfg.vocab_size, (B, T + 1), generator=gen)
        return d[:, :T].contiguous(), d[:, 1:].contiguous()

    def step(x, y):
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.autocast == "bf16"):
            _, loss = model(x, y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)  # shardlm's step clips too
        opt.step()
        return loss.item()

    for _ in range(args.warmup):
        step(*batch())
    times = []
    for _ in range(args.steps):
        x, y = batch()  # data generation excluded from timing
        t0 = time.perf_counter()
        step(x, y)
        times.append(time.perf_counter() - t0)

    total = sum(times)
    print(json.dumps({
        "impl": "pytorch",
        "autocast": args.autocast,
        "attn": args.attn,
        "B": B, "T": T,
        "threads": args.threads,
        "tokens_per_s": (B * T / statistics.median(times)) if times else None,  # median step, like shardlm
        "step_ms_median": statistics.median(times) * 1e3 if times else None,
        "step_ms_mean": statistics.mean(times) * 1e3 if times else None,
        "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0,
        "torch": torch.__version__,
        "blas_coretype": os.environ.get("OPENBLAS_CORETYPE"),
        "steps": len(times), "warmup": args.warmup,
    }))


if __name__ == "__main__":
    main()
