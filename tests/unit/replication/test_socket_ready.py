"""socket_ready: the replication stream's wait for its socket, at any descriptor number."""

from __future__ import annotations

import os
import resource
import socket
from collections.abc import Iterator

import pytest

from streambed.source.connection import socket_ready

HIGH_FD = 1500  # select() refuses descriptors from 1024 (FD_SETSIZE)


@pytest.fixture
def pair() -> Iterator[tuple[socket.socket, socket.socket]]:
    left, right = socket.socketpair()
    yield left, right
    left.close()
    right.close()


def test_readable_only_once_data_arrives(pair: tuple[socket.socket, socket.socket]) -> None:
    left, right = pair
    assert not socket_ready(left.fileno(), 0.05)
    right.send(b"x")
    assert socket_ready(left.fileno(), 1.0)
    assert socket_ready(left.fileno(), 0.0)  # no wait at all still sees it
    assert socket_ready(left.fileno(), -1.0)  # a deadline already passed: looked at once


def test_writable(pair: tuple[socket.socket, socket.socket]) -> None:
    assert socket_ready(pair[0].fileno(), 0.0, write=True)


def test_a_closed_peer_counts_as_ready(pair: tuple[socket.socket, socket.socket]) -> None:
    left, right = pair
    right.close()
    assert socket_ready(left.fileno(), 1.0)  # the read that follows reports the loss


def test_descriptor_above_select_limit(pair: tuple[socket.socket, socket.socket]) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft <= HIGH_FD:
        if hard != resource.RLIM_INFINITY and hard <= HIGH_FD:
            pytest.fail(f"RLIMIT_NOFILE hard limit {hard} is below {HIGH_FD}: raise it to test")
        resource.setrlimit(resource.RLIMIT_NOFILE, (HIGH_FD + 1, hard))
    left, right = pair
    high = os.dup2(left.fileno(), HIGH_FD)
    try:
        assert not socket_ready(high, 0.05)
        right.send(b"x")
        assert socket_ready(high, 1.0)
    finally:
        os.close(high)
        if soft <= HIGH_FD:
            resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
