"""Deadline pacing, BLESS's default scheduler: which kernels of which requests to launch now,
in which contexts.

The paper's rule (:func:`bless.core.scheduler.build_squad`) paces every request
against its own isolated schedule and keeps two identical closed loops in
lockstep, where nothing beats a static split (experiments/lockstep.py).
Deadline pacing keeps the promise and spends the rest of the GPU where it
shortens latency most:

* every request has a deadline: its finish time in the ISO run of the same
  arrivals (``max(arrival, previous deadline) + T[quota]``, so an app's own
  backlog moves its deadlines, not its neighbours'), or ``arrival + SLO``
  when that is earlier;
* the request with the earliest deadline (the top) runs unrestricted and is
  never held back; the others share what its quota leaves;
* every other request runs only when it must: once the time left to its
  deadline, less one window, no longer covers its remaining kernels at its
  quota (stretched by the interference its neighbours cause), it runs in
  the smallest restricted context that still meets the deadline (or the one
  it is in, if that still does: a switch idles it), launched ahead of the
  top so it finds its SMs free; where contexts are coarser than quotas (green
  contexts) and the others' quotas leave it less than its quota's context, it
  takes the difference from what the top's deadline does not need;
* the top yields (runs in its low-priority stream) while the last kernels of
  a request served before it, all launched, would otherwise miss its deadline:
  the GPU gives SMs in start order, and a newly arrived top's long kernels
  would hold the SMs those kernels wait for;
* beside restricted requests the top stays unrestricted only while they are
  projected to meet their deadlines (an unrestricted kernel keeps the SMs it
  took, so a capped neighbour only gets what it leaves); else it is capped,
  though never below its own deadline's need for a neighbour that misses its
  deadline even alone on the GPU (capping buys that one throughput, and its
  quota already guarantees it that; the need with a window to spare, a quarter
  of one beside an app over its share, which lends the top that need, unless the
  top's kernels are short beside the lender's), and not at all for a twin (the same
  model at the same quota) that misses its deadline capped too, where the cap
  would only make the two a static split and identical loops keep in lockstep;
* a top that needs more than its quota's SMs to meet its deadline with a
  window to spare (its neighbours' interference slows it) takes them from
  urgent neighbours whose apps are over their share (requests queue behind
  them, and have for a while: :func:`_over_share`), whatever their deadlines
  and from whatever context their deadlines gave them: what their quotas
  promise them is throughput, and the top's app gives the GPU back when it is
  idle (a top that misses its deadline even on the whole GPU takes all but
  half their quota: each SM still shortens its lateness); and, if
  its app has been finishing late (its caution), from urgent neighbours whose
  apps have kept their deadlines, each down to a smaller context only where,
  slowed there until the top is done and on the whole GPU after, it still
  meets its own with a window to spare: quota for quota, interference makes
  both late where one can lend;
* and the reverse: a sole urgent request whose app has been the latest, that
  misses its deadline at its quota beside the top (projected as above), takes
  what its deadline needs beyond its quota from the SMs of the top's quota
  that the top's own deadline does not need, and the top is capped for it
  (with several urgent requests this moved no mean and cost host time);
* a request already past its deadline comes after every request that can still
  meet its own (in deadline order among themselves): under overload EDF would
  otherwise put an overloaded app's late requests first for good and make its
  neighbours late too (the domino effect); it still runs at its quota beside them;
* and a request whose app is over its share (:func:`_over_share`) comes
  after both: what its quota promises it is throughput, which its deadlines (its
  ISO queue's) keep by making it urgent at its quota's pace, while a neighbour
  within its share keeps the top whether the overloaded app happens to be on time
  or behind (it was one or the other as host costs moved by microseconds, and
  the neighbour's latency with it, 0.95 or 1.02x ISO);
* a top runs in its low-priority stream, so that an app that could arrive now
  with an earlier deadline is not queued behind the windows of kernels it
  keeps queued, where it can spare that arrival its time: a top that needs the
  whole GPU for longer than the arrival's latency target has the slack at its
  quota for :data:`ARRIVAL_SLACK` such requests, a shorter one still meets its
  deadline at its quota while one arrival runs and on the whole GPU after;
* a request that can wait waits, leaving the GPU to the earlier deadline:
  one request finishes early, the other still on time, and two identical
  closed loops drift apart instead of into lockstep;
* but the earliest of the waiting requests runs in the bubbles: a short window
  of its kernels goes to the low-priority stream of its unrestricted context,
  where it takes only the SMs the others' kernels leave, so it gets ahead
  without taking an SM from anyone.  Its DRAM traffic still slows the others,
  so it runs only while every request launched beside it, slowed by its mean
  demand on the whole GPU as well, still meets its deadline with a window to
  spare, and never for an app over its share: its quota's throughput is what
  it has to claim, and its traffic in the bubbles made BERT beside VGG11 at 5x
  its share 1.016x ISO (0.996x without);
* kernels stream: each request keeps 1.5 to 2.5 windows of kernels queued in
  its context, refilled together, and no barrier separates two launches; less
  where what it queued would hold the GPU from where it is due: a lone request
  (an arrival with the earlier deadline waits behind it) and an overloaded app's
  request in a restricted context (its kernels stay there when the GPU frees);
"""

from __future__ import annotations

import bisect
import math
import operator
from collections.abc import Callable, Collection, Mapping, Sequence

from bless.core.paced_request import PacedLaunch, PacedRequest
from bless.core.policy import RequestLaunch
from bless.profiles.format import Profile

_TICK = 1e-7
"""Times closer than this (0.1 us) are one instant to deadline pacing (float rounding)."""
QUEUED = 1.5
"""Windows of kernels a running request keeps queued: a host that decides late by up to that
much leaves no gap on the GPU (on the wall clock a busy host is late by milliseconds).  Our
assumption; the served load test (tests/test_server_load.py) checks it against ``bless run``."""
REFILL_SLACK = 0.25
"""A refill due within this share of a window is due now.  A window that runs late pushes
its request's refill back by the lateness, as pacing sees it (:meth:`PacedRequest.observe`),
often by a few microseconds at a time; waking for each would poll the device.  Our
assumption: with 8 closed loops it halved the steps (1489 to 612); on quick re-runs of the
Fig. 13 exponential pairs and a Fig. 14 subset the means moved 23.81 -> 23.72 ms and the
deviation 0.18 -> 0.13 ms."""
BACKGROUND_WINDOW = 0.25
"""The waiting request that runs in the bubbles streams this share of a window at a time (of
its kernels' time alone on the whole GPU), refilled when a step runs anyway or when its queue
runs out, so that little of it is queued in its low-priority stream, where the others' kernels
may hold it back, when it must start in earnest.  Our assumption; on quick re-runs (BLESS
only) 0.1 / 0.25 / 0.5 gave the five Fig. 13 exponential pairs 23.78 / 23.70 / 23.59 ms
(23.79 without), the 4-app mix at B its worst app at 1.002 / 0.997 / 0.984x ISO, at A
ResNet50 at 0.988 / 1.004 / 1.023x, and 8 closed loops 22.2 / 21.5 / 20.6 kernels per step."""
TOP_UP = 1.0
"""A step that launches anything also gives its next window to every running request whose
queue would run short within this many of its windows: batched into a step already paid
for, rather than each in a step of its own.  A request then keeps between :data:`QUEUED`
and ``QUEUED + TOP_UP`` windows queued.  Our assumption: with 8 closed loops it cut the
steps from 612 to 456 (23 kernels a step); the two together, re-run over every experiment,
moved the Fig. 14 deviation 0.16 -> 0.14 ms and the Fig. 13 deterministic mean 20.6 -> 20.7
ms (``experiments/design_log.md``, item 5)."""


LONE_QUEUED = 0.75
"""Windows of kernels a request keeps queued while it is the only one with kernels left to launch.
The GPU gives SMs in launch order, so a request that arrives with the earlier deadline waits
behind whatever a lone request queued before it (Inception-v3 beside VGG19 waited 3.9 ms per
request); a lone request's steps look at one request and are prompt, so it needs less margin
against a late host.  An app over its share keeps no more: BERT's closed loop beside BERT at 5x
its share found 1.5-2.5 windows of it queued unrestricted and ran beside them for the first 1.75
ms of each request, whose deadline then needed 72-78 SMs lent by the app over its share, served
at 0.913x its quota's rate (0.928x so); over ``isolation_pairs.py``'s cells the shortfall below
the due summed 0.57 (0.46 so), no victim over ISO either way (``experiments/design_log.md``, item
37).  Our assumption; on quick re-runs of every experiment (BLESS only; ``experiments/design_log.md``, item
17) 0.25 / 0.5 / 0.75 / 1.0 windows gave the Fig. 13 exponential pairs 23.81 / 23.69 / 23.68 /
23.62 ms with their worst app at 1.008 / 1.011 / 1.009 / 1.016x ISO (1.5: 23.45 ms, 1.014x) and
Fig. 16's ResNet50 at 0.958 / 0.959 / 0.956 / 0.988x (1.5: 1.029x).  With the lone request in
its low-priority stream too (``lone_low_priority``), 1.5 windows put 3 of Fig. 14's 140 cells
over ISO (up to 1.078x; 1 at 0.75, 1.022x)."""


CAPPED_BACKLOG_QUEUED = 0.5
"""Windows of kernels a request keeps queued while its app is over its share (:func:`_over_share`)
and it runs in a restricted context.  Kernels queued in a context stay there, and
what its quota promises it is throughput: VGG11 at 5x its share beside BERT's closed loop
finished requests at 0.52x its quota's rate while a BERT request was in flight (1.83x between
them, as alone on the GPU), 0.95x over the run; at 0.5 windows 0.58x (1.83x), 0.99x, BERT at
ISO either way.  Our reading: a request's last kernels, launched, leave SMs the overloaded
app may take, but what it had queued in its capped context runs there first.  Our
assumption; on ``isolation_pairs.py``'s neighbours at 5x (BLESS only) 0.25 / 0.5 / 0.75 / 1.0 windows left
them on average 0.013 / 0.012 / 0.013 / 0.014 below the lesser of 1 and the fluid estimate of
their best (0.019 at 1.5 windows), with the worst victim at 0.999 / 0.992 / 1.011 / 1.020x ISO
(0.988x); on quick re-runs of every other experiment's BLESS runs at 0.5, only workload D moved
(25.97 -> 25.92 ms; ``experiments/design_log.md``, item 19)."""


SATURATION_HOLD = 4.0
"""Latency targets (its own) a latency-critical app must have been busy, a request in the
system without a gap (:attr:`~bless.core.lifecycle.AppState.busy_since`), before it counts as
saturated: while every latency-critical request with kernels to launch is of a saturated app,
the top keeps to what the others' quotas' contexts leave (:func:`build_deadline_squad`).
Every app then asks for at least its quota the whole time, is owed its quota's throughput, and
none more than another.  An unrestricted top, its kernels taking SMs in launch order from the
others' contexts, served the closed loops of ``experiments/saturation.py`` (every app with two
or three clients and no think time) at worst 0.85 / 0.74 / 0.78 of their quotas' throughput,
against a static split's 0.90 / 0.82 / 0.90 (GSLICE); capped, 0.89 / 0.81 / 0.90.  Busy, not
with requests queued behind the active one: a client's round trip empties the queue at every
answer, and four apps of two clients each thinking a tenth of their solo latency never had
requests queued for long (worst app 0.68x its ISO run's throughput gated on a queue; busy,
0.78; GSLICE 0.79).  A burst that soon
drains is the other case: there a fast top lowers the mean.  Our assumption, measured on quick
re-runs (BLESS only, seed 0; ``experiments/design_log.md``, item 43): at 1 / 2 / 4 / 8 targets
workload D was 26.16 / 25.93 / 25.89 / 25.89 ms (25.89 never capped), and the saturated
groups' worst apps 0.89 / 0.81-0.82 / 0.90 at each.

The same hold tells an app over its share (:func:`_over_share`): saturated, with requests queued
behind its active one.  Measured with the cap's hold at 4 (quick re-runs, BLESS only; item 47):
at 0 (a queue alone) / 1 / 2 / 4 / 8 targets / never, workload D was 25.90 / 25.79 / 25.65 /
25.59 / 25.56 / 25.56 ms; the 60 random groups had 2 / - / 2 / 3 / 3 / 5 closed loops over ISO
by more than 1 % (worst 1.041 / - / 1.077 / 1.043 / 1.061 / 1.077x) and 6 / - / 7 / 7 / 7 / 2
Poisson apps short of their due; never over its share, ResNet50 beside BERT at 1-5x its share
(``isolation.yaml``) was 1.028-1.033x ISO (0.983-0.985x at every hold up to 8)."""


HOPELESS_KEEP = 0.5
"""Share of its quota's SMs an app over its share keeps when it lends to a top that misses its
deadline even on the whole GPU.  Every SM more still shortens such a top's lateness, but it used
to take none ("no SMs buy it its deadline") and ran beside the overloaded app's capped kernels
on about its quota's SMs, slowed by their DRAM traffic: BERT's closed loop beside VGG11 at 1x
and 5x its share was hopeless at 29 % of the steps where it was the top, and 1.013-1.017x ISO
at seeds 1 and 2 with 26-39 % of its requests late.  Our assumption, measured on that pair at
seeds 1 and 2 (1x and 5x): keeping 0.25 / 0.5 / 0.75 of the quota put BERT at 0.973-0.977 /
0.975-0.978 / 1.001-1.009x ISO and served VGG11 at 0.95-0.98 / 0.96-0.99 / 0.96-1.00x its
quota's rate; lending down to the smallest context served VGG11 at 0.95-0.98x and moved
workload D from 25.92 to 25.99 ms (0.5: 25.95; ``experiments/design_log.md``, item 21)."""


BEST_EFFORT_WINDOW = 0.1
"""A best-effort request streams this share of a window at a time (0.1 ms of kernels at the
default 1 ms), so a latency-critical arrival finds at most about a quarter of a millisecond of
them queued ahead of it: best-effort work gives the GPU back quickly, Tally's principle (Zhao et
al., ASPLOS'25).  Our assumption: on the priority experiment's pairs it cut BLESS's
latency-critical P99 overhead from 12-152 % to 0.4-8.7 % for 10 % less best-effort
throughput; 0.02 did no better."""


_rank = operator.attrgetter("rank")
_first = operator.itemgetter(0)


def _standing(p: PacedRequest, now: float, over: Collection[int]) -> int:
    """Where ``p`` stands in the order of service, before its deadline rank: 0 on time, 1
    past its deadline, 2 its app over its share (its index in ``over``, :func:`_over_share`),
    3 best-effort."""
    if p.best_effort:
        return 3
    if p.request.app.index in over:
        return 2
    return 1 if p.deadline < now else 0


def _over_share(requests: list[PacedRequest], saturated: Collection[int]) -> frozenset[int]:
    """The indices of the apps over their share: requests queued behind their active one, and
    busy without a gap for :data:`SATURATION_HOLD` of their latency targets (``saturated``).

    A queue alone is not enough: arrivals well within a quota's throughput queue one request
    behind another now and then, as they do in the app's ISO run, and the queued requests'
    deadlines are that run's, so they keep their place in deadline order like anyone's.
    Counted over its share from its first queued request, an app in a burst yielded the top
    and lent its SMs, and on workload D's bursty traces both apps of a pair lost by it (25.89
    ms, 25.59 so, 36 of its 40 cells faster).  An app whose arrivals outpace its quota stays
    busy and counts after the hold; the random groups and the isolation sweeps are as before
    within their noise (``experiments/design_log.md``, item 47)."""
    if not saturated:
        return frozenset()
    return frozenset(
        p.request.app.index for p in requests if p.request.app.index in saturated and p.request.app.backlogged
    )


ARRIVAL_SLACK = 2.0
"""Requests (at the longest latency target among the apps that could arrive with an earlier
deadline) a top that needs the whole GPU for longer than that target must have the slack for,
at its quota, to let arrivals pass (:func:`_lets_arrivals_pass`).  Our assumption, measured
before shorter tops were priced apart (``experiments/design_log.md``, item 31): at 1 / 2 / 3, of
175 random groups of shipped and held-out apps (``random_groups.py``'s generator, seeds
60-234, BLESS only) 12 / 13 / 14 had a closed loop over ISO by more than 1 % (17 without),
and on the simulated H100 pairs at uneven quotas NASNet at 1/3 beside VGG11's loop with
exponential think times (A) was 1.030 / 0.968 / 0.964x ISO (0.964x without): at 1 it yielded
with the slack for one VGG11 request, and the next one came before it had its SMs back."""

LENDER_MARGIN = 0.25
"""Share of a window a top keeps to spare, beyond what its deadline needs, where it is capped
for a neighbour of an app over its share that misses its deadline even alone (elsewhere a
whole window; :func:`_deadline_need`).  The neighbour lends the top what the top's deadline
needs, and the top's cap is the rest of the GPU or that need with the margin, whichever is
more, so the margin is taken from the lender twice over: with a whole window ResNet50's closed
loop beside BERT at 1x and 5x its share was capped at 66-72 SMs where 60 meet its deadline,
over the 48 BERT kept, and ran at 0.936x ISO while BERT was served 0.948 of its due.  Our
assumption, measured on quick re-runs (BLESS only, seed 0, without :data:`SHORT_KERNELS`): at
0 / 0.25 / 0.5 / 1 that cell was 0.976 / 0.985 / 0.965 / 0.936x ISO and BERT was served 0.978
/ 0.985 / 0.978 / 0.948 of its due; of ``isolation_pairs.py``'s 25 neighbours at 1x / 5x
7 / 5, 5 / 6, 7 / 5 and 9 / 8 were short of their due (victims at most 0.994 / 0.996 / 0.992 /
0.987x ISO); of ``random_groups.py``'s 29 Poisson apps 7 / 6 / 7 / 8.  At 0 a top that ran a
little late went hopeless and took its lender down to :data:`HOPELESS_KEEP` (BERT at 2x its
share beside MobileNet's closed loop, group 29: 0.89 of its due, 0.98 with the window)."""

SHORT_KERNELS = 0.5
"""A top whose kernels on the whole GPU last at most this share of its lender's (mean over a
request) stays unrestricted where only the whole GPU meets its deadline with a window to spare
(:func:`_deadline_need`).  The GPU gives SMs in launch order, so each of the lender's kernels
waits for SMs the top's running kernels hold: cheap beside kernels much shorter than its own,
and an unrestricted top is done sooner.  BERT's loop (21 us kernels) beside VGG11 (183 us) at
5x its share: VGG11 served 0.985 of its due unrestricted, 0.963 capped at LENDER_MARGIN; ResNet50
(35 us) beside BERT at 1x: BERT 0.955 of its due unrestricted, 0.985 capped.  Our assumption, measured
on quick re-runs (BLESS only, seed 0) of 11 pairs and 9 random groups with overloaded apps
(``experiments/design_log.md``, item 36): the overloaded apps' shortfall below their due summed
0.771 / 0.795 / 0.827 / 0.875 at 0.25 / 0.5 / 1 / 2, 0.856 never unrestricted, 0.963 before
LENDER_MARGIN."""

TWIN_GAIN = 0.1
"""Twins (two requests of apps with the same tables and quota, such as two replicas of one model)
where the one behind misses its deadline whether the top is capped or not: the top stays
unrestricted if the walk projects the twin no later for it and the two done at least this share
sooner in sum.  Capping the top there makes twins a static split whenever they overlap, and
identical deterministic closed loops then stay in lockstep at their ISO latency times the
interference (Fig. 13 at seeds 1 and 3: NASNet, ResNet-101 and ResNet50 pairs at 1.01-1.10x at
every load); uncapped, one finishes early and the loops drift apart.  Only for twins: for any
pair the same rule put 19-22 of Fig. 14's 140 cells over ISO at gains of 0-0.1 (up to 1.47x), the
walk's projection of the uncapped neighbour being too hopeful there.  Our assumption; on quick re-runs (BLESS only,
seeds 0-3) 0.05 / 0.1 / 0.2 left Fig. 13 fixed think with 0 / 0 / 12 cells over 1 % at seed 3 and
the exponential pairs' worst app at 1.013-1.026 / 1.009-1.016 / 1.009-1.016x ISO (1.009-1.016x
without the rule)."""

PRICE_HORIZON = 2.0
"""Windows of time the kernel walk prices ahead; a window not done by then ends at the pace its
request kept (:meth:`~bless.core.determiner.Determiner.window_durations`).  Our assumption: at
one window the walk cost what it did before its requests ran on past their windows, but a
request's window, slowed beside the others, often ends past it; at two the Fig. 13 means with
fixed think times over seeds 0-3 were 22.89 / 22.81 ms (one / two windows) and walking to the
last window's end 22.80 ms for 1.5 us per kernel with 8 apps, over the target."""


Pricer = Callable[[list[tuple[Profile, int, int, "int | None"]], float], list[float]]
"""``price(runs, horizon)``: how long each run's window ``(profile, start, count, sm_limit)``
takes, all started together and each run going on past its window until the last one ends,
walked for ``horizon`` seconds at most (:meth:`~bless.core.determiner.Determiner.window_durations`)."""


def build_deadline_squad(
    requests: list[PacedRequest],
    now: float,
    window: float,
    price: Pricer | None = None,
    caution: Mapping[int, float] | None = None,
    lend: bool = True,
    wake_when_due: bool = True,
    background: bool = True,
    lone_low_priority: bool = False,
    arrivals: Sequence[tuple[float, float]] = (),
    saturated: Collection[int] = (),
) -> PacedLaunch:
    """The kernels to launch now under deadline pacing (see the section comment above).

    Kernels stream: a request that still has :data:`QUEUED` windows of kernels
    queued gets none now (a host that decides late does not starve the GPU), and
    no barrier separates two launches.  ``caution`` (per app index, in [0, 1],
    see :func:`caution_after`; an app not in it has none): the highest is how
    little a restricted request may count on the GPU freed when the top is done.
    A top that needs more than its quota's SMs to meet its deadline takes them
    from urgent neighbours whose apps are over their share and, if its app has
    some caution, from those whose apps have none where they still meet theirs;
    a sole urgent request whose app has the highest, projected to miss its
    deadline at its quota, takes them from the top's quota, less what the top's
    deadline needs (``lend``).  Requests of apps over their share come after
    those of apps within theirs.  Each entry carries its context (``sm_limit``);
    restricted requests are launched first.  An entry covers about ``window``
    seconds of the request's kernels.  ``background``: the earliest request that
    can wait, of an app within its share, runs in the low-priority stream of
    its unrestricted context meanwhile, :data:`BACKGROUND_WINDOW` of a window
    at a time, while the requests launched beside it can afford its
    interference.  The top runs in the low-priority stream of its unrestricted context while
    the last kernels of a request served before it (of an app within its share), all
    launched, would otherwise miss that request's deadline (:func:`_tail_at_risk`).
    ``lone_low_priority`` (opt-in, :attr:`~bless.policies.bless.BlessPolicy.lone_low_priority`):
    a request alone with kernels to launch, of an app within its share, runs in the
    low-priority stream of its unrestricted context, so that an arrival's kernels are not
    queued behind its own.  ``arrivals``: for each latency-critical app with no active request,
    the deadline a request of it arriving now would have and its latency target; a top far
    enough ahead of its deadline to let such arrivals pass (:func:`_lets_arrivals_pass`) runs in
    the low-priority stream of its unrestricted context, so that an arrival's kernels take the
    SMs as its blocks drain instead of queueing behind them.  ``saturated``: the indices of the
    latency-critical apps busy without a gap for :data:`SATURATION_HOLD` of their latency
    targets.  An app over its share lends only to a top whose app is not saturated (over its
    share or not: :func:`_over_share`).
    """
    if window <= 0:
        raise ValueError(f"window must be > 0 seconds, got {window}")
    live = [p for p in requests if p.request.scheduled < p.table.n_kernels]
    live.sort(key=_rank)
    if not live:
        return PacedLaunch((), (), (), (), math.inf)
    over_share = _over_share(requests, saturated)
    classes = [_standing(p, now, over_share) for p in live]
    if any(classes):  # a stable sort: deadline order within each standing
        live = [p for _, p in sorted(zip(classes, live), key=_first)]
    wake = math.inf if wake_when_due else now + window
    # Who runs: the earliest deadline, and every request that cannot wait a window.
    top = live[0]
    urgent = []  # (request, row of its quota's context, time left to its deadline)
    waiting = None  # the earliest request that can wait, of an app within its share (not best-effort)
    spare = top.table.sm_count - top.quota_sms  # SMs the quotas of the top and the urgent leave
    for p in live[1:]:
        tab = p.table
        k = p.request.scheduled
        busy = p.busy_until
        left = p.deadline - (busy if busy > now else now)
        q = p.quota_row
        line = tab.lines[q]
        need = (line[-1] - line[k]) * p.stretch + window
        if need <= left:
            # It can wait a window and still finish at its quota; it no longer can from
            # ``deadline - need`` on (no later than its queued kernels end, as ``left`` shows).
            if wake_when_due:
                wake = min(wake, max(p.deadline - need, now + _TICK))
            if waiting is None and background and not p.best_effort and p.request.app.index not in over_share:
                waiting = p
            continue
        urgent.append((p, q, left))
        spare -= tab.row_sms[q]
    # Where: each its quota first (the quotas fit the GPU), then more for those
    # behind, earliest deadline first, from what the others' quotas leave.
    picked: list[tuple[PacedRequest, int]] = [(top, top.table.full)]
    cautions = caution or {}
    # The top may take what its deadline needs beyond its quota (with a window to spare if its
    # app has been finishing late) from neighbours whose apps are over their share, and, if so, from
    # neighbours whose apps have not, where they still meet theirs (found on first need: most
    # steps lend nothing).
    top_late = bool(cautions.get(top.request.app.index))
    # Owed throughput, saturated (over its share or not): no neighbour over its share lends to it.
    top_owed = top.request.app.index in saturated
    want: float | None = None if lend else 0.0
    top_end = 0.0
    hopeless = False  # the top misses its deadline even on the whole GPU
    # And the reverse: a sole urgent request whose app has been the latest may take what its
    # deadline needs beyond its quota from the top's quota, less what the top's own deadline needs.
    borrow = lend and len(urgent) == 1
    taker = None  # the request that took SMs of the top's quota: the top is capped for it
    surplus_left: float | None = None  # SMs of the top's quota its deadline does not need, not yet taken
    for p, q, left in urgent:
        tab = p.table
        sms = tab.row_sms
        k = p.request.scheduled
        # Its quota's context and what the others' leave; never less than its quota's SMs, which
        # the quotas' sum guarantees even where their contexts, rounded up to the GPU's levels,
        # add up to more than the GPU (seven apps at 1/7: contexts of 18 SMs for quotas of 15.4).
        fits = max(spare + sms[q], p.quota_sms)
        row = tab.first_row_at_most(fits)
        if (
            borrow
            and row < tab.full
            and (mine := cautions.get(p.request.app.index, 0.0))
            and mine >= (highest := max(cautions.values()))
            and _misses_beside(p, top, left, window, highest)
            and tab.first_row_within(k, left, p.stretch, q) > row
        ):
            surplus = _surplus(top, now, window)
            if surplus:
                taker = p
                spare += surplus
                fits += surplus
                row = tab.first_row_at_most(fits)
        if row < q and taker is None and fits >= p.quota_sms - 1e-9:
            # What the others' quotas leave covers its quota but not its quota's context:
            # contexts come in coarser steps than quotas (green contexts in groups of 8 SMs:
            # half an H100 is 64 or 68 SMs, and beside a quota of 66 a context of 60).  It
            # takes the difference from what the top's deadline does not need, where that
            # covers it; else it runs short until the top is done.  VGG11 beside BERT-base's
            # closed loop spent its requests at 60 SMs and ran at 1.08x ISO, on the GPU as on
            # the simulator (0.95x so; ``experiments/design_log.md`` item 23).  No window to spare:
            # with one the top rarely had any surplus (1.06-1.07x).
            if surplus_left is None:
                surplus_left = _surplus(top, now, 0.0)
            short = sms[q] - fits
            if short <= surplus_left:
                surplus_left -= short
                spare += short
                fits = float(sms[q])
                row = q
        if row < 0:
            continue  # no context fits what the others leave this window
        row = tab.first_row_within(k, left, p.stretch, q, row)  # the smallest that meets its deadline
        if row <= p.row < tab.full and sms[p.row] <= fits:
            row = p.row  # its current context still serves: no switch
        # An app over its share lends from its quota's context or a larger one, which its ISO
        # queue's pace may have asked for against the interference: ResNet50 at 12/18 and 1x its
        # share held 78-102 SMs (its quota's 72) beside the closed loops of VGG11 at 5/18 and
        # BERT at 1/18, BERT at 1.080x ISO, 1.048x when it lends (``random_groups.py``, group
        # 23).  An app within its share lends only from its quota's: a larger context is what
        # its own deadline needs.
        over = p.request.app.index in over_share
        if (
            (row >= q if over else row == q)
            and want != 0.0
            and ((over and not top_owed) or (top_late and not cautions.get(p.request.app.index)))
        ):
            if want is None:
                want, top_end, hopeless = _beyond_quota(top, now, window if top_late else 0.0)
            smaller = tab.first_row_at_most(sms[q] - want)
            if hopeless:  # only an app over its share lends to it, and keeps part of its quota
                smaller = max(smaller, tab.first_row_at_least(sms[q] * HOPELESS_KEEP))
            if 0 <= smaller < q and (
                over or (not hopeless and _meets_after_lending(p, smaller, top_end, left, window))
            ):
                want = 0.0  # met: ``smaller`` leaves the top at least what it wants
                spare -= sms[q] - sms[smaller]  # lent to the top, not to the others
                row = smaller
        picked.append((p, row))
        spare -= sms[row] - sms[q]
    # Every latency-critical request with kernels to launch of a saturated app: the top keeps to
    # what the others' quotas' contexts leave, as they keep to theirs (:data:`SATURATION_HOLD`;
    # a best-effort app is owed no quota).
    capped = False
    if saturated:
        owed = [p for p in live if not p.best_effort]
        capped = len(owed) > 1 and all(p.request.app.index in saturated for p in owed)
    if capped:
        tab = top.table
        row = tab.first_row_at_most(tab.sm_count - sum(p.table.row_sms[p.quota_row] for p in owed[1:]))
        picked[0] = (top, max(row, top.quota_row))
    windows = [window * BEST_EFFORT_WINDOW if p.best_effort else window for p, _ in picked]
    alone = len(live) == 1
    lone = alone and top.request.app.index not in over_share
    depths = [
        LONE_QUEUED
        if alone
        else CAPPED_BACKLOG_QUEUED
        if row < p.table.full and p.request.app.index in over_share
        else QUEUED
        for p, row in picked
    ]  # windows each keeps queued
    refills = [p.busy_until - d * w for (p, _), d, w in zip(picked, depths, windows)]  # when each runs short of kernels
    waiting_depth = QUEUED * window * BACKGROUND_WINDOW  # seconds of kernels the waiting request keeps queued
    if waiting is not None and waiting.busy_until - waiting_depth > now + _TICK:
        waiting = None  # it has enough queued
    if waiting is None and min(refills) > now + max(_TICK, REFILL_SLACK * window):
        return PacedLaunch((), (), (), (), min(wake, *refills))  # every one has enough queued
    counts = [_window_count(p, row, w) for (p, row), w in zip(picked, windows)]
    # The top yields the SMs to the last kernels of a request served before it where they would
    # otherwise miss its deadline (asked only of a step that launches), and waits for them where
    # even in its low-priority stream its blocks would hold them back too long.
    tail = _tail_at_risk(requests, top, now, window, price, over_share) if len(live) < len(requests) else None
    yields = tail is not None
    holds = tail is not None and _holds_back(top, tail, now, window, over_share)  # the tail's end wakes pacing
    priced = None
    # None is best-effort where more than one is picked: windows are ``window``.
    if price is not None and len(picked) > 1 and not yields and not capped:
        row, counts[0], priced = _top_row(
            picked, counts, now, window, price, max(cautions.values(), default=0.0), over_share, taker
        )
        picked[0] = (top, row)
    # Restricted requests first: launched first, they find their SMs free.
    order = [i for i, (p, row) in enumerate(picked) if row < p.table.full]
    order += [i for i, (p, row) in enumerate(picked) if row >= p.table.full]
    entries = []
    lines = []
    rows = []
    durations = []
    for i in order:
        p, row = picked[i]
        refill = refills[i]
        if holds and i == 0:
            continue  # the top waits for the tail
        if refill > now + TOP_UP * windows[i]:
            wake = min(wake, refill)
            continue  # enough of its kernels are queued
        r = p.request
        tab = p.table
        count = counts[i]
        low = (  # a low-priority stream is the unrestricted context's
            i == 0
            and row >= tab.full
            and (yields or (lone and lone_low_priority) or _lets_arrivals_pass(top, now, window, arrivals))
        )
        entries.append(RequestLaunch(r, r.scheduled, count, tab.limits[row] if row < tab.full else None, low))
        lines.append(tab.lines[row])
        rows.append(row)
        # The walk's duration where it priced the configuration (co-running included).
        durations.append(tab.work(row, r.scheduled, count) * p.stretch if priced is None else priced[i])
        if r.scheduled + count < tab.n_kernels:
            wake = min(wake, max(now, p.busy_until) + max(durations[-1] - depths[i] * windows[i], _TICK))
    if waiting is not None and not (holds and waiting.drains) and _affords(picked, waiting, now, window):
        r = waiting.request
        tab = waiting.table
        count = _window_count(waiting, tab.full, window * BACKGROUND_WINDOW)
        entries.append(RequestLaunch(r, r.scheduled, count, None, low_priority=True))
        lines.append(tab.lines[tab.full])
        rows.append(tab.full)
        durations.append(tab.work(tab.full, r.scheduled, count) * waiting.stretch)
        if r.scheduled + count < tab.n_kernels:  # its next refill (it may be due before anyone else's)
            wake = min(wake, max(now, waiting.busy_until) + durations[-1] - waiting_depth)
    if not entries:
        return PacedLaunch((), (), (), (), wake)
    return PacedLaunch(tuple(entries), _start_order(entries, lines), tuple(rows), tuple(durations), wake)


def _lets_arrivals_pass(top: PacedRequest, now: float, window: float, arrivals: Sequence[tuple[float, float]]) -> bool:
    """Whether ``top`` (not best-effort) can spare the apps that could arrive now with an earlier
    deadline (``arrivals``, see :func:`build_deadline_squad`) their time.  Its kernels run in its
    low-priority stream then, and each arrival's in an ordinary one, so an arrival is not queued
    behind what the top keeps queued (a window and a half or more of its kernels).  BERT's closed
    loop at 15/18 of the GPU beside ResNet-101 and VGG19 at 1/18 and 2/18 (``random_groups.py``'s
    kind of group), which run far ahead of their deadlines in BERT's think time, waited so and ran
    at 1.048x ISO, the two at 0.57x; letting them pass, 0.966x.

    What an arrival costs the top is priced against the longest latency target ``need`` among
    those apps:

    * a top that needs the whole GPU for longer than ``need`` may see an app arrive again before
      it is done: it must have the slack, beyond its remaining kernels at its quota and a
      window, for :data:`ARRIVAL_SLACK` requests of ``need``;
    * a shorter one sees one arrival at most, and then has the GPU back: it must meet its deadline
      with a window to spare if it ran at its quota for ``need`` and on the whole GPU after.  A
      small quota alone on the GPU is ahead of the whole GPU's pace, rarely of its quota's:
      Inception-v3's closed loop at 3/18 kept BERT's arrivals at 15/18 waiting (1.017-1.018x ISO
      at seeds 0-3; 0.982x so, Inception 0.97x).  For every top, the same pricing put NASNet's loop
      at 1/3 of an H100 beside VGG11's at 2/3 at 1.031x ISO (0.981x): VGG11 came again before
      NASNet was done (``experiments/design_log.md``, item 31).

    An app over its share lets them pass too: its deadlines are its ISO queue's, so slack means
    it is ahead of its quota's throughput.  ResNet50's closed loop at 16/18 beside VGG11 at 2/18
    and 5x its share, which ran far ahead in ResNet50's think time, was 1.084x ISO (28 of 100
    such shipped pairs over 1 %, none now; ``experiments/design_log.md``, item 29)."""
    if top.best_effort:
        return False
    need = 0.0
    for deadline, target in arrivals:
        if deadline < top.deadline and target > need:
            need = target
    if need == 0.0:
        return False
    tab = top.table
    busy = top.busy_until
    left = top.deadline - (busy if busy > now else now) - window
    k = top.request.scheduled
    stretch = top.stretch
    at_quota = tab.rest(top.quota_row, k) * stretch
    if tab.rest(tab.full, k) * stretch > need:
        return left - at_quota >= ARRIVAL_SLACK * need
    if at_quota <= need:
        return at_quota <= left  # done at its quota while the arrival runs
    line = tab.lines[top.quota_row]
    done = bisect.bisect_right(line, line[k] + need / stretch, k) - 1  # its kernels run meanwhile
    return need + tab.rest(tab.full, done) * stretch <= left


def _tail_at_risk(
    requests: list[PacedRequest],
    top: PacedRequest,
    now: float,
    window: float,
    price: Pricer | None,
    over: Collection[int],
) -> PacedRequest | None:
    """Whether a request served before ``top`` (of an app within its share, earlier in the
    order of :func:`_standing` and deadline), its kernels all launched but not all run, would
    miss its deadline (with a window to spare) beside ``top``'s next window running
    unrestricted, as the walk prices it (without a pricer: whether there is such a request).

    The top then runs in the low-priority stream of its unrestricted context, on the SMs
    those queued kernels leave: in an ordinary stream its kernels would take the SMs they
    wait for (block dispatch follows start order), and at its quota it would lose the SMs
    they leave.  A tail is not in the order that picks the top (it has nothing left to
    launch), so the top can be a later deadline: BERT-base's last 19 kernels, 1.3 ms to go
    and 5 ms to its deadline, waited 34 ms behind the VGG11 convolutions of a request that
    had just arrived (each holding every SM of an H100 for 3-7 ms), and BERT-base ran at
    1.23x ISO at load B (0.94x when VGG11 yields; measured H200 profiles, green contexts,
    ``experiments/design_log.md`` item 23).  A top of an app over its share yields to any such
    tail: BERT's last window beside VGG11 at 5x its share took up to 1.4x its ISO time.
    Yielding where the tail does not need it costs the top its quota's throughput: a
    synthetic app of 250 us kernels at 5x its share beside one of 30 us kernels
    (``test_an_overloaded_neighbour_leaves_any_app_its_iso_latency``) was served at 0.90x
    its quota's rate when it always yielded, 0.99x when it yields so.

    A top of an app within its share yields only to a tail it could wait for and still finish
    on the whole GPU with a window to spare: its deadline is a promise too.  BERT's closed loop
    with no think time, at its quota's pace, has a tail at risk at every request; ResNet50's
    closed loop B beside it (``isolation.yaml``) gave way to each and ran at 1.015-1.021x ISO
    at seeds 0-3, 0.999-1.004x so, BERT no slower (``experiments/design_log.md``, item 30)."""
    order = None  # the top's place in the order of service (found on first need)
    ttab = top.table
    count: int | None = None  # kernels in the top's next window (found on first need)
    for p in requests:
        tab = p.table
        if p.request.scheduled < tab.n_kernels or p.busy_until <= now:
            continue
        standing = _standing(p, now, over)
        if order is None:
            order = (_standing(top, now, over), top.rank)
        if standing >= 2 or (standing == 0 and (standing, p.rank) > order):
            continue  # its app is over its share, or it is on time with a later deadline
        if order[0] < 2 and _misses_alone(top, p.busy_until + window):
            continue  # waiting for it, the top would miss its own deadline (an app over its share yields)
        if price is None:
            return p
        queued = _queued(p, now)
        if not queued:
            continue
        if count is None:
            count = _window_count(top, ttab.full, window)
        runs: list[tuple[Profile, int, int, int | None]] = [
            (top.request.app.profile, top.request.scheduled, count, None),
            (p.request.app.profile, tab.n_kernels - queued, queued, tab.row_sms[p.row] if p.row < tab.full else None),
        ]
        ends = price(runs, PRICE_HORIZON * window)
        if now + ends[1] + window > p.deadline:
            return p
    return None


def _holds_back(top: PacedRequest, tail: PacedRequest, now: float, window: float, over: Collection[int]) -> bool:
    """Whether ``top`` (of an app within its share), yielding to ``tail``, should launch nothing
    rather than run in its low-priority stream: each of the tail's queued kernels would wait for the SMs the top's
    blocks fill (its app's mean drain, :attr:`PacedRequest.drains`), and that wait would make
    the tail miss its deadline with a window to spare (a late tail: any wait).  VGG11's
    7 ms convolution in the low-priority stream, rounds of 0.7 ms, held BERT-base's last 19
    kernels back until they were late; once late, they waited behind VGG11's next
    convolutions in launch order (32 ms for a 12 ms request; measured H200 profiles, green
    contexts)."""
    drains = top.drains
    if not drains or _standing(top, now, over) >= 2:
        return False  # an app over its share keeps its quota's throughput: it runs on what the tail leaves
    return tail.busy_until + _queued(tail, now) * drains + window > tail.deadline


def _queued(p: PacedRequest, now: float) -> int:
    """How many of ``p``'s launched kernels are still queued or running: those its expected
    end leaves after now, at the table's pace in the context it was last decided in."""
    wait = p.busy_until - now
    k = p.request.scheduled
    if wait <= 0.0 or p.row < 0:
        return 0
    line = p.table.lines[p.row]
    return k - bisect.bisect_left(line, line[k] - wait / p.stretch, 0, k)


def _affords(picked: list[tuple[PacedRequest, int]], waiting: PacedRequest, now: float, window: float) -> bool:
    """Every picked request, its remaining kernels in its context of the row it was picked in,
    slowed by its stretch and by what ``waiting`` in the bubbles imposes (its DRAM traffic, and
    a wait for the SMs its blocks fill before each kernel), still meets its deadline with a
    window to spare."""
    slowdown = waiting.imposes
    drains = waiting.drains
    for p, row in picked:
        left = p.deadline - (p.busy_until if p.busy_until > now else now) - window
        k = p.request.scheduled
        if p.table.rest(row, k) * p.stretch * slowdown + (p.table.n_kernels - k) * drains > left:
            return False
    return True


def _beyond_quota(top: PacedRequest, now: float, margin: float) -> tuple[float, float, bool]:
    """The SMs ``top`` needs beyond its quota to meet its deadline alone with ``margin`` to spare,
    how long its remaining kernels take there (its interference stretch included), and whether
    it misses its deadline even on the whole GPU (hopeless): then the SMs beyond its quota of
    the largest restricted context, the most it can take from a neighbour (every SM more
    shortens its lateness; the lender keeps :data:`HOPELESS_KEEP` of its quota).

    The margin is a window where the top's app has been late, the margin the lenders keep too
    (:func:`_meets_after_lending`): the stretch is a mean, and a top lent exactly its expected
    need ran late beside an overloaded neighbour (BERT beside ResNet-101 at 5x its share, 1.015x
    ISO; 1.004x with the margin).  Where it has not been late, none: with the margin always, an
    app over its share lent tops what they did not need and fell short of its quota's rate
    (``isolation_pairs.py``, the neighbours at 5x: 0.84-1.01x, 0.966x on average, against
    0.88-1.01x, 0.980x; the worst victim 0.987 against 0.991x ISO)."""
    tab = top.table
    k = top.request.scheduled
    row = top.deadline_row(now, margin=margin, lowest=top.quota_row)
    hopeless = row >= tab.full
    if hopeless:
        row = tab.full - 1
    return tab.row_sms[row] - top.quota_sms, tab.rest(row, k) * top.stretch, hopeless


def _meets_after_lending(p: PacedRequest, smaller: int, top_end: float, left: float, window: float) -> bool:
    """``p``, at the context of row ``smaller`` until the top is done (``top_end`` seconds from
    now) and on the whole GPU after, still meets its deadline, ``left`` seconds away, with a
    window to spare."""
    tab = p.table
    k = p.request.scheduled
    slow = tab.rest(smaller, k) * p.stretch
    return _finish(slow, 1.0, top_end, tab.rest(tab.full, k) * p.stretch / slow) + window <= left


def _misses_beside(p: PacedRequest, top: PacedRequest, left: float, window: float, caution: float) -> bool:
    """``p``, at its quota beside the top until the top could be done (alone on the whole GPU)
    and after that as ``caution`` projects (:func:`_projection`), misses its deadline, ``left``
    seconds away, with a window to spare: it is sure to need more than its quota."""
    rem, after = _rest_and_after(p, caution)
    tt = top.table
    top_end = tt.rest(tt.full, top.request.scheduled) * top.stretch
    return _finish(rem, 1.0 / p.stretch, top_end, after) + window > left


def _surplus(top: PacedRequest, now: float, margin: float) -> float:
    """The SMs of ``top``'s quota that its deadline does not need, with ``margin`` seconds to
    spare (0 if it needs them all)."""
    tab = top.table
    row = top.deadline_row(now, margin=margin)
    return max(top.quota_sms - tab.row_sms[row], 0.0) if row < tab.full else 0.0


def _start_order(entries: list[RequestLaunch], lines: list[list[float]]) -> tuple[int, ...]:
    """The launch of each kernel, kernels in the order they would start alone in their
    contexts from now (``lines[j]``: launch j's context row; ties: the earlier launch first).

    Each launch's starts rise with its kernels (a row is a prefix sum), so the order is a
    merge of the launches' kernels: each next kernel is the earliest next start of any launch.
    A merge of typed integers and floats, not a sort with a key function: it runs at every
    step that launches two requests or more, on the host's critical path."""
    if len(entries) == 1:
        return (0,) * entries[0].count
    heads: list[int] = []  # each launch's next kernel
    ends: list[int] = []
    bases: list[float] = []  # when each launch's first kernel starts in its row
    nexts: list[float] = []  # when each launch's next kernel starts, from its first (inf: none left)
    total = 0
    for e, line in zip(entries, lines):
        heads.append(e.start)
        ends.append(e.start + e.count)
        bases.append(line[e.start])
        nexts.append(0.0 if e.count else math.inf)
        total += e.count
    order: list[int] = []
    n = len(entries)
    for _ in range(total):
        best = 0
        best_start = nexts[0]
        for j in range(1, n):
            if nexts[j] < best_start:
                best = j
                best_start = nexts[j]
        order.append(best)
        k = heads[best] + 1
        heads[best] = k
        nexts[best] = lines[best][k] - bases[best] if k < ends[best] else math.inf
    return tuple(order)


def _window_count(p: PacedRequest, row: int, window: float) -> int:
    """How many of ``p``'s next kernels take ``window`` seconds in the context of ``row`` (at
    least one, at most all it has left: it has some)."""
    k = p.request.scheduled
    line = p.table.lines[row]
    return bisect.bisect_left(line, line[k] + window, k + 1, p.table.n_kernels) - k


def _top_row(
    picked: list[tuple[PacedRequest, int]],
    counts: list[int],
    now: float,
    window: float,
    price: Pricer,
    caution: float,
    over: Collection[int],
    behind: PacedRequest | None = None,
) -> tuple[int, int, list[float]]:
    """The top's context beside restricted requests, its window of kernels there, and how
    long each picked request's next window (``counts[i]`` kernels, the top's in its
    unrestricted context) is expected to take in that configuration.

    The top runs unrestricted while every restricted request is projected to
    meet its deadline, with a window to spare, beside it (the top takes the SMs
    it can, holding them in start order, so a capped neighbour gets what it
    leaves); otherwise it is capped at what their contexts leave, but for a
    request that misses its deadline even alone on the GPU never below what the
    top's own deadline needs, and not for a twin that the cap does not save
    (:data:`TWIN_GAIN`).  ``behind``: a restricted request known to need the
    top capped (it took SMs of the top's quota), so the top is not priced
    unrestricted.  The next
    window is priced by the determiner's kernel walk; the rest is projected: a
    restricted request keeps its window's pace (slowed by its interference
    stretch) until the top, at its own window's pace, is done, then goes at a
    pace between full-GPU speed (the top's app stays away) and its quota's
    (the top's app comes back first and takes the GPU again), by ``caution``.
    """
    top = picked[0][0]
    tab = top.table
    full = tab.full
    ready = [max(p.busy_until - now, 0.0) for p, _ in picked]
    count = counts[0]
    k = top.request.scheduled
    runs: list[tuple[Profile, int, int, int | None]] = [(top.request.app.profile, k, count, None)]
    runs += [
        (p.request.app.profile, p.request.scheduled, c, p.table.row_sms[r]) for (p, r), c in zip(picked[1:], counts[1:])
    ]
    durations = None
    if behind is None:
        behind = _surely_behind(picked, counts, ready, now, window, caution)
    if behind is None:
        durations = price(runs, PRICE_HORIZON * window)
        top_end = _top_end(top, ready[0], durations[0], full, count)
        for (p, _), c, wait, d in zip(picked[1:], counts[1:], ready[1:], durations[1:]):
            rem, pace, after = _projection(p, c, wait + d, caution)
            if now + _finish(rem, pace, top_end, after) + window > p.deadline:
                behind = p
                break
        else:
            return full, count, durations
    row = max(0, tab.first_row_at_most(tab.sm_count - sum(other.table.row_sms[r] for other, r in picked[1:])))
    if _misses_alone(behind, now):
        # It misses its deadline even alone on the GPU: the cap buys it throughput, not
        # its deadline, so the top keeps what its own deadline needs (an overloaded
        # neighbour does not push an on-time app past its quota's promise).
        row = max(row, _deadline_need(top, behind, now, window, over))
    if row < full:
        # The top unrestricted, as priced so far (durations None: not priced).
        free_count, free_run, free_durations = count, runs[0], durations
        count = _window_count(top, row, window)
        runs[0] = (top.request.app.profile, k, count, tab.row_sms[row])
        durations = price(runs, PRICE_HORIZON * window)
        if len(picked) == 2 and behind.table.digest == tab.digest and behind.quota_sms == top.quota_sms:
            capped = _pair_ends(picked, counts, ready, durations, row, count, caution)
            if now + capped[1] > behind.deadline:  # the cap does not save its twin
                if free_durations is None:
                    free_durations = price([free_run, *runs[1:]], PRICE_HORIZON * window)
                ends = _pair_ends(picked, counts, ready, free_durations, full, free_count, caution)
                if ends[1] <= capped[1] + _TICK and sum(ends) < (1.0 - TWIN_GAIN) * sum(capped):
                    return full, free_count, free_durations
    elif durations is None:
        durations = price(runs, PRICE_HORIZON * window)
    return row, count, durations


def _pair_ends(
    picked: list[tuple[PacedRequest, int]],
    counts: list[int],
    ready: list[float],
    durations: list[float],
    row: int,
    count: int,
    caution: float,
) -> tuple[float, float]:
    """When the top, in the context of ``row`` with a window of ``count`` kernels, and the one
    request beside it are projected to be done (seconds from now), the walk having priced their
    next windows at ``durations``: the top at its window's pace, the other as
    :func:`_projection` and :func:`_finish` project a restricted request."""
    top_end = _top_end(picked[0][0], ready[0], durations[0], row, count)
    rem, pace, after = _projection(picked[1][0], counts[1], ready[1] + durations[1], caution)
    return top_end, _finish(rem, pace, top_end, after)


def _top_end(top: PacedRequest, ready: float, duration: float, row: int, count: int) -> float:
    """When ``top`` is projected to be done (seconds from now): its queued kernels end in
    ``ready``, then its remaining kernels in the context of ``row`` go at the pace of its next
    window of ``count`` kernels, priced at ``duration``."""
    tab = top.table
    k = top.request.scheduled
    return ready + duration * tab.rest(row, k) / max(tab.work(row, k, count), 1e-12)


def _deadline_need(top: PacedRequest, behind: PacedRequest, now: float, window: float, over: Collection[int]) -> int:
    """The smallest context (row) of ``top`` that meets its deadline beside ``behind``, a request
    that misses its own even alone on the GPU: with a window to spare, or, where ``behind``'s app
    is over its share (it lends the top what the top's deadline needs), :data:`LENDER_MARGIN` of
    one, unless only the whole GPU has the window to spare and the top's kernels are short
    beside the lender's (:data:`SHORT_KERNELS`): the top stays unrestricted then."""
    if behind.request.app.index not in over:
        return top.deadline_row(now, margin=window)
    if top.table.kernel_mean <= SHORT_KERNELS * behind.table.kernel_mean:
        row = top.deadline_row(now, margin=window)
        if row >= top.table.full:
            return row
    return top.deadline_row(now, margin=window * LENDER_MARGIN)


def _surely_behind(
    picked: list[tuple[PacedRequest, int]],
    counts: list[int],
    ready: list[float],
    now: float,
    window: float,
    caution: float,
) -> PacedRequest | None:
    """The neighbour that caps the top in :func:`_top_row` whatever the walk prices, if one
    is sure to (None: the walk decides), found without the walk.

    The walk never runs a window faster than alone on the whole GPU (the tables are
    non-increasing in SMs, interference and waiting only slow it), and a projected finish
    only grows with a window's duration; so a neighbour whose projection misses its
    deadline even at that speed, by more than the walk's rounding, is sure to cap the
    top.  It is the first to do so unless an earlier one fails in the walk; the cap is
    the same either way when every neighbour up to it misses (or meets) its deadline
    alone alike.  Many capped steps are known so, and skip pricing the top unrestricted
    only to cap it."""
    top = picked[0][0]
    tab = top.table
    k = top.request.scheduled
    # The least end the walk can give the top (:func:`_top_row`): its queue, then its rest at
    # its window's pace, which is never faster than alone on the whole GPU.
    top_end = ready[0] + tab.rest(tab.full, k)
    alone = None
    for (p, _), c, wait in zip(picked[1:], counts[1:], ready[1:]):
        misses = _misses_alone(p, now)
        if alone is None:
            alone = misses
        elif misses != alone:
            return None
        pt = p.table
        rem, pace, after = _projection(p, c, wait + pt.work(pt.full, p.request.scheduled, c), caution)
        # The finish falls as the pace rises; it rises with the top's end while
        # ``pace * after <= 1``, and is never below ``rem / pace`` (``top_end`` inf).
        finish = _finish(rem, pace, top_end if pace * after <= 1.0 else math.inf, after)
        if now + finish + window > p.deadline + _TICK:
            return p
    return None


def _projection(p: PacedRequest, count: int, end: float, caution: float) -> tuple[float, float, float]:
    """What :func:`_finish` needs of a restricted request whose window of ``count`` kernels
    ends at ``end``: its remaining kernels in quota-pace seconds, its pace while the top
    runs (quota-pace seconds per second, its stretch included), and its pace after: between
    full-GPU speed (the top's app stays away) and its quota's (it comes back first and takes
    the GPU again), by ``caution``."""
    rem, after = _rest_and_after(p, caution)
    line = p.table.lines[p.quota_row]
    k = p.request.scheduled
    return rem, (line[k + count] - line[k]) / max(end * p.stretch, 1e-12), after


def _rest_and_after(p: PacedRequest, caution: float) -> tuple[float, float]:
    """A restricted request's remaining kernels in quota-pace seconds, and its pace once the
    top is done (seconds per quota-pace second), as :func:`_projection` gives them."""
    tab = p.table
    k = p.request.scheduled
    rem = tab.rest(p.quota_row, k)
    fast = tab.rest(tab.full, k) / rem
    return rem, fast + caution * (1.0 - fast)


def _finish(rem: float, pace: float, top_end: float, after: float) -> float:
    """When a restricted request with ``rem`` quota-pace seconds of kernels left is done:
    at ``pace`` (quota-pace seconds per second) while the top runs, until ``top_end``, and
    the rest ``after`` seconds per quota-pace second (:func:`_projection`)."""
    if pace * top_end >= rem:
        return rem / pace
    return top_end + (rem - pace * top_end) * after


def _misses_alone(p: PacedRequest, now: float) -> bool:
    """``p`` misses its deadline even alone on the whole GPU from now."""
    pt = p.table
    return now + pt.rest(pt.full, p.request.scheduled) * p.stretch > p.deadline


CAUTION_GAIN = 1.0
"""How fast deadline pacing's caution follows lateness: a request late by its app's whole
ISO latency takes it from 0 to 1.  Our assumption, the natural unit; the Fig. 13 means with
exponential think times were 23.79 / 23.97 / 23.97 ms at gains 0.5 / 1 / 2 on quick re-runs early in
deadline pacing's history (``experiments/design_log.md``, "The BERT pair at A")."""


def caution_after(caution: float, lateness: float, target: float, gain: float = CAUTION_GAIN) -> float:
    """An app's caution once one of its requests finished ``lateness`` seconds after its
    deadline (negative: early), its app's latency target being ``target`` seconds
    (``gain`` 0: caution stays where it is, 0 from the start: the ablation).

    Caution, in [0, 1], is how little a waiting request's projection counts on the
    GPU the top frees when it is done: 0, all of it (the top's app stays away long
    enough); 1, only its quota's pace (the top's app comes back first and takes
    it).  Which is right depends on the neighbours' arrivals, which deadline
    pacing does not know; so it learns it from the outcome: lateness raises it,
    earliness lowers it (an integral controller on lateness relative to the
    target), and a GPU whose requests finish on time goes back to counting on
    the bubbles.
    """
    return min(max(caution + gain * lateness / target, 0.0), 1.0)


LEAD_RESERVE = 0.06
"""Share of its latency target each request of an app keeps out of its lead (:func:`lead_after`):
an app that spends its lead settles at ``1 - LEAD_RESERVE`` of its target, the rest covering
what pacing misjudges.  Our assumption, on quick re-runs of a first version of the rule
(BLESS only, the lead capped at :data:`LEAD_CAP`): at 0 / 0.03 / 0.06, of 400 random groups
at their own seeds (``random_groups.py``) 23 / 19 / 15 had a closed loop over ISO by more
than 1 % (16 with no lead, and 16 at 0.06 with this code, whose float arithmetic differs in
the last digit and tips some decisions): apps that gave their lead landed at 1.01-1.05x ISO
below 0.06."""

LEAD_CAP = 0.3
"""Most lead an app holds, in its latency targets: an app alone for a while does not bank its
whole time alone.  Our assumption: at 1, BERT's closed loop at 1/18 beside ResNet50 at 12/18
and its quota's throughput (``random_groups.py``, group 23) banked its think times alone and
ran at 1.198x ISO spending them (1.100x at 0.3; with no reserve and giving its lead beside
an app over its share, either way)."""


def lead_after(lead: float, early: float, target: float, reserve: float = LEAD_RESERVE, cap: float = LEAD_CAP) -> float:
    """An app's lead (seconds) once one of its requests finished ``early`` seconds before the
    deadline pacing gave it (negative: late), its app's latency target being ``target``
    (:attr:`~bless.policies.bless.BlessPolicy.give_lead`, opt-in).

    It reads an app's promise as one on its mean latency, not on each request's.  Requests
    that finish before their deadlines leave their app a lead, which its next request takes as
    a later deadline (:meth:`bless.policies.bless.BlessPolicy._lead_given`): the GPU goes to
    neighbours that need it meanwhile, in the order of their deadlines.  A request takes the
    lead when it arrives (two in flight do not spend it twice) and what it did not use comes
    back here with its earliness; each keeps ``reserve`` of its target out of it, and the lead
    never exceeds ``cap`` targets.  MobileNet's closed loop at 7/18 of the GPU beside ResNet-152's
    at 11/18 (models we do not ship, load A), both in most of each other's requests: ResNet-152
    ran at 1.066x ISO, MobileNet 0.906x; with the lead, 1.033x and 0.966x.  The cost is each
    request's own promise: a request that takes a lead may finish that much after its ISO
    deadline, which is why it is not the default."""
    return min(lead + early - reserve * target, cap * target)
