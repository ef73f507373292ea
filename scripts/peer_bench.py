#!/usr/bin/env python3
"""The PyTorch CPU peer of `stx bench`: the same "bench" model (Llama-style, vocab 2048, hidden 256,
4 layers, 4 heads, SwiGLU 704, untied head) and the same workloads, printed as the same JSON
lines, so that stx's figures can be reported as ratios measured on one machine in one run
(scripts/bench-vs-peer.sh). Needs PyTorch (Debian: apt-get install python3-torch; run with
/usr/bin/python3). Threads: --threads (PyTorch's intra-op threads, default 2).
--config takes a Llama/Qwen2-style config.json instead (GQA, q/k/v biases, tied head,
head_dim, rope_theta; e.g. the one `stx init-model --shape qwen2.5-0.5b` writes), with
--batch/--seq-len/--prompt-len/--new-tokens as `stx bench` has them.

--lora R measures LoRA as PyTorch + PEFT run it (`stx bench --lora R`'s peer): the model is
transformers' own (from --config, or the bench model's sizes as a Llama config) wrapped by PEFT's
get_peft_model (rank R, alpha 2R, --lora-targets, default all-linear), the optimizer holds the
adapters alone and the frozen reference is the base with the adapters disabled (as TRL does it).
It needs transformers and peft on PYTHONPATH (scripts/fetch-peft.sh installs them).

--dtype bfloat16 is `stx bench --dtype bfloat16`'s peer: the forward and the train steps run under
CPU autocast (bf16 matrix products, f32 weights, gradients and AdamW, as stx's bf16 mode), and
sampling casts the model's weights to bf16 first and decodes with them (as a Hugging Face model
loaded with torch_dtype=bfloat16 generates); log-softmax and sampling stay in f32 on both sides.

It is not part of stx or its tests: it only exists to measure the peer.
"""
import argparse
import contextlib
import ctypes
import json
import math
import os
import resource
import statistics
import sys
import time

# Debian's PyTorch runs its OpenMP threads and OpenBLAS's own threads at once; on 2 cores the two
# pools fight (measured: forward 3,200 tok/s with both at 2 threads, 5,300 with OpenBLAS at 1).
# --blas-threads sets OpenBLAS's (1 unless the caller's environment chose), --threads PyTorch's;
# scripts/bench-vs-peer.sh tries several pairs and keeps the best figure of each measurement.
# OpenBLAS reads its setting when torch loads it, so it is parsed before the import.
_pre = argparse.ArgumentParser(add_help=False)
_pre.add_argument("--blas-threads", type=int)
_blas_threads = _pre.parse_known_args()[0].blas_threads
if _blas_threads:
    os.environ["OPENBLAS_NUM_THREADS"] = str(_blas_threads)
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import torch  # noqa: E402 (after the environment is set)
import torch.nn.functional as F

V, D, L, H, FF = 2048, 256, 4, 4, 704
HD = D // H
KVH, THETA, BIAS, TIED = H, 10000.0, False, False


def use_config(path):
    """Sets the model's sizes from a Hugging Face config.json."""
    global V, D, L, H, FF, HD, KVH, THETA, BIAS, TIED
    with open(path) as f:
        c = json.load(f)
    V, D, L, H, FF = c["vocab_size"], c["hidden_size"], c["num_hidden_layers"], c["num_attention_heads"], c["intermediate_size"]
    HD = c.get("head_dim") or D // H
    KVH = c.get("num_key_value_heads", H)
    THETA = c.get("rope_theta", 10000.0)
    BIAS = c.get("model_type") == "qwen2" or c.get("attention_bias", False)
    TIED = c.get("tie_word_embeddings", False)


def rope(x, pos):  # x [B, H, T, HD]; pos [T] or [B, T]
    half = HD // 2
    inv = 1.0 / (THETA ** (torch.arange(half, dtype=torch.float32) * 2 / HD))
    ang = pos.to(torch.float32)[..., None] * inv  # [..., T, half]
    if ang.dim() == 2:
        ang = ang[None, None]
    else:
        ang = ang[:, None]
    c, s = ang.cos(), ang.sin()
    x1, x2 = x[..., :half], x[..., half:]
    # Computed in f32 and returned in x's dtype, so that q and k stay in v's dtype in bf16.
    return torch.cat([x1 * c - x2 * s, x2 * c + x1 * s], dim=-1).to(x.dtype)


def rms(x, w):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w


class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = torch.nn.Parameter(torch.randn(V, D) * 0.02)
        self.layers = torch.nn.ModuleList()
        for _ in range(L):
            m = torch.nn.Module()
            for name, shape in [("q", (H * HD, D)), ("k", (KVH * HD, D)), ("v", (KVH * HD, D)), ("o", (D, H * HD)),
                                ("gate", (FF, D)), ("up", (FF, D)), ("down", (D, FF))]:
                setattr(m, name, torch.nn.Parameter(torch.randn(*shape) * 0.02))
            for name, n in [("qb", H * HD), ("kb", KVH * HD), ("vb", KVH * HD)]:
                setattr(m, name, torch.nn.Parameter(torch.zeros(n)) if BIAS else None)
            m.n1 = torch.nn.Parameter(torch.ones(D))
            m.n2 = torch.nn.Parameter(torch.ones(D))
            self.layers.append(m)
        self.norm = torch.nn.Parameter(torch.ones(D))
        self.head = self.emb if TIED else torch.nn.Parameter(torch.randn(V, D) * 0.02)

    def forward(self, tokens, cache=None, start=0):
        B, T = tokens.shape
        x = self.emb[tokens]
        pos = torch.arange(start, start + T)
        for i, m in enumerate(self.layers):
            h = rms(x, m.n1)
            q = F.linear(h, m.q, m.qb).view(B, T, H, HD).transpose(1, 2)
            k = F.linear(h, m.k, m.kb).view(B, T, KVH, HD).transpose(1, 2)
            v = F.linear(h, m.v, m.vb).view(B, T, KVH, HD).transpose(1, 2)
            q, k = rope(q, pos), rope(k, pos)
            if cache is not None:
                if i in cache:
                    k = torch.cat([cache[i][0], k], dim=2)
                    v = torch.cat([cache[i][1], v], dim=2)
                cache[i] = (k, v)
            if KVH != H:
                k, v = k.repeat_interleave(H // KVH, 1), v.repeat_interleave(H // KVH, 1)
            a = F.scaled_dot_product_attention(q, k, v, is_causal=(cache is None or T > 1)) \
                if hasattr(F, "scaled_dot_product_attention") else None
            if a is None:
                s = (q @ k.transpose(-1, -2)) / math.sqrt(HD)
                if cache is None or T > 1:
                    s = s.masked_fill(torch.ones(T, k.shape[2], dtype=torch.bool).triu(k.shape[2] - T + 1), -1e30)
                a = s.softmax(-1) @ v
            x = x + a.transpose(1, 2).reshape(B, T, H * HD) @ m.o.T
            h = rms(x, m.n2)
            x = x + (F.silu(h @ m.gate.T) * (h @ m.up.T)) @ m.down.T
        return rms(x, self.norm) @ self.head.T


def token_logprobs(model, tokens, targets):
    return model(tokens).float().log_softmax(-1).gather(-1, targets[..., None])[..., 0]


class PeftPolicy:
    """A transformers model with PEFT LoRA adapters: forward with adapters, forward of the base."""

    def __init__(self, config_path, rank, targets):
        from peft import LoraConfig, get_peft_model
        from transformers import AutoConfig, AutoModelForCausalLM, LlamaConfig
        if config_path:
            cfg = AutoConfig.from_pretrained(os.path.dirname(os.path.abspath(config_path)))
        else:
            cfg = LlamaConfig(vocab_size=V, hidden_size=D, num_hidden_layers=L, num_attention_heads=H,
                              num_key_value_heads=KVH, intermediate_size=FF, tie_word_embeddings=TIED)
        base = AutoModelForCausalLM.from_config(cfg, torch_dtype=torch.float32)
        lc = LoraConfig(r=rank, lora_alpha=2 * rank, lora_dropout=0.0, task_type="CAUSAL_LM",
                        target_modules=targets if targets == "all-linear" else targets.split(","))
        self.model = get_peft_model(base, lc)

    def logprobs(self, tokens, targets):
        return self.model(input_ids=tokens).logits.float().log_softmax(-1).gather(-1, targets[..., None])[..., 0]

    def base_logprobs(self, tokens, targets):
        with self.model.disable_adapter():
            return self.logprobs(tokens, targets)


def timed(runs, fn):
    fn()
    ts = []
    for _ in range(runs):
        t = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t)
    return statistics.median(ts)


def openblas():
    """Describes the OpenBLAS that PyTorch loaded (its kernels and threads), as stx bench does."""
    try:
        lib = ctypes.CDLL("libopenblas.so.0")
        lib.openblas_get_config.restype = ctypes.c_char_p
        return f"{lib.openblas_get_config().decode()}, {lib.openblas_get_num_threads()} threads"
    except (OSError, AttributeError) as e:
        return f"OpenBLAS not found ({e})"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2, help="PyTorch's intra-op threads")
    ap.add_argument("--blas-threads", type=int, help="OpenBLAS's threads (default 1, see above)")
    ap.add_argument("--config", help="a Llama/Qwen2-style config.json instead of the bench model")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq-len", type=int, default=256)
    ap.add_argument("--prompt-len", type=int, default=32)
    ap.add_argument("--new-tokens", type=int, default=128)
    ap.add_argument("--only", default="", help="comma-separated measurements to run (as stx bench --only)")
    ap.add_argument("--lora", type=int, default=0, help="LoRA rank: PyTorch + PEFT adapters (0: full fine-tuning)")
    ap.add_argument("--lora-targets", default="all-linear", help="PEFT target_modules (comma-separated, or all-linear)")
    ap.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"],
                    help="compute dtype of the matrix products (see above)")
    args = ap.parse_args()
    names = ["forward_logprobs", "grpo_train_step", "sft_train_step", "kv_cache_sampling"]
    only = [n.strip() for n in args.only.split(",") if n.strip()] or names
    for n in only:
        if n not in names:
            ap.error(f"unknown measurement {n!r} (have {', '.join(names)})")
    if args.config:
        use_config(args.config)
    torch.set_num_threads(args.threads)
    print(f"peer: PyTorch {torch.__version__}, {args.threads} threads; {openblas()}", file=sys.stderr)
    torch.manual_seed(1)
    B, T, P, N = args.batch, args.seq_len, args.prompt_len, args.new_tokens
    if args.lora:
        pol = PeftPolicy(args.config, args.lora, args.lora_targets)
        model = pol.model
        fwd, ref_fwd = pol.logprobs, pol.base_logprobs
    else:
        # The frozen reference copy is only built where the GRPO step needs it: at the 1.5B shape
        # a second f32 copy is 6 GB that sampling alone never reads.
        model = Model()
        ref = None
        if "grpo_train_step" in only:
            ref = Model()
            ref.load_state_dict(model.state_dict())
        fwd = lambda t, y: token_logprobs(model, t, y)  # noqa: E731
        ref_fwd = lambda t, y: token_logprobs(ref, t, y)  # noqa: E731
    bf16 = args.dtype == "bfloat16"
    # Under autocast the products run in bf16; the log-softmax of token_logprobs is taken of f32
    # logits (autocast's CPU policy leaves log_softmax in the input's dtype).
    amp = (lambda: torch.autocast("cpu", dtype=torch.bfloat16)) if bf16 else contextlib.nullcontext
    tokens = torch.randint(0, V, (B, T))
    targets = torch.roll(tokens, -1, 1)
    mask = torch.ones(B, T)
    mask[:, -1] = 0
    out = []

    def emit(name, tok, sec):
        # ru_maxrss is the process's peak resident set in KiB (Linux).
        out.append({"name": name, "tokens_per_s": tok / sec, "median_s": sec, "runs": args.runs,
                    "threads": args.threads, "blas_threads": int(os.environ["OPENBLAS_NUM_THREADS"]),
                    "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024})

    if "forward_logprobs" in only:
        def forward():
            with torch.no_grad(), amp():
                fwd(tokens, targets)
        emit("forward_logprobs", B * T, timed(args.runs, forward))

    # With LoRA only the adapters require gradients: the optimizer holds them alone.
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=1e-5, weight_decay=0.0)
    adv = torch.randn(B)

    def step():
        with torch.no_grad(), amp():
            ref_lp = ref_fwd(tokens, targets)
        with amp():
            lp = fwd(tokens, targets)
        ratio = (lp - ref_lp).exp()
        a = adv[:, None]
        surr = torch.minimum(ratio * a, ratio.clamp(0.8, 1.28) * a)
        d = ref_lp - lp
        k3 = d.exp() - d - 1
        loss = ((0.04 * k3 - surr) * mask).sum() / mask.sum()
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
    if "grpo_train_step" in only:
        emit("grpo_train_step", B * T, timed(args.runs, step))

    def sft():
        with amp():
            lp = fwd(tokens, targets)
        loss = -(lp * mask).sum() / mask.sum()
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
    if "sft_train_step" in only:
        emit("sft_train_step", B * T, timed(args.runs, sft))

    prompts = torch.randint(0, V, (B, P))

    def sample():
        with torch.no_grad():
            cache = {}
            logits = model(prompts, cache, 0)[:, -1].float()
            for i in range(N):
                nxt = torch.multinomial(logits.softmax(-1), 1)
                if i == N - 1:
                    break
                logits = model(nxt, cache, P + i)[:, -1].float()
    if "kv_cache_sampling" in only and args.lora:
        print("peer: kv_cache_sampling is not measured with --lora (the hand-written cache needs the plain model)", file=sys.stderr)
    elif "kv_cache_sampling" in only:
        if bf16:
            # Sampling is the last measurement: the weights are cast in place (Module.to keeps
            # the tied head shared), so the f32 copy is freed rather than held beside the bf16 one.
            del opt
            ref = None  # noqa: F841 (frees the reference copy the GRPO step held)
            model.zero_grad(set_to_none=True)
            model.to(torch.bfloat16)
        emit("kv_cache_sampling", B * N, timed(args.runs, sample))
    for o in out:
        print(json.dumps(o))


if __name__ == "__main__":
    main()
