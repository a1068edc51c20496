"""SIGKILL while ``keep_last`` deletes an old checkpoint: --resume continues from the newest
complete one, and the half-deleted checkpoint does not outlive the next save."""

from __future__ import annotations

import subprocess
import sys

from rl_helpers import HERE, REPO, metrics, write_config

from rlxf.cli.main import main

KILL_DURING_PRUNE = """
import os, shutil, signal, sys
from pathlib import Path
real_rmtree = shutil.rmtree
def killed_mid_delete(path, *args, **kwargs):
    # step_1 is being pruned after step_2's save: one file gone (rmtree's first), then the kill
    path = Path(path)
    if "step_1" in path.name and not path.name.startswith(".tmp-"):
        (path / "trainer_state.pt").unlink()
        os.kill(os.getpid(), signal.SIGKILL)
    real_rmtree(path, *args, **kwargs)
shutil.rmtree = killed_mid_delete
from rlxf.cli.main import main
sys.exit(main(sys.argv[1:]))
"""


def test_kill_9_while_pruning_a_checkpoint_then_resume(tmp_path, nano_model_dir):
    cfg = write_config(tmp_path, nano_model_dir, train={"steps": 3}, checkpoint={"every": 1, "keep_last": 1})
    env = {"PYTHONPATH": str(HERE), "PATH": "/usr/bin:/bin", "OMP_NUM_THREADS": "1"}
    r = subprocess.run([sys.executable, "-c", KILL_DURING_PRUNE, "train", str(cfg)], cwd=REPO, env=env,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == -9, r.stderr
    ckpts = tmp_path / "runs/t/checkpoints"
    broken = [p.name for p in ckpts.glob("step_*") if not (p / "trainer_state.pt").exists()]
    assert broken == [], f"a kill while pruning left a half-deleted checkpoint: {broken}"
    assert main(["train", str(cfg), "--resume"]) == 0   # in this process: the killed one is gone already
    assert sorted(p.name for p in ckpts.iterdir()) == ["step_3"]
    assert [m["step"] for m in metrics(tmp_path / "runs/t")] == [1, 2, 3]
