"""A LLaMA (LlamaForCausalLM of HF transformers, re-written here: transformers is not a dependency)
in PyTorch, for shardlm's reference fixtures. Same computation as transformers' modeling_llama:
RMSNorm (x * rsqrt(mean(x^2) + eps)) * w, rotary embeddings by rotate_half on [out, in] weights,
grouped-query attention (repeat_kv), SwiGLU MLP down(silu(gate(x)) * up(x)), untied lm_head.
Everything runs in the dtype of the parameters (float64 for the reference)."""
import json
import math
import os
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class LlamaConfig:
    n_layer: int
    n_head: int
    n_kv_head: int
    n_embd: int
    ffn: int
    vocab_size: int
    n_ctx: int
    eps: float = 1e-5
    theta: float = 10000.0
    tie: bool = False

    def hf_json(self):
        return {
            "model_type": "llama", "architectures": ["LlamaForCausalLM"],
            "hidden_size": self.n_embd, "intermediate_size": self.ffn,
            "num_attention_heads": self.n_head, "num_key_value_heads": self.n_kv_head,
            "num_hidden_layers": self.n_layer, "vocab_size": self.vocab_size,
            "max_position_embeddings": self.n_ctx, "rms_norm_eps": self.eps,
            "rope_theta": self.theta, "rope_scaling": None, "tie_word_embeddings": self.tie,
            "attention_bias": False, "hidden_act": "silu", "torch_dtype": "float32",
        }


class RMSNorm(nn.Module):
    def __init__(self, n, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(n))
        self.eps = eps

    def forward(self, x):
        var = x.pow(2).mean(-1, keepdim=True)
        return self.weight * (x * torch.rsqrt(var + self.eps))


def rotate_half(x):
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


def rope_cos_sin(T, d, theta, dtype):
    inv_freq = 1.0 / (theta ** (torch.arange(0, d, 2, dtype=dtype) / d))
    t = torch.arange(T, dtype=dtype)
    freqs = torch.outer(t, inv_freq)
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos(), emb.sin()


class Attention(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c = c
        d = c.n_embd // c.n_head
        self.q_proj = nn.Linear(c.n_embd, c.n_head * d, bias=False)
        self.k_proj = nn.Linear(c.n_embd, c.n_kv_head * d, bias=False)
        self.v_proj = nn.Linear(c.n_embd, c.n_kv_head * d, bias=False)
        self.o_proj = nn.Linear(c.n_head * d, c.n_embd, bias=False)

    def forward(self, x, cos, sin):
        B, T, _ = x.shape
        c = self.c
        d = c.n_embd // c.n_head
        q = self.q_proj(x).view(B, T, c.n_head, d).transpose(1, 2)
        k = self.k_proj(x).view(B, T, c.n_kv_head, d).transpose(1, 2)
        v = self.v_proj(x).view(B, T, c.n_kv_head, d).transpose(1, 2)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        g = c.n_head // c.n_kv_head
        k = k.repeat_interleave(g, dim=1)  # repeat_kv
        v = v.repeat_interleave(g, dim=1)
        att = (q @ k.transpose(-2, -1)) / math.sqrt(d)
        mask = torch.triu(torch.ones(T, T, dtype=torch.bool), diagonal=1)
        att = att.masked_fill(mask, float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).reshape(B, T, c.n_head * d)
        return self.o_proj(y)


class MLP(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.gate_proj = nn.Linear(c.n_embd, c.ffn, bias=False)
        self.up_proj = nn.Linear(c.n_embd, c.ffn, bias=False)
        self.down_proj = nn.Linear(c.ffn, c.n_embd, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class Layer(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.input_layernorm = RMSNorm(c.n_embd, c.eps)
        self.self_attn = Attention(c)
        self.post_attention_layernorm = RMSNorm(c.n_embd, c.eps)
        self.mlp = MLP(c)

    def forward(self, x, cos, sin):
        x = x + self.self_attn(self.input_layernorm(x), cos, sin)
        return x + self.mlp(self.post_attention_layernorm(x))


class Llama(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c = c
        self.embed_tokens = nn.Embedding(c.vocab_size, c.n_embd)
        self.layers = nn.ModuleList([Layer(c) for _ in range(c.n_layer)])
        self.norm = RMSNorm(c.n_embd, c.eps)
        self.lm_head = nn.Linear(c.n_embd, c.vocab_size, bias=False)

    def forward(self, idx, targets=None):
        B, T = idx.shape
        x = self.embed_tokens(idx)
        cos, sin = rope_cos_sin(T, self.c.n_embd // self.c.n_head, self.c.theta, x.dtype)
        for layer in self.layers:
            x = layer(x, cos, sin)
        logits = self.lm_head(self.norm(x))
        loss = None
        if targets is not None:
            loss = F.cross_entropy(logits.reshape(-1, logits.size(-1)), targets.reshape(-1))
        return logits, loss

    def hf_tensors(self):
        """name -> float32 numpy, HF LlamaForCausalLM names (nn.Linear [out, in])."""
        out = {}
        for name, p in self.named_parameters():
            out["model." + name if not name.startswith("lm_head") else name] = (
                p.detach().to(torch.float32).numpy().copy())
        return out

    def load_hf(self, tensors):
        with torch.no_grad():
            for name, p in self.named_parameters():
                key = "model." + name if not name.startswith("lm_head") else name
                p.copy_(torch.from_numpy(tensors[key]).to(p.dtype))


def init_weights(model, seed):
    """N(0, 0.02) matrices and embeddings; norm gains 1 + N(0, 0.1) so their gradients matter."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() == 1:
                p.copy_(1.0 + 0.1 * torch.randn(p.shape, generator=g, dtype=torch.float32).to(p.dtype))
            else:
                p.copy_((0.02 * torch.randn(p.shape, generator=g, dtype=torch.float32)).to(p.dtype))


def param_groups(model, weight_decay):
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]


def save_dir(path, cfg, model, save_safetensors):
    os.makedirs(path, exist_ok=True)
    with open(os.path.join(path, "config.json"), "w") as f:
        json.dump(cfg.hf_json(), f, indent=2)
        f.write("\n")
    save_safetensors(os.path.join(path, "model.safetensors"), model.hf_tensors())
