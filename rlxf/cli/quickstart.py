"""`rlxf quickstart [OUT]`: SFT a tiny model on easy demonstrations, then GRPO where they run out.

The demo is built so that RL earns its keep, and shows the baseline that would say otherwise:

1. build a 3.4M-parameter Qwen2 model and its tokenizer (``rlxf init-model --preset tiny``);
2. SFT it on 3-digit additions that carry at most once, with one demonstration in 51 of an
   addition that carries two or three times (200 of them; recipes/quickstart_sft.yaml), until
   the model is sometimes right on the hard problems, which RL needs to learn anything: SFT
   stops at the first evaluation (every 100 steps) where a fifth of 200 held-out hard problems
   are right, or after 1000 steps;
3. GRPO on additions that carry two or three times; the reward is exact, the model starts out
   sometimes right (recipes/quickstart_grpo.yaml). RL on them alone costs the model the easy
   ones SFT taught; PPO-ptx (a supervised loss on easy demonstrations added to the policy loss)
   kept them on every seed measured (README). The easy held-out problems are evaluated with
   every eval (a source of weight 0), so forgetting shows. ``--no-remedy`` drops PPO-ptx;
4. continue the SFT instead, on the same demonstrations, for the same wall time as GRPO;
5. evaluate all three models greedily on 500 held-out hard problems (and 500 easy ones), print
   the table and write ``report.html`` for the GRPO run.

Every stage is an ordinary rlxf run in ``<out>/``, with its config, metrics and model. Each
finished stage's wall time is recorded in ``<out>/stages.json``, the arguments in
``<out>/quickstart.json``; ``--resume`` after an interrupt takes those arguments, skips the
finished stages, continues the interrupted SFT or GRPO run from its last checkpoint (its time
then counts the steps logged before the interrupt by their ``time/step``), and starts the
continued-SFT baseline over (its budget is GRPO's time).
"""

from __future__ import annotations

import json
import logging
import shutil
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from rlxf.cli.commands import path_override
from rlxf.cli.errors import UsageError
from rlxf.config import Config, load_config
from rlxf.run_dir import RunDir, RunDirError, setup_logging

RECIPES = Path(__file__).resolve().parent.parent / "trainer" / "recipes"
log = logging.getLogger("rlxf")


@dataclass
class Result:
    model: str
    hard: float             # greedy accuracy on held-out problems with 2-3 carries (the RL task)
    easy: float             # greedy accuracy on held-out problems with 0-1 carries (the demonstrations)
    seconds: float          # wall time of the stage that made the model


HELD_OUT = 500  # held-out problems of each kind in the final table


def _evaluate(model_dir: Path, cfg: Config) -> dict[str, float]:
    """Greedy accuracy of ``model_dir`` on the held-out problems of each source of ``cfg``'s
    sources (hard and easy), by source name."""
    from rlxf.trainer.evaluate import evaluate_saved_model

    metrics = evaluate_saved_model(model_dir, cfg, HELD_OUT)
    return {s.label: metrics[f"eval/{s.label}/accuracy"] for s in cfg.data.sources}


def _no_remedy(cfg: Config) -> Config:
    """``cfg`` without PPO-ptx: GRPO on the hard problems alone (the easy ones still evaluated)."""
    return cfg.model_copy(update={"data": cfg.data.model_copy(update={"ptx": None}),
                                  "algorithm": cfg.algorithm.model_copy(update={"ptx_coef": 0.0})})


def _config(name: str, out: Path, seed: int, overrides: list[str]) -> Config:
    return load_config(RECIPES / f"quickstart_{name}.yaml",
                       [path_override("run.output_dir", out), f"run.seed={seed}", *overrides])


def _prepare(out: Path, overwrite: bool) -> None:
    """Create ``out``, empty; an existing one only with ``overwrite``, and only if it is empty or
    a quickstart's (holds quickstart.log), so that a mistyped OUT deletes nothing else."""
    try:
        if out.exists() and not out.is_dir():
            raise RunDirError(f"{out} is a file; give the quickstart a directory")
        if out.exists() and any(out.iterdir()):
            if not overwrite:
                raise RunDirError(f"{out} already exists; pass --overwrite to start the quickstart over, "
                                  f"or give another directory")
            if not (out / "quickstart.log").is_file():
                raise RunDirError(f"--overwrite: {out} is not a quickstart directory (it holds no quickstart.log), so "
                                  f"it is not deleted; give another directory, or delete it yourself")
            shutil.rmtree(out)
        out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise RunDirError(f"cannot use {out} for the quickstart ({e.strerror or type(e).__name__}); "
                          f"give a writable directory") from None


STAGES = "stages.json"  # each finished stage's wall time: what --resume skips
SETTINGS = "quickstart.json"  # the arguments the quickstart started with: what --resume continues
DEFAULTS = {"seed": 0, "preset": "tiny", "remedy": True, "rl_steps": None, "sft_steps": None}
FLAGS = {"seed": "--seed", "preset": "--preset", "remedy": "--remedy/--no-remedy", "rl_steps": "--rl-steps",
         "sft_steps": "--sft-steps"}


def settings(out: Path, given: dict, resume: bool) -> dict:
    """The quickstart's arguments: those ``given`` (None: not given) over the defaults, or with
    ``resume`` over those OUT started with (``quickstart.json``). A resumed quickstart that took
    other ones would continue a stage on other settings than its first part (a GRPO run half with
    PPO-ptx, half without) and report it under the new ones, so a given one that differs is refused."""
    if not resume:
        return {**DEFAULTS, **{k: v for k, v in given.items() if v is not None}}
    path = out / SETTINGS
    try:
        started = json.loads(path.read_text())
        if not isinstance(started, dict) or set(started) != set(DEFAULTS):
            raise ValueError(f"expected the keys {', '.join(DEFAULTS)}")
    except FileNotFoundError:  # not a quickstart (refused later), or one started before rlxf recorded them
        return settings(out, given, resume=False)
    except (OSError, ValueError) as e:
        raise UsageError(f"--resume: cannot read {path} ({e}), the arguments the quickstart started with; "
                         f"repair it, or start the quickstart over with --overwrite") from None
    differ = [k for k, v in given.items() if v is not None and v != started[k]]
    if differ:
        was = ", ".join(f"{FLAGS[k]} {_shown_setting(k, started[k])}" for k in differ)
        now = ", ".join(f"{FLAGS[k]} {_shown_setting(k, given[k])}" for k in differ)
        raise UsageError(f"--resume: the quickstart in {out} started with {was}, not {now}; a resumed quickstart "
                         f"continues the same experiment, so leave those flags out (it takes its own), or start "
                         f"another in a new directory")
    return started


def _shown_setting(key: str, value) -> str:
    if key == "remedy":
        return "(--remedy)" if value else "(--no-remedy)"
    return "(the recipe's)" if value is None else str(value)


def _save_settings(out: Path, chosen: dict) -> None:
    tmp = out / f".{SETTINGS}.tmp"
    tmp.write_text(json.dumps(chosen, indent=2) + "\n")
    tmp.replace(out / SETTINGS)


def _check_resumable(out: Path) -> None:
    if not (out / "quickstart.log").is_file():
        raise RunDirError(f"--resume: {out} is not a quickstart directory (it holds no quickstart.log); "
                          f"start the quickstart without --resume")


def _finished(out: Path) -> dict[str, float]:
    try:
        return json.loads((out / STAGES).read_text())
    except (OSError, ValueError):
        return {}


def _record(out: Path, finished: dict[str, float], stage: str, seconds: float) -> float:
    finished[stage] = seconds
    tmp = out / f".{STAGES}.tmp"
    tmp.write_text(json.dumps(finished, indent=2) + "\n")
    tmp.replace(out / STAGES)
    return seconds


def _logged_seconds(run: Path) -> float:
    """The steps' own time (``time/step``) in a run's metrics.jsonl: what an interrupted stage
    had spent before ``--resume`` continues it."""
    from rlxf.metrics import read_jsonl

    path = run / "metrics.jsonl"
    return sum(float(r.get("time/step", 0.0)) for r in read_jsonl(path)) if path.exists() else 0.0


def _stage(out: Path, name: str, command: str, fn, *, continue_it: bool = True) -> float:
    """Run a stage's run ``fn(cfg_run, resume)`` in ``out/name``: fresh, or (its directory left by
    an interrupt) continued from its last checkpoint, or started over (``continue_it`` False).
    Returns its wall time, with what the interrupted part had logged."""
    path = out / name
    resume = continue_it and path.exists()
    before = _logged_seconds(path) if resume else 0.0
    run = RunDir.open(out, name, command=command, resume=resume, overwrite=path.exists() and not resume)
    t0 = time.perf_counter()
    fn(run, resume)
    run.drop_replaced()
    return before + time.perf_counter() - t0


def run_quickstart(out: Path, *, seed: int = 0, preset: str = "tiny", overwrite: bool = False,
                   rl_steps: int | None = None, sft_steps: int | None = None, remedy: bool = True,
                   resume: bool = False) -> list[Result]:
    from rlxf.metrics.report import write_report
    from rlxf.models import init_model
    from rlxf.models.presets import PRESETS
    from rlxf.placement import run_training
    from rlxf.trainer.sft import run_sft

    # everything that can be wrong with the arguments fails here, before OUT is touched
    if preset not in PRESETS:
        raise UsageError(f"--preset: unknown preset {preset!r}; valid presets: {', '.join(PRESETS)}")
    base, sft_model = out / "base-model", out / "sft"  # a run directory stands for its newest checkpoint's model
    sft_cfg = _config("sft", out, seed, [path_override("model.path", base)]
                      + ([f"sft.steps={sft_steps}"] if sft_steps is not None else []))
    grpo_cfg = _config("grpo", out, seed, [path_override("model.path", sft_model)]
                       + ([f"train.steps={rl_steps}"] if rl_steps is not None else []))
    if resume and overwrite:
        raise UsageError("--resume and --overwrite contradict each other; pass one")
    if resume:
        _check_resumable(out)
    else:
        _prepare(out, overwrite)
    if not (out / SETTINGS).is_file():
        _save_settings(out, {"seed": seed, "preset": preset, "remedy": remedy, "rl_steps": rl_steps,
                             "sft_steps": sft_steps})
    setup_logging(out / "quickstart.log")
    start = time.perf_counter()
    finished = _finished(out) if resume else {}

    # 1. a tiny base model with its own tokenizer, built offline
    if "base" not in finished:
        if base.exists():  # an interrupted build
            shutil.rmtree(base)
        init_model(preset, base, seed=seed)
        _record(out, finished, "base", 0.0)
    log.info("stage 1/4: built %s model in %s", preset, base)

    # 2. SFT on easy demonstrations (at most one carry), the hard ones shown rarely
    sft_seconds = finished.get("sft")
    if sft_seconds is None:
        sft_seconds = _record(out, finished, "sft", _stage(out, "sft", "sft",
                                                           lambda run, again: run_sft(sft_cfg, run, resume=again)))
    log.info("stage 2/4: SFT done in %.0fs", sft_seconds)

    # 3. GRPO on hard problems (two or three carries) with PPO-ptx on easy ones, from the SFT model
    eval_cfg = grpo_cfg  # hard and easy held-out problems, whatever the run trains on
    if not remedy:
        grpo_cfg = _no_remedy(grpo_cfg)
    rl_seconds = finished.get("grpo")
    if rl_seconds is None:
        rl_seconds = _record(out, finished, "grpo", _stage(
            out, "grpo", "train", lambda run, again: run_training(grpo_cfg, run, resume=again)))
        write_report([out / "grpo"])
    log.info("stage 3/4: GRPO done in %.0fs", rl_seconds)

    # 4. the baseline: continued SFT on the same demonstrations for the same wall time
    more_cfg = _config("sft", out, seed, [path_override("model.path", sft_model), "run.name=sft-more", "sft.steps=1000000",
                                          f"sft.max_seconds={rl_seconds:.1f}", "sft.optim.warmup_steps=20",
                                          "sft.optim.schedule=constant", "sft.eval_every=0", "sft.stop_when=null"])
    more_seconds = finished.get("sft-more")
    if more_seconds is None:
        more_seconds = _record(out, finished, "sft-more", _stage(
            out, "sft-more", "sft", lambda run, again: run_sft(more_cfg, run), continue_it=False))
    log.info("stage 4/4: continued SFT done in %.0fs", more_seconds)

    # held-out greedy accuracy of the three models on hard and easy problems
    grpo_model = out / "grpo"
    results = []
    grpo_name = "+ GRPO + PPO-ptx on easy" if remedy else "+ GRPO on hard problems"
    for name, path, seconds in (("SFT, hard ones rare", sft_model, sft_seconds),
                                (grpo_name, grpo_model, rl_seconds),
                                ("+ continued SFT, same time", out / "sft-more", more_seconds)):
        acc = _evaluate(path, eval_cfg)
        results.append(Result(name, acc["hard"], acc["easy"], seconds))
    summary = {"results": [asdict(r) for r in results], "total_seconds": time.perf_counter() - start,
               "held_out_problems": HELD_OUT, "seed": seed, "remedy": remedy}
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    return results


def format_table(results: list[Result]) -> str:
    lines = [f"{'model':<30} {'hard (2-3 carries)':>19} {'easy (0-1 carry)':>17} {'stage time':>11}"]
    for r in results:
        lines.append(f"{r.model:<30} {r.hard:>18.1%} {r.easy:>17.1%} {r.seconds:>10.0f}s")
    before, rl, sft = results
    lines.append("")
    lines.append(f"GRPO changed held-out hard accuracy by {100 * (rl.hard - before.hard):+.1f} points (easy by "
                 f"{100 * (rl.easy - before.easy):+.1f}); "
                 f"continued SFT for the same time by {100 * (sft.hard - before.hard):+.1f}.")
    return "\n".join(lines)


def run(out: Path, *, seed: int | None, overwrite: bool, rl_steps: int | None, sft_steps: int | None,
        preset: str | None = None, remedy: bool | None = None, resume: bool = False) -> None:
    """``None``: an argument not given (the default, or with ``resume`` the quickstart's own)."""
    import shlex
    import sys

    import typer

    from rlxf.trainer.interrupt import TrainingInterrupted

    chosen = settings(out, {"seed": seed, "preset": preset, "remedy": remedy, "rl_steps": rl_steps,
                            "sft_steps": sft_steps}, resume=resume and not overwrite)
    seed, preset, remedy = chosen["seed"], chosen["preset"], chosen["remedy"]
    rl_steps, sft_steps = chosen["rl_steps"], chosen["sft_steps"]
    again = shlex.join(["rlxf", "quickstart", str(out), "--seed", str(seed), "--preset", preset, "--resume",
                        *(["--rl-steps", str(rl_steps)] if rl_steps is not None else []),
                        *(["--sft-steps", str(sft_steps)] if sft_steps is not None else []),
                        *([] if remedy else ["--no-remedy"])])
    try:
        results = run_quickstart(out, seed=seed, preset=preset, overwrite=overwrite, rl_steps=rl_steps,
                                 sft_steps=sft_steps, remedy=remedy, resume=resume)
    except TrainingInterrupted as e:
        print(f"{e}\ncontinue the quickstart with: {again}", file=sys.stderr)
        raise typer.Exit(e.exit_code) from None
    except KeyboardInterrupt:
        print(f"interrupted\ncontinue the quickstart with: {again}", file=sys.stderr)
        raise typer.Exit(130) from None
    print()
    print(format_table(results))
    if remedy:
        print("\nGRPO's loss adds a supervised loss on easy demonstrations (PPO-ptx), to keep what SFT taught "
              "(see the easy column); --no-remedy trains on the hard problems alone.")
    print(f"\nruns, metrics and models: {out}/   report: {out / 'grpo' / 'report.html'}")
