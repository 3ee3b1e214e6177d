"""The query address is checked before anything slow starts: a clear error for each cause."""

from __future__ import annotations

import socket

import pytest

from streambed.core.errors import ConfigError, Kind
from streambed.core.listen import METRICS, check_listen, listen


def test_an_address_in_use_says_which_and_what_to_do() -> None:
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        with pytest.raises(ConfigError) as raised:
            check_listen("127.0.0.1", port)
    message = str(raised.value)
    assert raised.value.kind is Kind.CONFIG
    assert message.startswith(f"STREAMBED_QUERY_LISTEN=127.0.0.1:{port}: ")
    assert "(Address already in use)" in message
    assert "another streambed?" in message and "STREAMBED_QUERY_LISTEN= (empty)" in message


def test_an_address_of_another_machine_is_refused_with_its_reason() -> None:
    with pytest.raises(ConfigError) as raised:
        check_listen("192.0.2.1", 5433)  # TEST-NET-1: never an address of this machine
    message = str(raised.value)
    assert "(Cannot assign requested address)" in message
    assert "use an address of this machine" in message


def test_a_free_address_is_left_free_for_the_server() -> None:
    with socket.create_server(("127.0.0.1", 0)) as probe:
        port = probe.getsockname()[1]
    check_listen("127.0.0.1", port)
    with listen("127.0.0.1", port) as server:
        assert server.getsockname() == ("127.0.0.1", port)


def test_the_metrics_port_in_use_gives_the_same_error_naming_its_own_setting() -> None:
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        with pytest.raises(ConfigError) as raised:
            check_listen("127.0.0.1", port, METRICS)
    message = str(raised.value)
    assert message == (
        f"STREAMBED_METRICS_LISTEN=127.0.0.1:{port}: the metrics endpoint cannot listen there "
        "(Address already in use); another process listens there (another streambed?): stop "
        "it or choose a free port, or set STREAMBED_METRICS_LISTEN= (empty) to run without "
        "the metrics endpoint"
    )
