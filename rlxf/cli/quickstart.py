"""`rlxf quickstart [OUT]`"""

from __future__ import annotations

from pathlib import Path


def run(out: Path, *, seed: int, overwrite: bool, rl_steps: int | None, sft_steps: int | None,
        preset: str = "tiny") -> None:
    from rlxf.trainer.quickstart import format_table, run_quickstart

    results = run_quickstart(out, seed=seed, preset=preset, overwrite=overwrite, rl_steps=rl_steps,
                             sft_steps=sft_steps)
    print()
    print(format_table(results))
    print(f"\nruns, metrics and models: {out}/   report: {out / 'grpo' / 'report.html'}")
