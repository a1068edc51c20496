"""The Ray placement under a scheduler's SIGTERM to the whole process group, and its cleanup
when a step and a close both fail. Each test starts (and stops) its own Ray: what is checked is
the Ray that ``RayPlacement`` starts."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

ray = pytest.importorskip("ray")
psutil = pytest.importorskip("psutil")

# A driver in a session of its own: RayPlacement starts Ray, then (in place of loading the
# tokenizer) starts an actor, waits for the group SIGTERM the test sends and for the test's go,
# and checks the actor still answers (through the object store, which the raylet holds);
# raising then makes the placement stop its actors and its Ray.
_DRIVER = r"""
import os, signal, sys, time
import ray
import rlxf.models
from rlxf.config import Config
from rlxf.placement.ray import RayPlacement

got = []

@ray.remote(num_cpus=0)
class Pid:
    def pid(self, array):
        return os.getpid(), len(array)

class Done(Exception):
    pass

def started(*args, **kwargs):
    signal.signal(signal.SIGTERM, lambda s, f: got.append(s))   # the driver's stop, as the loop's StopRequest
    actor = Pid.remote()
    pid = ray.get(actor.pid.remote(b""), timeout=60)[0]
    print("ready", flush=True)
    sys.stdin.readline()
    big = ray.put(bytes(1 << 20))   # in the raylet's object store, not inline
    print("signalled", got == [signal.SIGTERM], "answers", ray.get(actor.pid.remote(big), timeout=20) == (pid, 1 << 20),
          flush=True)
    raise Done

rlxf.models.load_tokenizer = started
cfg = Config.model_validate({"model": {"path": "unused"}, "run": {"placement": "ray"}, "data": {"task": "arithmetic"}})
try:
    RayPlacement(cfg)
except Done:
    print("closed", flush=True)
"""


def _session(sid: int) -> list[psutil.Process]:
    out = []
    for p in psutil.process_iter():
        try:
            if os.getsid(p.pid) == sid and p.status() != psutil.STATUS_ZOMBIE:
                out.append(p)
        except (OSError, psutil.Error):
            pass
    return out


def test_a_group_sigterm_leaves_the_actors_to_the_driver_which_then_stops_them():
    """Ray's GCS and raylet share the driver's process group, so a scheduler's SIGTERM to the
    group killed them, and with them every actor: the run could not finish its step or checkpoint
    it, and the driver exited 1 without a word. The driver alone now handles it."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "RAY_num_cpus": "1"}
    proc = subprocess.Popen([sys.executable, "-c", _DRIVER], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env, start_new_session=True)
    try:
        assert proc.stdout.readline().strip() == "ready", proc.communicate(timeout=60)
        ray_processes = [p for p in _session(proc.pid) if p.pid != proc.pid]
        names = {p.pid: p.name() for p in ray_processes}
        assert "raylet" in names.values()
        os.killpg(proc.pid, signal.SIGTERM)
        gone, _ = psutil.wait_procs(ray_processes, timeout=3)
        assert not gone, f"the group SIGTERM ended {[names[p.pid] for p in gone]}"
        out, err = proc.communicate("go\n", timeout=90)
        assert "signalled True answers True" in out and "closed" in out, err[-3000:]
        assert proc.returncode == 0, err[-3000:]
        deadline = time.monotonic() + 10   # what ray.shutdown killed is reaped by its init
        while (left := _session(proc.pid)) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not left, [p.name() for p in left]
    finally:
        for p in _session(proc.pid):
            p.kill()
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
