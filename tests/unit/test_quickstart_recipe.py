"""The quickstart's GRPO recipe trains on the hard problems with PPO-ptx on easy demonstrations,
evaluates the SFT stage's held-out problems of both kinds, and --no-remedy drops PPO-ptx."""

from __future__ import annotations

from pathlib import Path

from rlxf.cli.quickstart import _config, _no_remedy


def test_grpo_recipe_keeps_easy_problems_by_ptx_and_no_remedy_drops_it(tmp_path: Path):
    grpo = _config("grpo", tmp_path, 0, [])
    sft = _config("sft", tmp_path, 0, [])
    weights = {s.label: s.weight for s in grpo.data.sources}
    assert weights == {"hard": 1.0, "easy": 0.0}        # easy: evaluated only
    assert grpo.algorithm.ptx_coef == 1.0 and grpo.data.ptx.task_options == next(
        s for s in grpo.data.sources if s.label == "easy").task_options
    # each GRPO source has the task, options and test size of the SFT source of its name: the same
    # 500 held-out problems of each kind, never trained on by either stage
    shown = {s.label: s for s in sft.data.sources}
    for source in grpo.data.sources:
        twin = shown[source.label]
        assert (source.task, source.task_options, source.test_size) == (twin.task, twin.task_options, twin.test_size)
    assert {s.label: s.weight for s in sft.data.sources} == {"easy": 1.0, "hard": 0.02}  # hard shown rarely
    plain = _no_remedy(grpo)
    assert plain.algorithm.ptx_coef == 0.0 and plain.data.ptx is None and plain.data.sources == grpo.data.sources
