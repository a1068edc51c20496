"""What a training command checks before it creates its run directory.

A start that fails after ``runs/<name>/`` exists makes the corrected rerun stop with "already
exists", so everything that can be checked without the expensive work (loading weights,
building the whole dataset) is checked first: the config itself (``load_config``: schema,
registry names, custom reward functions), the model and tokenizer paths (the tokenizer is
loaded: it is small), the task name and options, and the first record of each data file
against ``data.fields``. Whatever fails later, before the first step is logged, removes the
directory the command created (``RunDir.discard_if_unused``).

Each problem is reported with the field it is about and where that was set (the config's file
and line, or the override), as the schema's errors are: in a mixture, which source's file.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

from rlxf.config import Config
from rlxf.config.load import Origins


def check_inputs(cfg: Config, *, prompts: bool = True, origins: Origins | None = None) -> None:
    """Raise one ConfigError (a ``UserInputError``) naming every bad input, each with its origin.

    ``prompts``: the data are RL prompts (check ``record_prompt``'s fields); SFT data are checked
    when they are read, as their fields depend on the format.
    """
    problems = model_problems(cfg) + data_problems(cfg, prompts=prompts)
    if getattr(cfg.run, "placement", "local") == "ray" and importlib.util.find_spec("ray") is None:
        problems.append((("run", "placement"), "run.placement=ray needs Ray, which is not installed: "
                                               "pip install 'rlxf[ray]', or use run.placement=local"))
    if problems:
        raise (origins or Origins()).error(problems, names_in_message=False)


def check_pair_inputs(cfg: Config, origins: Origins | None = None) -> None:
    """``check_inputs`` for `rlxf rm` and `rlxf dpo`: the model and tokenizer, and the first
    record of each preference file against ``data.fields`` (chosen, rejected)."""
    from rlxf.data.preference import record_triple
    from rlxf.errors import UserInputError

    problems = model_problems(cfg) + data_problems(cfg, prompts=False)
    data = cfg.data
    if data.source == "task":
        problems.append((("data", "source"), f"data.task={data.task}: preference pairs come from files or a HF "
                         f"dataset (data.source=jsonl|json|parquet|csv|hf with data.train_path), not from a "
                         f"procedural task"))
    elif data.source != "hf":  # a hub dataset may need the network: read when training starts
        for key in ("train_path", "test_path"):
            path = getattr(data, key)
            if path is None or not Path(path).expanduser().is_file():  # data_problems said why
                continue
            try:
                first = _first_record(data, path)
                if first is not None:
                    record_triple(first[1], first[0], data)
            except UserInputError as e:
                problems.append((("data", key), str(e)))
    if problems:
        raise (origins or Origins()).error(problems, names_in_message=False)


def model_problems(cfg: Config) -> list[tuple[tuple, str]]:
    """The model and tokenizer paths (the tokenizer is loaded), as ``(location, message)``."""
    from rlxf.errors import UserInputError
    from rlxf.models.loading import tokenizer_from_config

    try:
        tokenizer_from_config(cfg.model)
    except UserInputError as e:
        text = str(e)
        field = ("path" if text.startswith("model.path") else "chat_template" if "chat_template" in text
                 else "tokenizer" if cfg.model.tokenizer else "path")
        return [(("model", field), text)]
    return []


def data_problems(cfg: Config, *, prompts: bool = True, missing_files: bool = True) -> list[tuple[tuple, str]]:
    """Each data source's cheap checks, as ``(location, message)``: its task made with its options,
    each data file there and a file (``missing_files``: a missing one is a problem), and
    (``prompts``) the first record of each file read as a prompt against data.fields. PPO-ptx's
    demonstrations count only with ``algorithm.ptx_coef`` > 0; a hub dataset (``source: hf``) may
    need the network, so it is read when training starts."""
    from rlxf.config.load import source_locations
    from rlxf.data.prompts import source_config
    from rlxf.data.readers import unexpanded
    from rlxf.errors import UserInputError

    problems: list[tuple[tuple, str]] = []
    for loc, source in source_locations(cfg):
        ptx = loc == ("data", "ptx")
        if ptx and cfg.algorithm.ptx_coef <= 0:
            continue
        data = source_config(cfg.data, source)
        checks = []
        if data.source == "task":
            checks.append(((*loc, "task"), data))
        elif data.source != "hf":
            for key, other in (("train_path", "test_path"), ("test_path", "train_path")):
                path = getattr(data, key)
                if path is None:
                    continue
                local = Path(path).expanduser()
                if local.is_dir():
                    problems.append(((*loc, key), f"{path} is a directory, not a {data.source} file; give the "
                                     f"file's path (a dataset saved with save_to_disk, or a directory of data "
                                     f"files, is read with source: hf)"))
                elif not local.is_file():
                    if missing_files:
                        problems.append(((*loc, key), f"data file {path} does not exist{unexpanded(str(path))}"))
                elif prompts and not ptx:  # PPO-ptx's files are SFT data, checked when read
                    checks.append(((*loc, key), data.model_copy(update={other: None})))
        for where, one in checks:
            try:
                check_data_source(one, prompts=prompts and not ptx)
            except UserInputError as e:
                text = str(e)
                if where[-1] == "task" and "task_options" in text:
                    where = (*where[:-1], "task_options")
                if loc != ("data",):  # the checks see the source as `data`: name the source's own fields
                    prefix = ".".join(map(str, loc))
                    text = text.replace("data.fields.", f"{prefix}.fields.").replace(
                        "data.task_options", f"{prefix}.task_options")
                problems.append((where, text))
    return problems


def _first_record(data, path):
    """(where, record) of the first record of ``path``, None for no path or an empty file."""
    from rlxf.data.readers import read_records

    if path is None:
        return None
    return next(iter(read_records(path, data.source)), None)


def check_data_source(data, prompts: bool) -> None:
    """One data source's cheap checks: its task made with its options, or (``prompts``) the first
    record of each of its files read as a prompt against data.fields."""
    if data.source == "task":
        from rlxf.data.tasks.base import get_task

        get_task(data.task or "", data.task_options)
    elif data.source != "hf" and prompts:  # a hub dataset may need the network: read when training starts
        from rlxf.data.prompts import record_prompt

        for path in (data.train_path, data.test_path):
            first = _first_record(data, path)
            if first is not None:
                where, record = first
                record_prompt(record, where, data)
