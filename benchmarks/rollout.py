"""Rollout throughput, side by side: rlxf's native engine and ``transformers`` ``generate``.

    python benchmarks/rollout.py                        # presets tiny and small
    python benchmarks/rollout.py --presets tiny --prompts 16 --tokens 64

Workload (both sides, the defaults): a ``rlxf init-model`` preset built in-process (same seed,
same weights), 64 prompts of random token ids with lengths drawn uniformly from [16, 64]
(seeded), n = 8 samples per prompt (512 sequences), exactly 128 new tokens each (eos ignored,
so both sides generate the same number of tokens), temperature 1.0, no top-k / top-p, fp32,
``--threads`` torch threads (default 2).

* native: ``build_engine("native", model).generate(prompts, SamplingParams(n=8, ...))``; every
  prompt prefilled once and shared by its 8 samples, all 512 sequences decoded at once
  (``--max-batch-size``), by ``--threads`` decode workers of one intra-op thread each (the
  engine's default on CPU; ``--engine-threads`` sets another count).
* HF: one ``model.generate`` call over the 64 left-padded prompts with
  ``num_return_sequences=8`` (512 sequences in one batch, DynamicCache, sdpa attention),
  ``do_sample=True, top_k=0, top_p=1.0``; plain ``generate``, no scores returned.

``update_weights`` (the trainer -> engine weight sync) is timed against cloning the same
parameters, the cheapest full copy.

Each side runs in its own subprocess (after one small warm-up call), so its peak RSS
(``ru_maxrss``: model, tokenizer, caches, everything) is its own. tokens/s counts generated
tokens over the wall time of the generate call, prefill included.

Fraction of peak = model FLOPs / time / matmul peak, with model FLOPs per generated token =
2 x parameters (the tied embedding once: it is the output head's matmul) + attention
4 x layers x query heads x head dim x context length (QK^T and PV over the prompt and the
tokens before it); the prefill is not counted (it is done once per prompt). The matmul peak is
the best of a few fp32 1024^3 and 2048^3 matmuls on the same threads (``benchmarks/common.py``), with torch.mm (MKL) and
with oneDNN's linear (the native engine's kernel on CPU; on this AMD machine MKL runs its AVX2
path and oneDNN AVX-512, about 2x faster).

Prints; never asserts. Timings on a shared machine are noisy (other processes compete for the
same cores): the ratio of the two sides, measured back to back, is the figure to read, and the
load average is printed with it. "CPU ratio" is the same comparison in CPU time (user + system
seconds of each side's process, HF / native): it is less sensitive to time lost waiting for a
core, but counts OpenMP threads spinning at barriers as work.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time

from common import cpu_model, matmul_peak


def make_prompts(count: int, lo: int, hi: int, vocab: int, seed: int = 0) -> list[list[int]]:
    import torch

    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(lo, hi + 1, (count,), generator=g).tolist()
    # ids 4.. skip the special tokens (eos, pad, chat markers) of the built-in tokenizer
    return [torch.randint(4, vocab, (n,), generator=g).tolist() for n in lengths]


def worker(args) -> dict:
    import torch

    torch.set_num_threads(args.threads)
    from rlxf.models import build_model, count_parameters
    from rlxf.models.tokenizer import train_tokenizer

    tok = train_tokenizer()
    model = build_model(args.preset, tok, seed=0).eval()
    cfg = model.config
    prompts = make_prompts(args.prompts, args.min_prompt, args.max_prompt, cfg.vocab_size)
    tokens = len(prompts) * args.n * args.tokens
    info = {"params": count_parameters(model), "layers": cfg.num_hidden_layers,
            "q_dim": cfg.num_attention_heads * (cfg.hidden_size // cfg.num_attention_heads)}
    if args.side == "native":
        from rlxf.rollout import SamplingParams, build_engine

        engine = build_engine("native", model, tok, max_batch_size=args.max_batch_size, compile=args.compile,
                              threads=args.engine_threads)
        engine.generate(prompts[:2], SamplingParams(n=2, max_new_tokens=4, ignore_eos=True))  # warm-up
        sp = SamplingParams(n=args.n, temperature=1.0, max_new_tokens=args.tokens, ignore_eos=True, seed=0)
        start, cpu = time.perf_counter(), time.process_time()
        out = engine.generate(prompts, sp)
        seconds, cpu = time.perf_counter() - start, time.process_time() - cpu
        got = sum(len(c.response_ids) for g in out for c in g)
        assert got == tokens, (got, tokens)
        info["kv_cache_mb"] = engine.last_stats.kv_cache_bytes / 2**20
        info["workers"] = engine.workers_for(len(prompts))
        info["mean_batch"] = engine.last_stats.mean_batch
        # update_weights against the cheapest full copy of the same tensors (best of 5 each)
        params = list(model.named_parameters())
        sync, copy = [], []
        for _ in range(5):
            t = time.perf_counter()
            engine.update_weights(params, version=1)
            sync.append(time.perf_counter() - t)
            t = time.perf_counter()
            [p.detach().clone() for _, p in params]
            copy.append(time.perf_counter() - t)
        info["update_ms"], info["clone_ms"] = 1e3 * min(sync), 1e3 * min(copy)
    else:
        width = max(len(p) for p in prompts)
        pad = cfg.pad_token_id or 0
        ids = torch.full((len(prompts), width), pad, dtype=torch.long)
        mask = torch.zeros_like(ids)
        for i, p in enumerate(prompts):
            ids[i, width - len(p):] = torch.tensor(p)
            mask[i, width - len(p):] = 1
        kw = dict(do_sample=True, temperature=1.0, top_k=0, top_p=1.0, eos_token_id=None, pad_token_id=pad)
        with torch.no_grad():
            model.generate(input_ids=ids[:2], attention_mask=mask[:2], max_new_tokens=4, **kw)  # warm-up
            start, cpu = time.perf_counter(), time.process_time()
            out = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=args.tokens,
                                 min_new_tokens=args.tokens, num_return_sequences=args.n, **kw)
            seconds, cpu = time.perf_counter() - start, time.process_time() - cpu
        assert out.shape == (len(prompts) * args.n, width + args.tokens), out.shape
    # attention FLOPs: each generated token at context c costs 4 * layers * q_dim * c
    ctx = sum(args.n * sum(len(p) + t for t in range(args.tokens)) for p in prompts)
    flops = 2 * info["params"] * tokens + 4 * info["layers"] * info["q_dim"] * ctx
    info.update(seconds=seconds, cpu_seconds=cpu, tokens=tokens, tok_per_s=tokens / seconds, flops=flops,
                peak_rss_mb=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
    return info


def run_side(side: str, preset: str, args) -> dict:
    cmd = [sys.executable, __file__, "--worker", side, "--preset", preset, "--threads", str(args.threads),
           "--prompts", str(args.prompts), "--n", str(args.n), "--tokens", str(args.tokens),
           "--min-prompt", str(args.min_prompt), "--max-prompt", str(args.max_prompt),
           "--max-batch-size", str(args.max_batch_size)] + (["--compile"] if args.compile else []) \
        + (["--engine-threads", str(args.engine_threads)] if args.engine_threads else [])
    env = {**os.environ, "OMP_NUM_THREADS": str(args.threads), "TOKENIZERS_PARALLELISM": "false"}
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        raise RuntimeError(f"{side} worker failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--presets", nargs="+", default=["tiny", "small"])
    ap.add_argument("--prompts", type=int, default=64)
    ap.add_argument("--n", type=int, default=8)
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--min-prompt", type=int, default=16)
    ap.add_argument("--max-prompt", type=int, default=64)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--max-batch-size", type=int, default=512)
    ap.add_argument("--compile", action="store_true", help="native engine with torch.compile")
    ap.add_argument("--engine-threads", type=int, default=None,
                    help="native engine decode workers (default: --threads)")
    ap.add_argument("--skip-hf", action="store_true")
    ap.add_argument("--worker", choices=["native", "hf"], help=argparse.SUPPRESS)
    ap.add_argument("--preset", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        args.side = args.worker
        print(json.dumps(worker(args)))
        return
    peak = matmul_peak(args.threads)
    print(f"CPU: {cpu_model()}")
    print(f"workload: {args.prompts} prompts (lengths {args.min_prompt}-{args.max_prompt}) x n={args.n}, "
          f"{args.tokens} new tokens, temperature 1.0, fp32, {args.threads} threads")
    print(f"fp32 matmul peak (square matmuls, best of torch.mm and oneDNN, {args.threads} threads): {peak / 1e9:.0f} GFLOP/s")
    print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    header = (f"{'preset':<7}{'params':>10}{'native tok/s':>14}{'HF tok/s':>11}{'ratio':>8}{'CPU ratio':>11}"
              f"{'native RSS':>12}{'HF RSS':>9}{'KV cache':>10}{'native % peak':>15}")
    print(header)
    for preset in args.presets:
        nat = run_side("native", preset, args)
        hf = None if args.skip_hf else run_side("hf", preset, args)
        ratio = f"{nat['tok_per_s'] / hf['tok_per_s']:.2f}x" if hf else "-"
        cpu_ratio = f"{hf['cpu_seconds'] / nat['cpu_seconds']:.2f}x" if hf else "-"
        print(f"{preset:<7}{nat['params'] / 1e6:>9.1f}M{nat['tok_per_s']:>14,.0f}"
              f"{hf['tok_per_s'] if hf else float('nan'):>11,.0f}{ratio:>8}{cpu_ratio:>11}"
              f"{nat['peak_rss_mb']:>10,.0f}MB{hf['peak_rss_mb'] if hf else float('nan'):>7,.0f}MB"
              f"{nat['kv_cache_mb']:>8,.0f}MB{100 * nat['flops'] / nat['seconds'] / peak:>14.1f}%", flush=True)
        print(f"        native update_weights: {nat['update_ms']:.1f} ms; cloning the same parameters: "
              f"{nat['clone_ms']:.1f} ms", flush=True)
    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
