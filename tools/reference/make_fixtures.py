#!/usr/bin/python3
"""Generate the PyTorch reference fixtures used by the shardlm C++ tests.

    nice -n 10 /usr/bin/python3 tools/reference/make_fixtures.py [--out tests/fixtures]

Deterministic (fixed seeds, 1 thread, deterministic algorithms, fp32): rerunning
produces byte-identical files.

Fixture A  tests/fixtures/gpt2_tiny/  : forward/backward/optimiser unit reference (and the
                                        forward/backward with bf16 matmul operands).
           tests/fixtures/gpt2_tiny/optimizers.{json,safetensors}: the optimisers added after the
                                        first five (OPTIMISERS_EXT), EXT_STEPS steps each, from the same
                                        model and batch (the files above stay byte-identical).
Fixture B  tests/fixtures/gpt2_e2e/   : 10-step AdamW end-to-end training reference.
Fixture C  tests/fixtures/llama_tiny/ : a LLaMA with grouped-query attention (RMSNorm, RoPE, SwiGLU,
                                        untied head) trained 10 AdamW steps in float64.
Fixture D  tests/fixtures/mixtral_tiny/: the same with HF Mixtral's mixture of experts in every layer (4
                                        experts, top 2, the balance and z-losses), 2 micro-batches a step.
Fixture E  tests/fixtures/moe_variants/: what Mixtral lacks: a dense layer, then an MoE layer with a shared
                                        expert, a sigmoid router, the top k not renormalised, a capacity factor.
"""
import argparse
import json
import os
import sys

import numpy as np
import torch

sys.dont_write_bytecode = True  # keep the source tree clean
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gpt2_torch as G  # noqa: E402
import llama_torch as LT  # noqa: E402
import optim_torch as O  # noqa: E402

REPO = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))


def setup_determinism():
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    torch.set_default_dtype(torch.float32)


def write_json(path, obj):
    with open(path, "w") as f:
        json.dump(obj, f, indent=2)
        f.write("\n")


def blas_isa():
    """The instruction set OpenBLAS's kernels use here ("avx512" or "avx2"): fixtures made on the
    other round differently after several steps (check_fixtures.py allows for it)."""
    core = os.environ.get("OPENBLAS_CORETYPE", "").lower()
    if core:
        return "avx512" if "skylakex" in core or "cooperlake" in core or "sapphire" in core else "avx2"
    flags = open("/proc/cpuinfo").read().split()
    return "avx512" if "avx512f" in flags else "avx2"


def report(path):
    print(f"  wrote {os.path.relpath(path, REPO)} ({os.path.getsize(path)} bytes)")


# ---------------------------------------------------------------------------
# Fixture A

TINY_CFG = G.GPTConfig(n_layer=3, n_head=3, n_embd=60, vocab_size=101, n_positions=32)
TINY_B, TINY_T = 3, 13
TINY_SEED = 1234
TINY_STEPS = 3
PERTURB_STD = 0.02

# name -> (torch class, kwargs, weight_decay for the "decay" group)
OPTIMISERS = {
    "sgd": ("SGD", dict(lr=0.1, momentum=0.0, dampening=0.0, nesterov=False), 0.01),
    "momentum": ("SGD", dict(lr=0.05, momentum=0.9, dampening=0.0, nesterov=False), 0.01),
    # The adaptive optimisers use lr 1e-3 and eps 1e-6 so the comparison is well conditioned:
    # with eps 1e-8..1e-10 they turn rounding noise into +-lr steps wherever a gradient is ~0
    # (e.g. the key bias, whose exact gradient is 0 since softmax is shift-invariant), and PyTorch
    # fp32 itself then differs from PyTorch fp64 by up to 1e-1 (AdaGrad) / 2e-4 (Adam). With these
    # values PyTorch fp32 vs fp64 after 3 steps differs by <= 1.6e-6 absolute.
    "adagrad": ("Adagrad", dict(lr=1e-3, lr_decay=0.0, initial_accumulator_value=0.0,
                                eps=1e-6), 0.01),
    "adam": ("Adam", dict(lr=1e-3, betas=(0.9, 0.95), eps=1e-6, amsgrad=False), 0.01),
    "adamw": ("AdamW", dict(lr=1e-3, betas=(0.9, 0.95), eps=1e-6, amsgrad=False), 0.1),
}


def make_optimizer(model, name):
    cls_name, kw, wd = OPTIMISERS[name]
    cls = getattr(torch.optim, cls_name)
    return cls(G.param_groups(model, wd), foreach=False, **kw)


# The optimisers added later: name -> shardlm `train` settings (TrainConfig keys). Each runs
# EXT_STEPS steps: RAdam's rectified branch starts at step 6 with beta2 0.9 (rho_t > 5), and the
# 8-bit and factored states see several requantisations and decays. lr 1e-3 and eps 1e-6 as above.
EXT_STEPS = 8
# Optimisers whose step on a gradient of pure rounding noise is a full step of noise's sign (Adafactor:
# eps1 = 1e-30 makes u = g / |g| = +-1 for a vector's element at t = 1): the key bias's gradient (0
# exactly: softmax is shift-invariant) is set to 0 on both sides, else the two implementations' key
# biases walk apart by +-lr a step, and although the key bias does not change the function, its size
# changes the scores' rounding, which these optimisers amplify.
EXACT_KEY_BIAS = ("adafactor", "adafactor_rel", "sophia")
SOPHIA_RHO = 40.0
OPTIMISERS_EXT = {
    # torch.optim.RAdam, coupled L2 weight decay as PyTorch 1.13 applies it
    "radam": dict(optimizer="radam", lr=1e-3, beta1=0.9, beta2=0.9, eps=1e-6, weight_decay=0.01),
    # the paper's Algorithm 2 (optim_torch.Lion); no betas given: shardlm's defaults for lion must be
    # the paper's (0.9, 0.99). Where a gradient is rounding noise around an exact 0 (the key bias:
    # softmax is shift-invariant) sign(c) is that noise's sign: those elements are compared apart.
    "lion": dict(optimizer="lion", lr=1e-4, weight_decay=0.1),
    # optim_torch.Adam8bit: small blocks so that the tiny model's tensors of 4096+ elements (wte,
    # c_attn, c_fc, mlp.c_proj) make several blocks and a partial last one; the others keep fp32 state
    "adam8bit": dict(optimizer="adam8bit", lr=1e-3, beta1=0.9, beta2=0.95, eps=1e-6, weight_decay=0.1,
                     optim_block=256, optim_code="dynamic"),
    # the linear code rounds every v under absmax/510 of its block to 0, where the step is m / eps:
    # eps 1e-3 keeps those steps bounded (with 1e-6 the run blows up, as bitsandbytes' paper found)
    "adam8bit_linear": dict(optimizer="adam8bit", lr=1e-3, beta1=0.9, beta2=0.95, eps=1e-3, weight_decay=0.1,
                            optim_block=512, optim_code="linear"),
    # optim_torch.Adafactor (transformers' step): explicit lr, no first moment, update clipping at 1;
    # and the paper's relative step with parameter scale and a first moment
    "adafactor": dict(optimizer="adafactor", lr=1e-3, weight_decay=0.01),
    "adafactor_rel": dict(optimizer="adafactor", beta1=0.9, weight_decay=0.1, relative_step=True,
                          scale_parameter=True, clip_threshold=1.0, decay_rate=-0.8),
    # optim_torch.SophiaG with the Hessian refreshed after steps 2, 4, 6, 8 (hess_interval 2) from
    # labels drawn by shardlm's hash (seed: the run's); rho large enough that the tiny model's steps
    # are partly clipped and partly m / (rho B h) (train_steps prints the clipped share)
    "sophia": dict(optimizer="sophia", lr=2e-4, beta1=0.9, beta2=0.9, rho=SOPHIA_RHO, hess_interval=2,
                   weight_decay=0.1, seed=1337),
}


def make_optimizer_ext(model, name):
    h = OPTIMISERS_EXT[name]
    groups = G.param_groups(model, h["weight_decay"])
    kind = h["optimizer"]
    if kind == "radam":
        return torch.optim.RAdam(groups, lr=h["lr"], betas=(h["beta1"], h["beta2"]), eps=h["eps"], foreach=False)
    if kind == "adam8bit":
        return O.Adam8bit(groups, lr=h["lr"], betas=(h["beta1"], h["beta2"]), eps=h["eps"], block=h["optim_block"],
                          code=h["optim_code"])
    if kind == "adafactor":
        return O.Adafactor(groups, lr=h.get("lr", 0.0), beta1=h.get("beta1"), clip_threshold=h.get("clip_threshold", 1.0),
                           decay_rate=h.get("decay_rate", -0.8), relative_step=h.get("relative_step", False),
                           scale_parameter=h.get("scale_parameter", False))
    if kind == "lion":
        return O.Lion(groups, lr=h["lr"], betas=(h.get("beta1", 0.9), h.get("beta2", 0.99)))
    if kind == "sophia":
        return O.SophiaG(groups, lr=h["lr"], betas=(h.get("beta1", 0.965), h.get("beta2", 0.99)),
                         rho=h.get("rho", 0.04))
    raise ValueError(name)


def train_steps(cfg, init_hf, inputs, targets, make_opt, steps, exact_key_bias=False, sophia=None):
    """`steps` optimiser steps from init_hf on one batch: (losses before each step and after the
    last, the model). exact_key_bias: the key bias's gradient set to its exact value, 0 (softmax is
    shift-invariant), instead of the rounding noise the backward computes. sophia: the settings of a
    SophiaG run: after every hess_interval-th step, the Hessian estimate from labels sampled with
    shardlm's hash (the run's seed and the step), and the step's B = the batch's tokens."""
    m = G.GPT(cfg)
    G.from_hf(m, init_hf)
    opt = make_opt(m)
    losses = []

    def exact_bias():
        if exact_key_bias:
            for b in m.transformer.h:
                b.attn.c_attn.bias.grad[cfg.n_embd:2 * cfg.n_embd] = 0

    for step in range(steps):
        opt.zero_grad(set_to_none=True)
        _, l = m(inputs, targets)
        l.backward()
        exact_bias()
        losses.append(l.item())
        if sophia is None:
            opt.step()
            continue
        opt.step(bs=inputs.numel())
        if (step + 1) % sophia["hess_interval"] == 0:
            opt.zero_grad(set_to_none=True)
            logits, _ = m(inputs, None)
            flat = logits.reshape(-1, logits.shape[-1])
            labels = O.sample_labels(flat, O.label_sample_seed(sophia["seed"], step))
            torch.nn.functional.cross_entropy(flat, labels).backward()
            exact_bias()
            opt.update_hessian()
    if sophia is not None:
        print(f"  sophia: {opt.clipped} of {opt.total} element steps clipped to lr")
    with torch.no_grad():
        losses.append(m(inputs, targets)[1].item())
    return losses, m


def fixture_tiny(outdir):
    cfg = TINY_CFG
    torch.manual_seed(TINY_SEED)
    model = G.GPT(cfg)
    # Perturb LayerNorm weights/biases and Linear biases so their grads/updates
    # are non-trivial.
    with torch.no_grad():
        for name, p, _ in G.hf_param_map(model):
            if p.dim() == 1:
                p.add_(torch.randn_like(p) * PERTURB_STD)
    gen = torch.Generator().manual_seed(TINY_SEED + 1)
    inputs = torch.randint(0, cfg.vocab_size, (TINY_B, TINY_T), generator=gen)
    targets = torch.randint(0, cfg.vocab_size, (TINY_B, TINY_T), generator=gen)

    init_hf = G.to_hf(model)
    G.save_model_dir(outdir, cfg, model)

    ref = {}
    ref["inputs"] = inputs.numpy().astype(np.int32)
    ref["targets"] = targets.numpy().astype(np.int32)

    model.zero_grad(set_to_none=True)
    logits, loss = model(inputs, targets)
    loss.backward()
    ref["logits"] = logits.detach().numpy().astype(np.float32)
    ref["loss"] = np.array([loss.item()], dtype=np.float32)
    ref["grad_norm"] = np.array([G.global_grad_norm(model).item()], dtype=np.float32)
    ref.update(G.grads_to_hf(model, prefix="grad."))
    print(f"[gpt2_tiny] loss={loss.item():.7f} grad_norm={ref['grad_norm'][0]:.7f}")

    # The same forward/backward with every linear layer's operands rounded to bf16.
    model.zero_grad(set_to_none=True)
    with G.matmul_bf16():
        _, loss_bf16 = model(inputs, targets)
        loss_bf16.backward()
    ref["bf16.loss"] = np.array([loss_bf16.item()], dtype=np.float32)
    ref.update(G.grads_to_hf(model, prefix="bf16.grad."))
    print(f"[gpt2_tiny] bf16 matmuls: loss={loss_bf16.item():.7f}")

    opt_losses = {}
    for oname in OPTIMISERS:
        losses, m = train_steps(cfg, init_hf, inputs, targets, lambda m: make_optimizer(m, oname), TINY_STEPS)
        opt_losses[oname] = losses
        ref.update(G.to_hf(m, prefix=f"{oname}.step{TINY_STEPS}."))
        print(f"[gpt2_tiny] {oname:8s} losses (before steps 1..3, after 3): "
              + " ".join(f"{x:.6f}" for x in losses))

    G.save_safetensors(os.path.join(outdir, "reference.safetensors"), ref)

    hyper = {
        "B": TINY_B, "T": TINY_T, "seed": TINY_SEED,
        "steps": TINY_STEPS,
        "same_batch_every_step": True,
        "init": "normal(0,0.02) for Linear weights and embeddings, zero biases, LN weight 1 "
                "bias 0; then N(0,%g) noise added to every 1-D tensor (LN weights/biases, "
                "Linear biases)" % PERTURB_STD,
        "grad_clip": None,
        "param_groups": {
            "decay": "tensors with 2+ dims (wte, wpe, c_attn/c_proj/c_fc/mlp.c_proj weights)",
            "no_decay": "biases and LayerNorm weights/biases (weight_decay 0)",
        },
        "optimizers": {},
        "losses_per_optimizer": opt_losses,
        "torch_version": torch.__version__,
    }
    for oname, (cls_name, kw, wd) in OPTIMISERS.items():
        d = {"torch_class": cls_name}
        d.update({k: (list(v) if isinstance(v, tuple) else v) for k, v in kw.items()})
        d["weight_decay"] = wd
        d["weight_decay_mode"] = "decoupled" if cls_name == "AdamW" else "coupled_l2"
        d["foreach"] = False
        hyper["optimizers"][oname] = d
    write_json(os.path.join(outdir, "reference.json"), hyper)
    for f in ("config.json", "model.safetensors", "reference.safetensors", "reference.json"):
        report(os.path.join(outdir, f))
    return init_hf, inputs, targets


def run_ext(cfg, init_hf, inputs, targets, name, steps=EXT_STEPS):
    """EXT_STEPS steps of OPTIMISERS_EXT[name] on the tiny model."""
    h = OPTIMISERS_EXT[name]
    return train_steps(cfg, init_hf, inputs, targets, lambda m: make_optimizer_ext(m, name), steps,
                       exact_key_bias=name in EXACT_KEY_BIAS, sophia=h if h["optimizer"] == "sophia" else None)


def fixture_optimizers_ext(outdir, init_hf, inputs, targets):
    ref, losses = {}, {}
    for name in OPTIMISERS_EXT:
        losses[name], m = run_ext(TINY_CFG, init_hf, inputs, targets, name)
        ref.update(G.to_hf(m, prefix=f"{name}.step{EXT_STEPS}."))
        print(f"[gpt2_tiny] {name:15s} losses: " + " ".join(f"{x:.6f}" for x in losses[name]))
    for kind in ("dynamic", "linear"):
        for signed in (True, False):
            ref[f"code.{kind}.{'signed' if signed else 'unsigned'}"] = O.make_code(kind, signed).numpy()
    G.save_safetensors(os.path.join(outdir, "optimizers.safetensors"), ref)
    write_json(os.path.join(outdir, "optimizers.json"),
               {"steps": EXT_STEPS, "same_batch_every_step": True, "settings": OPTIMISERS_EXT,
                "losses_per_optimizer": losses, "small_tensor": O.SMALL_TENSOR,
                "exact_key_bias": list(EXACT_KEY_BIAS),
                "decay": "tensors with 2+ dims (as reference.json's param_groups)",
                "blas_isa": blas_isa(),
                "torch_version": torch.__version__})
    for f in ("optimizers.safetensors", "optimizers.json"):
        report(os.path.join(outdir, f))


# ---------------------------------------------------------------------------
# Fixture B

E2E_CFG = G.GPTConfig(n_layer=2, n_head=4, n_embd=48, vocab_size=211, n_positions=64)
E2E_SEED = 4321
E2E_DATA_SEED = 777
E2E_NTOK = 700
E2E_G, E2E_T, E2E_STEPS = 4, 16, 10
E2E_HYPER = {
    "optimizer": "adamw", "lr": 3e-3, "lr_schedule": "constant", "betas": [0.9, 0.95],
    "eps": 1e-8, "weight_decay": 0.1,
    "weight_decay_groups": "decay = tensors with 2+ dims; biases and LayerNorm params 0",
    "grad_clip": 1.0, "grad_clip_mode": "global L2 norm over all params (tied wte once)",
    "steps": E2E_STEPS, "global_batch_rows": E2E_G, "T": E2E_T,
    "data_order": "sequential",
    "data_order_detail": "global batch k, row j uses tokens[(k*G+j)*T : (k*G+j)*T+T+1]; "
                         "inputs first T, targets last T",
    "loss": "mean cross-entropy over all G*T targets",
    "init": "normal(0,0.02) Linear weights and embeddings, zero biases, LN 1/0",
    "model_seed": E2E_SEED, "data_seed": E2E_DATA_SEED, "n_tokens": E2E_NTOK,
}


def markov_tokens(vocab, n, seed):
    """Sparse random Markov chain: each token has 4 successors with probs .7/.15/.1/.05."""
    rng = np.random.RandomState(seed)
    succ = np.stack([rng.choice(vocab, size=4, replace=False) for _ in range(vocab)])
    probs = np.array([0.7, 0.15, 0.1, 0.05])
    toks = np.empty(n, dtype=np.int64)
    toks[0] = rng.randint(vocab)
    for i in range(1, n):
        toks[i] = succ[toks[i - 1], rng.choice(4, p=probs)]
    return toks


def write_shard(path, tokens):
    header = np.zeros(256, dtype="<i4")
    header[0] = 20240520
    header[1] = 1
    header[2] = len(tokens)
    assert tokens.max() < 65536 and tokens.min() >= 0
    with open(path, "wb") as f:
        f.write(header.tobytes())
        f.write(tokens.astype("<u2").tobytes())


def fixture_e2e(outdir):
    cfg = E2E_CFG
    torch.manual_seed(E2E_SEED)
    model = G.GPT(cfg)
    G.save_model_dir(outdir, cfg, model)

    toks = markov_tokens(cfg.vocab_size, E2E_NTOK, E2E_DATA_SEED)
    write_shard(os.path.join(outdir, "data.bin"), toks)
    toks_t = torch.from_numpy(toks)

    opt = torch.optim.AdamW(G.param_groups(model, E2E_HYPER["weight_decay"]),
                            lr=E2E_HYPER["lr"], betas=tuple(E2E_HYPER["betas"]),
                            eps=E2E_HYPER["eps"], foreach=False)
    Gr, T = E2E_G, E2E_T
    losses, norms = [], []
    for k in range(E2E_STEPS):
        rows = [toks_t[(k * Gr + j) * T:(k * Gr + j) * T + T + 1] for j in range(Gr)]
        batch = torch.stack(rows)
        x, y = batch[:, :T], batch[:, 1:]
        opt.zero_grad(set_to_none=True)
        _, loss = model(x, y)
        loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), E2E_HYPER["grad_clip"])
        opt.step()
        losses.append(float(np.float32(loss.item())))
        norms.append(float(np.float32(norm.item())))
        print(f"[gpt2_e2e] step {k}: loss={losses[-1]:.6f} grad_norm={norms[-1]:.6f}")

    G.save_safetensors(os.path.join(outdir, "final.safetensors"), G.to_hf(model))
    write_json(os.path.join(outdir, "expected.json"),
               {"losses": losses, "grad_norms": norms, "hyper": E2E_HYPER,
                "torch_version": torch.__version__})
    for f in ("config.json", "model.safetensors", "data.bin", "final.safetensors",
              "expected.json"):
        report(os.path.join(outdir, f))


# ---------------------------------------------------------------------------
# Fixture C

LLAMA_CFG = LT.LlamaConfig(n_layer=2, n_head=4, n_kv_head=2, n_embd=48, ffn=128, vocab_size=211, n_ctx=64,
                           eps=1e-5, theta=10000.0)
LLAMA_SEED = 2468
LLAMA_HYPER = dict(E2E_HYPER, eps=1e-6, model_seed=LLAMA_SEED,
                   init="N(0, 0.02) matrices and embeddings (float32 values), RMSNorm gains 1 + N(0, 0.1)",
                   reference="float64 (tools/reference/llama_torch.py)",
                   grad_clip_mode="global L2 norm over all params")


def train_reference(outdir, name, model, cfg, h, micro=None):
    """10 AdamW steps of the float64 model on the e2e data, micro-batches of `micro` rows (each micro-batch's
    loss and MoE terms weighted by its share of the step); writes data.bin, final.safetensors, expected.json."""
    toks = markov_tokens(cfg.vocab_size, E2E_NTOK, E2E_DATA_SEED)
    write_shard(os.path.join(outdir, "data.bin"), toks)
    toks_t = torch.from_numpy(toks)
    opt = torch.optim.AdamW(LT.param_groups(model, h["weight_decay"]), lr=h["lr"], betas=tuple(h["betas"]),
                            eps=h["eps"], foreach=False)
    Gr, T = E2E_G, E2E_T
    M = micro or Gr
    losses, norms = [], []
    for k in range(E2E_STEPS):
        batch = torch.stack([toks_t[(k * Gr + j) * T:(k * Gr + j) * T + T + 1] for j in range(Gr)])
        opt.zero_grad(set_to_none=True)
        step_loss = 0.0
        for m in range(Gr // M):
            x, y = batch[m * M:(m + 1) * M, :T], batch[m * M:(m + 1) * M, 1:]
            _, loss = model(x, y)
            if M == Gr:
                (loss + model.moe_extra()).backward()
                step_loss = loss.item()
            else:
                (((loss + model.moe_extra()) * M) / Gr).backward()
                step_loss += loss.item() * M / Gr
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), h["grad_clip"])
        opt.step()
        losses.append(step_loss)
        norms.append(norm.item())
        print(f"[{name}] step {k}: loss={losses[-1]:.8f} grad_norm={norms[-1]:.8f}")
    G.save_safetensors(os.path.join(outdir, "final.safetensors"), model.hf_tensors())
    write_json(os.path.join(outdir, "expected.json"),
               {"losses": losses, "grad_norms": norms, "hyper": h, "torch_version": torch.__version__})
    for f in ("config.json", "model.safetensors", "data.bin", "final.safetensors", "expected.json"):
        report(os.path.join(outdir, f))


def fixture_llama(outdir):
    cfg = LLAMA_CFG
    model = LT.Llama(cfg)
    LT.init_weights(model, LLAMA_SEED)
    LT.save_dir(outdir, cfg, model, G.save_safetensors)  # float32 values, exactly the float64 model's
    train_reference(outdir, "llama_tiny", model.to(torch.float64), cfg, LLAMA_HYPER)


# ---------------------------------------------------------------------------
# Fixture D

MIXTRAL_CFG = LT.LlamaConfig(n_layer=2, n_head=4, n_kv_head=2, n_embd=48, ffn=32, vocab_size=211, n_ctx=64,
                             eps=1e-5, theta=10000.0, n_experts=4, top_k=2, aux_coef=0.01, z_coef=0.001)
MIXTRAL_SEED = 1357
MIXTRAL_MICRO = 2  # rows per micro-batch: the balance and z-losses are per micro-batch
MIXTRAL_HYPER = dict(LLAMA_HYPER, model_seed=MIXTRAL_SEED, micro_batch_rows=MIXTRAL_MICRO,
                     objective="mean cross-entropy + per layer and micro-batch (mean over the step's micro-batches): "
                               "aux_coef E sum_e f_e P_e + z_coef mean logsumexp^2",
                     reference="float64 (tools/reference/llama_torch.py: SparseMoe)")


# Fixture E: what Mixtral lacks: a dense layer then an MoE layer with a shared expert, a sigmoid router whose top k
# are not renormalised, and a capacity factor that drops choices.
MOE_VARIANTS_CFG = LT.LlamaConfig(n_layer=2, n_head=4, n_kv_head=2, n_embd=48, ffn=32, vocab_size=211, n_ctx=64,
                                  eps=1e-5, theta=10000.0, n_experts=4, top_k=2, aux_coef=0.01, z_coef=0.001,
                                  n_shared=1, router="sigmoid", norm_topk=False, capacity=0.75, moe_layers=(1,),
                                  dense_ffn=64)
MOE_VARIANTS_SEED = 8642


# Fixture F: an HF OLMoE (the queries and keys RMS-normalised over all heads, the experts under mlp. by LLaMA's
# MLP names, the top k not renormalised as OLMoE-1B-7B has it): 8 experts, top 2.
OLMOE_CFG = LT.LlamaConfig(n_layer=2, n_head=4, n_kv_head=2, n_embd=48, ffn=32, vocab_size=211, n_ctx=64, eps=1e-5,
                           theta=10000.0, n_experts=8, top_k=2, aux_coef=0.01, z_coef=0.001, norm_topk=False,
                           olmoe=True)
OLMOE_SEED = 2468


def fixture_mixtral(outdir, cfg=MIXTRAL_CFG, seed=MIXTRAL_SEED, name="mixtral_tiny"):
    model = LT.Llama(cfg)
    LT.init_weights(model, seed)
    LT.save_dir(outdir, cfg, model, G.save_safetensors)
    train_reference(outdir, name, model.to(torch.float64), cfg, dict(MIXTRAL_HYPER, model_seed=seed), MIXTRAL_MICRO)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join(REPO, "tests", "fixtures"))
    args = ap.parse_args()
    setup_determinism()
    tiny = os.path.join(args.out, "gpt2_tiny")
    fixture_optimizers_ext(tiny, *fixture_tiny(tiny))
    fixture_e2e(os.path.join(args.out, "gpt2_e2e"))
    fixture_llama(os.path.join(args.out, "llama_tiny"))
    fixture_mixtral(os.path.join(args.out, "mixtral_tiny"))
    fixture_mixtral(os.path.join(args.out, "moe_variants"), MOE_VARIANTS_CFG, MOE_VARIANTS_SEED, "moe_variants")
    fixture_mixtral(os.path.join(args.out, "olmoe_tiny"), OLMOE_CFG, OLMOE_SEED, "olmoe_tiny")


if __name__ == "__main__":
    main()
