#!/usr/bin/python3
"""Self-check of the committed fixtures (reads them back only through the files).

    nice -n 10 /usr/bin/python3 tools/reference/check_fixtures.py [--dir tests/fixtures]

- safetensors format sanity (header padding, contiguous offsets, names/shapes vs config)
- model.safetensors -> reference forward reproduces logits/loss/grads/grad_norm
- HF Conv1D transpose convention checked with an independent numpy forward
  (y = x @ W + b with W stored [in, out]) of the whole network
- optimiser step3 tensors reproduced; optimizers.{json,safetensors} (the later optimisers) replayed
- gpt2_e2e: data.bin header/tokens, training replay reproduces losses/grad_norms/final
- if `transformers` is importable: GPT2LMHeadModel on the same files gives the same logits
- llama_tiny: the float64 training replayed from the files, its step-0 loss against an independent
  numpy LLaMA (RMSNorm, rotate_half RoPE, repeat_kv GQA, SwiGLU, nn.Linear [out, in] weights)
- mixtral_tiny, moe_variants, olmoe_tiny: the float64 training replayed in micro-batches from the files; each MoE layer's
  output on the first batch against a token-by-token loop over its choices (no dispatch by index)
Exits non-zero on failure.
"""
import argparse
import json
import math
import os
import struct
import sys

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.dont_write_bytecode = True  # keep the source tree clean
sys.path.insert(0, HERE)
import gpt2_torch as G  # noqa: E402
import llama_torch as LT  # noqa: E402
import make_fixtures as MF  # noqa: E402

FAILS = []
# --other-kernels: PyTorch runs other BLAS kernels than the fixtures were made with (OpenBLAS's SkylakeX,
# AVX-512): on an AVX2-only CPU its sums round differently, and Adam's normalised steps carry that
# into the parameters (measured on a Zen 3: 2e-6 after 3 optimiser steps, 3e-5 after the 10 steps of
# gpt2_e2e). The comparisons over several steps then allow ten times that; a wrong optimiser or model
# is off by 1e-3 and more.
STEPS_ATOL = {"opt": 1e-6, "e2e": 1e-6, "ext": 1e-6}


def check(cond, msg):
    print(("  ok   " if cond else "  FAIL ") + msg)
    if not cond:
        FAILS.append(msg)


def close(name, a, b, rtol=1e-5, atol=1e-6):
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    ok = a.shape == b.shape and np.allclose(a, b, rtol=rtol, atol=atol)
    err = float(np.max(np.abs(a - b))) if a.shape == b.shape and a.size else float("nan")
    check(ok, f"{name} (max abs err {err:.3g})")


def expected_shapes(cfg):
    C, V, P = cfg.n_embd, cfg.vocab_size, cfg.n_positions
    s = {"transformer.wte.weight": [V, C], "transformer.wpe.weight": [P, C]}
    for i in range(cfg.n_layer):
        p = f"transformer.h.{i}."
        s.update({p + "ln_1.weight": [C], p + "ln_1.bias": [C],
                  p + "attn.c_attn.weight": [C, 3 * C], p + "attn.c_attn.bias": [3 * C],
                  p + "attn.c_proj.weight": [C, C], p + "attn.c_proj.bias": [C],
                  p + "ln_2.weight": [C], p + "ln_2.bias": [C],
                  p + "mlp.c_fc.weight": [C, 4 * C], p + "mlp.c_fc.bias": [4 * C],
                  p + "mlp.c_proj.weight": [4 * C, C], p + "mlp.c_proj.bias": [C]})
    s.update({"transformer.ln_f.weight": [C], "transformer.ln_f.bias": [C]})
    return s


def check_format(path):
    raw = open(path, "rb").read()
    (n,) = struct.unpack("<Q", raw[:8])
    hdr = json.loads(raw[8:8 + n])
    meta = hdr.pop("__metadata__", None)
    end = 0
    for name, info in hdr.items():
        b, e = info["data_offsets"]
        ok = b == end and e - b == 4 * int(np.prod(info["shape"], dtype=np.int64))
        if not ok:
            break
        end = e
    check(n % 8 == 0 and meta == {"format": "pt"} and ok and 8 + n + end == len(raw),
          f"{os.path.basename(path)}: safetensors layout")


def load_dir(d):
    cfg = G.GPTConfig.from_hf_json(json.load(open(os.path.join(d, "config.json"))))
    check_format(os.path.join(d, "model.safetensors"))
    w, _ = G.load_safetensors(os.path.join(d, "model.safetensors"))
    exp = expected_shapes(cfg)
    check(set(w) == set(exp) and all(list(w[k].shape) == exp[k] for k in exp),
          f"{os.path.basename(d)}/model.safetensors: names and HF shapes")
    m = G.GPT(cfg)
    G.from_hf(m, w)
    return cfg, w, m


def numpy_forward(cfg, w, idx):
    """Independent forward straight from HF-layout arrays (Conv1D: x @ W[in,out] + b)."""
    f = lambda a: a.astype(np.float64)  # noqa: E731
    W = {k: f(v) for k, v in w.items()}
    B, T = idx.shape
    C, nh = cfg.n_embd, cfg.n_head
    hs = C // nh
    eps = cfg.layer_norm_epsilon

    def ln(x, g, b):
        mu = x.mean(-1, keepdims=True)
        var = ((x - mu) ** 2).mean(-1, keepdims=True)
        return (x - mu) / np.sqrt(var + eps) * g + b

    def gelu(x):
        return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))

    x = W["transformer.wte.weight"][idx] + W["transformer.wpe.weight"][:T][None]
    mask = np.tril(np.ones((T, T), dtype=bool))
    for i in range(cfg.n_layer):
        p = f"transformer.h.{i}."
        h = ln(x, W[p + "ln_1.weight"], W[p + "ln_1.bias"])
        qkv = h @ W[p + "attn.c_attn.weight"] + W[p + "attn.c_attn.bias"]
        y = np.empty((B, T, C))
        for hd in range(nh):
            q = qkv[..., hd * hs:(hd + 1) * hs]
            k = qkv[..., C + hd * hs:C + (hd + 1) * hs]
            v = qkv[..., 2 * C + hd * hs:2 * C + (hd + 1) * hs]
            a = q @ k.transpose(0, 2, 1) / math.sqrt(hs)
            a = np.where(mask, a, -np.inf)
            a = np.exp(a - a.max(-1, keepdims=True))
            a /= a.sum(-1, keepdims=True)
            y[..., hd * hs:(hd + 1) * hs] = a @ v
        x = x + y @ W[p + "attn.c_proj.weight"] + W[p + "attn.c_proj.bias"]
        h = ln(x, W[p + "ln_2.weight"], W[p + "ln_2.bias"])
        h = gelu(h @ W[p + "mlp.c_fc.weight"] + W[p + "mlp.c_fc.bias"])
        x = x + h @ W[p + "mlp.c_proj.weight"] + W[p + "mlp.c_proj.bias"]
    x = ln(x, W["transformer.ln_f.weight"], W["transformer.ln_f.bias"])
    return x @ W["transformer.wte.weight"].T


def np_ce(logits, targets):
    z = logits - logits.max(-1, keepdims=True)
    lse = np.log(np.exp(z).sum(-1))
    picked = np.take_along_axis(z, targets[..., None], -1)[..., 0]
    return float((lse - picked).mean())


def maybe_transformers(d, idx, logits_ref):
    try:
        import transformers  # noqa: F401
        from transformers import GPT2LMHeadModel
    except Exception:
        return
    hf = GPT2LMHeadModel.from_pretrained(d).eval()
    with torch.no_grad():
        out = hf(torch.from_numpy(idx.astype(np.int64))).logits.numpy()
    close(f"{os.path.basename(d)}: transformers GPT2LMHeadModel logits", out, logits_ref,
          rtol=1e-4, atol=1e-5)


def check_tiny(d):
    print(f"[{d}]")
    cfg, w, m = load_dir(d)
    check_format(os.path.join(d, "reference.safetensors"))
    ref, _ = G.load_safetensors(os.path.join(d, "reference.safetensors"))
    hyper = json.load(open(os.path.join(d, "reference.json")))
    x = torch.from_numpy(ref["inputs"].astype(np.int64))
    y = torch.from_numpy(ref["targets"].astype(np.int64))
    check(list(ref["inputs"].shape) == [hyper["B"], hyper["T"]], "inputs shape == [B,T]")

    logits, loss = m(x, y)
    loss.backward()
    close("torch forward logits", logits.detach().numpy(), ref["logits"])
    close("torch forward loss", [loss.item()], ref["loss"])
    close("grad_norm", [G.global_grad_norm(m).item()], ref["grad_norm"])
    g = G.grads_to_hf(m)
    close("all grad.* tensors", np.concatenate([g[k].ravel() for k in sorted(g)]),
          np.concatenate([ref[k].ravel() for k in sorted(g)]))
    check(set(k for k in ref if k.startswith("grad.")) == set(g), "grad.* name set")

    npl = numpy_forward(cfg, w, ref["inputs"])
    close("independent numpy forward (HF Conv1D layout) logits", npl, ref["logits"],
          rtol=1e-4, atol=1e-5)
    close("independent numpy loss", [np_ce(npl, ref["targets"])], ref["loss"], rtol=1e-5)
    maybe_transformers(d, ref["inputs"], ref["logits"])

    for oname in MF.OPTIMISERS:
        mm = G.GPT(cfg)
        G.from_hf(mm, w)
        opt = MF.make_optimizer(mm, oname)
        for _ in range(hyper["steps"]):
            opt.zero_grad(set_to_none=True)
            mm(x, y)[1].backward()
            opt.step()
        got = G.to_hf(mm)
        pre = f"{oname}.step{hyper['steps']}."
        names = sorted(got)
        check(all(pre + n in ref for n in names), f"{pre}* names present")
        close(f"{oname} params after {hyper['steps']} steps",
              np.concatenate([got[n].ravel() for n in names]),
              np.concatenate([ref[pre + n].ravel() for n in names]), atol=STEPS_ATOL["opt"])
        moved = max(float(np.abs(ref[pre + n] - w[n]).max()) for n in names if w[n].ndim == 1)
        check(moved > 1e-4, f"{oname}: 1-D params actually changed (max |d|={moved:.3g})")


def check_optimizers_ext(d):
    print(f"[{d}: optimizers.json]")
    check_format(os.path.join(d, "optimizers.safetensors"))
    ref, _ = G.load_safetensors(os.path.join(d, "optimizers.safetensors"))
    hyper = json.load(open(os.path.join(d, "optimizers.json")))
    cfg, w, _ = load_dir(d)
    base, _ = G.load_safetensors(os.path.join(d, "reference.safetensors"))
    x = torch.from_numpy(base["inputs"].astype(np.int64))
    y = torch.from_numpy(base["targets"].astype(np.int64))
    check(set(hyper["settings"]) == set(MF.OPTIMISERS_EXT), "optimizers.json names == OPTIMISERS_EXT")
    # made with one instruction set's BLAS kernels (blas_isa): another's rounding, over 8 steps, as --other-kernels
    atol = STEPS_ATOL["ext"] if hyper.get("blas_isa") == MF.blas_isa() else max(STEPS_ATOL["ext"], 3e-4)
    for name in MF.OPTIMISERS_EXT:
        if atol > STEPS_ATOL["ext"] and hyper["settings"][name]["optimizer"] == "adam8bit":
            atol_name = hyper["settings"][name]["lr"]  # other roundings flip 8-bit codes: steps differ by a fraction of lr
        else:
            atol_name = atol
        losses, m = MF.run_ext(cfg, w, x, y, name, hyper["steps"])
        close(f"{name} losses", losses, hyper["losses_per_optimizer"][name], atol=atol_name)
        got = G.to_hf(m)
        pre = f"{name}.step{hyper['steps']}."
        names = sorted(got)
        if hyper["settings"][name]["optimizer"] == "lion":  # sign(noise) on the key bias (make_fixtures.py)
            C = cfg.n_embd
            for n in names:
                if n.endswith("attn.c_attn.bias"):
                    ref[pre + n] = ref[pre + n].copy()
                    ref[pre + n][C:2 * C] = got[n][C:2 * C]
        check(all(pre + n in ref for n in names), f"{pre}* names present")
        close(f"{name} params after {hyper['steps']} steps", np.concatenate([got[n].ravel() for n in names]),
              np.concatenate([ref[pre + n].ravel() for n in names]), atol=atol_name)
        moved = max(float(np.abs(ref[pre + n] - w[n]).max()) for n in names if w[n].ndim == 1)
        check(moved > 1e-4, f"{name}: 1-D params actually changed (max |d|={moved:.3g})")
    for kind in ("dynamic", "linear"):
        for sg in ("signed", "unsigned"):
            c = ref[f"code.{kind}.{sg}"]
            check(c.shape == (256,) and np.all(np.diff(c) >= 0) and c.max() == 1.0 and 0.0 in c
                  and (c.min() == -1.0 if sg == "signed" else c.min() == 0.0), f"code.{kind}.{sg}: 256 sorted values, 0 and 1 in it")


def replay(m, opt, tt, hp):
    """The fixture's training steps (expected.json "hyper": G rows of T + 1 tokens in order, global
    norm clipping): the first batch, and every step's loss and gradient norm."""
    Gr, T = hp["global_batch_rows"], hp["T"]
    first, losses, norms = None, [], []
    for k in range(hp["steps"]):
        b = torch.stack([tt[(k * Gr + j) * T:(k * Gr + j) * T + T + 1] for j in range(Gr)])
        first = b if first is None else first
        opt.zero_grad(set_to_none=True)
        _, loss = m(b[:, :T], b[:, 1:])
        loss.backward()
        norms.append(torch.nn.utils.clip_grad_norm_(m.parameters(), hp["grad_clip"]).item())
        losses.append(loss.item())
        opt.step()
    return first, losses, norms


def check_e2e(d):
    print(f"[{d}]")
    cfg, w, m = load_dir(d)
    exp = json.load(open(os.path.join(d, "expected.json")))
    hp = exp["hyper"]
    raw = open(os.path.join(d, "data.bin"), "rb").read()
    hdr = np.frombuffer(raw[:1024], dtype="<i4")
    toks = np.frombuffer(raw[1024:], dtype="<u2").astype(np.int64)
    check(hdr[0] == 20240520 and hdr[1] == 1 and hdr[2] == len(toks) and not hdr[3:].any(),
          f"data.bin header (magic, version, {len(toks)} tokens)")
    Gr, T = hp["global_batch_rows"], hp["T"]
    check(len(toks) >= hp["steps"] * Gr * T + 1 and toks.max() < cfg.vocab_size,
          "data.bin has enough in-vocab tokens")
    opt = torch.optim.AdamW(G.param_groups(m, hp["weight_decay"]), lr=hp["lr"],
                            betas=tuple(hp["betas"]), eps=hp["eps"], foreach=False)
    tt = torch.from_numpy(toks)
    first, losses, norms = replay(m, opt, tt, hp)
    close("step-0 loss vs numpy forward", [np_ce(numpy_forward(cfg, w, first[:, :T].numpy()), first[:, 1:].numpy())],
          [losses[0]], rtol=1e-5)
    close("losses", losses, exp["losses"])
    close("grad_norms", norms, exp["grad_norms"])
    check(exp["losses"][-1] < exp["losses"][0] - 0.2, "loss decreases over training")
    check_format(os.path.join(d, "final.safetensors"))
    fin, _ = G.load_safetensors(os.path.join(d, "final.safetensors"))
    got = G.to_hf(m)
    close("final params", np.concatenate([got[n].ravel() for n in sorted(got)]),
          np.concatenate([fin[n].ravel() for n in sorted(got)]), atol=STEPS_ATOL["e2e"])


def numpy_llama_loss(c, w, x, y):
    """An independent float64 LLaMA forward in numpy (HF LlamaForCausalLM's names and layouts)."""
    B, T = x.shape
    d = c.n_embd // c.n_head
    g = c.n_head // c.n_kv_head

    def rms(h, wt):
        return h / np.sqrt((h * h).mean(-1, keepdims=True) + c.eps) * wt

    inv = 1.0 / c.theta ** (np.arange(0, d, 2) / d)
    ang = np.outer(np.arange(T), inv)
    cos, sin = np.cos(ang), np.sin(ang)

    def rope(q):  # q (B, heads, T, d): pairs (i, i + d/2)
        a, b = q[..., : d // 2], q[..., d // 2:]
        return np.concatenate([a * cos - b * sin, b * cos + a * sin], -1)

    def lin(h, name):
        return h @ w[name].astype(np.float64).T

    h = w["model.embed_tokens.weight"].astype(np.float64)[x]
    mask = np.triu(np.ones((T, T), dtype=bool), 1)
    for l in range(c.n_layer):
        p = f"model.layers.{l}."
        a = rms(h, w[p + "input_layernorm.weight"])
        q = rope(lin(a, p + "self_attn.q_proj.weight").reshape(B, T, c.n_head, d).transpose(0, 2, 1, 3))
        k = rope(lin(a, p + "self_attn.k_proj.weight").reshape(B, T, c.n_kv_head, d).transpose(0, 2, 1, 3))
        v = lin(a, p + "self_attn.v_proj.weight").reshape(B, T, c.n_kv_head, d).transpose(0, 2, 1, 3)
        k, v = np.repeat(k, g, axis=1), np.repeat(v, g, axis=1)
        s = q @ k.transpose(0, 1, 3, 2) / math.sqrt(d)
        s[..., mask] = -np.inf
        s = np.exp(s - s.max(-1, keepdims=True))
        s /= s.sum(-1, keepdims=True)
        o = (s @ v).transpose(0, 2, 1, 3).reshape(B, T, c.n_head * d)
        h = h + lin(o, p + "self_attn.o_proj.weight")
        m = rms(h, w[p + "post_attention_layernorm.weight"])
        gate = lin(m, p + "mlp.gate_proj.weight")
        h = h + lin(gate / (1 + np.exp(-gate)) * lin(m, p + "mlp.up_proj.weight"), p + "mlp.down_proj.weight")
    logits = lin(rms(h, w["model.norm.weight"]), "lm_head.weight")
    return np_ce(logits, y)


def load_llama_fixture(d, cfg, kind):
    """A LLaMA-family fixture directory: its config and files checked; the float64 model loaded from
    model.safetensors, the initial weights, expected.json and the tokens."""
    print(f"[{d}]")
    check(json.load(open(os.path.join(d, "config.json"))) == cfg.hf_json(), f"config.json is the fixture's {kind} config")
    for f in ("model.safetensors", "final.safetensors"):
        check_format(os.path.join(d, f))
    w, _ = G.load_safetensors(os.path.join(d, "model.safetensors"))
    m = LT.Llama(cfg).to(torch.float64)
    check(set(w) == set(m.hf_tensors()), f"model.safetensors has the HF {kind} tensors")
    m.load_hf(w)
    exp = json.load(open(os.path.join(d, "expected.json")))
    raw = open(os.path.join(d, "data.bin"), "rb").read()
    tt = torch.from_numpy(np.frombuffer(raw[1024:], dtype="<u2").astype(np.int64))
    return m, w, exp, tt


def check_llama(d):
    cfg = MF.LLAMA_CFG
    m, w, exp, tt = load_llama_fixture(d, cfg, "LLaMA")
    hp = exp["hyper"]
    opt = torch.optim.AdamW(LT.param_groups(m, hp["weight_decay"]), lr=hp["lr"], betas=tuple(hp["betas"]),
                            eps=hp["eps"], foreach=False)
    T = hp["T"]
    first, losses, norms = replay(m, opt, tt, hp)
    close("step-0 loss vs the numpy LLaMA", [numpy_llama_loss(cfg, w, first[:, :T].numpy(), first[:, 1:].numpy())],
          [losses[0]], rtol=1e-12, atol=0)
    close("losses (float64)", losses, exp["losses"], rtol=1e-10, atol=0)
    close("grad_norms (float64)", norms, exp["grad_norms"], rtol=1e-10, atol=0)
    check(exp["losses"][-1] < exp["losses"][0] - 0.2, "loss decreases over training")
    fin, _ = G.load_safetensors(os.path.join(d, "final.safetensors"))
    got = m.hf_tensors()
    close("final params", np.concatenate([got[n].ravel() for n in sorted(got)]),
          np.concatenate([fin[n].ravel() for n in sorted(got)]), atol=1e-7)


def moe_by_token(moe, h):
    """SparseMoe's output one token at a time: its router, top k, gates, capacity mask, experts."""
    c = moe.c
    z = moe.gate(h)
    p = z.softmax(dim=-1) if c.router == "softmax" else torch.sigmoid(z)
    top_p, top_i = torch.topk(p, c.top_k, dim=-1)
    keep = moe.keep_mask(p, top_i)
    out = []
    for t in range(h.shape[0]):
        y = moe.shared_experts(h[t:t + 1])[0] if c.n_shared else torch.zeros_like(h[t])
        norm = top_p[t].sum() if c.norm_topk else 1.0
        for k in range(c.top_k):
            if keep[t, k]:
                y = y + top_p[t, k] / norm * moe.experts[int(top_i[t, k])](h[t:t + 1])[0]
        out.append(y)
    return torch.stack(out)


def check_moe(d, cfg, micro):
    m, _, exp, tt = load_llama_fixture(d, cfg, "OLMoE" if cfg.olmoe else "Mixtral")
    hp = exp["hyper"]
    Gr, T = hp["global_batch_rows"], hp["T"]
    with torch.no_grad():
        h = torch.randn(Gr * T, cfg.n_embd, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
        for layer in m.layers:
            if layer.c_moe():
                close("MoE layer against the token-by-token loop", layer.ffn()(h).numpy().ravel(),
                      moe_by_token(layer.ffn(), h).numpy().ravel(), rtol=1e-12, atol=1e-14)
    opt = torch.optim.AdamW(LT.param_groups(m, hp["weight_decay"]), lr=hp["lr"], betas=tuple(hp["betas"]),
                            eps=hp["eps"], foreach=False)
    losses, norms = [], []
    for k in range(hp["steps"]):
        b = torch.stack([tt[(k * Gr + j) * T:(k * Gr + j) * T + T + 1] for j in range(Gr)])
        opt.zero_grad(set_to_none=True)
        step = 0.0
        for i in range(Gr // micro):
            _, loss = m(b[i * micro:(i + 1) * micro, :T], b[i * micro:(i + 1) * micro, 1:])
            (((loss + m.moe_extra()) * micro) / Gr).backward()
            step += loss.item() * micro / Gr
        norms.append(torch.nn.utils.clip_grad_norm_(m.parameters(), hp["grad_clip"]).item())
        losses.append(step)
        opt.step()
    close("losses (float64)", losses, exp["losses"], rtol=1e-10, atol=0)
    close("grad_norms (float64)", norms, exp["grad_norms"], rtol=1e-10, atol=0)
    fin, _ = G.load_safetensors(os.path.join(d, "final.safetensors"))
    got = m.hf_tensors()
    close("final params", np.concatenate([got[n].ravel() for n in sorted(got)]),
          np.concatenate([fin[n].ravel() for n in sorted(got)]), atol=1e-7)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dir", default=os.path.join(MF.REPO, "tests", "fixtures"))
    ap.add_argument("--other-kernels", action="store_true",
                    help="PyTorch's BLAS is not the fixtures' (SkylakeX): allow its rounding over several steps")
    args = ap.parse_args()
    if args.other_kernels:
        STEPS_ATOL.update(opt=2e-5, e2e=3e-4, ext=3e-4)
        print("--other-kernels: comparisons over several optimiser steps allow 2e-5 (3 steps) and 3e-4 (10 steps)")
    MF.setup_determinism()
    check_tiny(os.path.join(args.dir, "gpt2_tiny"))
    check_optimizers_ext(os.path.join(args.dir, "gpt2_tiny"))
    check_e2e(os.path.join(args.dir, "gpt2_e2e"))
    check_llama(os.path.join(args.dir, "llama_tiny"))
    check_moe(os.path.join(args.dir, "mixtral_tiny"), MF.MIXTRAL_CFG, MF.MIXTRAL_MICRO)
    check_moe(os.path.join(args.dir, "moe_variants"), MF.MOE_VARIANTS_CFG, MF.MIXTRAL_MICRO)
    check_moe(os.path.join(args.dir, "olmoe_tiny"), MF.OLMOE_CFG, MF.MIXTRAL_MICRO)
    print("FAILED: %d check(s)" % len(FAILS) if FAILS else "all checks passed")
    sys.exit(1 if FAILS else 0)


if __name__ == "__main__":
    main()
