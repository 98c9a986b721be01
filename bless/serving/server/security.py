"""Who may reach the server and how: the admin token, TLS, and slowing token guesses.

One place for every front end (gRPC here, HTTP beside it): :func:`grpc_server_credentials`
and :func:`http_ssl_context` build the same TLS settings from the config, and
:class:`AuthGuard` checks the admin token of any call given its header and peer.
"""

from __future__ import annotations

import asyncio
import hmac
import logging
import os
import secrets
import ssl
import time
import urllib.parse
from dataclasses import dataclass
from pathlib import Path

import grpc

from bless.serving.server.config import ServerConfig
from bless.serving.server.errors import StartupError, Unauthenticated
from bless.serving.server.exposure import private_file_problem

log = logging.getLogger("bless.serving.server")

TOKEN_FILE = "admin-token"
"""The generated admin token's file in the state directory (mode 0600)."""
TOKEN_BYTES = 24
"""Random bytes of a generated token (192 bits: out of reach of any guessing)."""
TOKEN_HINT = (
    "send the admin token as metadata 'authorization: Bearer <token>' (bless client --token or $BLESS_ADMIN_TOKEN)"
)

AUTH_BURST = 10
"""Wrong tokens a peer may send back to back before it is slowed: room for an operator's
typos and a misconfigured script's retries, far too few for a search."""
AUTH_REFILL_SECONDS = 1.0
"""After the burst, one more token check per peer address every this many seconds: 1,000
guesses take over 16 minutes, while a person retyping a token never notices."""
AUTH_MAX_WAIT = 2.0
"""A slowed call waits at most this long for its turn; calls that would wait longer are
refused at once, without their token being checked, so a flood of parallel guesses
neither piles up sleeping handlers nor gets checked any faster."""
AUTH_MAX_PEERS = 4096
"""Peer addresses remembered at once; beyond it the least slowed are forgotten first."""


def read_token_file(path: Path) -> str:
    """The admin token in ``path``, refused unless only its owner can read it."""
    try:
        problem = private_file_problem(path)
        token = path.read_text().strip()
    except OSError as e:
        raise StartupError(f"admin_token_file: cannot read {path}: {e.strerror}") from None
    if problem:
        raise StartupError(f"admin_token_file: {problem}")
    if len(token) < 8:
        raise StartupError(f"admin_token_file: {path} must hold a token of at least 8 characters")
    return token


def new_token() -> str:
    """A random admin token: hex, so it never starts with ``-`` (a command line would read
    ``--token -xyz`` as two options; base64url tokens start so once in 64)."""
    return secrets.token_hex(TOKEN_BYTES)


def resolve_admin_token(cfg: ServerConfig) -> tuple[str, str]:
    """The admin token and where it came from, for the startup banner: the config
    (``token_source`` names how it got there), ``admin_token_file``, else
    ``<state_dir>/admin-token`` (generated once, mode 0600)."""
    if cfg.admin_token:
        return cfg.admin_token, cfg.token_source
    if cfg.admin_token_file is not None:
        return read_token_file(cfg.admin_token_file), f"the file {cfg.admin_token_file}"
    path = cfg.state_dir / TOKEN_FILE
    try:
        token = path.read_text().strip()
        if token:
            os.chmod(path, 0o600)  # one written by an older bless under a loose umask
            return token, f"the file {path}"
    except FileNotFoundError:
        pass
    token = new_token()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(token + "\n")
    return token, f"the file {path} (generated)"


# ---------------------------------------------------------------------------- TLS
def _read(path: Path, key: str) -> bytes:
    try:
        return path.read_bytes()
    except OSError as e:
        raise StartupError(f"{key}: cannot read {path}: {e.strerror}") from None


def http_ssl_context(cfg: ServerConfig) -> ssl.SSLContext | None:
    """The server-side TLS context of an HTTP front end (None: TLS off).

    With ``tls_client_ca`` clients must present a certificate that CA signed (mutual TLS).
    Loading it also checks the certificate and key (a mismatch names both files).
    """
    if cfg.tls_cert is None:
        return None
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        ctx.load_cert_chain(cfg.tls_cert, cfg.tls_key)
    except (OSError, ssl.SSLError) as e:
        raise StartupError(f"tls_cert/tls_key: cannot use {cfg.tls_cert} with {cfg.tls_key}: {e}") from None
    if cfg.tls_client_ca is not None:
        try:
            ctx.load_verify_locations(cafile=cfg.tls_client_ca)
        except (OSError, ssl.SSLError) as e:
            raise StartupError(f"tls_client_ca: cannot use {cfg.tls_client_ca}: {e}") from None
        ctx.verify_mode = ssl.CERT_REQUIRED
    problem = private_file_problem(cfg.tls_key)
    if problem:
        log.warning("tls_key: %s", problem)
    return ctx


def rest_tls(cfg: ServerConfig) -> tuple[str, str, str | None] | None:
    """The certificate, key and optional client CA files for uvicorn (None: TLS off).  Its
    callers have bound gRPC with the same settings first (:func:`add_grpc_port`), which
    checked these files through :func:`http_ssl_context` for a clear error."""
    if cfg.tls_cert is None or cfg.tls_key is None:
        return None
    return str(cfg.tls_cert), str(cfg.tls_key), cfg.tls_client_ca and str(cfg.tls_client_ca)


def grpc_server_credentials(cfg: ServerConfig) -> grpc.ServerCredentials | None:
    """The gRPC server's TLS credentials (None: TLS off), from the same settings as
    :func:`http_ssl_context` (which validates them first, for a clear error)."""
    if http_ssl_context(cfg) is None:
        return None
    ca = _read(cfg.tls_client_ca, "tls_client_ca") if cfg.tls_client_ca is not None else None
    return grpc.ssl_server_credentials(
        [(_read(cfg.tls_key, "tls_key"), _read(cfg.tls_cert, "tls_cert"))],
        root_certificates=ca,
        require_client_auth=ca is not None,
    )


def host_port(host: str, port: int | None) -> str:
    """``host:port`` as gRPC and URLs write it (an IPv6 host in brackets)."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def add_grpc_port(server: grpc.aio.Server, host: str, port: int, cfg: ServerConfig) -> int:
    """Listen on ``host:port`` with ``cfg``'s TLS (or none); the port bound (0 asks for any free
    one).  A port in use or an address not this machine's is a :class:`StartupError` naming the flag."""
    where = host_port(host, port)
    credentials = grpc_server_credentials(cfg)
    try:
        if credentials is None:
            return server.add_insecure_port(where)
        return server.add_secure_port(where, credentials)
    except RuntimeError:
        raise StartupError(
            f"cannot listen on {where}: the port is in use (or the address is not this machine's); "
            f"pick another port with --grpc-port (0: any free port)"
        ) from None


# ---------------------------------------------------------------------------- authentication
def peer_host(peer: str) -> str:
    """The address part of a gRPC peer (``ipv4:10.0.0.1:5000`` -> ``10.0.0.1``): guesses are
    counted per address, not per connection, or a new connection would reset the count."""
    peer = urllib.parse.unquote(peer)
    kind, _, rest = peer.partition(":")
    if kind in ("ipv4", "ipv6"):
        return rest.rsplit(":", 1)[0].strip("[]")
    return peer


@dataclass
class _Peer:
    due: float
    """Generic cell rate: when this peer's allowance is whole again (each check it fails, or
    waits for, pushes it ``AUTH_REFILL_SECONDS`` further)."""
    refusing: bool = False
    """Refusals of this peer were already logged (one line per episode, not one per call)."""


class AuthGuard:
    """Checks admin tokens; failures are logged (peer and method, never the token) and each
    peer address gets :data:`AUTH_BURST` free failures, then one check per
    :data:`AUTH_REFILL_SECONDS`.  A correct token from a peer within its allowance is
    never delayed; one from a peer that is being slowed waits its turn like any call
    (before the check, nothing tells them apart).  Runs on one event loop."""

    def __init__(self, token: str) -> None:
        self._token = token.encode()
        self._peers: dict[str, _Peer] = {}

    async def authorize(self, header: str, peer: str, method: str) -> None:
        """Return if ``header`` (``Bearer <token>``) holds the admin token, else raise
        :class:`~bless.serving.server.errors.Unauthenticated`."""
        host = peer_host(peer)
        now = time.monotonic()
        state = self._peers.get(host)
        wait = 0.0 if state is None else state.due - now - (AUTH_BURST - 1) * AUTH_REFILL_SECONDS
        if wait > AUTH_MAX_WAIT:
            if not state.refusing:
                state.refusing = True
                log.warning(
                    "refusing admin calls from %s for %.0f s without checking them: too many wrong tokens",
                    host,
                    wait,
                )
            raise Unauthenticated(
                f"too many wrong admin tokens from {host}; retry in {wait:.0f} s with the right one ({TOKEN_HINT})"
            )
        if wait > 0:  # take the next slot now, so parallel callers queue behind each other
            self._charge(host, now)
            await asyncio.sleep(wait)
        scheme, _, token = header.partition(" ")
        if header and scheme.lower() == "bearer" and hmac.compare_digest(token.strip().encode(), self._token):
            return
        if wait <= 0:
            self._charge(host, now)
        log.warning(
            "admin authentication failed from %s on %s: %s", host, method, "wrong token" if header else "no token"
        )
        if not header:
            raise Unauthenticated(f"this call changes the server and needs the admin token: {TOKEN_HINT}")
        raise Unauthenticated(f"the admin token is wrong; {TOKEN_HINT}")

    def _charge(self, host: str, now: float) -> None:
        state = self._peers.get(host)
        if state is None:
            if len(self._peers) >= AUTH_MAX_PEERS:
                self._forget(now)
            state = self._peers[host] = _Peer(now)
        if state.due <= now:
            state.due, state.refusing = now, False
        state.due += AUTH_REFILL_SECONDS

    def _forget(self, now: float) -> None:
        """Drop peers whose allowance is whole again; if that is not enough, the least slowed half."""
        self._peers = {h: p for h, p in self._peers.items() if p.due > now}
        if len(self._peers) >= AUTH_MAX_PEERS:
            kept = sorted(self._peers.items(), key=lambda hp: hp[1].due)[len(self._peers) // 2 :]
            self._peers = dict(kept)
