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
    easy = next(s for s in grpo.data.sources if s.label == "easy")
    # the same task, options and test size as SFT's data: the same 500 held-out easy problems
    assert (easy.task, easy.task_options, easy.test_size) == (sft.data.task, sft.data.task_options, sft.data.test_size)
    assert [s.label for s in _hard_only(grpo).data.sources] == ["hard"]
