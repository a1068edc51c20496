"""`rlxf explain CONFIG [OVERRIDES]`: the resolved config, batch arithmetic, memory per role."""

from __future__ import annotations

from pathlib import Path

from rich.console import Console
from rich.table import Table


def _model_dims(path: str, trust_remote_code: bool):
    """Read the model's architecture (config.json only; weights are not loaded)."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    from rlxf.config.explain import ModelDims

    hf_config = AutoConfig.from_pretrained(path, trust_remote_code=trust_remote_code)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(hf_config, trust_remote_code=trust_remote_code)
    params = sum(p.numel() for p in model.parameters())
    return ModelDims.from_hf_config(hf_config, params)


def _gib(n: int) -> str:
    return f"{n / 1024**3:.3f}" if n < 1024**3 * 10 else f"{n / 1024**3:.1f}"


def run(config: Path, overrides: list[str]) -> None:
    from rlxf.config import dump_config, load_config
    from rlxf.config.explain import batch_table, memory_estimate, resolved_dtype

    cfg = load_config(config, overrides)
    console = Console()
    console.rule("resolved config")
    console.print(dump_config(cfg), highlight=False, markup=False)

    console.rule("batch arithmetic")
    table = Table(show_header=True, header_style="bold")
    for col in ("quantity", "value", "from"):
        table.add_column(col)
    for row in batch_table(cfg):
        table.add_row(*row)
    console.print(table)

    console.rule("memory estimate (GiB, rough upper bound)")
    try:
        dims = _model_dims(cfg.model.path, cfg.model.trust_remote_code)
    except (OSError, ValueError) as e:
        from rlxf.models.loading import missing_model_hint

        console.print(f"model.path {cfg.model.path!r} not readable ({type(e).__name__}); memory estimate "
                      f"skipped. {missing_model_hint(Path(cfg.model.path))}", markup=False)
        return
    console.print(f"model: {dims.params:,} parameters, {dims.layers} layers, hidden {dims.hidden}, "
                  f"vocab {dims.vocab}; dtype {resolved_dtype(cfg)}")
    table = Table(show_header=True, header_style="bold")
    for col in ("role", "weights", "grads", "optimizer", "activations", "KV cache", "total"):
        table.add_column(col, justify="right")
    roles = memory_estimate(cfg, dims)
    for r in roles:
        table.add_row(r.role, _gib(r.weights), _gib(r.grads), _gib(r.optimizer), _gib(r.activations),
                      _gib(r.kv_cache), _gib(r.total))
    table.add_row("all", "", "", "", "", "", _gib(sum(r.total for r in roles)))
    console.print(table)
