"""GRPO step time, side by side: TRL's GRPOTrainer and rlxf, same model, same prompts.

    pip install 'rlxf[bench]'                            # trl, psutil
    python benchmarks/grpo_step.py                       # tiny + small, 32 and 128 new tokens
    python benchmarks/grpo_step.py --presets tiny --tokens 32 --rounds 1

Workload (both sides): a locally built model (``rlxf init-model --preset tiny|small``, the same
directory, weights and tokenizer), the built-in arithmetic task (2-digit addition; the chat
template on both sides, the same prompt text), 8 prompts x 8 samples per step, up to
``--tokens`` new tokens, temperature 1 (no top-k / top-p), reward 1 if the response's last
number equals the answer, GRPO advantages (group mean and std), PPO-clip 0.2 with the
per-sequence token-mean loss, no KL (beta / kl_coef 0, no reference model), one AdamW optimizer
step per RL step over all 64 samples (lr 1e-5 constant, no warm-up, no weight decay, grad-norm
clip 1.0; rlxf with ``train.optim.skip_zero_grad_steps`` off, so that, as TRL, it runs every sample's
forward/backward and the optimizer step when the advantages are all 0, as they are from an untrained
model), fp32 on CPU, no gradient checkpointing, ``--threads`` torch threads, OpenMP's default
wait policy (``--omp-wait-policy``), no logging, no checkpoints, no evaluation.

Each side runs in its own subprocess, so its peak RSS (``ru_maxrss``) is its own; ``--rounds``
runs alternate which side goes first, and their timed steps are pooled. A step is timed from
the end of the one before to its own end, wall-clock and process CPU time (all threads):

* TRL: between ``on_step_end`` callbacks (generation, reward, forward/backward, optimizer).
  Generation is ``model.generate`` over all 64 samples; ``--trl-micro-batch`` is
  per_device_train_batch_size, with gradient accumulation making up the 64 (16 was TRL's
  fastest of 8 / 16 / 64 here, and holds less memory than 64).
* rlxf: between the loop's per-step logs (``rlxf.trainer.loop.train``: rollout with the native
  engine, reward, experience, forward/backward, optimizer, weight sync); the phase split comes
  from ``metrics.jsonl``.
* rlxf-async (``--sides trl,rlxf,rlxf-async``): the same run with ``rollout.mode: async`` and
  ``max_staleness: 1``: the engine samples the next step's groups in its own process (1 thread)
  while the trainer (``--threads`` - 1) trains; timed like rlxf. Its CPU time and peak RSS add
  the engine process's (peak: the two processes' peaks summed, an upper bound).

MFU = model FLOPs / step time / matmul peak, with model FLOPs = 2 N x (response tokens +
prompt tokens once per prompt) for generation + 6 N x (prompt + response tokens of every
sample) for the training forward/backward (N = parameters, the tied embedding counted once:
it is the output head's matmul; attention score FLOPs are left out). The same count for both
sides, whatever work each skips. The peak is the best of a few fp32 square matmuls on
``--threads`` threads over torch.mm (MKL) and oneDNN (``benchmarks/common.py``), measured by
this script: rlxf's trainer and engine run their linear layers on oneDNN on CPU
(``rlxf.models.kernels``), which reaches about twice MKL's rate on this AMD machine; TRL runs
transformers' own ``nn.Linear`` (MKL).

Prints; never asserts. Timings on a shared machine are noisy: the ratio of the two sides,
measured back to back, is the figure to read (the load average is printed with it). The CPU-time
ratio is the less load-sensitive one. See benchmarks/README.md for figures.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import cpu_model, matmul_peak

PROMPTS_PER_STEP = 8
N_SAMPLES = 8
TASK_OPTIONS = {"min_digits": 2, "max_digits": 2, "ops": "+"}
TRAIN_SIZE, TEST_SIZE = 2000, 100
LR = 1e-5
CLIP_EPS = 0.2
MAX_GRAD_NORM = 1.0
SEED = 0
RESULT = "RESULT "


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


def children_peak_rss_mb() -> float:
    """The largest peak RSS of the child processes that have ended (rlxf-async's engine)."""
    return resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024


def stamp() -> tuple[float, float]:
    """(wall-clock, CPU time of this process and its live child processes (rlxf-async's engine):
    all their threads, user + system)."""
    import psutil

    cpu = time.process_time()
    for child in psutil.Process().children(recursive=True):
        try:
            times = child.cpu_times()
            cpu += times.user + times.system
        except psutil.NoSuchProcess:
            pass
    return time.perf_counter(), cpu


def intervals(ends: list[tuple[float, float]], warmup: int) -> dict[str, list[float]]:
    """Wall and CPU seconds of each step after the warm-up: between consecutive step-end stamps."""
    pairs = list(zip(ends, ends[1:]))[warmup - 1:]
    return {"step_s": [b[0] - a[0] for a, b in pairs], "cpu_s": [b[1] - a[1] for a, b in pairs]}


def last_number(text: str) -> str | None:
    found = re.findall(r"-?\d+", text)
    return found[-1] if found else None


# ---------------------------------------------------------------------------------------------
# TRL worker
def trl_worker(args) -> dict:
    import torch
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from rlxf.data.tasks import get_task

    torch.manual_seed(SEED)
    torch.set_num_threads(args.threads)
    items, _ = get_task("arithmetic", TASK_OPTIONS).splits(TRAIN_SIZE, TEST_SIZE, SEED)
    dataset = Dataset.from_list([{"prompt": [{"role": "user", "content": it.question}], "answer": it.answer}
                                 for it in items])
    lengths: list[int] = []

    def correct(prompts, completions, completion_ids, answer, **_):
        lengths.extend(len(c) for c in completion_ids)
        texts = [c[-1]["content"] if isinstance(c, list) else c for c in completions]
        return [float(last_number(t) == a) for t, a in zip(texts, answer)]

    class StepClock(TrainerCallback):
        def __init__(self):
            self.ends: list[tuple[float, float]] = []

        def on_step_end(self, *a, **k):
            self.ends.append(stamp())

    micro = args.trl_micro_batch
    cfg = GRPOConfig(
        output_dir=args.out, max_steps=args.warmup + args.steps, seed=SEED, use_cpu=True,
        bf16=False, fp16=False, gradient_checkpointing=False,
        per_device_train_batch_size=micro, gradient_accumulation_steps=PROMPTS_PER_STEP * N_SAMPLES // micro,
        num_generations=N_SAMPLES, max_completion_length=args.tokens, temperature=1.0, top_p=1.0, top_k=0,
        beta=0.0, num_iterations=1, epsilon=CLIP_EPS, loss_type="grpo", scale_rewards="group",
        learning_rate=LR, lr_scheduler_type="constant", warmup_steps=0, weight_decay=0.0,
        max_grad_norm=MAX_GRAD_NORM, logging_strategy="no", save_strategy="no", eval_strategy="no",
        report_to="none", disable_tqdm=True, log_completions=False, dataloader_num_workers=0,
    )
    model = AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.float32)
    tokenizer = AutoTokenizer.from_pretrained(args.model)
    clock = StepClock()
    trainer = GRPOTrainer(model=model, reward_funcs=correct, args=cfg, train_dataset=dataset,
                          processing_class=tokenizer, callbacks=[clock])
    trainer.train()
    per_step = PROMPTS_PER_STEP * N_SAMPLES
    timed_lengths = lengths[args.warmup * per_step:]
    return {**intervals(clock.ends, args.warmup),
            "response_len": statistics.mean(timed_lengths) if timed_lengths else 0.0, "peak_rss_mb": peak_rss_mb(), "settings": {
                "per_device_train_batch_size": micro, "gradient_accumulation_steps": cfg.gradient_accumulation_steps,
                "steps_per_generation": cfg.steps_per_generation, "generation_batch_size": cfg.generation_batch_size,
                "optim": str(cfg.optim), "loss_type": cfg.loss_type, "torch_threads": torch.get_num_threads()}}


# ---------------------------------------------------------------------------------------------
# rlxf worker
def rlxf_config(args, run_dir: str, asynchronous: bool = False):
    from rlxf.config.schema import Config

    return Config.model_validate({
        "run": {"name": "bench", "output_dir": run_dir, "seed": SEED,
                "threads": max(1, args.threads - 1) if asynchronous else args.threads},
        "model": {"path": args.model, "dtype": "float32", "device": "cpu", "gradient_checkpointing": False},
        "data": {"task": "arithmetic", "task_options": TASK_OPTIONS, "train_size": TRAIN_SIZE,
                 "test_size": TEST_SIZE, "apply_chat_template": True},
        "rollout": {"backend": "native", "n": N_SAMPLES, "temperature": 1.0, "top_p": 1.0, "top_k": 0,
                    "max_new_tokens": args.tokens,
                    **({"mode": "async", "max_staleness": 1} if asynchronous else {})},
        "reward": {"verifiers": [{"type": "numeric", "name": "correct", "extract": ["last_number"]}],
                   "workers": 0},
        "algorithm": {"name": "grpo", "kl_coef": 0.0, "clip_eps_low": CLIP_EPS, "clip_eps_high": CLIP_EPS},
        "train": {"steps": args.warmup + args.steps, "prompts_per_step": PROMPTS_PER_STEP,
                  "mini_batch_size": PROMPTS_PER_STEP * N_SAMPLES, "micro_batch_size": args.rlxf_micro_batch,
                  "ppo_epochs": 1, "packing": True,
                  # TRL runs every sample's forward/backward and steps AdamW whatever the advantages;
                  # rlxf's default skips rows and steps without signal (all of them from an untrained
                  # model, whose rewards are all 0), which would time a step that trains nothing
                  "optim": {"lr": LR, "weight_decay": 0.0, "warmup_steps": 0, "schedule": "constant",
                            "max_grad_norm": MAX_GRAD_NORM, "skip_zero_grad_steps": False}},
        "eval": {"every": 0, "at_start": False},
        "checkpoint": {"every": 0, "save_final": False},
        "logging": {"progress": False, "samples_fraction": 0.0},
    })


def rlxf_worker(args) -> dict:
    import torch

    from rlxf.placement import run_training
    from rlxf.run_dir import RunDir
    from rlxf.trainer.state import RunState

    asynchronous = args.worker == "rlxf-async"
    cfg = rlxf_config(args, args.out, asynchronous)
    torch.set_num_threads(cfg.run.threads)
    run = RunDir.open(cfg.run.output_dir, cfg.run.name, overwrite=True)
    # Step-end stamps, as TRL's on_step_end: the loop logs each step once, after its sync. (A
    # wrapper in this worker process only; the library has no per-step hook.)
    stamps = []
    log = RunState.log

    def stamped_log(self, step, metrics, trajs=None):
        log(self, step, metrics, trajs)
        stamps.append(stamp())

    RunState.log = stamped_log
    run_training(cfg, run)
    rows = [json.loads(line) for line in run.metrics.read_text().splitlines() if line.strip()]
    rows = [r for r in rows if r.get("step", 0) > args.warmup and "time/step" in r]
    phases = sorted({k for r in rows for k in r if k.startswith("time/") and k != "time/step"})
    return {**intervals(stamps, args.warmup),
            "phases_s": {k[5:]: statistics.median(r.get(k, 0.0) for r in rows) for k in phases},
            "response_len": statistics.mean(r["response/length_mean"] for r in rows),
            "peak_rss_mb": peak_rss_mb() + (children_peak_rss_mb() if asynchronous else 0.0), "settings": {
                "micro_batch_size": cfg.train.micro_batch_size, "packing": cfg.train.packing,
                "rows_run_frac": statistics.mean(r.get("rows_run_frac", 1.0) for r in rows),
                "logprob_chunk_size": cfg.model.logprob_chunk_size,
                "loss_agg": cfg.algorithm.loss_agg, "torch_threads": torch.get_num_threads()}}


# ---------------------------------------------------------------------------------------------
# driver
def build_models(presets: list[str], root: Path) -> dict[str, Path]:
    out = {}
    for preset in presets:
        path = root / preset
        if not (path / "config.json").exists():
            subprocess.run([sys.executable, "-m", "rlxf.cli.main", "init-model", "--preset", preset, str(path)],
                           check=True, stdout=subprocess.DEVNULL)
        out[preset] = path
    return out


def workload_shape(model: Path) -> tuple[int, float]:
    """(parameters, mean prompt tokens after the chat template) of the benchmark's prompts."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from rlxf.data.tasks import get_task

    params = sum(p.numel() for p in AutoModelForCausalLM.from_pretrained(model).parameters())
    tokenizer = AutoTokenizer.from_pretrained(model)
    items, _ = get_task("arithmetic", TASK_OPTIONS).splits(TRAIN_SIZE, TEST_SIZE, SEED)
    lengths = [len(tokenizer.apply_chat_template([{"role": "user", "content": it.question}],
                                                 add_generation_prompt=True, tokenize=True)["input_ids"])
               for it in items[:256]]
    return params, statistics.mean(lengths)


def set_wait_policy(env, policy: str) -> None:
    """OpenMP's wait policy in ``env``: ``default`` removes the variable (the runtime's default)."""
    if policy == "default":
        env.pop("OMP_WAIT_POLICY", None)
    else:
        env["OMP_WAIT_POLICY"] = policy.upper()


def rlxf_micro_batch(args, tokens: int) -> int:
    """``--rlxf-micro-batch``, or (0) 512 // tokens within [8, 64]: 16 at 32 new tokens, 8 at 128.
    At most 1024 response tokens per micro-batch: one chunk of the default
    ``model.logprob_chunk_size``, so no logits are recomputed; and the activations held for the
    backward pass keep rlxf's peak RSS under TRL's (32 at 32 tokens was as fast but not)."""
    return args.rlxf_micro_batch or max(8, min(PROMPTS_PER_STEP * N_SAMPLES, 512 // tokens))


def run_side(side: str, model: Path, tokens: int, args) -> dict:
    with tempfile.TemporaryDirectory(prefix=f"grpo-bench-{side}-") as out:
        cmd = [sys.executable, __file__, "--worker", side, "--model", str(model), "--tokens", str(tokens),
               "--steps", str(args.steps), "--warmup", str(args.warmup), "--threads", str(args.threads),
               "--trl-micro-batch", str(args.trl_micro_batch),
               "--rlxf-micro-batch", str(rlxf_micro_batch(args, tokens)), "--out", out]
        env = {**os.environ, "TOKENIZERS_PARALLELISM": "false"}
        set_wait_policy(env, args.omp_wait_policy)
        t0 = time.perf_counter()
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
        wall = time.perf_counter() - t0
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith(RESULT)]
    if proc.returncode or not lines:
        sys.stderr.write(proc.stdout[-3000:] + proc.stderr[-5000:])
        return {"error": f"{side} worker exited {proc.returncode}"}
    result = json.loads(lines[-1][len(RESULT):])
    result["wall_s"] = wall
    return result


def merge_rounds(runs: list[dict]) -> dict:
    """One side's rounds as one result: all timed steps pooled, the highest peak RSS."""
    ok = [r for r in runs if "error" not in r]
    if not ok:
        return runs[0]
    out = {**ok[-1], "step_s": [x for r in ok for x in r["step_s"]], "cpu_s": [x for r in ok for x in r["cpu_s"]],
           "peak_rss_mb": max(r["peak_rss_mb"] for r in ok),
           "response_len": statistics.mean(r["response_len"] for r in ok), "wall_s": sum(r["wall_s"] for r in ok)}
    if "phases_s" in ok[0]:
        out["phases_s"] = {k: statistics.median(r["phases_s"][k] for r in ok) for k in ok[0]["phases_s"]}
    return out


def model_flops(params: int, prompt_len: float, response_len: float) -> float:
    samples = PROMPTS_PER_STEP * N_SAMPLES
    gen = 2 * params * (samples * response_len + PROMPTS_PER_STEP * prompt_len)
    trn = 6 * params * samples * (prompt_len + response_len)
    return gen + trn


def fmt(x: float | None, spec: str, suffix: str = "") -> str:
    return "-" if x is None else format(x, spec) + suffix


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--presets", default="tiny,small", help="comma-separated rlxf init-model presets")
    p.add_argument("--tokens", default="32,128", help="comma-separated max new tokens")
    p.add_argument("--steps", type=int, default=4, help="timed steps per side, configuration and round")
    p.add_argument("--warmup", type=int, default=1, help="steps run first and not timed (at least 1)")
    p.add_argument("--rounds", type=int, default=2,
                   help="run each side this many times per configuration, alternating which goes first; "
                   "the timed steps of all rounds are pooled")
    p.add_argument("--threads", type=int, default=2, help="torch threads on both sides")
    p.add_argument("--sides", default="trl,rlxf", help="which sides to run: trl, rlxf, rlxf-async")
    p.add_argument("--trl-micro-batch", type=int, default=16,
                   help="TRL per_device_train_batch_size (gradient accumulation makes up 64 samples)")
    p.add_argument("--rlxf-micro-batch", type=int, default=0,
                   help="rlxf train.micro_batch_size; 0 = 512 // tokens, within [8, 64]")
    p.add_argument("--omp-wait-policy", choices=["default", "passive", "active"], default="default",
                   help="OMP_WAIT_POLICY of both workers. default: unset, what either library gets out of "
                   "the box (libgomp spins briefly at a barrier, then sleeps); passive: threads sleep at "
                   "once, which spares a loaded machine the spinning and costs every parallel region a "
                   "wake-up (rlxf's training forward/backward ~30%% slower here, TRL's step ~14%%)")
    p.add_argument("--models", type=Path, default=None, help="where the built models go (default: a temp dir)")
    p.add_argument("--worker", choices=["trl", "rlxf", "rlxf-async"], help=argparse.SUPPRESS)
    p.add_argument("--model", help=argparse.SUPPRESS)
    p.add_argument("--out", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.warmup < 1:
        p.error("--warmup must be at least 1: a step is timed from the end of the one before")
    if args.worker:
        args.tokens = int(args.tokens)
        result = trl_worker(args) if args.worker == "trl" else rlxf_worker(args)
        print(RESULT + json.dumps(result), flush=True)
        return

    presets = [s for s in args.presets.split(",") if s]
    token_list = [int(t) for t in args.tokens.split(",") if t]
    sides = [s for s in args.sides.split(",") if s]
    started = time.perf_counter()
    set_wait_policy(os.environ, args.omp_wait_policy)  # the peak is measured here, under the same policy
    load_start = os.getloadavg()[0]
    peak = matmul_peak(args.threads) / 1e9
    print(f"CPU: {cpu_model()}; fp32 matmul peak on {args.threads} threads: {peak:.1f} GFLOP/s; "
          f"load average {load_start:.2f}")
    print(f"{PROMPTS_PER_STEP} prompts x {N_SAMPLES} samples; {args.rounds} round(s) of warm-up {args.warmup} + "
          f"{args.steps} timed steps per side; TRL micro-batch {args.trl_micro_batch}; rlxf micro-batch "
          f"{args.rlxf_micro_batch or '512 // tokens (at least 8)'}; OMP_WAIT_POLICY {args.omp_wait_policy}", flush=True)
    tmp = tempfile.TemporaryDirectory(prefix="grpo-bench-models-") if args.models is None else None
    models = build_models(presets, Path(tmp.name) if tmp else args.models)
    shapes = {preset: workload_shape(path) for preset, path in models.items()}
    for preset, (params, prompt_len) in shapes.items():
        print(f"{preset}: {params:,} parameters, prompts of {prompt_len:.1f} tokens (chat template)")
    rows = []
    for preset in presets:
        for tokens in token_list:
            runs: dict[str, list[dict]] = {side: [] for side in sides}
            loads = []
            for rnd in range(args.rounds):
                for side in (sides if rnd % 2 == 0 else sides[::-1]):
                    runs[side].append(run_side(side, models[preset], tokens, args))
                    loads.append(os.getloadavg()[0])
            res = {side: merge_rounds(rs) for side, rs in runs.items()}
            rows.append((preset, tokens, res, statistics.mean(loads)))
            for side, r in res.items():
                if "error" in r:
                    print(f"  {preset} {tokens} {side}: {r['error']}")
                    continue
                phases = ""
                if "phases_s" in r:
                    phases = "; median phases " + ", ".join(f"{k} {v:.3f}" for k, v in r["phases_s"].items())
                print(f"  {preset:5s} {tokens:4d} {side:10s}: median {statistics.median(r['step_s']):.3f} s/step, "
                      f"CPU {statistics.median(r['cpu_s']):.3f} s/step (steps {', '.join(f'{x:.2f}' for x in r['step_s'])}), "
                      f"response {r['response_len']:.1f} tokens, peak RSS {r['peak_rss_mb']:.0f} MB, "
                      f"processes {r['wall_s']:.0f} s{phases}", flush=True)

    def med(r: dict | None, key: str) -> float | None:
        return statistics.median(r[key]) if r and "error" not in r else None

    print()
    print("| preset | new tokens | TRL s/step | rlxf s/step | TRL / rlxf | CPU-time ratio | TRL peak RSS MB "
          "| rlxf peak RSS MB | rlxf MFU | TRL MFU | load |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for preset, tokens, res, load in rows:
        trl, rl = res.get("trl"), res.get("rlxf")
        params, prompt_len = shapes[preset]
        t_med, r_med = med(trl, "step_s"), med(rl, "step_s")
        t_cpu, r_cpu = med(trl, "cpu_s"), med(rl, "cpu_s")
        mfu_r = model_flops(params, prompt_len, rl["response_len"]) / r_med / 1e9 / peak if r_med else None
        mfu_t = model_flops(params, prompt_len, trl["response_len"]) / t_med / 1e9 / peak if t_med else None
        ratio = t_med / r_med if t_med and r_med else None
        cpu_ratio = t_cpu / r_cpu if t_cpu and r_cpu else None
        rss_t = trl.get("peak_rss_mb") if trl else None
        rss_r = rl.get("peak_rss_mb") if rl else None
        print(f"| {preset} | {tokens} | {fmt(t_med, '.3f')} | {fmt(r_med, '.3f')} | {fmt(ratio, '.2f', 'x')} "
              f"| {fmt(cpu_ratio, '.2f', 'x')} | {fmt(rss_t, '.0f')} | {fmt(rss_r, '.0f')} "
              f"| {fmt(mfu_r and 100 * mfu_r, '.1f', '%')} | {fmt(mfu_t and 100 * mfu_t, '.1f', '%')} | {load:.2f} |")
    if "rlxf-async" in sides:
        print()
        print("| preset | new tokens | rlxf async s/step | TRL / rlxf async | rlxf sync / async | async CPU s/step "
              "| async peak RSS MB (trainer + engine) |")
        print("|---|---|---|---|---|---|---|")
        for preset, tokens, res, _ in rows:
            a_med, t_med, r_med = med(res.get("rlxf-async"), "step_s"), med(res.get("trl"), "step_s"), med(res.get("rlxf"), "step_s")
            rss = res["rlxf-async"].get("peak_rss_mb")
            print(f"| {preset} | {tokens} | {fmt(a_med, '.3f')} | {fmt(t_med and a_med and t_med / a_med, '.2f', 'x')} "
                  f"| {fmt(r_med and a_med and r_med / a_med, '.2f', 'x')} | {fmt(med(res.get('rlxf-async'), 'cpu_s'), '.3f')} "
                  f"| {fmt(rss, '.0f')} |")
    for preset, tokens, res, _ in rows:
        for side, r in res.items():
            if "settings" in r:
                print(f"{preset} {tokens} {side} settings: {r['settings']}")
    print(f"total {time.perf_counter() - started:.0f} s; load average now {os.getloadavg()[0]:.2f}")
    if tmp:
        tmp.cleanup()


if __name__ == "__main__":
    main()
