"""What would expose the server or its secrets: a network address without TLS, a secret
file that others can read.  Plain checks, read by the config and by
:mod:`bless.serving.server.security`."""

from __future__ import annotations

import ipaddress
import socket
import stat
from pathlib import Path


def private_file_problem(path: Path) -> str | None:
    """Why ``path`` is not private to its owner (group or others may read or write it), else None."""
    mode = stat.S_IMODE(path.stat().st_mode)
    if mode & 0o077:
        return f"{path} is accessible to group or others (mode {mode:04o}); make it private: chmod 600 {path}"
    return None


def is_loopback(host: str) -> bool:
    """Whether ``host`` names this machine only (127.0.0.0/8, ::1, or a name resolving only there)."""
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        pass
    try:
        infos = socket.getaddrinfo(host, None)
    except OSError:
        return False
    return bool(infos) and all(ipaddress.ip_address(info[4][0].split("%")[0]).is_loopback for info in infos)


def exposure_problem(host: str, tls: bool, insecure: bool) -> str | None:
    """Why serving on ``host`` as configured would send secrets in clear text, else None."""
    if tls or insecure or is_loopback(host):
        return None
    return (
        f"host: {host} is reachable from other machines and TLS is off, so the admin token and inference data "
        f"would cross the network in clear text; give --tls-cert and --tls-key (tls_cert, tls_key), "
        f"or --insecure (insecure: true) if a TLS proxy or a trusted network protects the port"
    )
