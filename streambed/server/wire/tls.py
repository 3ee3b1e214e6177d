"""TLS for the query port: answer SSLRequest with 'S' and wrap the socket when a certificate
and key are configured ('N' otherwise); `require` refuses clients that do not ask for TLS."""

from __future__ import annotations

import enum
import ssl
from pathlib import Path


class TlsMode(enum.StrEnum):
    OFF = "off"  # SSLRequest answered 'N'
    ON = "on"  # TLS offered; plaintext still accepted
    REQUIRE = "require"  # plaintext startup refused with 28000


def server_context(cert: Path, key: Path) -> ssl.SSLContext:
    """A server-side context (TLS 1.2+) for the certificate chain and private key files."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(certfile=str(cert), keyfile=str(key))
    return context


REFUSED_PLAINTEXT = (
    "28000",
    "TLS is required on this server: connect with sslmode=require",
)
