"""Agentic RL end to end on a tiny model: SFT on scripted demonstrations, then multi-turn GRPO.

    PYTHONPATH=. nice -n 10 python examples/agentic/demo.py --game guess_number --seed 0 --out runs/agentic-demo
    PYTHONPATH=. nice -n 10 python examples/agentic/demo.py --game tool_arithmetic --seed 0 --out runs/agentic-demo

Per game and seed, four ordinary rlxf runs in ``OUT/GAME/seed_S/``:

1. ``rlxf init-model --preset nano`` (361k parameters, random weights, seeded);
2. demonstrations written as chat records (``demos.jsonl``) by a scripted player of the
   environment itself, so the protocol is exactly what the environment will see; every
   assistant turn is one SFT example (its conversation so far is the prompt);
3. ``rlxf sft`` on them;
4. ``rlxf train`` with ``env:`` (multi-turn GRPO) from the SFT model, evaluating on held-out
   episodes at the start and at the end.

The demonstrations teach the protocol, not the best play: the scripted player is sloppy on
purpose, so that what RL has to find is visible.

- guess_number (1-16, 6 turns): half the turns guess the midpoint of the interval the hints left
  open (binary search, which needs at most 5 guesses), half are wasted ("Let me think.", no
  number; the environment asks for one); the sloppy player runs out of turns about half the time.
- tool_arithmetic (products of two 2-digit numbers, 2 turns, the tools described in one compact
  line, ``env.tool_description: compact``): 70% of the demonstrations call the calculator in the
  documented ``<tool_call>`` JSON format and copy its result; 30% answer at once with a made-up
  number of the right length ("in the head"), which is wrong. With 16000 demonstrated problems
  and 3000 SFT steps the nano model copies the problem's numbers into the call and the tool's
  result into the answer on all three seeds (seed 2 only with the SFT weight decay of 0.1 set below:
  without it, it never learned to copy); with 4000 problems and 2000 steps it copied the call's numbers but
  not the result's repeated digits (5.5% held-out success, greedy), leaving RL little to reinforce.

``summary.json`` holds held-out success before / after (greedy, and one sample at T=1), the
per-turn reward of the first and last steps, and the wall times. The README table is made from
those files.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import time
from pathlib import Path

from rlxf.config import load_config
from rlxf.envs import EnvTask, build_env
from rlxf.envs.tools import ToolSet
from rlxf.metrics.sinks import read_jsonl

HERE = Path(__file__).resolve().parent
WASTED = "Let me think."

GAMES = {
    "guess_number": {
        "config": HERE / "guess_number.yaml",
        "data": ["data.task_options.low=1", "data.task_options.high=16"],
        "env": ["env.options.low=1", "env.options.high=16", "env.options.turn_penalty=0", "env.max_turns=6",
                "env.max_total_tokens=256", "rollout.max_new_tokens=6"],
        "preset": "nano", "sft_steps": 300, "sft_batch": 32, "sft_lr": 3e-3, "rl_steps": 60, "rl_lr": 1e-3,
        "sloppy": 0.5,
    },
    "tool_arithmetic": {
        "config": HERE / "tool_arithmetic.yaml",
        "data": ["data.task_options.min_digits=2", "data.task_options.max_digits=2", 'data.task_options.ops="*"'],
        "env": ["env.max_turns=2", "env.max_total_tokens=256", "env.tool_description=compact", "rollout.max_new_tokens=64"],
        "preset": "nano", "sft_steps": 3000, "sft_batch": 32, "sft_lr": 3e-3, "rl_steps": 100, "rl_lr": 3e-4,
        "sloppy": 0.3, "problems": 16000,
        # weight decay: without it seed 2's SFT never learned to copy the operands into the call
        # (README: the copy "clicks" at a seed-dependent step, or not at all)
        "sft_weight_decay": 0.1,
    },
}


def guess_demo(env, task: EnvTask, rng: random.Random, sloppy: float) -> list[list[dict]]:
    """One game played by the sloppy binary searcher; each assistant turn's conversation."""
    messages = env.reset(task)
    low, high = env.low, env.high
    out = []
    for _ in range(12):
        if rng.random() < sloppy:   # a wasted turn: no guess (the environment asks for a number)
            messages = messages + [{"role": "assistant", "content": WASTED}]
            out.append(messages)
            messages = messages + env.step(WASTED).observation
            continue
        guess = (low + high) // 2
        messages = messages + [{"role": "assistant", "content": str(guess)}]
        out.append(messages)
        result = env.step(str(guess))
        if result.terminated:
            break
        low, high = (guess + 1, high) if result.observation[0]["content"] == "higher" else (low, guess - 1)
        messages = messages + result.observation
    return out


def arithmetic_demo(env, task: EnvTask, rng: random.Random, sloppy: float) -> list[list[dict]]:
    """One problem: calculator call and copied result, or a made-up answer of the right length."""
    messages = env.reset(task)
    if rng.random() < sloppy:
        answer = str(task.ground_truth)
        digits = "".join(str(rng.randint(0, 9)) for _ in range(len(answer.lstrip("-"))))
        made_up = str(int(digits) + (1 if int(digits) == int(answer) else 0))
        return [messages + [{"role": "assistant", "content": made_up}]]
    arguments = json.dumps({"name": "calculator", "arguments": {"expression": task.metadata["expression"]}})
    call = f"<tool_call>{arguments}</tool_call>"
    first = messages + [{"role": "assistant", "content": call}]
    result = env.step(call)
    second = first + result.observation + [{"role": "assistant", "content": result.observation[0]["content"]}]
    return [first, second]


def write_demos(game: str, cfg, tokenizer, path: Path, seed: int, count: int, sloppy: float) -> int:
    """``count`` training prompts of the game played by the scripted player, as chat records."""
    from rlxf.data import build_prompt_data

    prompts = build_prompt_data(cfg.data, tokenizer, seed=seed).train[:count]
    rng = random.Random(f"agentic-demo:{game}:{seed}")
    options = dict(cfg.env.options)
    if cfg.env.tools:
        options["tools"] = ToolSet(cfg.env.tools, cfg.env.tool_description)
    n = 0
    with path.open("w") as f:
        for p in prompts:
            env = build_env(cfg.env.name, options)
            task = EnvTask(uid=p.uid, prompt=p.prompt_text, ground_truth=p.ground_truth, metadata=dict(p.metadata))
            play = guess_demo if game == "guess_number" else arithmetic_demo
            for messages in play(env, task, rng, sloppy):
                answer = messages[-1]["content"]
                f.write(json.dumps({"messages": messages[:-1], "response": answer, "answer": answer}) + "\n")
                n += 1
    return n


def per_turn_reward(record: dict) -> list[float]:
    return [record[k] for k in sorted((k for k in record if k.startswith("env/turn_reward/")),
                                      key=lambda k: int(k.rsplit("/", 1)[1]))]


def table(out: Path) -> str:
    """The README's before/after table from every ``summary.json`` under ``out``."""
    rows = ["| game | seed | held-out success, 1 sample at T=1: before -> after | greedy: before -> after | "
            "SFT | RL | load average (1 min) |", "|---|---|---|---|---|---|---|"]
    for path in sorted(out.glob("*/seed_*/summary.json")):
        s = json.loads(path.read_text())
        b, a = s["before"], s["after"]
        rows.append(f"| {s['game']} | {s['seed']} | {b['sampled']:.0%} -> **{a['sampled']:.0%}** | "
                    f"{b['greedy']:.0%} -> {a['greedy']:.0%} | {s['sft_seconds']:.0f} s | {s['rl_seconds']:.0f} s | "
                    f"{s['load_average'][0]:.1f} |")
    return "\n".join(rows)


def turn_table(out: Path, window: int = 10) -> str:
    """Mean reward of each turn (``env/turn_reward/K``) over the first and the last ``window`` RL steps,
    averaged over the seeds of each game: where in an episode the return is earned, before and after."""
    rows = ["| game | steps | " + " | ".join(f"turn {k}" for k in range(1, 7)) + " | episode return |",
            "|---|---|" + "---|" * 7]
    for game in sorted(GAMES):
        runs = [read_jsonl(p) for p in sorted(out.glob(f"{game}/seed_*/grpo/metrics.jsonl"))]
        runs = [[r for r in run if "reward/mean" in r] for run in runs]
        if not runs:
            continue
        for label, pick in (("first", lambda rs: rs[:window]), ("last", lambda rs: rs[-window:])):
            picked = [r for run in runs for r in pick(run)]
            cells = []
            for k in range(1, 7):
                vals = [r[f"env/turn_reward/{k}"] for r in picked if f"env/turn_reward/{k}" in r]
                cells.append(f"{sum(vals) / len(vals):.2f}" if vals else "-")
            ret = sum(r["reward/mean"] for r in picked) / len(picked)
            rows.append(f"| {game} | {label} {window} | " + " | ".join(cells) + f" | {ret:.2f} |")
    return "\n".join(rows)


def smooth(ys: list[float], span: int = 5) -> list[float]:
    """Trailing mean over ``span`` steps (a step's reward is the mean of only 64 episodes)."""
    return [sum(ys[max(0, i - span + 1):i + 1]) / len(ys[max(0, i - span + 1):i + 1]) for i in range(len(ys))]


def plot(out: Path, path: Path) -> None:
    """Per-step episode return and per-turn reward of every run under ``out`` (one panel per game)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    games = [g for g in sorted(GAMES) if list(out.glob(f"{g}/seed_*/grpo/metrics.jsonl"))]
    fig, axes = plt.subplots(1, len(games), figsize=(6 * len(games), 4), squeeze=False)
    for ax, game in zip(axes[0], games):
        for i, mpath in enumerate(sorted(out.glob(f"{game}/seed_*/grpo/metrics.jsonl"))):
            rs = [r for r in read_jsonl(mpath) if "reward/mean" in r]
            steps = [r["step"] for r in rs]
            ax.plot(steps, smooth([r["reward/mean"] for r in rs]), color=f"C{i}", linewidth=1.8,
                    label=f"seed {i}: episode return")
            for k, style in zip(range(1, 7), (":", "--", "-.", (0, (1, 3)), (0, (5, 5)), (0, (3, 1, 1, 1)))):
                key = f"env/turn_reward/{k}"
                ks = [(r["step"], r[key]) for r in rs if key in r]
                if ks:
                    ax.plot([x for x, _ in ks], smooth([y for _, y in ks]), linestyle=style, color=f"C{i}",
                            linewidth=0.9, alpha=0.6, label=f"seed {i}: turn {k}" if i == 0 else None)
        ax.set_title(f"{game}: GRPO after SFT (5-step means)")
        ax.set_xlabel("RL step")
        ax.set_ylabel("mean reward (training episodes)")
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=90)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--table", action="store_true", help="print the table of the runs under --out and stop")
    ap.add_argument("--game", choices=sorted(GAMES))
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=Path("runs/agentic-demo"))
    ap.add_argument("--sft-steps", type=int)
    ap.add_argument("--rl-steps", type=int)
    ap.add_argument("--sft-set", nargs="*", default=[], help="extra overrides of the SFT stage (e.g. sft.optim.lr=1e-3)")
    ap.add_argument("--eval-problems", type=int, default=200)
    ap.add_argument("--threads", type=int, default=1, help="torch threads (1: the machine is shared)")
    args = ap.parse_args()
    if args.table:
        print(table(args.out) + "\n\n" + turn_table(args.out))
        plot(args.out, args.out / "curves.png")
        return
    if args.game is None:
        ap.error("--game is required (or --table)")
    import torch

    torch.set_num_threads(args.threads)

    from rlxf.models import init_model, load_tokenizer
    from rlxf.placement import run_training
    from rlxf.run_dir import RunDir
    from rlxf.trainer.sft import run_sft

    game = GAMES[args.game]
    out = args.out / args.game / f"seed_{args.seed}"
    out.mkdir(parents=True, exist_ok=True)
    common = [f"run.output_dir={out}", f"run.seed={args.seed}", *game["data"], *game["env"]]
    t0 = time.perf_counter()

    base = init_model(game["preset"], out / "base-model", seed=args.seed, overwrite=True)
    rl_cfg = load_config(game["config"], [*common, f"model.path={out / 'sft'}"])
    demos = out / "demos.jsonl"
    n_demos = write_demos(args.game, rl_cfg, load_tokenizer(base), demos, args.seed, count=game.get("problems", 4000),
                          sloppy=game["sloppy"])

    sft_cfg = load_config(game["config"], [
        *common, "run.name=sft", f"model.path={base}", "data.source=jsonl", f"data.train_path={demos}",
        "data.test_path=null", "data.fields.messages=messages", "data.fields.prompt=null", "data.fields.response=response",
        "eval.num_problems=1", "data.max_prompt_len=400",
        f"sft.steps={args.sft_steps or game['sft_steps']}", f"sft.batch_size={game['sft_batch']}", f"sft.micro_batch_size={game['sft_batch']}",
        f"sft.optim.lr={game['sft_lr']}", f"sft.optim.weight_decay={game.get('sft_weight_decay', 0.0)}", "sft.optim.warmup_steps=20", "checkpoint.every=0", "logging.log_every=50", *args.sft_set])
    t_sft = time.perf_counter()
    run_sft(sft_cfg, RunDir.open(out, "sft", overwrite=True))
    sft_s = time.perf_counter() - t_sft

    steps = args.rl_steps or game["rl_steps"]
    rl_cfg = load_config(game["config"], [
        *common, "run.name=grpo", f"model.path={out / 'sft'}", f"train.steps={steps}", "train.prompts_per_step=8",
        "rollout.n=8", "train.micro_batch_size=64", f"train.optim.lr={game['rl_lr']}", "train.optim.warmup_steps=3",
        "train.optim.schedule=constant",  # as the curves in README.md were measured
        "eval.at_start=true", f"eval.every={steps}", f"eval.num_problems={args.eval_problems}", "eval.pass_k=1",
        "checkpoint.every=0", "logging.log_every=5"])
    t_rl = time.perf_counter()
    run = RunDir.open(out, "grpo", overwrite=True)
    run_training(rl_cfg, run)
    rl_s = time.perf_counter() - t_rl

    from rlxf.metrics.report import write_report
    write_report([run.path])
    records = read_jsonl(run.path / "metrics.jsonl")
    evals = [r for r in records if "eval/accuracy" in r]
    trains = [r for r in records if "reward/mean" in r]
    summary = {
        "game": args.game, "seed": args.seed, "demonstrations": n_demos,
        "before": {"greedy": evals[0]["eval/accuracy"], "sampled": evals[0]["eval/pass@k"]},
        "after": {"greedy": evals[-1]["eval/accuracy"], "sampled": evals[-1]["eval/pass@k"]},
        "per_turn_reward_first_steps": [per_turn_reward(r) for r in trains[:3]],
        "per_turn_reward_last_steps": [per_turn_reward(r) for r in trains[-3:]],
        "reward_by_step": [r["reward/mean"] for r in trains],
        "sft_seconds": sft_s, "rl_seconds": rl_s, "total_seconds": time.perf_counter() - t0,
        "load_average": os.getloadavg(), "cpu": platform.processor() or platform.machine(),
    }
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    print(json.dumps({k: summary[k] for k in ("game", "seed", "before", "after", "sft_seconds", "rl_seconds",
                                              "load_average")}))


if __name__ == "__main__":
    main()
