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
    # mixture of experts (Mixtral's block_sparse_moe in every layer): 0 experts = dense
    n_experts: int = 0
    top_k: int = 2
    aux_coef: float = 0.0
    z_coef: float = 0.0
    # beyond Mixtral (shardlm's keys in config.json): shared experts, a sigmoid router, the top k not
    # renormalised, a capacity factor, MoE in some layers only (the others dense, of dense_ffn)
    n_shared: int = 0
    router: str = "softmax"
    norm_topk: bool = True
    capacity: float = 0.0
    moe_layers: tuple = ()
    dense_ffn: int = 0
    # HF OLMoE (OlmoeForCausalLM): the queries and keys RMS-normalised over all heads (q_norm, k_norm) before
    # the rotary embeddings, and the experts under mlp. (gate, experts.N.gate_proj/up_proj/down_proj)
    olmoe: bool = False

    def is_moe(self, layer):
        return self.n_experts > 0 and (not self.moe_layers or layer in self.moe_layers)

    def hf_json(self):
        if self.olmoe:
            j = self.llama_json()
            j.update({"model_type": "olmoe", "architectures": ["OlmoeForCausalLM"],
                      "num_experts": self.n_experts, "num_experts_per_tok": self.top_k,
                      "norm_topk_prob": self.norm_topk, "router_aux_loss_coef": self.aux_coef,
                      "output_router_logits": False, "clip_qkv": None})
            if self.z_coef:
                j["shardlm_router_z_loss_coef"] = self.z_coef
            return j
        if self.n_experts:
            j = self.llama_json()
            j.update({"model_type": "mixtral", "architectures": ["MixtralForCausalLM"],
                      "num_local_experts": self.n_experts, "num_experts_per_tok": self.top_k,
                      "router_aux_loss_coef": self.aux_coef, "output_router_logits": False})
            if self.z_coef:
                j["shardlm_router_z_loss_coef"] = self.z_coef
            if self.n_shared:
                j["shardlm_shared_experts"] = self.n_shared
            if self.router != "softmax":
                j["shardlm_router"] = self.router
            if not self.norm_topk:
                j["shardlm_norm_topk"] = False
            if self.capacity:
                j["shardlm_capacity_factor"] = self.capacity
            if self.moe_layers:
                j["shardlm_moe_layers"] = ",".join(str(x) for x in self.moe_layers)
            if self.dense_ffn:
                j["shardlm_dense_ffn"] = self.dense_ffn
            return j
        return self.llama_json()

    def llama_json(self):
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
        if c.olmoe:
            self.q_norm = RMSNorm(c.n_head * d, c.eps)
            self.k_norm = RMSNorm(c.n_kv_head * d, c.eps)

    def forward(self, x, cos, sin):
        B, T, _ = x.shape
        c = self.c
        d = c.n_embd // c.n_head
        q, k = self.q_proj(x), self.k_proj(x)
        if c.olmoe:
            q, k = self.q_norm(q), self.k_norm(k)
        q = q.view(B, T, c.n_head, d).transpose(1, 2)
        k = k.view(B, T, c.n_kv_head, d).transpose(1, 2)
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
    def __init__(self, c, width=None):
        super().__init__()
        width = width or c.ffn
        self.gate_proj = nn.Linear(c.n_embd, width, bias=False)
        self.up_proj = nn.Linear(c.n_embd, width, bias=False)
        self.down_proj = nn.Linear(width, c.n_embd, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class Expert(nn.Module):
    """Mixtral's expert: w2(silu(w1 x) * w3 x)."""
    def __init__(self, c):
        super().__init__()
        self.w1 = nn.Linear(c.n_embd, c.ffn, bias=False)
        self.w2 = nn.Linear(c.ffn, c.n_embd, bias=False)
        self.w3 = nn.Linear(c.n_embd, c.ffn, bias=False)

    def forward(self, x):
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class SparseMoe(nn.Module):
    """Mixtral's block_sparse_moe: softmax router, top k renormalised, each expert over its tokens. The
    objective's terms (Megatron's per-layer form, over the tokens of one forward = one micro-batch):
    aux_coef * E * sum_e f_e P_e (f_e: the share of the N k choices expert e got, no gradient; P_e: its mean
    probability) + z_coef * mean_t logsumexp(logits_t)^2, left in self.extra."""
    def __init__(self, c):
        super().__init__()
        self.c = c
        self.gate = nn.Linear(c.n_embd, c.n_experts, bias=False)
        # OLMoE's experts are MLPs by LLaMA's names (gate_proj, up_proj, down_proj), Mixtral's w1, w3, w2
        self.experts = nn.ModuleList([MLP(c) if c.olmoe else Expert(c) for _ in range(c.n_experts)])
        if c.n_shared:
            self.shared_experts = MLP(c, c.n_shared * c.ffn)
        self.extra = None

    def keep_mask(self, p, top_i):
        """Which of the N x K choices the capacity keeps: per expert the ceil(F K N / E) of largest
        probability (the earlier choice, token-major, on a tie)."""
        c = self.c
        N, K, E = top_i.shape[0], top_i.shape[1], c.n_experts
        keep = torch.ones(N, K, dtype=torch.bool)
        if not c.capacity:
            return keep
        cap = math.ceil(c.capacity * N * K / E)
        for e in range(E):
            js = [j for j in range(N * K) if top_i[j // K, j % K] == e]
            js.sort(key=lambda j: -p[j // K, e].item())  # stable: ties keep index order
            for j in js[cap:]:
                keep[j // K, j % K] = False
        return keep

    def forward(self, x):
        c = self.c
        h = x.reshape(-1, x.shape[-1])
        N, E, K = h.shape[0], c.n_experts, c.top_k
        z = self.gate(h)
        p = z.softmax(dim=-1) if c.router == "softmax" else torch.sigmoid(z)
        top_p, top_i = torch.topk(p, K, dim=-1)
        g = top_p / top_p.sum(dim=-1, keepdim=True) if c.norm_topk else top_p
        g = g * self.keep_mask(p, top_i).to(g.dtype)
        out = self.shared_experts(h) if c.n_shared else torch.zeros_like(h)
        for e in range(E):
            rows, ks = (top_i == e).nonzero(as_tuple=True)
            if rows.numel():
                out = out.index_add(0, rows, g[rows, ks].unsqueeze(-1) * self.experts[e](h[rows]))
        f = F.one_hot(top_i, E).sum(dim=(0, 1)).to(h.dtype) / (N * K)
        P = p if c.router == "softmax" else p / p.sum(dim=-1, keepdim=True)
        balance = E * (f * P.mean(dim=0)).sum()
        zsq = (torch.logsumexp(z, dim=-1) ** 2).mean()
        self.extra = c.aux_coef * balance + c.z_coef * zsq
        return out.view_as(x)


class Layer(nn.Module):
    def __init__(self, c, index=0):
        super().__init__()
        self.input_layernorm = RMSNorm(c.n_embd, c.eps)
        self.self_attn = Attention(c)
        self.post_attention_layernorm = RMSNorm(c.n_embd, c.eps)
        if c.is_moe(index) and not c.olmoe:
            self.block_sparse_moe = SparseMoe(c)
        else:
            self.mlp = SparseMoe(c) if c.is_moe(index) else MLP(c, c.dense_ffn or c.ffn)

    def forward(self, x, cos, sin):
        x = x + self.self_attn(self.input_layernorm(x), cos, sin)
        return x + self.ffn()(self.post_attention_layernorm(x))

    def ffn(self):
        return self.block_sparse_moe if hasattr(self, "block_sparse_moe") else self.mlp

    def c_moe(self):
        return isinstance(self.ffn(), SparseMoe)


class Llama(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c = c
        self.embed_tokens = nn.Embedding(c.vocab_size, c.n_embd)
        self.layers = nn.ModuleList([Layer(c, i) for i in range(c.n_layer)])
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

    def moe_extra(self):
        """The mixture of experts' objective terms of the last forward, summed over the layers."""
        terms = [layer.ffn().extra for layer in self.layers if layer.c_moe()]
        return sum(terms) if terms else 0.0

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
