"""The learner -> engines broadcast group built in a thread (``broadcast.Joining``): the member
keeps answering while the others are missing, and a build that fails says why to the poller."""

from __future__ import annotations

import socket
import threading
from datetime import timedelta

import pytest
import torch

from rlxf.placement import broadcast
from rlxf.placement.broadcast import Joining, Manifest
from rlxf.trainer.distributed import free_address


def test_members_building_in_threads_form_a_group_that_broadcasts(monkeypatch):
    monkeypatch.setattr(broadcast, "TIMEOUT", timedelta(seconds=20))
    host, port = free_address("127.0.0.1", hold=True)
    learner, engine = Joining(host, port, 0, 2, "gloo"), Joining(host, port, 1, 2, "gloo")
    groups = [learner.wait(20), engine.wait(20)]
    assert all(isinstance(g, broadcast.WeightGroup) for g in groups)
    weights = {"w": torch.arange(6.0).view(2, 3), "b": torch.tensor([7.0, 8.0])}
    manifest = Manifest.of(weights)
    sent = []
    sender = threading.Thread(target=lambda: sent.append(groups[0].send(weights, manifest)))
    sender.start()
    got = groups[1].receive(manifest)
    sender.join(20)
    assert sent == [8 * 4]
    assert got.keys() == weights.keys() and all(torch.equal(got[k], weights[k]) for k in weights)


def test_a_member_waiting_for_a_missing_one_answers_polls_then_raises_the_builds_error(monkeypatch):
    """Before, the actor sat inside the build until TIMEOUT; a poll now answers at once."""
    monkeypatch.setattr(broadcast, "TIMEOUT", timedelta(seconds=1))
    host, port = free_address("127.0.0.1", hold=True)
    joining = Joining(host, port, 0, 2, "gloo")   # rank 1 never comes
    assert joining.wait(0.05) is None
    with pytest.raises(Exception, match="1/2 clients joined"):   # torch's DistStoreError, as built
        joining.wait(20)


def test_the_learner_holds_the_port_it_names_for_the_group_until_its_store_listens():
    """Released, the port could go to a Ray worker starting meanwhile (they bind free ports too)."""
    pytest.importorskip("ray")
    from rlxf.placement.ray import _Learner

    host, port = _Learner.address(None)
    with socket.socket() as other, pytest.raises(OSError):
        other.bind(("", port))
    joining = Joining(host, port, 0, 1, "gloo")   # a group of one: the store listens on the held port
    assert joining.wait(20).group.size() == 1
