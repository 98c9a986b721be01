"""TLS on the client side: credentials from PEM files, and why a connection failed.

Files are checked when the credentials are built, with Python's ``ssl`` module, so a
missing file, a file holding no certificate or a key that does not match its
certificate is an error naming the file's setting; gRPC would only report a failed
handshake on the first call.  A plain-text client at a TLS port gets no better from
gRPC than "Socket closed" either, so :func:`probe` asks the server itself which it
speaks.
"""

from __future__ import annotations

import enum
import socket
import ssl
from collections.abc import Mapping
from pathlib import Path

import grpc

PROBE_TIMEOUT_S = 2.0
"""How long :func:`probe` waits to connect, for the handshake and for the server's first
bytes: a server on this machine or a LAN answers in milliseconds, and the probe runs
only after a call already failed, so a slow answer just means no diagnosis."""

DEFAULT_LABELS = {"ca": "ca", "cert": "cert", "key": "key"}


def _read(path: Path, label: str) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError as e:
        raise ValueError(f"{label}: cannot read {path}: {e.strerror}") from None


def channel_credentials(
    ca: Path | None = None,
    cert: Path | None = None,
    key: Path | None = None,
    *,
    labels: Mapping[str, str] = DEFAULT_LABELS,
) -> grpc.ChannelCredentials:
    """TLS credentials trusting the PEM certificates in ``ca`` (None: the system's CAs) and,
    for mutual TLS, presenting the certificate chain ``cert`` with its private ``key``.

    Errors (``ValueError``) name each file by ``labels[...]``, e.g. the flag it came from.
    """
    if (cert is None) != (key is None):
        raise ValueError(f"{labels['cert']}, {labels['key']}: give both (a client certificate and its key) or neither")
    check = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    root = None
    if ca is not None:
        root = _read(ca, labels["ca"])
        try:
            check.load_verify_locations(cadata=root.decode("ascii", "replace"))
        except (ssl.SSLError, ValueError):
            raise ValueError(
                f"{labels['ca']}: {ca} holds no PEM certificate (-----BEGIN CERTIFICATE-----): give the "
                "server's certificate or the CA certificate that signed it"
            ) from None
    chain = private_key = None
    if cert is not None:
        chain, private_key = _read(cert, labels["cert"]), _read(key, labels["key"])
        try:
            check.load_cert_chain(cert, key)
        except ssl.SSLError as e:
            why = "the key is not the certificate's" if e.reason == "KEY_VALUES_MISMATCH" else "not PEM"
            raise ValueError(
                f"{labels['cert']}, {labels['key']}: cannot use {cert} with {key} ({why}): "
                "give a PEM certificate and the PEM private key it was made for"
            ) from None
    return grpc.ssl_channel_credentials(root_certificates=root, private_key=private_key, certificate_chain=chain)


class Transport(enum.Enum):
    """What :func:`probe` found at an address."""

    PLAINTEXT = "does not speak TLS"
    TLS = "speaks TLS"
    TLS_CLOSED = "speaks TLS, and closed the connection after the handshake"
    """TLS 1.3 finishes the client's side of the handshake before the server checks the
    client's certificate; a gRPC server that accepts the connection sends its HTTP/2
    settings at once, one that wanted a certificate closes instead."""
    UNREACHABLE = "cannot be reached"


def probe(address: str, timeout: float = PROBE_TIMEOUT_S) -> Transport:
    """Whether the server at ``host:port`` speaks TLS, and whether it accepted a client that
    presented no certificate.  Nothing is verified: this only diagnoses a failed call."""
    host, _, port = address.rpartition(":")
    host = host.strip("[]")
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    context.set_alpn_protocols(["h2"])
    try:
        sock = socket.create_connection((host, int(port)), timeout=timeout)
    except (OSError, ValueError):
        return Transport.UNREACHABLE
    with sock:
        try:
            with context.wrap_socket(sock, server_hostname=host or None) as tls:
                try:
                    return Transport.TLS if tls.recv(1) else Transport.TLS_CLOSED
                except TimeoutError:
                    return Transport.TLS
                except (ssl.SSLError, ConnectionError):
                    return Transport.TLS_CLOSED
        except ssl.SSLError as e:
            return Transport.TLS if "ALERT" in (e.reason or "") else Transport.PLAINTEXT
        except OSError:
            return Transport.PLAINTEXT
