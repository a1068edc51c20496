"""`rlxf explain CONFIG [OVERRIDES]`: the algorithm, batch arithmetic, memory per role, the matmul
kernels picked here and why, then the config (what differs from the defaults; ``--full-config``
for all)."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text


def _model_dims(path: str, trust_remote_code: bool, revision: str | None = None):
    """Read the model's architecture (config.json only; weights are not loaded). ``path`` is read
    as `rlxf train` reads model.path: a model, checkpoint or run directory (``rlxf.models.paths``)
    or a hub id; a local directory that holds no model raises ModelLoadError, which says why."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    from rlxf.config.explain import ModelDims
    from rlxf.models.loading import adapter_base, check_source, is_adapter_dir

    source = check_source(path, "model.path", adapters=True, revision=revision)
    if is_adapter_dir(source):   # a LoRA adapter: the architecture is its base model's (the merge keeps it)
        source = check_source(adapter_base(source, "model.path"), f"the base model of the LoRA adapter {source}",
                              revision=revision)
    hf_config = AutoConfig.from_pretrained(source, revision=revision, trust_remote_code=trust_remote_code)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(hf_config, trust_remote_code=trust_remote_code)
    params = sum(p.numel() for p in model.parameters())
    return ModelDims.from_hf_config(hf_config, params)


def _unreadable(path: str, err: Exception) -> str:
    """Why model.path could not be read, and what to do. Only a path that does not exist gets
    ``missing_model_hint`` (which may offer ``rlxf init-model``): an existing directory, a trained
    run above all, must never be pointed at a command that writes (or with --overwrite deletes) it."""
    from rlxf.models.loading import ModelLoadError, missing_model_hint

    if isinstance(err, ModelLoadError):  # check_source's own message names the path and the fix
        return str(err)
    local = Path(path).expanduser()
    first = next(iter(str(err).splitlines()), "").rstrip(".")
    why = f"model.path {path!r} not readable ({type(err).__name__}: {first})."
    if local.exists():
        return f"{why} Check that it holds a model (config.json), a checkpoint or a run's checkpoints."
    return f"{why} {missing_model_hint(local)}"


def _gib(n: int) -> str:
    return f"{n / 1024**3:.3f}" if n < 1024**3 * 10 else f"{n / 1024**3:.1f}"


def _print_config(console: Console, cfg, full: bool) -> None:
    """The resolved config last (it is long): the fields set by the file or the overrides, or
    every field with ``full``."""
    import yaml

    from rlxf.config import dump_config

    if full:
        console.rule("resolved config")
        console.print(dump_config(cfg), highlight=False, markup=False)
        return
    console.rule("config: fields that differ from the defaults (--full-config for all)")
    changed = _with_kinds(cfg.model_dump(mode="json", exclude_defaults=True), cfg.model_dump(mode="json"))
    console.print(yaml.safe_dump(changed, sort_keys=False, allow_unicode=True), highlight=False, markup=False)


def _with_kinds(changed: Any, full: Any) -> Any:
    """``changed`` with each list entry's ``type`` put back (reward.verifiers, a source's
    verifiers): a kind's own default, so dropped as a default, yet what says which kind it is."""
    if isinstance(changed, dict) and isinstance(full, dict):
        return {k: _with_kinds(v, full.get(k)) for k, v in changed.items()}
    if isinstance(changed, list) and isinstance(full, list) and len(changed) == len(full):
        return [{"type": f["type"], **_with_kinds(c, f)} if isinstance(c, dict) and isinstance(f, dict) and "type" in f
                else _with_kinds(c, f) for c, f in zip(changed, full, strict=True)]
    return changed


def _print_kernels(console: Console, cfg) -> None:
    from rlxf.models.kernel_choice import explain

    console.rule(f"matmul kernels (model.linear_kernels={cfg.model.linear_kernels})")
    for line in explain(cfg.model.linear_kernels, cfg.model.device, cfg.model.dtype):
        console.print(line, highlight=False, markup=False)


def _titled_table(console, title: str, columns: tuple[str, ...], rows) -> None:
    """A rule with ``title``, then a table of ``rows`` under ``columns``."""
    console.rule(title)
    table = Table(show_header=True, header_style="bold")
    for col in columns:
        table.add_column(col)
    for row in rows:
        table.add_row(*_literal(row))
    console.print(table)


def _literal(cells) -> list[Text]:
    """Table cells shown as written: they hold the user's names and paths (a source named
    ``easy[bold]``), which rich would otherwise read as markup and print as ``easy``."""
    return [Text(str(cell)) for cell in cells]


def _data_files(cfg) -> list[tuple[tuple, str]]:
    """Each data file a run reads before its first step that is not there (yet), as (location,
    path). Hub datasets (``source: hf``) are not files; PPO-ptx's count only with
    ``algorithm.ptx_coef`` > 0; a directory where a file should be is a problem, not a warning
    (``data_problems``)."""
    from rlxf.config.load import source_locations

    files = []
    for loc, source in source_locations(cfg):
        if source.source in ("task", "hf") or (loc == ("data", "ptx") and cfg.algorithm.ptx_coef <= 0):
            continue
        for key in ("train_path", "test_path"):
            path = getattr(source, key)
            if path is not None and not Path(path).expanduser().exists():
                files.append(((*loc, key), path))
    return files


def model_problems(cfg) -> list[tuple[tuple, str]]:
    """What ``rlxf train`` refuses of model.path, model.revision, model.tokenizer and
    model.chat_template before it loads the model (``check_inputs``: the tokenizer is loaded),
    once model.path holds a model (a file is refused as train refuses it). One that does not
    (not made yet, a run with no model saved yet, or a hub id: the hub may be out of reach here
    and not where the run goes) is no problem here: the memory estimate says why it is skipped,
    and the config is explained."""
    from rlxf.cli.preflight import model_problems as problems
    from rlxf.models.loading import ModelLoadError, check_source

    local = Path(cfg.model.path).expanduser()
    if local.is_file():
        return problems(cfg)   # refused as train refuses it
    if not local.exists():
        return []              # not made yet, or a hub id
    try:
        check_source(local, "model.path", adapters=True)
    except ModelLoadError:     # a run directory with no model saved yet
        return []
    return problems(cfg)


def data_problems(cfg) -> list[tuple[tuple, str]]:
    """What ``rlxf train`` checks of the data before it loads a model (``check_inputs``), where
    it is cheap: each task made with its options, each data file's first record against
    ``data.fields``, a directory given for a file. Not the tokenizer (``model_problems``), not a
    hub dataset (the network), not a missing data file (it may not be made yet: ``run`` warns of
    it)."""
    from rlxf.cli.preflight import data_problems as problems

    return problems(cfg, missing_files=False)


def machine_problems(cfg) -> list[str]:
    """What stops ``rlxf train`` with this config on this machine, though the config is valid
    (the explanation itself describes the machine the config asks for)."""
    import torch  # noqa: PLC0415

    problems = []
    if cfg.run.placement == "ray" and importlib.util.find_spec("ray") is None:   # as ``check_inputs`` refuses it
        problems.append("run.placement=ray needs Ray, which is not installed here: `rlxf train` stops on it here "
                        "(pip install 'rlxf[ray]')")
    on_this_machine = cfg.run.placement == "local" or cfg.ray.address is None   # a cluster's machines are its own
    if on_this_machine and cfg.model.device == "cuda" and not torch.cuda.is_available():
        problems.append("model.device=cuda, and this machine has no CUDA device: `rlxf train` stops on it here "
                        "(the figures below are for a CUDA machine; model.device=auto uses one where there is one)")
    return problems


def run(config: Path, overrides: list[str], *, full_config: bool = False) -> None:
    from rlxf.config import load_config
    from rlxf.config.explain import unused_settings
    from rlxf.data.readers import unexpanded

    cfg = load_config(config, overrides, checks=(model_problems, data_problems))
    console = Console()
    missing = [f"{'.'.join(map(str, loc))}: data file {path} does not exist (yet); `rlxf train` stops on it"
               f"{unexpanded(path)}" for loc, path in _data_files(cfg)]
    for warning in (*missing, *machine_problems(cfg), *unused_settings(cfg)):
        console.print(f"warning: {warning}", style="yellow", highlight=False, markup=False, soft_wrap=True)
    try:
        _print_tables(console, cfg)
        _print_kernels(console, cfg)
    finally:
        _print_config(console, cfg, full_config)


def _print_tables(console: Console, cfg) -> None:
    from rlxf.config.explain import algorithm_table, batch_table, memory_estimate, resolved_dtype

    _titled_table(console, f"algorithm: the {cfg.algorithm.name} preset and the fields set over it",
                  ("part", "choice", "what it is"), algorithm_table(cfg))

    _titled_table(console, "batch arithmetic", ("quantity", "value", "from"), batch_table(cfg))

    from rlxf.config.explain import mixture_table

    mixture = mixture_table(cfg)
    if mixture:
        _titled_table(console, "data mixture", ("source", "weight", "prompts per step", "verifiers"), mixture)
        console.print("Held-out prompts of every source are removed from every source's training prompts by "
                      "content; the counts are in the run log's `prompt data` line.", highlight=False)
    if cfg.algorithm.ptx_coef > 0 and cfg.data.ptx is not None:
        console.print(f"PPO-ptx: + {cfg.algorithm.ptx_coef:g} x NLL of {cfg.data.ptx.batch_size} demonstrations "
                      f"({cfg.data.ptx.task or cfg.data.ptx.train_path}) per optimizer step", highlight=False,
                      markup=False)
    if cfg.data.curriculum.enabled:
        c = cfg.data.curriculum
        what = " and ".join(w for w, on in (("solved", c.skip_solved), ("unsolved", c.skip_unsolved)) if on)
        console.print(f"curriculum: prompts {what} in their last {c.window} groups are skipped"
                      + (f" ({c.keep_fraction:g} of them kept)" if c.keep_fraction else ""), highlight=False)

    console.rule("memory estimate (GiB, rough upper bound)")
    try:
        dims = _model_dims(cfg.model.path, cfg.model.trust_remote_code, cfg.model.revision)
    except (OSError, ValueError) as e:
        console.print(f"memory estimate skipped: {_unreadable(cfg.model.path, e)}", markup=False)
        _print_placement(console, cfg, None)
        return
    console.print(f"model: {dims.params:,} parameters, {dims.layers} layers, hidden {dims.hidden}, "
                  f"vocab {dims.vocab}; dtype {resolved_dtype(cfg)}")
    if cfg.train.optim.lr == "auto":
        from rlxf.trainer.optim import auto_lr

        console.print(f"actor lr: auto = {auto_lr(dims.hidden, dims.layers):.2g} (0.1 / (hidden {dims.hidden} x "
                      f"{dims.layers} layers); train.optim.lr sets it)", highlight=False)
    table = Table(show_header=True, header_style="bold")
    for col in ("role", "weights", "grads", "optimizer", "activations", "KV cache", "total"):
        table.add_column(col, justify="right")
    roles = memory_estimate(cfg, dims)
    for r in roles:
        table.add_row(r.role, _gib(r.weights), _gib(r.grads), _gib(r.optimizer), _gib(r.activations),
                      _gib(r.kv_cache), _gib(r.total))
    table.add_row("all", "", "", "", "", "", _gib(sum(r.total for r in roles)))
    console.print(table)
    _print_placement(console, cfg, roles)


def _print_placement(console: Console, cfg, roles) -> None:
    """Which process holds which role, with its resources; ``roles`` None: the model could not be
    read, so the roles are known but not their memory."""
    from rlxf.config.explain import ModelDims, memory_estimate, placement_notes, placement_table

    known = roles is not None
    if not known:
        roles = memory_estimate(cfg, ModelDims(params=0, layers=0, hidden=0, intermediate=0, kv_dim=0, vocab=0))
    console.rule(f"placement: {cfg.run.placement}" + (f" ({cfg.ray.mode})" if cfg.run.placement == "ray" else ""))
    table = Table(show_header=True, header_style="bold")
    for col in ("process", "roles", "resources", "memory (GiB)"):
        table.add_column(col)
    for process, held, resources, size in placement_table(cfg, roles):
        table.add_row(*_literal((process, held, resources, _gib(size) if size is not None and known else "-")))
    console.print(table)
    for note in placement_notes(cfg):
        console.print(note, markup=False)
