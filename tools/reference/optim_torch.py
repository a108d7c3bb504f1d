"""Reference optimisers that PyTorch 1.13 does not have, written in torch from their papers, for the
fixtures of shardlm's optimisers (make_fixtures.py: OPTIMISERS_EXT).

- Lion (Chen et al. 2023, "Symbolic Discovery of Optimization Algorithms", Algorithm 2):
      c = b1 m + (1 - b1) g;  p <- p - lr (sign(c) + wd p);  m <- b2 m + (1 - b2) g
  decoupled weight decay on the tensors AdamW decays.
- Adam8bit (Dettmers et al. 2022, "8-bit Optimizers via Block-wise Quantization"): AdamW whose m and
  v are stored block-wise quantised (absmax per block of `block` elements of each tensor's flattened
  elements, m with the signed code, v with the unsigned one); tensors of fewer than 4096 elements
  keep fp32 state. Each step dequantises, updates in fp32 (the parameter step uses the fp32 values),
  then quantises with the blocks' new absmax, as bitsandbytes' blockwise kernels do. Weight decay is
  decoupled (p *= 1 - lr wd), as those kernels apply it.
- Adafactor (Shazeer & Stern 2018), following transformers.optimization.Adafactor: factored second
  moment (row and column means of g^2 + eps1) for tensors of 2+ dimensions, unfactored for vectors;
  beta2_t = 1 - t^decay_rate; update clipping by its RMS (clip_threshold); optional relative step
  min(1e-2, 1/sqrt(t)) and parameter scale max(eps2, RMS(p)); optional first moment (beta1).

- SophiaG (Liu et al. 2023, "Sophia: A Scalable Stochastic Second-order Optimizer for Language Model
  Pre-training", Algorithm 3, as the authors' sophia.py writes it): p <- p (1 - lr wd);
  m <- b1 m + (1 - b1) g; p <- p - lr sign(m) min(|m| / (rho B h + 1e-15), 1), with h refreshed every k
  steps by update_hessian(): h <- b2 h + (1 - b2) g_hat^2, g_hat the gradient of the mean loss on labels
  sampled from the model (sample_labels: shardlm's draw, the same hash, so both sample the same labels).

The 8-bit code tables are bitsandbytes' constructions (create_dynamic_map with 7 exponent bits, its
most negative value set to -1; create_linear_map with a zero), computed in float64 and rounded once to
float32, sorted: shardlm builds the same 256 values (its test compares them bit for bit).
"""
import math

import numpy as np
import torch

SMALL_TENSOR = 4096  # tensors with fewer elements keep fp32 state (Adam8bit)


# ---------------------------------------------------------------------------
# Lion

class Lion(torch.optim.Optimizer):
    def __init__(self, params, lr, betas=(0.9, 0.99), weight_decay=0.0):
        super().__init__(params, dict(lr=lr, betas=betas, weight_decay=weight_decay))

    @torch.no_grad()
    def step(self):
        for group in self.param_groups:
            lr, (b1, b2), wd = group["lr"], group["betas"], group["weight_decay"]
            for p in group["params"]:
                st = self.state[p]
                if not st:
                    st["exp_avg"] = torch.zeros_like(p)
                m = st["exp_avg"]
                p.mul_(1 - lr * wd)
                c = m.mul(b1).add_(p.grad, alpha=1 - b1)
                p.add_(c.sign_(), alpha=-lr)
                m.mul_(b2).add_(p.grad, alpha=1 - b2)


# ---------------------------------------------------------------------------
# 8-bit block-wise quantisation

def dynamic_code(signed):
    """bitsandbytes create_dynamic_map(signed, max_exponent_bits=7, total_bits=8), in float64."""
    data = []
    max_exp, non_sign_bits = 7, 7
    for i in range(max_exp):
        items = 2 ** (i + non_sign_bits - max_exp) + 1 if signed else 2 ** (i + non_sign_bits - max_exp + 1) + 1
        bounds = np.linspace(0.1, 1.0, items)
        means = (bounds[:-1] + bounds[1:]) / 2.0
        data += list(10.0 ** (-(max_exp - 1) + i) * means)
        if signed:
            data += list(-(10.0 ** (-(max_exp - 1) + i)) * means)
    data += [0.0, 1.0]
    assert len(data) == 256
    data = np.sort(np.array(data))
    if signed:
        # bitsandbytes' most negative value is -0.9928: shardlm's is -1, so that a block's largest
        # magnitude, of either sign, is stored exactly (x / absmax = +-1 -> code +-1), and a
        # dequantised block requantises to the same codes and absmax (bit-exact resume)
        data[0] = -1.0
    return torch.from_numpy(data.astype(np.float32))


def linear_code(signed):
    """bitsandbytes create_linear_map(signed, 8 bits, add_zero=True), in float64."""
    if signed:
        v = np.linspace(-1.0, 1.0, 255)
        v = np.concatenate([v, [0.0]])
    else:
        v = np.linspace(0.0, 1.0, 256)
    return torch.from_numpy(np.sort(v).astype(np.float32))


def make_code(kind, signed):
    return dynamic_code(signed) if kind == "dynamic" else linear_code(signed)


def quantize(x, code, block):
    """x (any shape) -> (indices [n] int64, absmax [blocks] fp32) over x's flattened elements."""
    flat = x.reshape(-1)
    n = flat.numel()
    nb = (n + block - 1) // block
    padded = torch.zeros(nb * block, dtype=torch.float32)
    padded[:n] = flat
    rows = padded.view(nb, block)
    absmax = rows.abs().max(dim=1).values
    safe = torch.where(absmax > 0, absmax, torch.ones_like(absmax))
    normed = torch.where(absmax[:, None] > 0, rows / safe[:, None], torch.zeros_like(rows)).reshape(-1)[:n]
    idx = torch.empty(n, dtype=torch.int64)
    for s in range(0, n, 8192):  # nearest code, the lower one on a tie (argmin's first)
        idx[s:s + 8192] = torch.argmin((normed[s:s + 8192, None] - code[None, :]).abs(), dim=1)
    return idx, absmax


def dequantize(idx, absmax, code, block, shape):
    n = idx.numel()
    scale = absmax.repeat_interleave(block)[:n]
    return (code[idx] * scale).reshape(shape)


class Adam8bit(torch.optim.Optimizer):
    def __init__(self, params, lr, betas, eps, weight_decay=0.0, block=2048, code="dynamic"):
        super().__init__(params, dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay))
        self.block = block
        self.code_m, self.code_v = make_code(code, True), make_code(code, False)
        self.t = 0

    @torch.no_grad()
    def step(self):
        self.t += 1
        t = self.t
        for group in self.param_groups:
            lr, (b1, b2), eps, wd = group["lr"], group["betas"], group["eps"], group["weight_decay"]
            bc1 = 1 - b1 ** t
            bc2_sqrt = math.sqrt(1 - b2 ** t)
            for p in group["params"]:
                st = self.state[p]
                small = p.numel() < SMALL_TENSOR
                g = p.grad
                if not st:
                    if small:
                        st["m"], st["v"] = torch.zeros_like(p), torch.zeros_like(p)
                    else:
                        st["m"] = quantize(torch.zeros_like(p), self.code_m, self.block)
                        st["v"] = quantize(torch.zeros_like(p), self.code_v, self.block)
                if small:
                    m, v = st["m"], st["v"]
                else:
                    m = dequantize(*st["m"], self.code_m, self.block, p.shape)
                    v = dequantize(*st["v"], self.code_v, self.block, p.shape)
                m.mul_(b1).add_(g, alpha=1 - b1)
                v.mul_(b2).addcmul_(g, g, value=1 - b2)
                p.mul_(1 - lr * wd)
                denom = (v.sqrt() / bc2_sqrt).add_(eps)
                p.addcdiv_(m, denom, value=-lr / bc1)
                if not small:
                    st["m"] = quantize(m, self.code_m, self.block)
                    st["v"] = quantize(v, self.code_v, self.block)


# ---------------------------------------------------------------------------
# Adafactor

class Adafactor(torch.optim.Optimizer):
    """transformers.optimization.Adafactor's step (eps = (1e-30, 1e-3), warmup_init off)."""

    def __init__(self, params, lr, beta1=None, weight_decay=0.0, clip_threshold=1.0, decay_rate=-0.8,
                 relative_step=False, scale_parameter=False):
        super().__init__(params, dict(lr=lr, beta1=beta1, weight_decay=weight_decay, clip_threshold=clip_threshold,
                                      decay_rate=decay_rate, relative_step=relative_step,
                                      scale_parameter=scale_parameter, eps=(1e-30, 1e-3)))

    @staticmethod
    def _rms(x):
        return x.norm(2) / (x.numel() ** 0.5)

    @staticmethod
    def _approx_sq_grad(row, col):
        r = (row / row.mean(dim=-1, keepdim=True)).rsqrt_().unsqueeze(-1)
        c = col.unsqueeze(-2).rsqrt()
        return torch.mul(r, c)

    @torch.no_grad()
    def step(self):
        for group in self.param_groups:
            for p in group["params"]:
                g = p.grad
                st = self.state[p]
                factored = g.dim() >= 2
                if not st:
                    st["step"] = 0
                    if group["beta1"] is not None:
                        st["exp_avg"] = torch.zeros_like(g)
                    if factored:
                        st["row"] = torch.zeros(g.shape[:-1])
                        st["col"] = torch.zeros(g.shape[:-2] + g.shape[-1:])
                    else:
                        st["exp_avg_sq"] = torch.zeros_like(g)
                st["step"] += 1
                rms = self._rms(p)
                lr = group["lr"]
                if group["relative_step"]:
                    lr = min(1e-2, 1.0 / math.sqrt(st["step"]))
                if group["scale_parameter"]:
                    lr = max(group["eps"][1], float(rms)) * lr
                beta2t = 1.0 - math.pow(st["step"], group["decay_rate"])
                update = g ** 2 + group["eps"][0]
                if factored:
                    st["row"].mul_(beta2t).add_(update.mean(dim=-1), alpha=1.0 - beta2t)
                    st["col"].mul_(beta2t).add_(update.mean(dim=-2), alpha=1.0 - beta2t)
                    update = self._approx_sq_grad(st["row"], st["col"])
                    update.mul_(g)
                else:
                    st["exp_avg_sq"].mul_(beta2t).add_(update, alpha=1.0 - beta2t)
                    update = st["exp_avg_sq"].rsqrt().mul_(g)
                if group["clip_threshold"] > 0:
                    update.div_((self._rms(update) / group["clip_threshold"]).clamp_(min=1.0))
                update.mul_(lr)
                if group["beta1"] is not None:
                    st["exp_avg"].mul_(group["beta1"]).add_(update, alpha=1 - group["beta1"])
                    update = st["exp_avg"]
                if group["weight_decay"] != 0:
                    p.add_(p, alpha=-group["weight_decay"] * lr)
                p.add_(-update)


# ---------------------------------------------------------------------------
# Sophia-G

M64 = (1 << 64) - 1


def mix64(z):
    """splitmix64's finaliser (kernels/sample_labels.h)."""
    z &= M64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
    return z ^ (z >> 31)


def label_sample_seed(run_seed, step):
    return mix64(mix64(run_seed ^ 0x50484941534F53) + step)


def label_uniform(seed, key):
    return (mix64(seed + 0x9E3779B97F4A7C15 * (key + 1)) >> 11) * 2.0 ** -53


def sample_labels(logits, seed):
    """Labels [N] drawn from softmax(logits [N, V]) by inverse CDF in vocabulary order with the uniform
    of each row's key (its index n: row b of T tokens, position t -> b T + t), in float64."""
    x = logits.detach().double()
    e = torch.exp(x - x.max(dim=1, keepdim=True).values)
    cum = torch.cumsum(e, dim=1)
    labels = torch.empty(x.shape[0], dtype=torch.int64)
    for n in range(x.shape[0]):
        target = label_uniform(seed, n) * float(cum[n, -1])
        labels[n] = min(int(torch.searchsorted(cum[n], torch.tensor([target], dtype=torch.float64), right=True)),
                        x.shape[1] - 1)
    return labels


class SophiaG(torch.optim.Optimizer):
    def __init__(self, params, lr, betas=(0.965, 0.99), rho=0.04, weight_decay=0.0):
        super().__init__(params, dict(lr=lr, betas=betas, rho=rho, weight_decay=weight_decay))
        self.clipped = 0  # elements whose step was clipped to lr (statistics for the fixture)
        self.total = 0

    def _state(self, p):
        st = self.state[p]
        if not st:
            st["exp_avg"] = torch.zeros_like(p)
            st["hessian"] = torch.zeros_like(p)
        return st

    @torch.no_grad()
    def update_hessian(self):
        for group in self.param_groups:
            b2 = group["betas"][1]
            for p in group["params"]:
                self._state(p)["hessian"].mul_(b2).addcmul_(p.grad, p.grad, value=1 - b2)

    @torch.no_grad()
    def step(self, bs):
        for group in self.param_groups:
            lr, (b1, _), rho, wd = group["lr"], group["betas"], group["rho"], group["weight_decay"]
            for p in group["params"]:
                st = self._state(p)
                m, h = st["exp_avg"], st["hessian"]
                p.mul_(1 - lr * wd)
                m.mul_(b1).add_(p.grad, alpha=1 - b1)
                ratio = (m.abs() / (rho * bs * h + 1e-15)).clamp(None, 1)
                self.clipped += int((ratio == 1).sum())
                self.total += ratio.numel()
                p.addcmul_(m.sign(), ratio, value=-lr)
