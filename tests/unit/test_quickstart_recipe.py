"""The quickstart's GRPO recipe is a hard/easy mixture whose easy held-out problems are the SFT
stage's, and --no-remedy keeps the hard source alone."""

from __future__ import annotations

from pathlib import Path

from rlxf.cli.quickstart import _config, _hard_only


def test_grpo_recipe_mixes_easy_problems_and_no_remedy_drops_them(tmp_path: Path):
    grpo = _config("grpo", tmp_path, 0, [])
    sft = _config("sft", tmp_path, 0, [])
    weights = {s.label: s.weight for s in grpo.data.sources}
    assert weights == {"hard": 3.0, "easy": 1.0}
    # each GRPO source has the task, options and test size of the SFT source of its name: the same
    # 500 held-out problems of each kind, never trained on by either stage
    shown = {s.label: s for s in sft.data.sources}
    for source in grpo.data.sources:
        twin = shown[source.label]
        assert (source.task, source.task_options, source.test_size) == (twin.task, twin.task_options, twin.test_size)
    assert {s.label: s.weight for s in sft.data.sources} == {"easy": 1.0, "hard": 0.02}  # hard shown rarely
    assert [s.label for s in _hard_only(grpo).data.sources] == ["hard"]
