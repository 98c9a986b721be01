"""``bless serve``: the BLESS runtime behind gRPC, one server process per GPU.

* :mod:`~bless.serving.server.server` -- :class:`BlessServer`, assembling the parts;
* :mod:`~bless.serving.server.core` -- the serving loop (threads, faults), with
  :mod:`~bless.serving.server.inbox` (the messages RPC handlers post to it) and
  :mod:`~bless.serving.server.jobs` (apps and requests in flight, outcomes);
* :mod:`~bless.serving.server.inference` / :mod:`~bless.serving.server.admin` -- the OIP v2 and
  ``bless.admin.v1`` services;
* :mod:`~bless.serving.server.admission` -- admission rules (pure functions);
* :mod:`~bless.serving.server.tensors`, :mod:`~bless.serving.server.spec` -- validation;
* :mod:`~bless.serving.server.store` (SQLite; the state directory's lock);
* :mod:`~bless.serving.server.security` -- the admin token, TLS for every front end,
  slowing token guesses, with :mod:`~bless.serving.server.exposure` (plain checks: a
  network address without TLS, a secret file others can read);
* :mod:`~bless.serving.server.stats` -- every measurement, recorded once, which GetStats,
  ModelStatistics and :mod:`~bless.serving.server.metrics` (Prometheus, at scrape time) read.

See ``bless/serving/server/README.md``.  The package imports its parts lazily, so
clients can use :mod:`bless.serving.server.tensors` without the server's dependencies.
"""

from __future__ import annotations

from typing import Any

__all__ = ["BlessServer", "ServerConfig"]


def __getattr__(name: str) -> Any:
    if name == "BlessServer":
        from bless.serving.server.server import BlessServer

        return BlessServer
    if name == "ServerConfig":
        from bless.serving.server.config import ServerConfig

        return ServerConfig
    raise AttributeError(name)
