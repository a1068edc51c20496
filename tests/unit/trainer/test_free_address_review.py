"""free_address: the port chosen for the learners' store is still free when the store binds it."""

from __future__ import annotations

import errno
import socket
import threading
from datetime import timedelta

import pytest

from rlxf.trainer.distributed import free_address, tcp_store


def test_a_held_port_cannot_be_taken_before_rank_0s_store_listens_on_it():
    """Released, the port went to whoever bound it first: the store then failed with EADDRINUSE."""
    host, port = free_address("127.0.0.1", hold=True)
    other = socket.socket()
    with pytest.raises(OSError) as refused:   # another process picking the same port
        other.bind(("", port))
    other.close()
    assert refused.value.errno == errno.EADDRINUSE
    got = {}

    def rank_1():
        got["key"] = tcp_store(host, port, 2, is_master=False, timeout=timedelta(seconds=20)).get("key")

    client = threading.Thread(target=rank_1)
    client.start()
    store = tcp_store(host, port, 2, is_master=True, timeout=timedelta(seconds=20))
    store.set("key", "value")
    client.join(timeout=20)
    assert got == {"key": b"value"} and store.port == port


def test_a_released_port_is_free_for_the_process_that_hosts_the_store():
    """Handed to another process (the default), the port is not kept bound here."""
    _, port = free_address("127.0.0.1")
    with socket.socket() as s:
        s.bind(("", port))
