"""What a training command checks before it creates its run directory.

A start that fails after ``runs/<name>/`` exists makes the corrected rerun stop with "already
exists", so everything that can be checked without the expensive work (loading weights,
building the whole dataset) is checked first: the config itself (``load_config``: schema,
registry names, custom reward functions), the model and tokenizer paths (the tokenizer is
loaded: it is small), the task name and options, and the first record of each data file
against ``data.fields``. Whatever fails later, before the first step is logged, removes the
directory the command created (``RunDir.discard_if_unused``).
"""

from __future__ import annotations

from rlxf.config import Config


def check_inputs(cfg: Config, *, prompts: bool = True) -> None:
    """Raise the error a user can act on (a ``UserInputError``) for the first bad input.

    ``prompts``: the data are RL prompts (check ``record_prompt``'s fields); SFT data are checked
    when they are read, as their fields depend on the format.
    """
    from rlxf.data.prompts import source_config
    from rlxf.models.loading import tokenizer_from_config

    tokenizer_from_config(cfg.model)
    # each source of a mixture, or the one source; PPO-ptx's demonstrations are SFT data
    sources = [source_config(cfg.data, s) for s in cfg.data.sources] or [cfg.data]
    for data in sources:
        check_data_source(data, prompts)
    if cfg.data.ptx is not None and cfg.algorithm.ptx_coef > 0:
        check_data_source(source_config(cfg.data, cfg.data.ptx), prompts=False)


def check_pair_inputs(cfg: Config) -> None:
    """``check_inputs`` for `rlxf rm` and `rlxf dpo`: the model and tokenizer, and the first
    record of each preference file against ``data.fields`` (chosen, rejected)."""
    from rlxf.data.errors import DataError
    from rlxf.data.preference import record_triple

    check_inputs(cfg, prompts=False)
    data = cfg.data
    if data.source == "task":
        raise DataError(f"data.task={data.task}: preference pairs come from files or a HF dataset "
                        f"(data.source=jsonl|json|parquet|csv|hf with data.train_path), not from a procedural task")
    if data.source == "hf":  # may need the network: read when training starts
        return
    for path in (data.train_path, data.test_path):
        first = _first_record(data, path)
        if first is not None:
            record_triple(first[1], first[0], data)


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
