"""streambed's Spark daemon: pyspark's worker loop, a closed connection ends a worker quietly."""

from __future__ import annotations

import socket

import pytest

from streambed.spark import daemon as spark_daemon


@pytest.mark.parametrize("error", [BrokenPipeError, ConnectionResetError])
def test_a_connection_the_jvm_closed_ends_the_worker_with_code_1(
    monkeypatch: pytest.MonkeyPatch, error: type[OSError]
) -> None:
    def closed(sock: socket.socket, authenticated: bool) -> int:
        raise error(32, "Broken pipe")

    monkeypatch.setattr(spark_daemon, "_pyspark_worker", closed)
    with socket.socket() as sock:
        assert spark_daemon.worker(sock, True) == 1


def test_other_outcomes_are_pysparks(monkeypatch: pytest.MonkeyPatch) -> None:
    codes = iter([0, 7])
    monkeypatch.setattr(spark_daemon, "_pyspark_worker", lambda sock, auth: next(codes))
    with socket.socket() as sock:
        assert spark_daemon.worker(sock, False) == 0
        assert spark_daemon.worker(sock, False) == 7

    def failing(sock: socket.socket, authenticated: bool) -> int:
        raise ValueError("a bug in a worker")

    monkeypatch.setattr(spark_daemon, "_pyspark_worker", failing)
    with socket.socket() as sock, pytest.raises(ValueError, match="a bug in a worker"):
        spark_daemon.worker(sock, True)
