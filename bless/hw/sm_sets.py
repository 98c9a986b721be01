"""Where green contexts' SM sets sit: which groups of a green-context split each app's contexts use.

A green context is a fixed set of SMs, a union of the groups one split of the
device makes (``cuDevSmResourceSplitByCount``), not a cap: two contexts on the
same groups run on the same SMs while the others' SMs sit idle.  So each
deployed app gets a *home*, the groups nearest its quota's SMs, apart from the
other apps' homes, and every context of the app is a contiguous run of groups
that starts at its home's edge (:func:`select_groups`).  Apps in even
deployment slots grow their sets toward the high end of the GPU, from the
lowest free groups; apps in odd slots toward the low end, from the highest.
With two apps that is the split's two ends, each app's sets meeting the other's
only past what their counts fit; with more, quotas that add up to the GPU get
homes that do not overlap, where a fixed pair of ends would put every second
app on the first one's SMs (four apps' static split at their quotas, GSLICE
on green contexts: 1.28-2.56x ISO on the simulated A100, against 1.10-1.13x
under MPS caps; ``experiments/design_log.md``, item 34).  The CUDA backend and the
simulator place their contexts with the same code.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field


def select_groups(
    sizes: Sequence[int], sm_limit: float, from_high: bool = False, anchor: int | None = None
) -> tuple[int, ...]:
    """Indices of the green-context SM groups whose union is nearest ``sm_limit`` SMs (ties round up).

    The union is contiguous: groups from ``anchor`` (default: the low end, or the
    high end when ``from_high``) toward the high end, or toward the low end when
    ``from_high``; where the GPU's edge comes first it goes on past the anchor's
    other side.  At least one group, at most all of them.
    """
    if not sizes:
        raise ValueError("no SM groups to choose from")
    if sm_limit < 1:
        raise ValueError(f"sm_limit must be >= 1, got {sm_limit}")
    last = len(sizes) - 1
    start = (last if from_high else 0) if anchor is None else anchor
    if not 0 <= start <= last:
        raise ValueError(f"anchor must be a group index in 0..{last}, got {anchor}")
    if from_high:
        order = [*range(start, -1, -1), *range(start + 1, last + 1)]
    else:
        order = [*range(start, last + 1), *range(start - 1, -1, -1)]
    best_n, best_gap, total = 1, None, 0
    for n, i in enumerate(order, start=1):
        total += sizes[i]
        gap = abs(total - sm_limit)
        # '<=' with n increasing makes a tie go to the larger union (round half up).
        if best_gap is None or gap <= best_gap:
            best_n, best_gap = n, gap
        if total >= sm_limit:
            break
    return tuple(sorted(order[:best_n]))


@dataclass(frozen=True)
class _Home:
    anchor: int
    from_high: bool
    groups: frozenset[int]


@dataclass
class GreenHomes:
    """The homes of the apps deployed on one device's green-context split (groups of ``sizes`` SMs)."""

    sizes: tuple[int, ...]
    _homes: dict[Hashable, _Home] = field(default_factory=dict)

    def place(self, owner: Hashable, home_sms: float | None, from_high: bool) -> int:
        """Give ``owner`` a home of the groups nearest ``home_sms`` SMs (None or 0: none, only an
        anchor): the first run of free groups from the low end (from the high end if
        ``from_high``), or, where none is free, the one that shares the fewest SMs.  Returns
        the SMs its home shares with the other apps' (0 where the quotas fit the groups)."""
        if owner in self._homes:
            raise ValueError(f"{owner!r} already has a home; release it first")
        taken = frozenset().union(*(h.groups for h in self._homes.values()))
        anchors = range(len(self.sizes) - 1, -1, -1) if from_high else range(len(self.sizes))
        best: _Home | None = None
        best_shared = None
        for a in anchors:
            groups = frozenset(select_groups(self.sizes, home_sms, from_high, a)) if home_sms else frozenset({a})
            shared = sum(self.sizes[i] for i in groups & taken)
            if best_shared is None or shared < best_shared:
                best, best_shared = _Home(a, from_high, groups if home_sms else frozenset()), shared
            if shared == 0:
                break
        assert best is not None and best_shared is not None  # sizes is not empty: select_groups checked it
        self._homes[owner] = best
        return best_shared

    def release(self, owner: Hashable) -> None:
        """``owner`` left the device: its groups are free for the next app placed."""
        self._homes.pop(owner, None)

    def groups(self, owner: Hashable, sm_limit: int) -> tuple[int, ...]:
        """The groups of ``owner``'s context of ``sm_limit`` SMs: from its home's edge onward."""
        home = self._homes.get(owner)
        if home is None:
            raise ValueError(f"{owner!r} has no home on this device; place it first")
        return select_groups(self.sizes, sm_limit, home.from_high, home.anchor)


def green_overlap(app: str, shared: int, sizes: Sequence[int]) -> str:
    """What to tell an operator whose app's green home shares ``shared`` SMs with other apps'."""
    return (
        f"app {app!r} shares {shared} SMs of its quota's green contexts with other apps: the quotas, "
        f"rounded to the split's groups ({', '.join(str(n) for n in sorted(set(sizes)))} SMs), add up to "
        f"more than the GPU; lower a quota by a group or use mechanism mps"
    )
