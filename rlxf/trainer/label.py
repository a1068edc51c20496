"""`rlxf label`: preference pairs labelled by a machine (RLAIF, Bai et al. 2022; Lee et al. 2023).

For each prompt the policy samples k responses; the reward (a rule verifier, the LLM judge,
a reward model, or a weighted mix of them) scores each, and the best and the worst become a
(chosen, rejected) pair, written as JSONL that `rlxf rm` and `rlxf dpo` read:

    {"prompt": ..., "chosen": ..., "rejected": ..., "chosen_score": ..., "rejected_score": ..., "uid": ...}

``prompt`` is the prompt text with the chat template already applied, exactly what the policy
saw and what the ``reward_model`` verifier is later given, so read these files with
``data.apply_chat_template: false``.

A sample whose reward failed (a verifier raised, timed out or crashed) scores
``reward.error_score``, which says nothing about the response, so it is left out of the choice
of best and worst; a prompt with fewer than two scored samples gives no pair. Failures are
counted in ``label_summary.json``, and as in RL too many of them stop the run with the first
traceback: more than ``reward.max_error_frac_first_step`` of the first batch's samples, or more
than ``reward.max_error_frac`` of a later batch's.

A response cut at ``rollout.max_new_tokens`` (finish reason ``length``) is never chosen, only
rejected: the pair files give each response an eos, so a cut one as the chosen would teach DPO
to stop mid-answer and a reward model to score an unfinished answer best. A prompt whose only
responses that outscore another were cut gives no pair (``truncated_unpaired``); cut samples are
counted (``truncated``) and said.

Pairs are written batch by batch, to ``pairs_<split>.partial.jsonl``, and after each batch a
line of ``label_progress_<split>.jsonl`` records how far the split got (its counts and the size
of the pairs file then). A run stopped part way (too many failed rewards, a signal, a kill)
keeps what it made; ``resume`` cuts the pairs file back to the last recorded batch (a batch
killed half written, a torn line) and goes on from the prompt after it, to the same files an
uninterrupted run writes.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from rlxf.config import Config
from rlxf.config.preference import LabelConfig
from rlxf.config.reward import RewardConfig
from rlxf.errors import UserInputError
from rlxf.rollout import SamplingParams
from rlxf.run_dir import RunDir
from rlxf.trainer.collect import Rollout, stop_on_reward_failures
from rlxf.trainer.seeds import derive_seed
from rlxf.types import Prompt, Trajectory

log = logging.getLogger("rlxf")


def best_and_worst(group: list[Trajectory]) -> tuple[Trajectory, Trajectory] | None:
    """The highest-rewarded sample of one prompt that was not cut at max_new_tokens and the
    lowest-rewarded other one (the first of equals), among those whose reward did not fail; None
    when fewer than two were scored or every scored one was cut."""
    scored = [t for t in group if t.reward_error is None]
    whole = [i for i, t in enumerate(scored) if t.finish_reason != "length"]
    if len(scored) < 2 or not whole:
        return None
    best = max(whole, key=lambda i: (scored[i].reward, -i))
    worst = min((i for i in range(len(scored)) if i != best), key=lambda i: (scored[i].reward, i))
    return scored[best], scored[worst]


def _no_counts() -> dict[str, float]:
    """A labelling's running counts before its first prompt; ``next`` is the first prompt not labelled."""
    return {"next": 0, "pairs": 0, "ties": 0, "unscored": 0, "truncated_unpaired": 0, "reward_failed": 0,
            "truncated": 0, "gap_sum": 0.0}


def label_prompts(rollout: Rollout, prompts: list[Prompt], sampling: SamplingParams, cfg: LabelConfig, *,
                  seed: int, reward: RewardConfig, run_start: bool = True, split: str = "train",
                  on_batch: Callable[[list[dict], dict], None] | None = None,
                  done: dict | None = None) -> tuple[list[dict], dict[str, float]]:
    """Pairs for ``prompts`` (one per prompt whose scored samples differ by more than
    ``cfg.min_gap``) and counts: prompts, pairs, ties dropped (best and worst scored within
    ``min_gap``, or are the same text: a reward that scores one text two ways), prompts left
    without a pair because fewer than two samples were scored (``unscored``) or because only
    samples cut at max_new_tokens outscored another (``truncated_unpaired``), samples whose reward
    failed (``reward_failed``), samples cut at max_new_tokens (``truncated``), mean best-worst gap.

    Too many failed rewards in a batch raise ``RewardFailures``; with ``run_start`` the first
    batch is the run's first and is held to ``reward.max_error_frac_first_step``. ``on_batch``
    gets each batch's pairs as soon as they are made, with the running counts. ``done``: such
    counts of a labelling of these prompts that stopped; it goes on from prompt ``done["next"]``,
    and the pairs returned are the new ones."""
    sampling = replace(sampling, n=cfg.k)
    tally = _no_counts() | (done or {})
    pairs: list[dict] = []
    failed = 0
    first_error: str | None = None
    for start in range(int(tally["next"]), len(prompts), cfg.batch_prompts):
        chunk = prompts[start:start + cfg.batch_prompts]
        trajs = rollout.generate(chunk, [derive_seed(seed, start + i) for i in range(len(chunk))], sampling)
        rollout.score(trajs, sampling.max_new_tokens)
        stop_on_reward_failures(
            trajs, reward, first=run_start and start == 0,
            where=f"rlxf label, {split} prompts {start}-{start + len(chunk) - 1}",
            carry_on=(f"label on: samples whose reward failed (scored reward.error_score={reward.error_score:g}) "
                      "are left out of the pairs and counted in label_summary.json"))
        errors = [t.reward_error for t in trajs if t.reward_error is not None]
        failed += len(errors)
        tally["reward_failed"] += len(errors)
        tally["truncated"] += sum(t.finish_reason == "length" for t in trajs)
        first_error = first_error or (errors[0] if errors else None)
        made = len(pairs)
        groups: dict[int, list[Trajectory]] = {g: [] for g in range(len(chunk))}
        for t in trajs:   # a prompt whose requests failed in the engine has none: it is unscored, not lost
            groups[t.group].append(t)
        for group in groups.values():
            if sum(t.reward_error is None for t in group) < 2:
                tally["unscored"] += 1
                continue
            ends = best_and_worst(group)
            # every sample that outscores another was cut: an unfinished answer is never the chosen
            if ends is None or ends[0].reward < ends[1].reward:
                tally["truncated_unpaired"] += 1
                continue
            chosen, rejected = ends
            # one response scored twice (a sampling judge): its two scores say nothing about it
            if chosen.reward - rejected.reward <= cfg.min_gap or chosen.response_text == rejected.response_text:
                tally["ties"] += 1
                continue
            pairs.append({"prompt": chosen.prompt.prompt_text, "chosen": chosen.response_text,
                          "rejected": rejected.response_text, "chosen_score": chosen.reward,
                          "rejected_score": rejected.reward, "uid": chosen.prompt.uid})
            tally["pairs"] += 1
            tally["gap_sum"] += chosen.reward - rejected.reward
        tally["next"] = start + len(chunk)
        if on_batch is not None:
            on_batch(pairs[made:], dict(tally))
    if failed:
        log.warning("label %s: the reward failed on %d of %d samples, left out of the pairs (%d prompts were left "
                    "with fewer than 2 scored samples and gave no pair). The first failure:\n%s", split, failed,
                    (len(prompts) - int((done or {}).get("next", 0))) * cfg.k, int(tally["unscored"]), first_error)
    if tally["truncated"]:
        (log.warning if tally["truncated_unpaired"] else log.info)(
            "label %s: %d of %d samples were cut at rollout.max_new_tokens=%d; they are never chosen, only rejected "
            "(%d prompts gave no pair for it). Raise rollout.max_new_tokens if the answers need more tokens", split,
            int(tally["truncated"]), len(prompts) * cfg.k, sampling.max_new_tokens, int(tally["truncated_unpaired"]))
    return pairs, _summary(tally, len(prompts))


def _summary(tally: dict, prompts: int) -> dict[str, float]:
    return {"prompts": float(prompts), **{k: float(tally[k]) for k in (
        "pairs", "ties", "unscored", "truncated_unpaired", "reward_failed", "truncated")},
        "gap_mean": tally["gap_sum"] / max(1, tally["pairs"])}


def _recorded(split: str, partial: Path, done: Path, progress: Path, prompts: list[Prompt]) -> dict | None:
    """The counts of the last batch a stopped labelling of ``split`` recorded in ``progress``, with
    what came after it cut off: a torn progress line, and pairs written past the recorded size of
    the pairs file (a batch killed before its line was written). None: nothing was recorded."""
    if not progress.exists():
        partial.unlink(missing_ok=True)
        return None
    raw, keep, last = progress.read_bytes(), 0, None
    for line in raw.splitlines(keepends=True):
        try:
            record = json.loads(line) if line.endswith(b"\n") else None
        except ValueError:
            record = None
        if not isinstance(record, dict) or not {*_no_counts(), "bytes", "uid"} <= record.keys():
            break
        keep, last = keep + len(line), record
    if keep < len(raw):
        log.warning("label %s: %s ends in %d bytes that are not a whole progress record (a write cut short); "
                    "dropped them", split, progress, len(raw) - keep)
        with open(progress, "r+b") as f:
            f.truncate(keep)
    if last is None:
        partial.unlink(missing_ok=True)
        return None
    n = int(last["next"])
    if not 0 < n <= len(prompts) or prompts[n - 1].uid != last["uid"]:
        raise UserInputError(
            f"rlxf label --resume: {progress} records {split} prompts 0-{n - 1} labelled, the last {last['uid']!r}, "
            f"but there are {len(prompts)} {split} prompts now"
            + (f" and prompt {n - 1} is {prompts[n - 1].uid!r}" if 0 < n <= len(prompts) else "")
            + "; the data changed since that run. Start a new run (another run.name) to label these prompts")
    pairs = partial if partial.exists() else done
    size = pairs.stat().st_size if pairs.exists() else -1
    if size < last["bytes"]:
        raise UserInputError(f"rlxf label --resume: {progress} records {last['bytes']} bytes of {split} pairs but "
                             f"{pairs} has {max(size, 0)}; the pairs file was changed or lost. Start a new run "
                             f"(another run.name)")
    if size > last["bytes"]:
        log.info("label %s: dropped the %d bytes of pairs a stopped batch wrote past its last record", split,
                 size - last["bytes"])
        with open(pairs, "r+b") as f:
            f.truncate(last["bytes"])
    if pairs is done and n < len(prompts):
        done.replace(partial)
    return last


def label_split(rollout: Rollout, run_path: Path, split: str, prompts: list[Prompt], sampling: SamplingParams,
                cfg: LabelConfig, *, seed: int, reward: RewardConfig, run_start: bool,
                resume: bool = False) -> dict[str, float]:
    """``label_prompts`` into ``<run>/pairs_<split>.jsonl``; returns the counts. Each batch's pairs
    are written as soon as they are made, to ``pairs_<split>.partial.jsonl``, renamed when the
    split is done: a run stopped part way (too many failed rewards, a signal) keeps the pairs it
    has paid for, under a name that no reader takes for the whole split. With ``resume`` a split
    goes on from the last batch ``label_progress_<split>.jsonl`` records."""
    partial, done = run_path / f"pairs_{split}.partial.jsonl", run_path / f"pairs_{split}.jsonl"
    progress = run_path / f"label_progress_{split}.jsonl"
    recorded = _recorded(split, partial, done, progress, prompts) if resume else None
    if recorded is not None and recorded["next"] == len(prompts):
        if partial.exists():   # stopped between its last batch and the rename
            partial.replace(done)
        log.info("label %s: all %d prompts were labelled before; %s kept", split, len(prompts), done)
        return _summary(recorded, len(prompts))
    if recorded is not None:
        log.info("label %s: resuming at prompt %d of %d (%d pairs so far)", split, recorded["next"], len(prompts),
                 recorded["pairs"])
    mode = "a" if recorded is not None else "w"
    try:
        with open(partial, mode) as f, open(progress, mode) as g:
            def write(pairs: list[dict], tally: dict) -> None:
                # the pairs reach the disk before the line that says they are there
                f.writelines(json.dumps(p) + "\n" for p in pairs)
                f.flush()
                os.fsync(f.fileno())
                g.write(json.dumps({**tally, "bytes": f.tell(), "uid": prompts[tally["next"] - 1].uid}) + "\n")
                g.flush()
                os.fsync(g.fileno())

            _, counts = label_prompts(rollout, prompts, sampling, cfg, seed=seed, reward=reward,
                                      run_start=run_start, split=split, on_batch=write, done=recorded)
    except BaseException:
        if partial.exists() and partial.stat().st_size:   # an empty one goes with an unused run directory
            log.warning("label %s stopped; the pairs of the batches it finished are in %s", split, partial)
        raise
    partial.replace(done)
    return counts


def run_label(cfg: Config, run: RunDir, *, resume: bool = False) -> dict[str, dict[str, float]]:
    """``rlxf label``: writes ``<run>/pairs_train.jsonl`` (and ``pairs_test.jsonl``); returns
    each split's counts. ``resume`` goes on from where a stopped labelling of the run got."""
    from rlxf.config import dump_config
    from rlxf.data import build_prompt_data
    from rlxf.models import load_from_config
    from rlxf.rewards import build_run_reward
    from rlxf.rollout import build_engine_from_config
    from rlxf.trainer.collect import EngineRollout

    if cfg.rollout.temperature <= 0:
        raise UserInputError(f"rlxf label: rollout.temperature={cfg.rollout.temperature} makes the k samples of a "
                         f"prompt identical; set rollout.temperature > 0 (e.g. 1.0)")
    run.write_config(dump_config(cfg))
    model, tokenizer = load_from_config(cfg.model.model_copy(update={"lora": None}))
    data = build_prompt_data(cfg.data, tokenizer, seed=cfg.seeds.data)
    engine = build_engine_from_config(cfg.rollout, model, tokenizer, seed=cfg.seeds.sampling)
    reward = build_run_reward(cfg)
    sampling = SamplingParams.from_config(cfg.rollout)
    out: dict[str, dict[str, float]] = {}
    try:
        rollout = EngineRollout(engine, tokenizer, reward)
        for split, prompts, seed in (("train", data.train[: cfg.label.num_prompts], cfg.seeds.sampling),
                                     ("test", data.test[: cfg.label.test_prompts], cfg.seeds.sampling + 1)):
            if not prompts:
                continue
            counts = label_split(rollout, run.path, split, prompts, sampling, cfg.label, seed=seed,
                                 reward=cfg.reward, run_start=split == "train", resume=resume)
            log.info("label %s: %d pairs from %d prompts (%d ties dropped, %d without 2 scored samples, %d whose "
                     "only better samples were cut at max_new_tokens; %d failed rewards, %d cut samples), mean score "
                     "gap %.3g -> %s", split, counts["pairs"], len(prompts), counts["ties"], counts["unscored"],
                     counts["truncated_unpaired"], counts["reward_failed"], counts["truncated"], counts["gap_mean"],
                     run.path / f"pairs_{split}.jsonl")
            out[split] = counts
    finally:
        reward.close()
    (run.path / "label_summary.json").write_text(json.dumps(out, indent=1) + "\n")
    return out
