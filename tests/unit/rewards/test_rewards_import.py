"""`import rlxf.rewards` stays light: no web stack, no torch, no model code."""

import subprocess
import sys


def test_import_rlxf_rewards_is_light():
    code = ("import sys, rlxf, rlxf.rewards; heavy = ['fastapi', 'uvicorn', 'httpx', 'torch', 'ray', 'vllm', "
            "'math_verify', 'reasoning_gym', 'rlxf.rewards.server']; print([m for m in heavy if m in sys.modules])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
