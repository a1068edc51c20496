"""Placements, reviewed. Closing while an error is in flight: the caller sees the error that
ended the run, not a cleanup's failure, and every role is closed (and every actor killed) even
when closing another one failed. The address learner rank 0 hosts its process groups at. No
model is loaded and no Ray is started: roles and Ray's calls are stand-ins."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from rlxf.placement.base import close_all
from rlxf.placement.local import LocalPlacement


class _Closes:
    def __init__(self, log: list[str], name: str, fails: bool = False):
        self.log, self.name, self.fails = log, name, fails

    def close(self) -> None:
        self.log.append(self.name)
        if self.fails:
            raise OSError(f"{self.name} would not close")


def _local(log: list[str], *, reward_fails: bool) -> LocalPlacement:
    placement = object.__new__(LocalPlacement)
    placement.reward = _Closes(log, "reward", fails=reward_fails)
    placement._rollout = SimpleNamespace()   # nothing to close
    placement.engine = _Closes(log, "engine")
    return placement


def test_a_failing_step_and_a_failing_close_give_the_caller_the_steps_error():
    """The reward pool's close error replaced the step's, and the engine was left open."""
    log: list[str] = []
    with pytest.raises(ValueError, match="the step failed") as caught:
        with _local(log, reward_fails=True):
            raise ValueError("the step failed")
    assert log == ["reward", "engine"]
    assert any("reward would not close" in note for note in caught.value.__notes__)


def test_a_failing_close_alone_is_raised_after_closing_the_rest():
    log: list[str] = []
    with pytest.raises(OSError, match="reward would not close"):
        with _local(log, reward_fails=False) as placement:
            placement.reward.fails = True
    assert log == ["reward", "engine"]


def test_close_all_runs_every_closer_and_raises_the_first_failure_noting_the_rest():
    log: list[str] = []
    a, b, c = _Closes(log, "a", fails=True), _Closes(log, "b"), _Closes(log, "c", fails=True)
    with pytest.raises(OSError, match="a would not close") as caught:
        close_all([a.close, b.close, c.close])
    assert log == ["a", "b", "c"]
    assert caught.value.__notes__ == ["closing failed too: OSError: c would not close"]


# -- the Ray placement: stand-in actor handles, ray.kill / ray.shutdown recorded -----------------


class _Remote:
    """A stand-in actor method: ``.remote()`` runs it at once (``ray.get`` is the identity)."""

    def __init__(self, fn):
        self.fn = fn

    def remote(self, *args):
        return self.fn(*args)


@pytest.fixture
def ray():
    return pytest.importorskip("ray")


@pytest.fixture
def ray_calls(ray, monkeypatch):
    """ray.get, ray.kill and ray.shutdown stand-ins, recording what they were asked."""
    calls: list[str] = []
    monkeypatch.setattr(ray, "get", lambda ref, **kwargs: ref)
    monkeypatch.setattr(ray, "kill", lambda handle: calls.append(f"kill {handle.name}"))
    monkeypatch.setattr(ray, "shutdown", lambda: calls.append("shutdown"))
    return calls


def _ray_placement(calls: list[str], reward_fails: bool):
    from rlxf.placement.ray import RayPlacement

    placement = object.__new__(RayPlacement)
    placement.cfg = SimpleNamespace(ray=SimpleNamespace(mode="disaggregated"))
    placement._started_ray = True
    placement._learners = [SimpleNamespace(name="learner")]
    placement._engines = [SimpleNamespace(name=f"engine{i}", close=_Remote(lambda i=i: calls.append(f"close engine{i}")))
                          for i in range(2)]
    placement._scorers = []
    placement.reward = _Closes(calls, "close reward", fails=reward_fails)
    return placement


def test_ray_a_failing_step_and_a_failing_close_give_the_caller_the_steps_error(ray_calls):
    """The reward's close error replaced the step's, and the engines' env tools were left open."""
    with pytest.raises(ValueError, match="the step failed") as caught:
        with _ray_placement(ray_calls, reward_fails=True):
            raise ValueError("the step failed")
    assert ray_calls == ["close reward", "close engine0", "close engine1", "kill learner", "kill engine0",
                         "kill engine1", "shutdown"]
    assert any("close reward would not close" in note for note in caught.value.__notes__)


def test_ray_a_kill_that_fails_still_stops_the_rest_and_ray(ray, ray_calls, monkeypatch):
    def kill(handle):
        ray_calls.append(f"kill {handle.name}")
        if handle.name == "learner":
            raise RuntimeError("the GCS is gone")

    monkeypatch.setattr(ray, "kill", kill)
    with pytest.raises(RuntimeError, match="the GCS is gone"):
        _ray_placement(ray_calls, reward_fails=False).close()
    assert ray_calls[-3:] == ["kill engine0", "kill engine1", "shutdown"]


def test_ray_a_start_that_fails_raises_its_error_even_when_stopping_the_actors_fails(ray, ray_calls, monkeypatch):
    """A learner that could not start, then a kill that failed: the user saw the kill's error."""
    from rlxf.config import Config
    from rlxf.errors import UserInputError
    from rlxf.placement.ray import RayPlacement

    def kill(handle):
        raise RuntimeError("the GCS is gone")

    def start_fails(self, refs):
        raise UserInputError("model.path: no such model")

    learner = SimpleNamespace(name="learner", start=_Remote(lambda *args: "a started ref"))
    monkeypatch.setattr(ray, "is_initialized", lambda: True)
    monkeypatch.setattr(ray, "kill", kill)
    monkeypatch.setattr("rlxf.models.load_tokenizer", lambda *args, **kwargs: "tokenizer")
    monkeypatch.setattr(RayPlacement, "_new_learner", lambda self, cls: learner)
    monkeypatch.setattr(RayPlacement, "_wait_placed", lambda self, role, handles: None)
    monkeypatch.setattr(RayPlacement, "_gather", start_fails)
    cfg = Config.model_validate({"model": {"path": "unused"}, "run": {"placement": "ray"},
                                 "data": {"task": "arithmetic"}})
    with pytest.raises(UserInputError, match="no such model") as caught:
        RayPlacement(cfg)
    assert any("the GCS is gone" in note for note in caught.value.__notes__)


def test_ray_learner_rank_0_advertises_the_address_ray_knows_its_node_by(ray, monkeypatch):
    """Rank 0 advertised its host name resolved: a loopback address where /etc/hosts maps the
    name to 127.0.1.1 (Debian's default), which learners and engines on other nodes cannot reach."""
    import socket

    from rlxf.placement.ray import _Rank

    monkeypatch.setattr(socket, "gethostbyname", lambda name: "127.0.1.1")
    monkeypatch.setattr(ray.util, "get_node_ip_address", lambda: "10.1.2.3")
    host, port = _Rank.address(None)
    assert host == "10.1.2.3" and 0 < port < 65536


def test_ray_that_cannot_write_its_files_is_told_by_name(monkeypatch):
    """ray.init with an unwritable HOME ends in a bare FileNotFoundError for ~/.ray: the run
    says what Ray needs written and the ways out."""
    import ray

    from rlxf.config import Config
    from rlxf.errors import UserInputError
    from rlxf.placement.ray import RayPlacement

    def init(**kwargs):
        raise FileNotFoundError(2, "No such file or directory", "/proc/1/.ray")

    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray, "init", init)
    monkeypatch.setenv("HOME", "/proc/1")
    cfg = Config.model_validate({"model": {"path": "unused"}, "run": {"placement": "ray"},
                                 "data": {"task": "arithmetic"}})
    with pytest.raises(UserInputError) as caught:
        RayPlacement(cfg)
    text = str(caught.value)
    assert "Ray could not start here (FileNotFoundError" in text and "/proc/1/.ray" in text
    assert "HOME='/proc/1'" in text and "RAY_AUTH_MODE=disabled" in text and "run.placement=local" in text


def test_a_replaced_actor_is_killed_first(monkeypatch):
    """An engine only unreachable (ActorUnavailableError) may still be alive, holding its CPUs
    or GPU: the placement kills it before starting the new one, so the new one can be placed."""
    import ray
    from ray.exceptions import ActorUnavailableError

    from rlxf.config import Config
    from rlxf.placement.ray import RayPlacement

    killed = []
    monkeypatch.setattr(ray, "kill", lambda actor, no_restart=False: killed.append((actor, no_restart)))
    placement = RayPlacement.__new__(RayPlacement)
    placement.cfg = Config.model_validate({"model": {"path": "unused"}, "run": {"placement": "ray"},
                                           "data": {"task": "arithmetic"}})
    placement.restarts, placement.restarts_by_role = 0, {"engine": 0, "reward": 0}
    placement._engines, placement._scorers = ["old engine"], ["old scorer"]
    monkeypatch.setattr(RayPlacement, "_new_engine", lambda self: "new engine")
    monkeypatch.setattr(RayPlacement, "_new_scorer", lambda self: "new scorer")
    placement._replace_actor("engine", 0, ActorUnavailableError("unreachable", b"\0" * 16))
    placement._replace_actor("reward", 0, ActorUnavailableError("unreachable", b"\0" * 16))
    assert killed == [("old engine", True), ("old scorer", True)]
    assert placement._engines == ["new engine"] and placement._scorers == ["new scorer"]
