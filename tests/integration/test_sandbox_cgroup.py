"""The sandbox's control groups survive what killed servers leave behind.

A server named its base group after its pid alone; a group a killed server could not remove
kept that name, and a later server given the same pid found it taken and ran without control
groups, so memory hoarded in memfds and shared memory went unbounded (CI, 1 Dec 2026: two
hacks scored 1.0). Here the host's own groups are made and removed, so these tests need the
cgroup access the sandbox itself uses, and are skipped without it.
"""

from __future__ import annotations

import os

import pytest

from rlxf.rewards.sandbox import _cgroup
from rlxf.rewards.sandbox._cgroup import Cgroups, CgroupUnavailable, base_name


def _open(name: str) -> Cgroups:
    try:
        return Cgroups(name)
    except CgroupUnavailable as e:
        if "File exists" in str(e):
            raise
        pytest.skip(f"no usable control groups here: {e}")


def test_base_names_never_repeat_within_one_process():
    names = {base_name() for _ in range(100)}
    assert len(names) == 100 and all(n.startswith(f"rlxf-sandbox-{os.getpid()}-") for n in names)


def test_a_name_left_behind_does_not_take_the_next_servers_groups():
    stale = _open(base_name())        # a server killed before it could remove its groups
    try:
        fresh = _open(base_name())    # the next server in this process: a name of its own
        assert fresh.kind == stale.kind and set(fresh.paths).isdisjoint(stale.paths)
        fresh.remove_base()
    finally:
        stale.remove_base()


def _no_v2(self, mounts, own) -> None:
    raise OSError("v2 off for this test")


def test_a_failed_open_leaves_no_group_behind(monkeypatch):
    probe = _open(base_name())
    kind, paths = probe.kind, list(probe.paths)
    probe.remove_base()
    if kind != "v1" or len(paths) < 2:
        pytest.skip("one hierarchy (cgroup v2): nothing is made before the last step can fail")
    # the second controller's group exists already: the first one made must be removed again
    name = base_name()
    taken = os.path.join(os.path.dirname(paths[1]), name)
    os.mkdir(taken)
    try:
        monkeypatch.setattr(_cgroup.Cgroups, "_open_v2", _no_v2)
        with pytest.raises(CgroupUnavailable, match="File exists"):
            Cgroups(name)
        assert not os.path.exists(os.path.join(os.path.dirname(paths[0]), name))
    finally:
        os.rmdir(taken)
