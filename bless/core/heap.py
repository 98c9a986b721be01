"""Keep the garbage collector's full passes short on the scheduling loop.

CPython's collector scans every tracked object of the generation it collects; the oldest
holds what setup made (modules, profiles, the apps' tables, the backend's contexts: about
130k objects in a replay), which lives as long as the loop and is never garbage. Each full
pass on a wall-clock backend is time in which nothing is launched. :func:`frozen_heap` moves
what exists when the loop starts into the collector's permanent generation (``gc.freeze``),
so a full pass scans only what the loop made; after the loop it is collectable again.
Measured on the simulator (4 apps at load A, 60 s, 5463 requests; one run on a loaded
2-core host): the loop's one full pass took 35 ms without, 17 ms with.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def frozen_heap() -> Iterator[None]:
    """Collect what is garbage now, then exempt the rest from collection until the block ends."""
    gc.collect()
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()
