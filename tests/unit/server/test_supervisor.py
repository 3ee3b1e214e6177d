"""The query process's restart backoff and how an exit is described
(`streambed.server.supervisor`); the processes themselves are tested in
tests/integration/gateway/test_isolation.py."""

from __future__ import annotations

import signal
import socket
from pathlib import Path

import pytest

from streambed.core.config import Settings
from streambed.core.errors import ConfigError
from streambed.server.supervisor import RestartBackoff, exit_fields, start_query_process


def test_the_delay_doubles_at_each_early_exit_up_to_the_cap() -> None:
    backoff = RestartBackoff(first=0.5, cap=30.0, steady=60.0)
    delays = [backoff.after_exit(uptime=1.0) for _ in range(9)]
    assert delays == [0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 30.0, 30.0, 30.0]
    assert backoff.failures == 9


def test_capped_only_once_processes_keep_exiting_at_the_cap() -> None:
    backoff = RestartBackoff(first=1.0, cap=4.0, steady=60.0)
    seen = []
    for _ in range(4):
        backoff.after_exit(uptime=0.1)
        seen.append(backoff.capped)
    assert seen == [False, False, True, True]
    single = RestartBackoff(first=4.0, cap=4.0)
    single.after_exit(uptime=0.1)
    assert not single.capped  # one exit is not "keeps exiting"


def test_a_process_that_served_steadily_starts_again_at_the_first_delay() -> None:
    backoff = RestartBackoff(first=0.5, cap=30.0, steady=60.0)
    for _ in range(8):
        backoff.after_exit(uptime=2.0)
    capped_before = backoff.capped
    assert backoff.after_exit(uptime=60.0) == 0.5
    assert capped_before and not backoff.capped
    assert backoff.failures == 1
    assert backoff.after_exit(uptime=59.9) == 1.0  # early again: doubling resumes


def test_an_exit_is_described_by_its_code_or_its_signal() -> None:
    assert exit_fields(-signal.SIGSEGV) == {"signal": "sigsegv"}
    assert exit_fields(-signal.SIGKILL) == {"signal": "sigkill"}
    assert exit_fields(0) == {"exit_code": 0}
    assert exit_fields(2) == {"exit_code": 2}
    assert exit_fields(None) == {"exit_code": "none"}
    assert exit_fields(-200) == {"signal": 200}


def test_a_certificate_that_cannot_be_loaded_stops_the_start_before_the_port_is_bound(
    tmp_path: Path,
) -> None:
    (tmp_path / "cert.pem").write_text("not a certificate\n")
    (tmp_path / "key.pem").write_text("not a key\n")
    with socket.create_server(("127.0.0.1", 0)) as probe:
        port = probe.getsockname()[1]
    settings = Settings.from_env(
        {
            "STREAMBED_SOURCE_URL": "postgresql://nobody@127.0.0.1:1/none",
            "STREAMBED_DATA_DIR": str(tmp_path / "data"),
            "STREAMBED_QUERY_LISTEN": f"127.0.0.1:{port}",
            "STREAMBED_QUERY_TLS_CERT": str(tmp_path / "cert.pem"),
            "STREAMBED_QUERY_TLS_KEY": str(tmp_path / "key.pem"),
        }
    )
    with pytest.raises(ConfigError, match="STREAMBED_QUERY_TLS_CERT"):
        start_query_process(settings)
    with socket.create_server(("127.0.0.1", port)):  # left free: no process was started
        pass
