"""``bless serve``: the BLESS runtime behind gRPC, one server process per GPU.

* :mod:`~bless.server.server` -- :class:`BlessServer`, assembling the parts;
* :mod:`~bless.server.core` -- the serving loop (threads, inbox, faults);
* :mod:`~bless.server.inference` / :mod:`~bless.server.admin` -- the OIP v2 and
  ``bless.admin.v1`` services;
* :mod:`~bless.server.admission` -- admission rules (pure functions);
* :mod:`~bless.server.tensors`, :mod:`~bless.server.spec` -- validation;
* :mod:`~bless.server.store` (SQLite), :mod:`~bless.server.stats`,
  :mod:`~bless.server.metrics` (Prometheus).

See ``bless/server/README.md``.  The package imports its parts lazily, so
clients can use :mod:`bless.server.tensors` without the server's dependencies.
"""

from __future__ import annotations

from typing import Any

__all__ = ["BlessServer", "ServerConfig"]


def __getattr__(name: str) -> Any:
    if name == "BlessServer":
        from bless.server.server import BlessServer

        return BlessServer
    if name == "ServerConfig":
        from bless.server.config import ServerConfig

        return ServerConfig
    raise AttributeError(name)
