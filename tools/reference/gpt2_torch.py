"""Minimal nanoGPT-style GPT-2 in plain PyTorch (fp32), plus a tiny safetensors
reader/writer and HF GPT-2 name/layout conversion.

Shared by tools/reference/make_fixtures.py, tools/reference/check_fixtures.py and
bench/pytorch_gpt2_step.py so there is exactly one model definition.

Internal modules use nn.Linear ([out, in] weights). HF GPT-2 uses Conv1D, which
stores weights as [in, out]; to_hf()/from_hf() transpose the 2-D Linear weights.
The LM head is tied: lm_head.weight IS transformer.wte.weight (no bias).
"""
import contextlib
import json
import math
import struct
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class GPTConfig:
    n_layer: int
    n_head: int
    n_embd: int
    vocab_size: int
    n_positions: int
    layer_norm_epsilon: float = 1e-5

    def to_hf_json(self):
        return {
            "model_type": "gpt2",
            "architectures": ["GPT2LMHeadModel"],
            "n_layer": self.n_layer,
            "n_head": self.n_head,
            "n_embd": self.n_embd,
            "vocab_size": self.vocab_size,
            "n_positions": self.n_positions,
            "n_ctx": self.n_positions,
            "layer_norm_epsilon": self.layer_norm_epsilon,
            "activation_function": "gelu_new",
            "resid_pdrop": 0,
            "embd_pdrop": 0,
            "attn_pdrop": 0,
            "tie_word_embeddings": True,
        }

    @staticmethod
    def from_hf_json(d):
        return GPTConfig(n_layer=d["n_layer"], n_head=d["n_head"], n_embd=d["n_embd"],
                         vocab_size=d["vocab_size"], n_positions=d["n_positions"],
                         layer_norm_epsilon=d.get("layer_norm_epsilon", 1e-5))


class CausalSelfAttention(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        C = cfg.n_embd
        assert C % cfg.n_head == 0
        self.n_head = cfg.n_head
        self.c_attn = nn.Linear(C, 3 * C, bias=True)   # q, k, v concatenated (out dim)
        self.c_proj = nn.Linear(C, C, bias=True)
        mask = torch.tril(torch.ones(cfg.n_positions, cfg.n_positions, dtype=torch.bool))
        self.register_buffer("mask", mask.view(1, 1, cfg.n_positions, cfg.n_positions),
                             persistent=False)

    def forward(self, x):
        B, T, C = x.shape
        nh = self.n_head
        hs = C // nh
        q, k, v = self.c_attn(x).split(C, dim=2)
        q = q.view(B, T, nh, hs).transpose(1, 2)  # (B, nh, T, hs)
        k = k.view(B, T, nh, hs).transpose(1, 2)
        v = v.view(B, T, nh, hs).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hs))
        att = att.masked_fill(~self.mask[:, :, :T, :T], float("-inf"))
        att = F.softmax(att.float(), dim=-1).to(v.dtype)
        y = att @ v  # (B, nh, T, hs)
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        return self.c_proj(y)


class MLP(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        C = cfg.n_embd
        self.c_fc = nn.Linear(C, 4 * C, bias=True)
        self.c_proj = nn.Linear(4 * C, C, bias=True)

    def forward(self, x):
        return self.c_proj(F.gelu(self.c_fc(x), approximate="tanh"))


class Block(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.ln_1 = nn.LayerNorm(cfg.n_embd, eps=cfg.layer_norm_epsilon)
        self.attn = CausalSelfAttention(cfg)
        self.ln_2 = nn.LayerNorm(cfg.n_embd, eps=cfg.layer_norm_epsilon)
        self.mlp = MLP(cfg)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        x = x + self.mlp(self.ln_2(x))
        return x


class GPT(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.transformer = nn.ModuleDict(dict(
            wte=nn.Embedding(cfg.vocab_size, cfg.n_embd),
            wpe=nn.Embedding(cfg.n_positions, cfg.n_embd),
            h=nn.ModuleList([Block(cfg) for _ in range(cfg.n_layer)]),
            ln_f=nn.LayerNorm(cfg.n_embd, eps=cfg.layer_norm_epsilon),
        ))
        self.lm_head = nn.Linear(cfg.n_embd, cfg.vocab_size, bias=False)
        self.lm_head.weight = self.transformer.wte.weight  # tied
        self.init_weights()

    @torch.no_grad()
    def init_weights(self):
        for m in self.modules():
            if isinstance(m, nn.Linear):
                if m is self.lm_head:
                    continue  # tied to wte
                nn.init.normal_(m.weight, mean=0.0, std=0.02)
                if m.bias is not None:
                    nn.init.zeros_(m.bias)
            elif isinstance(m, nn.Embedding):
                nn.init.normal_(m.weight, mean=0.0, std=0.02)
            elif isinstance(m, nn.LayerNorm):
                nn.init.ones_(m.weight)
                nn.init.zeros_(m.bias)

    def forward(self, idx, targets=None):
        B, T = idx.shape
        assert T <= self.cfg.n_positions
        pos = torch.arange(T, dtype=torch.long, device=idx.device)
        x = self.transformer.wte(idx) + self.transformer.wpe(pos)
        for blk in self.transformer.h:
            x = blk(x)
        x = self.transformer.ln_f(x)
        logits = self.lm_head(x)
        loss = None
        if targets is not None:
            loss = F.cross_entropy(logits.view(-1, logits.size(-1)).float(),
                                   targets.reshape(-1), reduction="mean")
        return logits, loss


# ---------------------------------------------------------------------------
# bf16 matmul precision (shardlm's --matmul-precision bf16, src/shardlm/kernels/gemm/gemm.h)

def _bf16(t):
    """Round to bf16 (nearest even) and back to fp32."""
    return t.to(torch.bfloat16).to(torch.float32)


class _Bf16Linear(torch.autograd.Function):
    """y = bf16(x) @ bf16(w)^T + b, accumulated in fp32; the backward rounds dy the same way
    before both of its products. Bias and bias gradient stay fp32."""

    @staticmethod
    def forward(ctx, x, w, b):
        xr, wr = _bf16(x), _bf16(w)
        ctx.save_for_backward(xr, wr)
        ctx.has_bias = b is not None
        y = xr @ wr.t()
        return y + b if b is not None else y

    @staticmethod
    def backward(ctx, gy):
        xr, wr = ctx.saved_tensors
        gr = _bf16(gy)
        gx = gr @ wr
        gw = gr.reshape(-1, gr.shape[-1]).t() @ xr.reshape(-1, xr.shape[-1])
        gb = gy.reshape(-1, gy.shape[-1]).sum(0) if ctx.has_bias else None
        return gx, gw, gb


@contextlib.contextmanager
def matmul_bf16():
    """Every nn.Linear (the LM head included) runs as _Bf16Linear inside this block."""
    orig = F.linear
    F.linear = lambda x, w, b=None: _Bf16Linear.apply(x, w, b)
    try:
        yield
    finally:
        F.linear = orig


# ---------------------------------------------------------------------------
# HF GPT-2 naming / layout

def hf_param_map(model):
    """Ordered list of (hf_name, parameter, transpose) for every HF tensor.
    transpose=True for Conv1D weights (HF stores [in, out], nn.Linear [out, in])."""
    t = model.transformer
    out = [("transformer.wte.weight", t.wte.weight, False),
           ("transformer.wpe.weight", t.wpe.weight, False)]
    for i, b in enumerate(t.h):
        p = f"transformer.h.{i}."
        out += [
            (p + "ln_1.weight", b.ln_1.weight, False),
            (p + "ln_1.bias", b.ln_1.bias, False),
            (p + "attn.c_attn.weight", b.attn.c_attn.weight, True),
            (p + "attn.c_attn.bias", b.attn.c_attn.bias, False),
            (p + "attn.c_proj.weight", b.attn.c_proj.weight, True),
            (p + "attn.c_proj.bias", b.attn.c_proj.bias, False),
            (p + "ln_2.weight", b.ln_2.weight, False),
            (p + "ln_2.bias", b.ln_2.bias, False),
            (p + "mlp.c_fc.weight", b.mlp.c_fc.weight, True),
            (p + "mlp.c_fc.bias", b.mlp.c_fc.bias, False),
            (p + "mlp.c_proj.weight", b.mlp.c_proj.weight, True),
            (p + "mlp.c_proj.bias", b.mlp.c_proj.bias, False),
        ]
    out += [("transformer.ln_f.weight", t.ln_f.weight, False),
            ("transformer.ln_f.bias", t.ln_f.bias, False)]
    return out


def _to_np(t, transpose):
    t = t.detach()
    if transpose:
        t = t.t()
    return t.contiguous().cpu().numpy().astype(np.float32, copy=True)


def to_hf(model, prefix=""):
    """Parameters in HF layout: {prefix+hf_name: np.float32 array}."""
    return {prefix + n: _to_np(p, tr) for n, p, tr in hf_param_map(model)}


def grads_to_hf(model, prefix="grad."):
    return {prefix + n: _to_np(p.grad, tr) for n, p, tr in hf_param_map(model)}


@torch.no_grad()
def from_hf(model, tensors):
    for n, p, tr in hf_param_map(model):
        a = torch.from_numpy(np.ascontiguousarray(tensors[n]))
        if tr:
            a = a.t()
        assert tuple(a.shape) == tuple(p.shape), (n, a.shape, p.shape)
        p.copy_(a)


def param_groups(model, weight_decay):
    """'decay' = tensors with 2+ dims (wte, wpe, weight matrices); 'no_decay' = rest."""
    params = list(model.parameters())  # deduplicated: tied wte appears once
    decay = [p for p in params if p.dim() >= 2]
    no_decay = [p for p in params if p.dim() < 2]
    return [{"params": decay, "weight_decay": weight_decay},
            {"params": no_decay, "weight_decay": 0.0}]


def global_grad_norm(model):
    gs = [p.grad.detach().reshape(-1) for p in model.parameters() if p.grad is not None]
    return torch.linalg.vector_norm(torch.cat(gs), 2)


# ---------------------------------------------------------------------------
# safetensors

_DT = {"F32": (np.float32, "<f4"), "I32": (np.int32, "<i4")}


def save_safetensors(path, tensors, metadata=None):
    """tensors: ordered dict name -> numpy array (float32 or int32)."""
    header = {}
    blobs = []
    off = 0
    for name, arr in tensors.items():
        arr = np.asarray(arr)
        if arr.dtype == np.float32:
            dt = "F32"
        elif arr.dtype == np.int32:
            dt = "I32"
        else:
            raise TypeError(f"{name}: unsupported dtype {arr.dtype}")
        data = np.ascontiguousarray(arr, dtype=_DT[dt][1]).tobytes()
        header[name] = {"dtype": dt, "shape": list(arr.shape),
                        "data_offsets": [off, off + len(data)]}
        blobs.append(data)
        off += len(data)
    header["__metadata__"] = dict(metadata or {"format": "pt"})
    h = json.dumps(header, separators=(",", ":")).encode("utf-8")
    h += b" " * ((-len(h)) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)


def load_safetensors(path):
    """Returns (dict name -> numpy array, metadata)."""
    with open(path, "rb") as f:
        raw = f.read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n].decode("utf-8"))
    base = 8 + n
    meta = header.pop("__metadata__", {})
    out = {}
    for name, info in header.items():
        b, e = info["data_offsets"]
        np_dt, le = _DT[info["dtype"]]
        arr = np.frombuffer(raw[base + b:base + e], dtype=le).astype(np_dt)
        out[name] = arr.reshape(info["shape"])
    return out, meta


def save_model_dir(path, cfg, model):
    import os
    os.makedirs(path, exist_ok=True)
    with open(os.path.join(path, "config.json"), "w") as f:
        json.dump(cfg.to_hf_json(), f, indent=2)
        f.write("\n")
    save_safetensors(os.path.join(path, "model.safetensors"), to_hf(model))
