"""Do rlxf's defaults learn on tasks nobody tuned them for? GRPO vs continued SFT, same wall time.

For each reasoning-gym dataset (small options, short answers, so a 3.4M-parameter model on two
CPU cores can learn it partly):

1. build the ``tiny`` preset model (``rlxf init-model``; ``--preset`` for another size);
2. SFT it on the task's question/answer pairs (``rlxf sft``, the quickstart's SFT settings),
   evaluating the held-out split every ``--sft-eval-every`` steps with a checkpoint each time;
   the start model is the first checkpoint that is "sometimes right" (held-out accuracy at
   least ``--start-min``, 10% by default, and ``--start-margin``, 10 points, above what always
   giving the most common answer scores), or the last one. ``--starts easier`` is the
   quickstart's design instead, RL where the demonstrations run out: SFT on an easier variant
   of the dataset (fewer animals, smaller numbers, ``Task.easier``), with 200 of the task's own
   demonstrations in 2% of the draws, and the start is also ``--easier-learned`` (80%) right
   on the easier variant;
3. GRPO from it with **rlxf's defaults**: the config says only what defines the task (data,
   an exact-match reward, the answer length), the time budget (``train.max_seconds``) and a
   micro-batch size (throughput only); everything else (lr, warm-up, loss aggregation, KL,
   clipping, group size, prompts per step) is the default;
4. continued SFT from the same start, on the same demonstrations, for the wall time GRPO took;
5. greedy held-out accuracy of the three models on the same ``--eval-problems`` problems.

Every stage is an ordinary run whose config is written to ``<out>/<task>/<stage>.yaml`` and run
with the ``rlxf`` command line, so each can be rerun by hand. The SFT start models are cached:
a later run with the same ``--out`` starts at step 3 (``--grpo-set`` then compares settings
on the same start models, e.g. ``--grpo-set train.optim.lr=1e-4 --label lr1e-4``).

    python benchmarks/efficacy.py --out runs/efficacy                      # every task x 5 minutes of RL
    python benchmarks/efficacy.py --out runs/efficacy --tasks gcd products --minutes 2

    python benchmarks/efficacy.py --out runs/efficacy --tasks leg_counting --steps 60   # a step budget
    python benchmarks/efficacy.py --out runs/efficacy-easier --starts easier   # the tasks with an easier variant

Writes ``<out>/<task>/result[-<label>].json`` per task and ``<out>/efficacy[-<label>].json``, and
prints the table with the CPU model and load average, and the target counted over all tasks and
over those continued SFT lifts by 10 points (the model can learn more of them in the time);
``--table-only`` prints the table of results already there (of tasks run in parallel
processes, say). benchmarks/README.md has the figures measured so far.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path

import yaml
from common import cpu_model, load_average

from rlxf.models.presets import PRESETS


@dataclass(frozen=True)
class Task:
    """A reasoning-gym dataset with options that keep questions short and answers a few tokens."""

    options: dict
    max_new_tokens: int   # the answer's tokens and the end-of-turn token, with room to spare
    max_prompt_len: int = 128
    # options of an easier variant of the same dataset, what ``--starts easier`` SFTs on: a part
    # of the task's problems (smaller numbers, shorter offsets, one of each animal), or for
    # family_relationships smaller families
    easier: dict | None = None


TASKS = {
    "basic_arithmetic": Task({"min_terms": 2, "max_terms": 2, "min_digits": 1, "max_digits": 2,
                              "operators": ["+", "-"]}, 6),
    "chain_sum": Task({"min_terms": 2, "max_terms": 3, "min_digits": 1, "max_digits": 2}, 6,
                      easier={"min_terms": 2, "max_terms": 2, "min_digits": 1, "max_digits": 1}),
    "leg_counting": Task({"min_animals": 1, "max_animals": 2, "max_instances": 3}, 5,
                         easier={"min_animals": 1, "max_animals": 2, "max_instances": 1}),
    "gcd": Task({"min_numbers": 2, "max_numbers": 2, "min_value": 1, "max_value": 100}, 5,
                easier={"min_numbers": 2, "max_numbers": 2, "min_value": 1, "max_value": 20}),
    "products": Task({"min_terms": 2, "max_terms": 2, "min_digits": 1, "max_digits": 2}, 6),
    "count_bits": Task({"min_n": 1, "max_n": 4095}, 4, easier={"min_n": 1, "max_n": 255}),
    "simple_equations": Task({"min_terms": 2, "max_terms": 2, "min_value": 1, "max_value": 20}, 5,
                             easier={"min_terms": 2, "max_terms": 2, "min_value": 1, "max_value": 5}),
    "lcm": Task({"min_numbers": 2, "max_numbers": 2, "min_value": 1, "max_value": 20}, 5,
                easier={"min_numbers": 2, "max_numbers": 2, "min_value": 1, "max_value": 10}),
    # three more, added after the first eight showed that a task the 3.4M model cannot learn
    # more of in 5 minutes even from labels says nothing about RL (benchmarks/README.md); picked
    # for short prompts and answers and a structure to learn, before any RL ran on them (a
    # fourth, aiw's siblings questions, was dropped: SFT's first 50 steps solved all of it)
    "calendar_arithmetic": Task({"tasks": ["weekday_offset"], "offset_upper_bound": 30}, 5,
                                easier={"tasks": ["weekday_offset"], "offset_upper_bound": 7}),
    "family_relationships": Task({"min_family_size": 4, "max_family_size": 5}, 7,
                                 easier={"min_family_size": 3, "max_family_size": 3}),
    "number_sequence": Task({"max_complexity": 2, "min_value": -20, "max_value": 20, "max_terms": 6}, 6,
                            easier={"max_complexity": 1, "min_value": -20, "max_value": 20, "max_terms": 6}),
    # one more whose answer is one of the six colours the prompt names, added when the four
    # learnable tasks above were too few for the target's six, before any RL ran on it. Tried
    # and not kept: letter_counting (its most common answer, 1, is right on 31-59% of its
    # problems whatever the text's length), aiw's siblings and friends questions (92% after
    # SFT's first 50 steps; its colleagues questions run to 300 tokens)
    "color_cube_rotation": Task({"min_rotations": 1, "max_rotations": 1}, 7, max_prompt_len=192),
    # three whose answers are several tokens, each a copy of one in the prompt (words in
    # reverse order, a 2x2 matrix's entries rotated, a word's letters reversed): the case of the
    # quickstart's additions, where samples differ in a few positions and exact match pays the
    # ones right in all of them. Added on 2 Dec 2026 after the short-answer tasks above showed
    # GRPO learning mostly their answers' distribution, before any RL ran on these
    "word_sequence_reversal": Task({"min_words": 3, "max_words": 4}, 24,
                                   easier={"min_words": 2, "max_words": 2}),
    "rotate_matrix": Task({"min_n": 2, "max_n": 2, "min_rotations": 0, "max_rotations": 10}, 10,
                          easier={"min_n": 2, "max_n": 2, "min_rotations": 0, "max_rotations": 3}),
    "spell_backward": Task({"min_word_len": 3, "max_word_len": 5}, 8,
                           easier={"min_word_len": 3, "max_word_len": 3}),
}
# continued SFT's held-out gain that shows the model can learn more of a task in the time
LEARNABLE = 0.10
DEFAULT_TASKS = list(TASKS)   # two of them (basic_arithmetic, chain_sum) the tiny model never learns to 10%


@dataclass
class Result:
    task: str
    sft_steps: int            # SFT steps of the start model
    start: float              # greedy held-out accuracy of the start model
    grpo: float
    sft_more: float
    grpo_seconds: float
    sft_more_seconds: float
    grpo_steps: int
    grpo_curve: dict[int, float] = field(default_factory=dict)   # step -> held-out accuracy during GRPO
    mean_k: dict[str, float] = field(default_factory=dict)       # --sampled K: model -> held-out mean@K
    pass_k: dict[str, float] = field(default_factory=dict)       # --sampled K: model -> held-out pass@K
    # problems each side trained on in its time: GRPO's prompts (steps x prompts per step) and
    # continued SFT's demonstrations (steps x batch); 0 in results written before they were kept
    grpo_prompts: int = 0
    sft_more_demos: int = 0


def _task_config(name: str, seed: int, eval_problems: int, out: Path) -> dict:
    task = TASKS[name]
    return {
        "run": {"output_dir": str(out), "seed": seed},
        "data": {"task": f"reasoning_gym:{name}", "task_options": task.options, "train_size": 5000,
                 "test_size": eval_problems, "max_prompt_len": task.max_prompt_len},
        "rollout": {"max_new_tokens": task.max_new_tokens},
        # a throughput setting, not a learning one: gradient accumulation makes the same update
        # from 16 micro-batches of 8 (the default) as from one of 128, whose fewer, larger
        # matmuls run faster on CPU (the quickstart sets 128 too)
        "train": {"micro_batch_size": 128},
        # exact match: reasoning-gym's default score_answer pays len(answer) / len(response) when
        # the answer is inside the response, and GRPO learns to hedge with longer strings (on
        # count_bits at lr 1e-4 it ran every response to the length limit and greedy accuracy to
        # 0% within 40 steps); held-out accuracy counts exact answers only
        "reward": {"verifiers": [{"type": "exact", "name": "correct", "extract": ["answer_tag", "full"]}]},
        "eval": {"num_problems": eval_problems},
        "logging": {"progress": False},
    }


# --starts easier: the share of SFT's draws that are the task's own demonstrations, and how many
# of them there are (the quickstart's SFT: one draw in 51, from 200)
TASK_SHARE, TASK_DEMOS = 0.02, 200


def _sft_task(name: str, args, out: Path) -> dict:
    """The task part of the SFT runs' config (the start's and continued SFT's): the task's own
    demonstrations, or (``--starts easier``) a mixture of the easier variant's with 200 of the
    task's shown rarely, whose held-out ``task`` source is the task's held-out split."""
    cfg = _task_config(name, args.seed, args.eval_problems, out)
    if args.starts == "easier":
        own = dict(cfg["data"])   # the task as GRPO and the evaluation see it
        limit = own.pop("max_prompt_len")
        cfg["data"] = {"max_prompt_len": limit, "sources": [
            own | {"name": "task", "train_size": TASK_DEMOS, "weight": TASK_SHARE},
            # 50 held out: an easier variant has few distinct questions (lcm's 100, count_bits'
            # 255), and 300 would leave few to train on
            own | {"name": "easier", "task_options": TASKS[name].easier, "test_size": 50,
                   "weight": 1 - TASK_SHARE}]}
    return cfg


def _point(row: dict, args) -> tuple:
    """(step, the task's held-out accuracy) of an SFT evaluation's metrics row, and with
    ``--starts easier`` the easier variant's held-out accuracy after them."""
    if args.starts == "same":
        return row["step"], row["eval/accuracy"]
    return row["step"], row["eval/task/accuracy"], row["eval/easier/accuracy"]


def _is_start(point: tuple, threshold: float, args) -> bool:
    """Sometimes right on the task; with ``--starts easier``, also the easier variant learned
    (``--easier-learned``): the quickstart's start knows what its demonstrations teach, and RL
    is left what they do not."""
    return point[1] >= threshold and (args.starts == "same" or point[2] >= args.easier_learned)


def _merge(base: dict, extra: dict) -> dict:
    out = dict(base)
    for k, v in extra.items():
        out[k] = _merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def _rlxf(command: str, config: dict, path: Path, *args: str) -> None:
    """Write ``config`` to ``path`` and run ``rlxf COMMAND path ARGS`` (in this process)."""
    from rlxf.cli.main import main

    path.write_text(yaml.safe_dump(config, sort_keys=False))
    code = main([command, str(path), *args])
    if code != 0:
        raise SystemExit(f"rlxf {command} {path} {' '.join(args)} failed with exit code {code}")


def _metrics(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


def constant_answer_share(name: str, args) -> float:
    """The accuracy of always giving the training split's most common answer: what a model that
    has learned the answers' distribution and nothing of the questions scores (reasoning-gym's
    gcd answers 2 to 31% of its problems, count_bits 6 to 22%)."""
    from rlxf.data.tasks import get_task

    train, _ = get_task(f"reasoning_gym:{name}", TASKS[name].options).splits(5000, args.eval_problems, args.seed)
    counts = Counter(item.answer for item in train)
    return counts.most_common(1)[0][1] / len(train)


def start_threshold(name: str, args) -> float:
    """Held-out accuracy that makes an SFT checkpoint "sometimes right": ``--start-min``, and
    ``--start-margin`` above the constant answer's share. A model at that share has learned
    which answers are common, not the task; GRPO from such a model reinforces the common
    answer wherever it happens to be right and converges to giving it everywhere (it did on
    family_relationships: "son" to every question, benchmarks/README.md)."""
    return max(args.start_min, constant_answer_share(name, args) + args.start_margin)


def build_start(name: str, out: Path, args) -> tuple[Path, int]:
    """(model directory, SFT steps) of the first SFT checkpoint that is sometimes right, built once.

    SFT runs ``--sft-eval-every`` steps at a time, each stretch a resume of the same run (``rlxf
    sft --resume`` with more ``sft.steps``: the optimizer and data order continue exactly), and
    stops at the first end-of-stretch evaluation at or above ``start_threshold``. A start built
    under a lower threshold is built on from where its SFT stopped."""
    from rlxf.models import init_model

    threshold = start_threshold(name, args)
    marker = out / "start.json"
    if marker.exists():
        found = json.loads(marker.read_text())
        for what, value, default in (("preset", args.preset, "tiny"), ("starts", args.starts, "same")):
            if found.get(what, default) != value:
                raise SystemExit(f"{marker}: the start there was built with --{what} {found.get(what, default)}, "
                                 f"not {value}: give each --{what} its own --out")
        if _is_start(found["sft_curve"][-1], threshold, args) or found["steps"] >= args.sft_max_steps:
            return Path(found["model"]), found["steps"]
        # runs from the old start are stale: GRPO and continued SFT run again from the new one
        for stale in [marker, *out.glob("grpo*.json"), *out.glob("sft-more-*.json")]:
            stale.unlink()
    base = out / "base-model"
    if not (base / "config.json").exists():
        init_model(args.preset, base, seed=args.seed)
    cfg = _merge(_sft_task(name, args, out), {
        "run": {"name": "sft"}, "model": {"path": str(base)},
        "sft": {"steps": args.sft_eval_every, "batch_size": 32, "micro_batch_size": 32,
                "optim": {"lr": 1e-3, "betas": [0.9, 0.99], "warmup_steps": 30}},
        "checkpoint": {"every": 0, "keep_last": 10_000},
        "eval": {"num_problems": args.start_eval_problems},
    })
    # an interrupted build continues from its last stretch
    done = _metrics(out / "sft") if (out / "sft" / "metrics.jsonl").exists() else []
    curve = [_point(m, args) for m in done if "eval/num_problems" in m]
    first = curve[-1][0] + args.sft_eval_every if curve else args.sft_eval_every
    for steps in range(first, args.sft_max_steps + 1, args.sft_eval_every):
        if curve and _is_start(curve[-1], threshold, args):
            break
        _rlxf("sft", cfg, out / "sft.yaml", f"sft.steps={steps}", *(["--resume"] if curve else ["--overwrite"]))
        curve.append(_point(_metrics(out / "sft")[-1], args))
        print(f"{name}: SFT step {steps}: held-out accuracy {curve[-1][1]:.1%}"
              + (f" (easier variant {curve[-1][2]:.1%})" if len(curve[-1]) > 2 else ""), flush=True)
    model = out / "sft" / "checkpoints" / f"step_{curve[-1][0]}" / "model"
    marker.write_text(json.dumps({"model": str(model), "preset": args.preset, "starts": args.starts,
                                  "steps": curve[-1][0], "threshold": threshold,
                                  "sft_curve": curve}, indent=2) + "\n")
    return model, curve[-1][0]


def run_task(name: str, args) -> Result:
    from rlxf.config import load_config
    from rlxf.trainer.evaluate import evaluate_saved_model

    out = args.out / name
    out.mkdir(parents=True, exist_ok=True)
    start, sft_steps = build_start(name, out, args)
    task = _task_config(name, args.seed, args.eval_problems, out)
    suffix = f"-{args.label}" if args.label else ""

    # GRPO with the defaults: only the task and the time budget are given
    grpo = _merge(task, {"run": {"name": f"grpo{suffix}"}, "model": {"path": str(start)},
                         "train": {"steps": args.steps, "max_seconds": None} if args.steps else
                                  {"steps": 1_000_000, "max_seconds": 60 * args.minutes},
                         "eval": {"every": args.eval_every, "at_start": False},
                         "checkpoint": {"every": 0, "keep_last": 1}})
    done = out / f"grpo{suffix}.json"   # written when the run finished: a rerun goes on from there
    if not done.exists():
        t0 = time.perf_counter()
        _rlxf("train", grpo, out / f"grpo{suffix}.yaml", "--overwrite", *args.grpo_set)
        done.write_text(json.dumps({"seconds": time.perf_counter() - t0}) + "\n")
    grpo_seconds = json.loads(done.read_text())["seconds"]
    grpo_rows = _metrics(out / f"grpo{suffix}")

    # continued SFT for the same wall time: once per start model and budget (it does not depend
    # on --grpo-set; GRPO variants of one budget take the same time to within their last step)
    more_dir = out / (f"sft-more-{args.steps}steps" if args.steps else f"sft-more-{args.minutes:g}m")
    more_json = more_dir.with_suffix(".json")
    if not more_json.exists():
        more = _merge(_sft_task(name, args, out), {
            "run": {"name": more_dir.name}, "model": {"path": str(start)},
            "sft": {"steps": 1_000_000, "max_seconds": round(grpo_seconds, 1), "batch_size": 32, "micro_batch_size": 32,
                    "optim": {"lr": 1e-3, "betas": [0.9, 0.99], "warmup_steps": 20}},
            "checkpoint": {"every": 0, "keep_last": 1}})
        t0 = time.perf_counter()
        _rlxf("sft", more, more_dir.with_suffix(".yaml"), "--overwrite")
        more_json.write_text(json.dumps({"seconds": time.perf_counter() - t0}) + "\n")
    more_seconds = json.loads(more_json.read_text())["seconds"]
    grpo_cfg = yaml.safe_load((out / f"grpo{suffix}" / "config.yaml").read_text())
    more_cfg = yaml.safe_load((more_dir / "config.yaml").read_text())
    seen = (grpo_rows[-1]["step"] * grpo_cfg["train"]["prompts_per_step"],
            _metrics(more_dir)[-1]["step"] * more_cfg["sft"]["batch_size"])

    # held-out greedy accuracy of the three models on the same problems
    # (--sampled K: also K samples per problem at the rollout temperature, their mean accuracy)
    cfg = load_config(None, base=_merge(task, {"model": {"path": str(start)}, "eval": {"pass_k": args.sampled}}))
    evals = {label: evaluate_saved_model(path, cfg, cfg.eval.num_problems)
             for label, path in (("start", start), ("grpo", out / f"grpo{suffix}"), ("sft_more", more_dir))}
    acc = {label: m["eval/accuracy"] for label, m in evals.items()}
    result = Result(name, sft_steps, acc["start"], acc["grpo"], acc["sft_more"], grpo_seconds, more_seconds,
                    grpo_rows[-1]["step"],
                    {m["step"]: m["eval/accuracy"] for m in grpo_rows if "eval/accuracy" in m},
                    {label: m["eval/mean@k"] for label, m in evals.items() if "eval/mean@k" in m},
                    {label: m["eval/pass@k"] for label, m in evals.items() if "eval/pass@k" in m}, *seen)
    (out / f"result{suffix}.json").write_text(json.dumps(
        {"cpu": cpu_model(), "load_average_end": load_average(), "budget": _budget(args), "starts": args.starts,
         "grpo_set": args.grpo_set, **asdict(result)}, indent=2) + "\n")
    return result


def read_result(out: Path, name: str, label: str) -> Result | None:
    path = out / name / f"result{'-' + label if label else ''}.json"
    if not path.exists():
        return None
    found = json.loads(path.read_text())
    found["grpo_curve"] = {int(k): v for k, v in found["grpo_curve"].items()}
    return Result(**{k: v for k, v in found.items() if k in Result.__dataclass_fields__})


def _budget(args) -> str:
    return f"{args.steps} GRPO steps" if args.steps else f"{args.minutes:g} min of GRPO"


def format_table(results: list[Result], budget: str, grpo_set: list[str], starts: str = "same") -> str:
    settings = " ".join(grpo_set) or "rlxf's defaults"
    sft_data = ("the task's demonstrations" if starts == "same" else
                f"an easier variant's, with {TASK_DEMOS} of the task's in {TASK_SHARE:.0%} of draws")
    lines = [f"CPU: {cpu_model()}; load average {load_average()}; {budget} per task; "
             f"GRPO settings: {settings}",
             f"greedy held-out accuracy on the task (start = the SFT model RL and continued SFT both start from; "
             f"SFT data: {sft_data})",
             f"{'task':<18} {'SFT steps':>9} {'start':>7} {'GRPO':>7} {'gain':>7} {'last 3':>7} {'SFT more':>8} "
             f"{'gain':>7} {'GRPO steps':>10} {'GRPO s':>7} {'SFT s':>6} {'problems: GRPO / SFT':>20}  "
             f"lowest eval during GRPO"]
    for r in results:
        low = min(r.grpo_curve.values(), default=r.grpo)
        # held-out accuracy swings from one evaluation to the next (benchmarks/README.md): the
        # mean of the last three is the steadier reading of where GRPO ended
        last = [acc for _, acc in sorted(r.grpo_curve.items())][-3:] or [r.grpo]
        lines.append(f"{r.task:<18} {r.sft_steps:>9} {r.start:>7.1%} {r.grpo:>7.1%} {100 * (r.grpo - r.start):>+7.1f} "
                     f"{sum(last) / len(last):>7.1%} {r.sft_more:>8.1%} {100 * (r.sft_more - r.start):>+7.1f} "
                     f"{r.grpo_steps:>10} {r.grpo_seconds:>7.0f} {r.sft_more_seconds:>6.0f} {_seen(r):>20}  {low:.1%}")
    sampled = [r for r in results if r.mean_k]
    if sampled:
        # pass@k is what sharpening alone could reach: a start that solves a problem in 1 of k
        # samples has the answer in it for RL to make greedy
        lines.append("held-out mean@k and pass@k (of --sampled k samples per problem at the rollout temperature: "
                     "the fraction right, and the fraction of problems with one right)")
        lines.append(f"{'task':<18} {'mean@k: start':>13} {'GRPO':>7} {'SFT more':>8}   "
                     f"{'pass@k: start':>13} {'GRPO':>7} {'SFT more':>8}")
        for r in sampled:
            m, p = r.mean_k, r.pass_k
            passes = (f"{p['start']:>13.1%} {p['grpo']:>7.1%} {p['sft_more']:>8.1%}" if p else f"{'-':>13} {'-':>7} {'-':>8}")
            lines.append(f"{r.task:<18} {m['start']:>13.1%} {m['grpo']:>7.1%} {m['sft_more']:>8.1%}   {passes}")
    lines.append(_verdict("all tasks", results))
    # a task where even its labels, for the same minutes, do not lift held-out accuracy by 10
    # points is one the model cannot learn more of in that time: it tests the model, not RL
    learnable = [r for r in results if r.sft_more - r.start >= LEARNABLE]
    lines.append(_verdict(f"the tasks continued SFT lifts by >= {100 * LEARNABLE:g} points in the same time", learnable))
    return "\n".join(lines)


def _seen(r: Result) -> str:
    """The problems GRPO sampled and the demonstrations continued SFT trained on, in their time:
    a GRPO problem costs n samples, and this cost explains part of the gap between the two on
    some tasks (benchmarks/README.md, the Zen 3 section), not on others: at n = 4 GRPO sampled
    as many problems as continued SFT saw on two tasks and still gained far less (the Zen 4 section)."""
    return f"{r.grpo_prompts:,} / {r.sft_more_demos:,}" if r.grpo_prompts else "-"


def _verdict(which: str, results: list[Result]) -> str:
    wins = sum(r.grpo - r.start >= 0.10 for r in results)
    worst = min((100 * (r.grpo - r.start) for r in results), default=0.0)
    return (f"{which}: GRPO gained >= 10 points on {wins} of {len(results)}; its worst change was {worst:+.1f} "
            f"points (target: >= 10 on at least 4 of 6 tasks, never below -2)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path("runs/efficacy"))
    ap.add_argument("--tasks", nargs="+", choices=sorted(TASKS),
                    help=f"default: all {len(TASKS)} (with --starts easier, the "
                    f"{sum(t.easier is not None for t in TASKS.values())} that have an easier variant)")
    ap.add_argument("--minutes", type=float, default=5.0, help="wall time of GRPO (and of continued SFT) per task")
    ap.add_argument("--steps", type=int, default=0,
                    help="run GRPO for this many steps instead of --minutes (continued SFT still gets GRPO's "
                    "wall time): on a loaded machine a time budget buys few steps, a step budget compares "
                    "settings on equal work")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--preset", default="tiny", choices=list(PRESETS),
                    help="size of the model built for the starts (rlxf init-model); a start already in --out is "
                    "kept, so give each preset its own --out")
    ap.add_argument("--eval-problems", type=int, default=300, help="held-out problems per final evaluation")
    ap.add_argument("--eval-every", type=int, default=50, help="GRPO steps between held-out evaluations")
    ap.add_argument("--sft-max-steps", type=int, default=1500)
    ap.add_argument("--sft-eval-every", type=int, default=50)
    ap.add_argument("--start-eval-problems", type=int, default=200,
                    help="held-out problems per evaluation while choosing the start checkpoint")
    ap.add_argument("--start-min", type=float, default=0.10, help="accuracy that makes a checkpoint the start")
    ap.add_argument("--start-margin", type=float, default=0.10,
                    help="... and at least this much above the accuracy of always giving the most common answer")
    ap.add_argument("--starts", choices=["same", "easier"], default="same",
                    help="what the start models are SFT'd on: the task's own demonstrations (same), or an easier "
                    f"variant's with the task's shown rarely, {TASK_DEMOS} of them in {100 * TASK_SHARE:g}%% of draws "
                    "(easier: the quickstart's design, RL where the demonstrations run out); continued SFT goes on "
                    "with the same data")
    ap.add_argument("--easier-learned", type=float, default=0.8,
                    help="--starts easier: the start is also at least this accurate on the easier variant")
    ap.add_argument("--grpo-set", nargs="*", default=[], help="config overrides for GRPO (default: none)")
    ap.add_argument("--label", default="", help="names this variant's GRPO runs and results file")
    ap.add_argument("--threads", type=int, default=2, help="torch threads")
    ap.add_argument("--sampled", type=int, default=0, metavar="K",
                    help="also score K samples per held-out problem (rollout temperature) and report their mean "
                    "accuracy, mean@K, and the share of problems with one right, pass@K; rerunning with the same "
                    "--out and --label only evaluates again")
    ap.add_argument("--table-only", action="store_true",
                    help="run nothing: print the table of the results already in --out (e.g. of tasks run "
                    "in parallel processes)")
    args = ap.parse_args()
    if args.tasks is None:
        args.tasks = [t for t in DEFAULT_TASKS if args.starts == "same" or TASKS[t].easier is not None]
    if args.starts == "easier" and (plain := [t for t in args.tasks if TASKS[t].easier is None]):
        ap.error(f"--starts easier: {', '.join(plain)} has no easier variant (Task.easier in {__file__})")
    import torch

    torch.set_num_threads(args.threads)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    args.out.mkdir(parents=True, exist_ok=True)
    results_path = args.out / f"efficacy{'-' + args.label if args.label else ''}.json"
    load_start = load_average()
    results = []
    for name in args.tasks:   # saved after each task, so a long run can be read while it goes on
        found = read_result(args.out, name, args.label) if args.table_only else run_task(name, args)
        if found is None:
            continue
        results.append(found)
        results_path.write_text(json.dumps({
            "cpu": cpu_model(), "load_average_start": load_start, "load_average_now": load_average(),
            "budget": _budget(args), "grpo_set": args.grpo_set, "starts": args.starts,
            "results": [asdict(r) for r in results]},
            indent=2) + "\n")
    print(format_table(results, _budget(args), args.grpo_set, args.starts))
    when = "now (the runs' own are in their result files)" if args.table_only else "at the start"
    print(f"load average {when}: {load_start}; results: {results_path}")


if __name__ == "__main__":
    main()
