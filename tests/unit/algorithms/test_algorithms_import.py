"""`import rlxf.algorithms` imports only torch; the docs' plugin example works end to end.

Both run in a fresh interpreter: sys.modules and the registries of this test process are
shared with every other test.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]


def python(code: str, cwd: Path, extra_path: Path | None = None) -> str:
    env = dict(os.environ)
    paths = [str(REPO)] + ([str(extra_path)] if extra_path else [])
    env["PYTHONPATH"] = os.pathsep.join(paths + [env.get("PYTHONPATH", "")])
    done = subprocess.run([sys.executable, "-c", code], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout


IMPORT_PROBE = """
import json, sys
import torch
before = set(sys.modules)
import rlxf.algorithms
print(json.dumps({"new": sorted(set(sys.modules) - before), "all": sorted(sys.modules)}))
"""


def test_import_pulls_in_nothing_but_torch(tmp_path):
    found = json.loads(python(IMPORT_PROBE, tmp_path))
    stdlib = sys.stdlib_module_names
    outside = [m for m in found["new"]
               if m.split(".")[0] not in stdlib and m.split(".")[0] != "torch"
               and m != "rlxf" and not m.startswith("rlxf.algorithms")]
    assert outside == [], f"rlxf.algorithms imports more than torch and the stdlib: {outside}"
    forbidden = ("transformers", "pydantic", "yaml", "ray", "vllm", "deepspeed", "wandb", "mlflow",
                 "pandas", "scipy")
    loaded = [m for m in found["all"] if m.split(".")[0] in forbidden]
    assert loaded == [], loaded
    other_rlxf = [m for m in found["all"] if m.startswith("rlxf.") and not m.startswith("rlxf.algorithms")]
    assert other_rlxf == [], f"rlxf.algorithms must not import other rlxf layers: {other_rlxf}"
    # numpy only arrives with torch itself, never because of rlxf.algorithms
    assert not any(m.split(".")[0] == "numpy" for m in found["new"])


def _doc_blocks() -> tuple[str, str]:
    text = (REPO / "docs" / "algorithms.md").read_text()
    section = text[text.index("## Register your own"):]
    code = re.search(r"```python\n(# my_module\.py\n.*?)```", section, re.S).group(1)
    config = re.search(r"```yaml\n(.*?)```", section, re.S).group(1)
    return code, config


def test_docs_plugin_example(tmp_path):
    code, config = _doc_blocks()
    assert len(code.strip().splitlines()) <= 12  # the docs promise a short example
    plugin_dir = tmp_path / "plugins"
    plugin_dir.mkdir()
    (plugin_dir / "my_module.py").write_text(code)
    (tmp_path / "run.yaml").write_text(config)
    probe = """
import torch
from rlxf.config import load_config
from rlxf.algorithms import registry, AdvantageParams, masked_mean, masked_var
cfg = load_config("run.yaml", base={"model": {"path": "unused"}, "data": {"task": "arithmetic"}})
assert cfg.algorithm.advantage == "my_estimator", cfg.algorithm.advantage
fn = registry.get("advantage", cfg.algorithm.advantage)
rewards = torch.tensor([[0.0, 1.0], [0.0, 3.0], [2.0, 0.0]])
mask = torch.tensor([[1.0, 1.0], [1.0, 1.0], [1.0, 0.0]])
adv, returns = fn(rewards, mask, torch.tensor([0, 0, 1]), None, AdvantageParams())
assert abs(masked_mean(adv, mask).item()) < 1e-6 and abs(masked_var(adv, mask).item() - 1) < 1e-4
assert returns.tolist() == [[1.0, 1.0], [3.0, 3.0], [2.0, 0.0]]
assert "my_estimator" in registry.names("advantage")
print("ok")
"""
    assert python(probe, tmp_path, extra_path=plugin_dir).strip() == "ok"
    # without the plugin the name is rejected, and the message lists the valid names
    (tmp_path / "run.yaml").write_text(config.replace("plugins: [my_module]", "plugins: []"))
    probe = """
from rlxf.config import load_config, ConfigError
try:
    load_config("run.yaml", base={"model": {"path": "unused"}, "data": {"task": "arithmetic"}})
except ConfigError as e:
    print(e)
"""
    out = python(probe, tmp_path)
    assert "my_estimator" in out and "grpo" in out and "rloo" in out
