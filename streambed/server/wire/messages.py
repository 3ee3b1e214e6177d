"""Postgres protocol v3 messages: length-checked parsers for what clients send, builders for
what the server answers. Pure functions over bytes; no sockets.

Every read is bounds-checked: a truncated or malformed message raises `ProtocolViolation`
(SQLSTATE 08P01), never IndexError or a silent short read. Message type bytes come from
buenavista's `ClientCommand` / `ServerResponse` so the two stay one vocabulary.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from buenavista.postgres import ClientCommand, ServerResponse

# Frontend message type bytes (after startup).
QUERY: bytes = ClientCommand.QUERY
PARSE: bytes = ClientCommand.PARSE
BIND: bytes = ClientCommand.BIND
DESCRIBE: bytes = ClientCommand.DESCRIBE
EXECUTE: bytes = ClientCommand.EXECUTE
SYNC: bytes = ClientCommand.SYNC
FLUSH: bytes = ClientCommand.FLUSH
CLOSE: bytes = ClientCommand.CLOSE
TERMINATE: bytes = ClientCommand.TERMINATE
PASSWORD: bytes = ClientCommand.PASSWORD_MESSAGE  # also SASLInitialResponse / SASLResponse

# Backend message type bytes.
AUTHENTICATION: bytes = ServerResponse.AUTHENTICATION_REQUEST
BACKEND_KEY_DATA: bytes = ServerResponse.BACKEND_KEY_DATA
BIND_COMPLETE: bytes = ServerResponse.BIND_COMPLETE
CLOSE_COMPLETE: bytes = ServerResponse.CLOSE_COMPLETE
COMMAND_COMPLETE: bytes = ServerResponse.COMMAND_COMPLETE
DATA_ROW: bytes = ServerResponse.DATA_ROW
EMPTY_QUERY_RESPONSE: bytes = ServerResponse.EMPTY_QUERY_RESPONSE
ERROR_RESPONSE: bytes = ServerResponse.ERROR_RESPONSE
NO_DATA: bytes = ServerResponse.NO_DATA
NOTICE_RESPONSE: bytes = ServerResponse.NOTICE_RESPONSE
PARAMETER_DESCRIPTION: bytes = ServerResponse.PARAMETER_DESCRIPTION
PARAMETER_STATUS: bytes = ServerResponse.PARAMETER_STATUS
PARSE_COMPLETE: bytes = ServerResponse.PARSE_COMPLETE
PORTAL_SUSPENDED: bytes = ServerResponse.PORTAL_SUSPENDED
READY_FOR_QUERY: bytes = ServerResponse.READY_FOR_QUERY
ROW_DESCRIPTION: bytes = ServerResponse.ROW_DESCRIPTION

# Startup-phase request codes (the int32 after the length, in place of a protocol version).
PROTOCOL_3_0 = 196608
SSL_REQUEST_CODE = 80877103
GSSENC_REQUEST_CODE = 80877104
CANCEL_REQUEST_CODE = 80877102

# Authentication request codes.
AUTH_OK = 0
AUTH_SASL = 10
AUTH_SASL_CONTINUE = 11
AUTH_SASL_FINAL = 12

_I16 = struct.Struct("!h")
_U16 = struct.Struct("!H")
_I32 = struct.Struct("!i")
_U32 = struct.Struct("!I")
_HEADER = struct.Struct("!ci")


class ProtocolViolation(Exception):
    """The client sent bytes that are not a valid protocol message (SQLSTATE 08P01)."""

    sqlstate = "08P01"


class Reader:
    """Cursor over one message body. Every read checks that the bytes are there."""

    __slots__ = ("_data", "_pos", "_what")

    def __init__(self, data: bytes, what: str) -> None:
        self._data = data
        self._pos = 0
        self._what = what

    def _need(self, n: int) -> None:
        if n < 0 or self._pos + n > len(self._data):
            raise ProtocolViolation(
                f"invalid {self._what} message: needs {n} bytes at offset {self._pos}, "
                f"has {len(self._data) - self._pos}"
            )

    def byte(self) -> int:
        self._need(1)
        value = self._data[self._pos]
        self._pos += 1
        return value

    def int16(self) -> int:
        self._need(2)
        (value,) = _I16.unpack_from(self._data, self._pos)
        self._pos += 2
        return int(value)

    def int32(self) -> int:
        self._need(4)
        (value,) = _I32.unpack_from(self._data, self._pos)
        self._pos += 4
        return int(value)

    def uint32(self) -> int:
        self._need(4)
        (value,) = _U32.unpack_from(self._data, self._pos)
        self._pos += 4
        return int(value)

    def raw(self, n: int) -> bytes:
        self._need(n)
        value = self._data[self._pos : self._pos + n]
        self._pos += n
        return value

    def cstring(self) -> str:
        end = self._data.find(b"\x00", self._pos)
        if end < 0:
            raise ProtocolViolation(f"invalid {self._what} message: unterminated string")
        raw = self._data[self._pos : end]
        self._pos = end + 1
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError as e:
            raise ProtocolViolation(f"invalid {self._what} message: string is not UTF-8") from e

    def rest(self) -> bytes:
        value = self._data[self._pos :]
        self._pos = len(self._data)
        return value

    def count(self) -> int:
        """A count of parameters or format codes: unsigned 16 bits (0..65535), as Postgres
        reads it."""
        self._need(2)
        (value,) = _U16.unpack_from(self._data, self._pos)
        self._pos += 2
        return int(value)

    def done(self) -> None:
        if self._pos != len(self._data):
            raise ProtocolViolation(
                f"invalid {self._what} message: {len(self._data) - self._pos} trailing bytes"
            )


# --- startup phase -------------------------------------------------------------------------


@dataclass(frozen=True)
class StartupMessage:
    parameters: dict[str, str]


@dataclass(frozen=True)
class SSLRequest:
    pass


@dataclass(frozen=True)
class GSSENCRequest:
    pass


@dataclass(frozen=True)
class CancelRequest:
    process_id: int
    secret_key: int


StartupPacket = StartupMessage | SSLRequest | GSSENCRequest | CancelRequest


def parse_startup(body: bytes) -> StartupPacket:
    """Parse a startup-phase packet body (everything after its int32 length)."""
    r = Reader(body, "startup")
    code = r.uint32()
    if code == SSL_REQUEST_CODE:
        r.done()
        return SSLRequest()
    if code == GSSENC_REQUEST_CODE:
        r.done()
        return GSSENCRequest()
    if code == CANCEL_REQUEST_CODE:
        pid, secret = r.uint32(), r.uint32()
        r.done()
        return CancelRequest(pid, secret)
    if code != PROTOCOL_3_0:
        raise ProtocolViolation(
            f"unsupported frontend protocol {code >> 16}.{code & 0xFFFF}: server supports 3.0"
        )
    parameters: dict[str, str] = {}
    while True:
        name = r.cstring()
        if not name:
            break
        parameters[name] = r.cstring()
    r.done()
    return StartupMessage(parameters)


# --- frontend messages after startup --------------------------------------------------------


@dataclass(frozen=True)
class Query:
    sql: str


@dataclass(frozen=True)
class Parse:
    statement: str
    sql: str
    param_oids: tuple[int, ...]


@dataclass(frozen=True)
class Bind:
    portal: str
    statement: str
    param_formats: tuple[int, ...]
    params: tuple[bytes | None, ...]
    result_formats: tuple[int, ...]


@dataclass(frozen=True)
class Describe:
    kind: str  # "S" statement or "P" portal
    name: str


@dataclass(frozen=True)
class Execute:
    portal: str
    max_rows: int


@dataclass(frozen=True)
class Close:
    kind: str  # "S" or "P"
    name: str


@dataclass(frozen=True)
class Sync:
    pass


@dataclass(frozen=True)
class Flush:
    pass


@dataclass(frozen=True)
class Terminate:
    pass


@dataclass(frozen=True)
class Password:
    """Raw 'p' message; its meaning (SASLInitialResponse, SASLResponse) depends on the state."""

    body: bytes


FrontendMessage = (
    Query | Parse | Bind | Describe | Execute | Close | Sync | Flush | Terminate | Password
)


def _format_codes(r: Reader, what: str) -> tuple[int, ...]:
    codes = tuple(r.int16() for _ in range(r.count()))
    if any(code not in (0, 1) for code in codes):
        raise ProtocolViolation(f"invalid {what}: format codes must be 0 (text) or 1 (binary)")
    return codes


def _kind(r: Reader, what: str) -> str:
    kind = chr(r.byte())
    if kind not in ("S", "P"):
        raise ProtocolViolation(f"invalid {what} message: target must be 'S' or 'P', not {kind!r}")
    return kind


def parse_frontend(type_code: bytes, body: bytes) -> FrontendMessage:
    """Parse one frontend message after startup. Unknown types raise ProtocolViolation."""
    if type_code == QUERY:
        r = Reader(body, "Query")
        sql = r.cstring()
        r.done()
        return Query(sql)
    if type_code == PARSE:
        r = Reader(body, "Parse")
        name, sql = r.cstring(), r.cstring()
        oids = tuple(r.uint32() for _ in range(r.count()))
        r.done()
        return Parse(name, sql, oids)
    if type_code == BIND:
        r = Reader(body, "Bind")
        portal, statement = r.cstring(), r.cstring()
        param_formats = _format_codes(r, "parameter format")
        values: list[bytes | None] = []
        for _ in range(r.count()):
            n = r.int32()
            if n < -1:
                raise ProtocolViolation("invalid Bind message: negative parameter length")
            values.append(None if n == -1 else r.raw(n))
        result_formats = _format_codes(r, "result format")
        r.done()
        return Bind(portal, statement, param_formats, tuple(values), result_formats)
    if type_code == DESCRIBE:
        r = Reader(body, "Describe")
        kind, name = _kind(r, "Describe"), r.cstring()
        r.done()
        return Describe(kind, name)
    if type_code == EXECUTE:
        r = Reader(body, "Execute")
        portal, max_rows = r.cstring(), r.int32()
        r.done()
        return Execute(portal, max(max_rows, 0))
    if type_code == CLOSE:
        r = Reader(body, "Close")
        kind, name = _kind(r, "Close"), r.cstring()
        r.done()
        return Close(kind, name)
    if type_code == SYNC:
        return Sync()
    if type_code == FLUSH:
        return Flush()
    if type_code == TERMINATE:
        return Terminate()
    if type_code == PASSWORD:
        return Password(body)
    raise ProtocolViolation(f"invalid frontend message type {type_code!r}")


@dataclass(frozen=True)
class SASLInitialResponse:
    mechanism: str
    data: bytes


def parse_sasl_initial(body: bytes) -> SASLInitialResponse:
    r = Reader(body, "SASLInitialResponse")
    mechanism = r.cstring()
    n = r.int32()
    data = b"" if n == -1 else r.raw(n)
    r.done()
    return SASLInitialResponse(mechanism, data)


# --- backend message builders ---------------------------------------------------------------


def message(type_code: bytes, body: bytes = b"") -> bytes:
    return _HEADER.pack(type_code, len(body) + 4) + body


def cstr(value: str) -> bytes:
    return value.encode("utf-8") + b"\x00"


def authentication(code: int, data: bytes = b"") -> bytes:
    return message(AUTHENTICATION, _I32.pack(code) + data)


def authentication_ok() -> bytes:
    return authentication(AUTH_OK)


def authentication_sasl(mechanisms: Sequence[str]) -> bytes:
    return authentication(AUTH_SASL, b"".join(cstr(m) for m in mechanisms) + b"\x00")


def parameter_status(name: str, value: str) -> bytes:
    return message(PARAMETER_STATUS, cstr(name) + cstr(value))


def backend_key_data(process_id: int, secret_key: int) -> bytes:
    return message(BACKEND_KEY_DATA, _U32.pack(process_id) + _U32.pack(secret_key))


def ready_for_query(status: bytes) -> bytes:
    return message(READY_FOR_QUERY, status)


def command_complete(tag: str) -> bytes:
    return message(COMMAND_COMPLETE, cstr(tag))


def empty_query_response() -> bytes:
    return message(EMPTY_QUERY_RESPONSE)


def parse_complete() -> bytes:
    return message(PARSE_COMPLETE)


def bind_complete() -> bytes:
    return message(BIND_COMPLETE)


def close_complete() -> bytes:
    return message(CLOSE_COMPLETE)


def no_data() -> bytes:
    return message(NO_DATA)


def portal_suspended() -> bytes:
    return message(PORTAL_SUSPENDED)


MAX_PARAMETERS = 65535  # a parameter count on the wire is an unsigned 16-bit number


def parameter_description(oids: Iterable[int]) -> bytes:
    """ParameterDescription; the caller keeps the count within MAX_PARAMETERS."""
    oid_list = list(oids)
    return message(
        PARAMETER_DESCRIPTION, _U16.pack(len(oid_list)) + b"".join(_U32.pack(o) for o in oid_list)
    )


def _fields(
    severity: str,
    sqlstate: str,
    text: str,
    detail: str | None,
    hint: str | None,
    position: int | None = None,
) -> bytes:
    parts = [b"S", cstr(severity), b"V", cstr(severity), b"C", cstr(sqlstate), b"M", cstr(text)]
    if detail:
        parts += [b"D", cstr(detail)]
    if hint:
        parts += [b"H", cstr(hint)]
    if position:
        parts += [b"P", cstr(str(position))]
    parts.append(b"\x00")
    return b"".join(parts)


def error_response(
    sqlstate: str,
    text: str,
    *,
    severity: str = "ERROR",
    detail: str | None = None,
    hint: str | None = None,
    position: int | None = None,
) -> bytes:
    return message(ERROR_RESPONSE, _fields(severity, sqlstate, text, detail, hint, position))


def notice_response(sqlstate: str, text: str, *, severity: str = "NOTICE") -> bytes:
    return message(NOTICE_RESPONSE, _fields(severity, sqlstate, text, None, None))


# --- backend message parsing (for tests and tools) ------------------------------------------


def split_backend(data: bytes) -> list[tuple[bytes, bytes]]:
    """Split a stream of backend messages into (type, body) pairs."""
    out: list[tuple[bytes, bytes]] = []
    pos = 0
    while pos < len(data):
        if pos + 5 > len(data):
            raise ProtocolViolation("truncated backend message header")
        type_code, length = _HEADER.unpack_from(data, pos)
        end = pos + 1 + length
        if length < 4 or end > len(data):
            raise ProtocolViolation("truncated backend message body")
        out.append((type_code, data[pos + 5 : end]))
        pos = end
    return out


def parse_error_fields(body: bytes) -> dict[str, str]:
    """Fields of an ErrorResponse/NoticeResponse body, keyed by their one-letter code."""
    r = Reader(body, "ErrorResponse")
    fields: dict[str, str] = {}
    while True:
        code = r.byte()
        if code == 0:
            return fields
        fields[chr(code)] = r.cstring()
