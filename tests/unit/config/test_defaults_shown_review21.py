"""What the config tools print of a list of sections: `rlxf config-docs` gives reward.verifiers'
real default (one math verifier, not an empty list), and `rlxf explain`'s "fields that differ
from the defaults" keeps each verifier's `type`, so it reads back as the same config."""

from __future__ import annotations

import yaml

from rlxf.cli.main import main
from rlxf.config import Config

CONFIG = """\
model: {path: /nonexistent/model}
data:
  sources:
  - {task: arithmetic, name: a, verifiers: [{type: exact, weight: 2}]}
  - {task: arithmetic, name: b}
reward:
  verifiers: [{type: math, weight: 0.5}, {type: format, weight: 0.1, required_tags: [answer]}]
"""


def test_config_docs_shows_the_verifier_a_config_gets_by_default(capsys):
    assert main(["config-docs", "reward"]) == 0
    [line] = [line for line in capsys.readouterr().out.splitlines() if line.startswith("  reward.verifiers:")]
    assert line.endswith("= [{type: math}]")
    assert [v.type for v in Config.model_validate({"model": {"path": "m"}, "data": {"task": "arithmetic"}}).reward.verifiers] == ["math"]


def test_explains_changed_fields_read_back_as_the_same_config(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "300")
    path = tmp_path / "config.yaml"
    path.write_text(CONFIG)
    assert main(["explain", str(path)]) == 0
    out = capsys.readouterr().out
    body = out.split("fields that differ from the defaults", 1)[1].split("\n", 1)[1]
    shown = yaml.safe_load(body.split("\n─", 1)[0].split("\n━", 1)[0].rsplit("\n\n", 1)[0])
    assert [v["type"] for v in shown["reward"]["verifiers"]] == ["math", "format"]
    assert shown["data"]["sources"][0]["verifiers"] == [{"type": "exact", "weight": 2.0}]
    assert Config.model_validate(shown) == Config.model_validate(yaml.safe_load(CONFIG))


def test_a_missing_model_argument_is_not_told_to_set_a_config_field(capsys):
    # `rlxf generate MODEL`: the model is its argument; there is no model.path to set
    assert main(["generate", "runs/never-run", "hi"]) != 0
    err = capsys.readouterr().err
    assert "model.path" not in err and "or give a trained causal LM directory or hub id instead" in err
