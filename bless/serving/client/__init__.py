"""Clients of a bless server: :class:`BlessClient` (blocking calls) and :func:`replay` (loads).

Any Open Inference Protocol client (e.g. ``tritonclient[grpc]``) works for
inference too; this one adds the admin API and load replay.
"""

from bless.serving.client.client import BlessClient, InferResult
from bless.serving.client.replay import (
    AppLoad,
    ReplayResult,
    Sample,
    replay,
    replay_async,
)

__all__ = ["AppLoad", "BlessClient", "InferResult", "ReplayResult", "Sample", "replay", "replay_async"]
