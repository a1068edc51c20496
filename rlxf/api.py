"""The Python entry point: ``rlxf.train(...)``, the same run as ``rlxf train CONFIG``.

    import rlxf

    def correct(sample):                                   # or TRL's f(prompts, completions, **cols)
        return float(sample.response.strip() == sample.ground_truth)

    result = rlxf.train(
        model=model, tokenizer=tokenizer,                  # in memory, or model="path/or/hub-id"
        prompts=[{"prompt": "12+34=", "answer": "46"}, ...],   # or strings, or a datasets.Dataset
        reward_funcs=[correct],
        algorithm={"name": "grpo"}, rollout={"n": 8}, train={"steps": 100},   # keyword sections
        run={"name": "my-run"},
    )
    result.run_dir, result.metrics, result.checkpoint

Everything a config says can come from ``config`` (a ``Config``, a YAML path or a dict) and
keyword sections merged over it (``rollout={"n": 8}`` sets ``rollout.n``); the arguments
``model``, ``tokenizer``, ``prompts``, ``eval_prompts`` and ``reward_funcs`` fill in the
sections they stand for. The run writes the run directory the CLI writes (config.yaml,
metrics.jsonl, samples.jsonl, train.log, checkpoints/, report.html); in-memory prompts are
saved in it (``prompts/train.jsonl``) so the run directory records what it trained on.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rlxf.config import Config, ConfigError, load_config
from rlxf.run_dir import API_OPTIONS, RunDir, setup_logging

PROMPTS_DIR = "prompts"


@dataclass(frozen=True)
class TrainResult:
    """What a finished ``rlxf.train`` run leaves behind."""

    run_dir: Path                   # runs/<name>/: config.yaml, metrics.jsonl, ..., report.html
    metrics: dict[str, float]       # the last step's metrics (empty if no step ran)
    checkpoint: Path | None         # the newest checkpoint; its model/ is an HF model directory


def train(
    config: Config | str | Path | Mapping[str, Any] | None = None,
    *,
    model: Any = None,
    tokenizer: Any = None,
    prompts: Iterable[Any] | None = None,
    eval_prompts: Iterable[Any] | None = None,
    reward_funcs: Callable[..., Any] | list[Callable[..., Any]] | None = None,
    resume: bool = False,
    overwrite: bool = False,
    **sections: Any,
) -> TrainResult:
    """Run RL training and return where its outputs are.

    Args:
        config: a ``Config``, a YAML file, or a dict of sections; None starts from defaults.
        model: a model directory or hub id, or an in-memory transformers causal LM (trained
            in place, on its own device and dtype; the reference and a PPO critic start as
            copies of it). An in-memory model needs ``tokenizer``.
        tokenizer: an in-memory tokenizer (or a path / hub id, like ``model.tokenizer``).
        prompts: the training prompts: strings, dicts (a ``prompt`` text or chat-messages list,
            an optional ``answer`` for verifiers, any other keys as metadata), or a Hugging Face
            ``datasets.Dataset`` of such rows. Replaces the config's data source.
        eval_prompts: held-out prompts in the same forms (for ``eval.every`` / ``eval.at_start``).
        reward_funcs: one callable or a list; each is a verifier named after the function,
            called per sample ``f(sample)``, batched ``f(samples)`` or TRL-style
            ``f(prompts, completions, **columns)`` (see ``rlxf.rewards.callables``). Replaces
            ``reward.verifiers``; their scores add up (weights 1). A call past ``reward.timeout_s``
            is stopped at its next line of Python and its samples count as timeouts.
        resume: continue the run in its run directory from its last checkpoint.
        overwrite: delete an existing run directory of the same name first.
        **sections: config sections merged over ``config``, e.g. ``rollout={"n": 8}``.

    Raises ``ConfigError`` (a ``UserInputError``) naming every bad field or argument before any
    work starts, and ``rlxf.trainer.interrupt.TrainingInterrupted`` after SIGTERM / Ctrl-C (the
    finished step is checkpointed; call again with ``resume=True``). However it ends, the call
    leaves the caller's process as it found it: the ``rlxf`` logger's handlers, transformers'
    verbosity, torch's thread count, the signal handlers; no lock on the run and no open file.
    """
    from rlxf.rewards.callables import CallableVerifier

    if resume and overwrite:
        raise ConfigError("rlxf.train: resume=True continues the run and overwrite=True deletes it; pass one")
    data = _merge(_as_dict(config), sections)
    in_memory_model = model is not None and not isinstance(model, str | Path)
    if in_memory_model and (tokenizer is None or isinstance(tokenizer, str | Path)):
        raise ConfigError("rlxf.train: an in-memory model needs its in-memory tokenizer (tokenizer=...)")
    if not in_memory_model and tokenizer is not None and not isinstance(tokenizer, str | Path):
        raise ConfigError(  # the model is loaded from its path with the path's tokenizer: this one would go unused
            f"rlxf.train: tokenizer is an in-memory {type(tokenizer).__name__} but model is "
            f"{'not given' if model is None else repr(str(model))}: an in-memory tokenizer goes with an in-memory "
            f"model. Pass the model loaded in memory too, or the tokenizer as a path / hub id")
    if model is not None:
        path = str(model) if not in_memory_model else getattr(model, "name_or_path", "") or "in-memory"
        data = _merge(data, {"model": {"path": path}})
    if isinstance(tokenizer, str | Path):
        data = _merge(data, {"model": {"tokenizer": str(tokenizer)}})

    funcs = [reward_funcs] if callable(reward_funcs) else list(reward_funcs or [])
    names = _reward_names(funcs)
    if funcs:
        data["reward"] = {**data.get("reward", {}), "verifiers": [
            {"type": "custom", "name": name, "function": f"{_module_of(fn)}:{name}"}
            for name, fn in zip(names, funcs, strict=True)]}

    run = data.get("run", {})
    run_path = Path(run.get("output_dir", "runs")) / run.get("name", "run")
    records = {}
    if prompts is not None:
        records["train"] = _records(prompts, "prompts")
        if eval_prompts is not None:
            records["test"] = _records(eval_prompts, "eval_prompts")
        data = _merge(data, {"data": _data_section(data.get("data", {}), records, run_path / PROMPTS_DIR)})
    elif eval_prompts is not None:
        raise ConfigError("rlxf.train: eval_prompts needs prompts (the training prompts) as well")

    cfg = load_config(None, base=data, given_rewards=bool(funcs))
    in_process = [arg for arg, given in (("model", in_memory_model), ("reward_funcs", funcs)) if given]
    if in_process and cfg.run.placement != "local":
        raise ConfigError(f"rlxf.train: {' and '.join(in_process)} run in this process, which run.placement="
                          f"{cfg.run.placement} does not: set run.placement to local, or give the model as a path "
                          f"and the rewards as reward.verifiers")
    if funcs and cfg.reward.url:
        raise ConfigError(f"rlxf.train: reward_funcs score in this process, but reward.url ({cfg.reward.url}) sends "
                          f"the scoring to a reward server; unset reward.url, or leave out reward_funcs")
    run_dir = RunDir.open(cfg.run.output_dir, cfg.run.name, resume=resume, overwrite=overwrite, command="train",
                          options=API_OPTIONS)

    def prepare() -> dict[str, Any]:
        """The saved prompts and the reward: run under ``_run``'s guard, so that a failure here
        leaves no half-made run, no set-aside old run and no lock behind."""
        files = {run_dir.path / PROMPTS_DIR / f"{split}.jsonl": rows for split, rows in records.items()}
        if resume:  # checked before anything is written: a refused resume leaves the run as it was
            from rlxf.cli.train import check_resume_compatible

            check_resume_compatible(run_dir.config, cfg)
            for path, rows in files.items():
                _check_saved_prompts(path, rows)
        for path, rows in files.items():
            if not (resume and path.exists()):  # on resume the saved file holds the same prompts
                _write_jsonl(path, rows)
        objects: dict[str, Any] = {"model": model, "tokenizer": tokenizer} if in_memory_model else {}
        if funcs:
            from rlxf.rewards.scorer import LocalReward

            verifiers = {name: CallableVerifier(name, fn, ground_truth_key=cfg.data.fields.ground_truth,
                                               timeout_s=cfg.reward.timeout_s)
                         for name, fn in zip(names, funcs, strict=True)}
            objects["reward"] = LocalReward(cfg.reward, verifiers=verifiers)
        return objects

    return _run(cfg, run_dir, resume, prepare)


def _run(cfg: Config, run_dir: RunDir, resume: bool, prepare: Callable[[], dict[str, Any]]) -> TrainResult:
    """What ``rlxf train`` does once its config and run directory are ready; ``prepare`` returns the
    in-memory objects (model, tokenizer, reward) after its checks and writes in the run directory."""
    import torch

    from rlxf.cli.train import discard_on_failed_start

    threads = torch.get_num_threads()
    log = logging.getLogger("rlxf")
    restore_logging = None
    try:
        with discard_on_failed_start(run_dir, fresh=not resume):  # as `rlxf train`: everything under it
            from rlxf.cli.train import apply_threads
            from rlxf.metrics.report import write_report
            from rlxf.placement import run_training
            from rlxf.trainer.checkpoint import latest_checkpoint

            restore_logging = _set_logging_aside()
            objects = prepare()  # before the log file opens: a refused resume leaves the run as it was
            setup_logging(run_dir.log)
            apply_threads(cfg.run.threads)
            log.info("run directory %s", run_dir.path)
            last = run_training(cfg, run_dir, resume=resume, **objects)
        write_report([run_dir.path])
        return TrainResult(run_dir.path, last, latest_checkpoint(run_dir.checkpoints))
    finally:  # a library call leaves no open log file, no lock on its run, and the caller's settings behind
        if restore_logging is not None:
            for handler in list(log.handlers):
                log.removeHandler(handler)
                handler.close()
            restore_logging()
        torch.set_num_threads(threads)
        run_dir.release()


def _set_logging_aside() -> Callable[[], None]:
    """Detach the caller's handlers of the ``rlxf`` logger (``setup_logging`` would close them) and
    return a function that puts them back, with the logger's level and propagation and
    transformers' verbosity and progress bars: a script's own logging works after ``rlxf.train``
    as before."""
    from transformers.utils import logging as hf_logging

    log = logging.getLogger("rlxf")
    handlers, level, propagate = list(log.handlers), log.level, log.propagate
    verbosity, bars = hf_logging.get_verbosity(), hf_logging.is_progress_bar_enabled()
    for handler in handlers:
        log.removeHandler(handler)

    def restore() -> None:
        for handler in handlers:
            log.addHandler(handler)
        log.setLevel(level)
        log.propagate = propagate
        hf_logging.set_verbosity(verbosity)
        (hf_logging.enable_progress_bar if bars else hf_logging.disable_progress_bar)()

    return restore


def _as_dict(config: Config | str | Path | Mapping[str, Any] | None) -> dict[str, Any]:
    if config is None:
        return {}
    if isinstance(config, Config):
        return config.model_dump(mode="json", exclude_unset=True)
    if isinstance(config, str | Path):  # its reward names are checked once merged (train's load_config)
        return load_config(config, given_rewards=True).model_dump(mode="json", exclude_unset=True)
    if isinstance(config, Mapping):
        return dict(config)
    raise ConfigError(f"rlxf.train: config must be a Config, a YAML path or a dict, not {type(config).__name__}")


def _merge(base: dict[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    """``over`` merged into a copy of ``base``, section by section (dicts merge, values replace)."""
    out = dict(base)
    for key, value in over.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = _merge(dict(out[key]), value)
        else:
            out[key] = dict(value) if isinstance(value, Mapping) else value
    return out


def _reward_names(funcs: list[Callable[..., Any]]) -> list[str]:
    """A distinct verifier name per function: its ``__name__`` (``reward_<i>`` for a lambda)."""
    names: list[str] = []
    for i, fn in enumerate(funcs):
        if not callable(fn):
            raise ConfigError(f"rlxf.train: reward_funcs[{i}] is a {type(fn).__name__}, not a callable")
        name = getattr(fn, "__name__", "")
        name = name if name.isidentifier() else f"reward_{i}"
        names.append(name if name not in names else f"{name}_{i}")
    return names


def _module_of(fn: Callable[..., Any]) -> str:
    """The function's module, as config.yaml records it (``__main__`` for a script's own)."""
    module = getattr(fn, "__module__", None) or "__main__"
    return module if all(part.isidentifier() for part in module.split(".")) else "__main__"


def _records(prompts: Iterable[Any], arg: str) -> list[dict[str, Any]]:
    """Prompts as JSON records: a string becomes ``{"prompt": text}``, a row stays a dict.

    A container whose iteration is not its rows is refused: a string iterates its characters,
    a dict (a ``DatasetDict`` of splits, a dict of columns) and a pandas DataFrame their keys,
    each of which would otherwise become a prompt."""
    if isinstance(prompts, str | bytes):
        text = prompts.decode(errors="replace") if isinstance(prompts, bytes) else prompts
        raise ConfigError(f"rlxf.train: {arg} is a single {type(prompts).__name__}, whose characters would each be a "
                          f"prompt; give a list of prompts, e.g. {arg}=[{text[:40]!r}]")
    if isinstance(prompts, Mapping):
        if all(hasattr(v, "column_names") for v in prompts.values()):  # load_dataset(...) without split=
            raise ConfigError(f"rlxf.train: {arg} is a {type(prompts).__name__} of splits "
                              f"({', '.join(map(str, prompts))}); pass one split, e.g. {arg}=dataset['train']")
        raise ConfigError(f"rlxf.train: {arg} is a {type(prompts).__name__} (keys {', '.join(map(str, prompts))[:80]}), "
                          f"which iterates its keys; give a list of rows (dicts with a 'prompt'), or a dict of "
                          f"columns as datasets.Dataset.from_dict(...)")
    if hasattr(prompts, "columns") and hasattr(prompts, "to_dict"):  # a pandas DataFrame iterates its column names
        raise ConfigError(f"rlxf.train: {arg} is a {type(prompts).__name__}, which iterates its column names; "
                          f"pass its rows: {arg}=df.to_dict('records')")
    rows = []
    for i, item in enumerate(prompts):  # a datasets.Dataset iterates as dicts
        if isinstance(item, str):
            rows.append({"prompt": item})
        elif isinstance(item, Mapping):
            rows.append(dict(item))
        else:
            raise ConfigError(f"rlxf.train: {arg}[{i}] is a {type(item).__name__}; give a prompt string or a "
                              f"dict with a 'prompt' (text or messages) and optional 'answer'")
        try:
            json.dumps(rows[-1])
        except (TypeError, ValueError) as e:
            raise ConfigError(f"rlxf.train: {arg}[{i}] cannot be saved as JSON ({e}); give plain "
                              f"strings, numbers, lists and dicts") from None
    if not rows:
        raise ConfigError(f"rlxf.train: {arg} is empty")
    return rows


def _data_section(given: Mapping[str, Any], records: dict[str, list[dict]], directory: Path) -> dict[str, Any]:
    """The ``data`` section for prompts saved under ``directory``: JSONL files, with the
    fields inferred from the rows unless ``data.fields`` was given."""
    section: dict[str, Any] = {"source": "jsonl", "task": None, "train_path": str(directory / "train.jsonl"),
                               "test_path": str(directory / "test.jsonl") if "test" in records else None}
    if "fields" not in given:
        chat = isinstance(records["train"][0].get("prompt"), list)
        named = [(f"{arg}[{i}]", row) for split, arg in (("train", "prompts"), ("test", "eval_prompts"))
                 for i, row in enumerate(records.get(split, []))]
        answered = next((where for where, row in named if "answer" in row), None)
        for where, row in named:
            _check_prompt(row, chat, where)
            if answered and "answer" not in row:  # the field is read from every row once one has it
                raise ConfigError(f"rlxf.train: {where} has no 'answer' but {answered} has one; give every "
                                  f"prompt an 'answer' (what its verifiers compare with), or none")
        section["fields"] = {"prompt": None if chat else "prompt", "messages": "prompt" if chat else None,
                             "ground_truth": "answer" if answered else None}
    return section


def _check_prompt(row: dict[str, Any], chat: bool, where: str) -> None:
    """A row's ``prompt`` is there, and in the form of the first row's (text, or a chat-messages
    list: every row is read with the one field), so a bad row is named here, not in the saved file."""
    forms = {False: "text", True: "a chat-messages list"}
    if "prompt" not in row:
        field = "messages" if chat else "prompt"
        raise ConfigError(f"rlxf.train: {where} has no 'prompt' (its keys: {', '.join(row) or 'none'}); put the "
                          f"prompt ({forms[chat]}) under 'prompt', or name its key: data={{'fields': {{'{field}': KEY}}}}")
    prompt = row["prompt"]
    if not isinstance(prompt, str | list):
        raise ConfigError(f"rlxf.train: {where}['prompt'] is a {type(prompt).__name__}; give the prompt's text "
                          f"or a chat-messages list")
    if isinstance(prompt, list) != chat:
        raise ConfigError(f"rlxf.train: {where}['prompt'] is {forms[not chat]} but prompts[0]'s is {forms[chat]}; "
                          f"give every prompt in one form")
    from rlxf.data.errors import DataError  # noqa: PLC0415 - `import rlxf` stays cheap
    from rlxf.data.templates import check_not_blank  # noqa: PLC0415

    try:
        check_not_blank(prompt, where, "prompt")
    except DataError:
        raise ConfigError(f"rlxf.train: {where}['prompt'] holds no text (only whitespace, or only system "
                          f"turns); give the question, or drop the row") from None
    except (AttributeError, KeyError, TypeError):   # malformed messages: named with their field when read
        pass


def _check_saved_prompts(path: Path, rows: list[dict[str, Any]]) -> None:
    """On resume: ``rows`` must be the prompts the run saved in ``path`` (its config.yaml names
    that file as its data), as records: the same rows in the same order, keys in any order."""
    if not path.exists():  # nothing saved to keep (the sampler's fingerprint still checks the order)
        return
    given = [json.loads(json.dumps(r)) for r in rows]  # as they read back (tuples become lists)
    try:
        saved = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    except (OSError, ValueError) as e:
        raise ConfigError(f"rlxf.train(resume=True): cannot read the run's saved prompts {path} ({e})") from None
    if given == saved:
        return
    if len(given) != len(saved):
        how = f"{len(given)} rows given, {len(saved)} rows saved"
    else:
        first = next(i for i, (a, b) in enumerate(zip(given, saved, strict=True)) if a != b)
        how = f"row {first} is {json.dumps(given[first])[:200]}, saved {json.dumps(saved[first])[:200]}"
    raise ConfigError(
        f"rlxf.train(resume=True): the prompts differ from the ones this run trained on, saved in {path} "
        f"({how}); nothing was changed. Resume with the same prompts (or without prompts, passing "
        f"config=<run>/config.yaml, which names that file); to train on other prompts start a new run "
        f"(another run.name, or overwrite=True)")


def _write_jsonl(path: Path, rows: list[dict[str, Any]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))


__all__ = ["TrainResult", "train"]
