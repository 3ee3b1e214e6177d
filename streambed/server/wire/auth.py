"""SCRAM-SHA-256 password authentication, server side (RFC 5802 / RFC 7677), as Postgres does it.

Users come from `STREAMBED_QUERY_USERS` ("user:password,...", verifiers are derived at start
with a random salt) or from `STREAMBED_QUERY_USERS_FILE` (lines "user:SCRAM-SHA-256$<iterations>:
<salt>$<StoredKey>:<ServerKey>", the format of `pg_authid.rolpassword`; `make_verifier` or
`python -m streambed.server.wire.auth USER` prints one). Passwords are never stored or logged.

An unknown user runs the same exchange against a made-up verifier and fails at the same step
with the same error as a wrong password, so the answer does not reveal which users exist.
"""

from __future__ import annotations

import base64
import getpass
import hashlib
import hmac
import os
import secrets
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

MECHANISM = "SCRAM-SHA-256"
DEFAULT_ITERATIONS = 4096


class AuthFailed(Exception):
    """Authentication failed. The message is the same for every cause (SQLSTATE 28P01)."""

    sqlstate = "28P01"


class UsersFileError(ValueError):
    """A users file line is not "user:SCRAM-SHA-256$..."."""


@dataclass(frozen=True)
class ScramVerifier:
    iterations: int
    salt: bytes
    stored_key: bytes
    server_key: bytes

    def __str__(self) -> str:
        b64 = _b64
        return (
            f"{MECHANISM}${self.iterations}:{b64(self.salt)}"
            f"${b64(self.stored_key)}:{b64(self.server_key)}"
        )


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _hmac(key: bytes, msg: bytes) -> bytes:
    return hmac.digest(key, msg, "sha256")


def _sha256(data: bytes) -> bytes:
    return hashlib.sha256(data).digest()


def make_verifier(
    password: str, salt: bytes | None = None, iterations: int = DEFAULT_ITERATIONS
) -> ScramVerifier:
    """Derive the stored verifier for a password (Postgres skips SASLprep for ASCII; so do we)."""
    salt = salt if salt is not None else secrets.token_bytes(16)
    salted = hashlib.pbkdf2_hmac("sha256", password.encode("utf-8"), salt, iterations)
    client_key = _hmac(salted, b"Client Key")
    return ScramVerifier(iterations, salt, _sha256(client_key), _hmac(salted, b"Server Key"))


def parse_verifier(text: str) -> ScramVerifier:
    try:
        mechanism, params, keys = text.strip().split("$")
        iterations, salt = params.split(":")
        stored, server = keys.split(":")
        if mechanism != MECHANISM:
            raise ValueError(mechanism)
        return ScramVerifier(
            int(iterations),
            base64.b64decode(salt, validate=True),
            base64.b64decode(stored, validate=True),
            base64.b64decode(server, validate=True),
        )
    except ValueError as e:
        raise UsersFileError(
            f"not a {MECHANISM} verifier; expected "
            f"{MECHANISM}$<iterations>:<salt>$<stored>:<server>"
        ) from e


class UserStore:
    """Users and their verifiers. Empty means authentication is off (trust)."""

    def __init__(self, verifiers: Mapping[str, ScramVerifier]) -> None:
        self._verifiers = dict(verifiers)
        self._secret = secrets.token_bytes(32)

    @classmethod
    def from_passwords(cls, spec: str) -> UserStore:
        """From "user:password,user2:password2"."""
        users: dict[str, ScramVerifier] = {}
        for item in spec.split(","):
            if not item.strip():
                continue
            user, sep, password = item.partition(":")
            if not sep or not user.strip():
                raise UsersFileError("expected user:password pairs separated by commas")
            users[user.strip()] = make_verifier(password)
        return cls(users)

    @classmethod
    def from_file(cls, path: Path) -> UserStore:
        users: dict[str, ScramVerifier] = {}
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if not line.strip() or line.lstrip().startswith("#"):
                continue
            user, sep, verifier = line.partition(":")
            if not sep or not user.strip():
                raise UsersFileError(f"{path}:{number}: expected user:{MECHANISM}$...")
            try:
                users[user.strip()] = parse_verifier(verifier)
            except UsersFileError as e:
                raise UsersFileError(f"{path}:{number}: {e}") from e
        return cls(users)

    def merged(self, other: UserStore) -> UserStore:
        return UserStore({**self._verifiers, **other._verifiers})

    @property
    def enabled(self) -> bool:
        return bool(self._verifiers)

    def __len__(self) -> int:
        return len(self._verifiers)

    def verifier(self, user: str) -> ScramVerifier | None:
        return self._verifiers.get(user)

    def mock_verifier(self, user: str) -> ScramVerifier:
        """A stable fake verifier for an unknown user: same salt on every attempt."""
        salt = _hmac(self._secret, b"salt:" + user.encode("utf-8"))[:16]
        key = _hmac(self._secret, b"key:" + user.encode("utf-8"))
        return ScramVerifier(DEFAULT_ITERATIONS, salt, key, key)


def _attributes(message: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for part in message.split(","):
        if len(part) < 2 or part[1] != "=":
            raise AuthFailed("malformed SCRAM message")
        out.setdefault(part[0], part[2:])
    return out


class ScramExchange:
    """One server-side SCRAM-SHA-256 exchange: `first` answers the client-first message,
    `final` checks the proof and returns the server-final message or raises AuthFailed."""

    def __init__(self, verifier: ScramVerifier, *, known_user: bool, nonce: str | None = None):
        self._verifier = verifier
        self._known = known_user
        self._nonce = nonce if nonce is not None else _b64(secrets.token_bytes(18))
        self._client_first_bare = ""
        self._server_first = ""
        self._combined_nonce = ""
        self._gs2_header = ""

    def first(self, client_first: bytes) -> bytes:
        try:
            text = client_first.decode("utf-8")
        except UnicodeDecodeError as e:
            raise AuthFailed("malformed SCRAM message") from e
        if not text.startswith(("n,", "y,")):
            # "p=" asks for channel binding, which SCRAM-SHA-256 (without -PLUS) does not offer.
            raise AuthFailed("malformed SCRAM message: channel binding is not supported")
        cbind, _, rest = text.partition(",")
        authzid, _, bare = rest.partition(",")
        self._gs2_header = f"{cbind},{authzid},"
        attrs = _attributes(bare)
        if "r" not in attrs or not attrs["r"]:
            raise AuthFailed("malformed SCRAM message: no client nonce")
        self._client_first_bare = bare
        self._combined_nonce = attrs["r"] + self._nonce
        v = self._verifier
        self._server_first = f"r={self._combined_nonce},s={_b64(v.salt)},i={v.iterations}"
        return self._server_first.encode("ascii")

    def final(self, client_final: bytes) -> bytes:
        try:
            text = client_final.decode("utf-8")
        except UnicodeDecodeError as e:
            raise AuthFailed("malformed SCRAM message") from e
        without_proof, sep, proof_part = text.rpartition(",p=")
        if not sep:
            raise AuthFailed("malformed SCRAM message: no proof")
        attrs = _attributes(without_proof)
        expected_binding = _b64(self._gs2_header.encode("utf-8"))
        if attrs.get("c") != expected_binding or attrs.get("r") != self._combined_nonce:
            raise AuthFailed("SCRAM channel binding or nonce mismatch")
        try:
            proof = base64.b64decode(proof_part, validate=True)
        except ValueError as e:
            raise AuthFailed("malformed SCRAM proof") from e
        auth_message = ",".join(
            (self._client_first_bare, self._server_first, without_proof)
        ).encode("utf-8")
        v = self._verifier
        signature = _hmac(v.stored_key, auth_message)
        if len(proof) != len(signature):
            raise AuthFailed("wrong proof length")
        client_key = bytes(a ^ b for a, b in zip(proof, signature, strict=True))
        if not hmac.compare_digest(_sha256(client_key), v.stored_key) or not self._known:
            raise AuthFailed("password does not match")
        return ("v=" + _b64(_hmac(v.server_key, auth_message))).encode("ascii")


def main(argv: list[str]) -> int:
    """Print a users-file line for a user, reading the password from the terminal."""
    if len(argv) != 1:
        print("usage: python -m streambed.server.wire.auth USER", file=sys.stderr)
        return 2
    password = os.environ.get("STREAMBED_PASSWORD") or getpass.getpass("password: ")
    print(f"{argv[0]}:{make_verifier(password)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
