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
        _check_source(data, prompts)
    if cfg.data.ptx is not None and cfg.algorithm.ptx_coef > 0:
        _check_source(source_config(cfg.data, cfg.data.ptx), prompts=False)


def _check_source(data, prompts: bool) -> None:
    if data.source == "task":
        from rlxf.data.tasks.base import get_task

        get_task(data.task or "", data.task_options)
    elif data.source != "hf" and prompts:  # a hub dataset may need the network: read when training starts
        from rlxf.data.prompts import record_prompt
        from rlxf.data.readers import read_records

        for path in (data.train_path, data.test_path):
            if path is None:
                continue
            first = next(iter(read_records(path, data.source)), None)
            if first is not None:
                where, record = first
                record_prompt(record, where, data)
