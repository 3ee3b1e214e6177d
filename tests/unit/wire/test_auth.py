"""SCRAM-SHA-256 server side against the RFC 7677 test vector, and the failure cases."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest

from streambed.server.wire.auth import (
    AuthFailed,
    ScramExchange,
    UsersFileError,
    UserStore,
    make_verifier,
    parse_verifier,
)

# RFC 7677, section 3: user "user", password "pencil".
CLIENT_NONCE = "rOprNGfwEbeRWgbNEkqO"
SERVER_NONCE = "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0"
SALT = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")
CLIENT_FIRST = f"n,,n=user,r={CLIENT_NONCE}".encode()
SERVER_FIRST = f"r={CLIENT_NONCE}{SERVER_NONCE},s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096".encode()
CLIENT_FINAL = (
    f"c=biws,r={CLIENT_NONCE}{SERVER_NONCE},p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="
).encode()
SERVER_FINAL = b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="


def _exchange(password: str = "pencil", known: bool = True) -> ScramExchange:
    return ScramExchange(make_verifier(password, SALT, 4096), known_user=known, nonce=SERVER_NONCE)


def test_rfc7677_vector() -> None:
    scram = _exchange()
    assert scram.first(CLIENT_FIRST) == SERVER_FIRST
    assert scram.final(CLIENT_FINAL) == SERVER_FINAL


def test_wrong_password_fails() -> None:
    scram = _exchange("not pencil")
    scram.first(CLIENT_FIRST)
    with pytest.raises(AuthFailed):
        scram.final(CLIENT_FINAL)


def test_unknown_user_fails_at_the_same_step_even_with_the_right_proof() -> None:
    scram = _exchange(known=False)
    assert scram.first(CLIENT_FIRST) == SERVER_FIRST
    with pytest.raises(AuthFailed):
        scram.final(CLIENT_FINAL)


@pytest.mark.parametrize(
    "client_final",
    [
        CLIENT_FINAL.replace(b"c=biws", b"c=eSws"),  # channel binding flag changed
        CLIENT_FINAL.replace(CLIENT_NONCE.encode(), b"x" * len(CLIENT_NONCE)),  # nonce
        CLIENT_FINAL.split(b",p=")[0],  # no proof
        CLIENT_FINAL[:-8] + b"!!!!!!!=",  # proof is not base64
        b"\xff\xfe",
    ],
)
def test_tampered_final_message_fails(client_final: bytes) -> None:
    scram = _exchange()
    scram.first(CLIENT_FIRST)
    with pytest.raises(AuthFailed):
        scram.final(client_final)


@pytest.mark.parametrize("client_first", [b"p=tls-server-end-point,,n=,r=abc", b"n,,n=user", b""])
def test_bad_first_message_fails(client_first: bytes) -> None:
    with pytest.raises(AuthFailed):
        _exchange().first(client_first)


def test_verifier_text_round_trip_and_pg_format() -> None:
    verifier = make_verifier("pencil", SALT, 4096)
    text = str(verifier)
    assert text.startswith("SCRAM-SHA-256$4096:W22ZaJ0SNY7soEsUEjb6gQ==$")
    assert parse_verifier(text) == verifier
    with pytest.raises(UsersFileError):
        parse_verifier("md5abcdef")


def test_user_store_from_passwords_and_file(tmp_path: Path) -> None:
    store = UserStore.from_passwords("alice:secret, bob:pa:ss")
    assert store.verifier("alice") is not None and store.verifier("bob") is not None
    path = tmp_path / "users"
    path.write_text(f"# comment\ncarol:{make_verifier('x')}\n")
    merged = store.merged(UserStore.from_file(path))
    assert len(merged) == 3
    assert merged.mock_verifier("nobody") == merged.mock_verifier("nobody")
    path.write_text("carol:plaintext\n")
    with pytest.raises(UsersFileError, match=":1:"):
        UserStore.from_file(path)
