"""The server's Triton statistics agree with themselves at any reading."""

from bless.serving.server.stats import AppStats


def test_compute_counts_agree_while_a_request_is_between_running_and_answering():
    """perf_analyzer takes the difference of two ModelStatistics readings and aborts when the
    input, infer and output counts differ ("Server side statistics compute counts must be the
    same"); a request whose kernels ran but whose RPC had not answered made them differ."""
    stats = AppStats("app", 0.5)
    stats.admitted(0.004)
    stats.started()
    stats.ran(started=True, latency=0.004, queue=0.001, compute=0.003)
    mid = stats.cumulative()
    assert mid.compute_input.count == mid.compute_infer.count == mid.compute_output.count == 0
    stats.answered(0.005, compute=0.003, decode=0.0002, encode=0.0001)
    done = stats.cumulative()
    assert done.compute_input.count == done.compute_infer.count == done.compute_output.count == 1
    assert done.compute_infer.ns == 3_000_000


def test_behind_quota_counts_what_the_app_alone_at_its_quota_would_have_finished_and_has_not():
    """The app's ISO queue: three requests at t = 0 taking 10 ms each alone at the quota end at
    10, 20 and 30 ms.  Served one at 15 ms, the app is behind by one at 25 ms; served all by 30
    ms it is behind by none, and being ahead never counts below zero."""
    now = [0.0]
    stats = AppStats("app", 0.5, clock=lambda: now[0])
    for _ in range(3):
        stats.admitted(0.010)
    assert stats.behind_quota() == 0
    now[0] = 0.015
    stats.ran(started=True, latency=0.015, queue=0.0, compute=0.015)
    assert stats.behind_quota() == 0  # ISO has ended one, so has the app
    now[0] = 0.025
    assert stats.behind_quota() == 1  # ISO has ended two
    assert stats.window(0.010).behind_quota == 1 and stats.series().behind_quota == 1
    stats.ran(started=True, latency=0.025, queue=0.0, compute=0.01)
    stats.ended("cancelled", "cancelled", started=False)  # ended early: no longer owed
    assert stats.behind_quota() == 0
    now[0] = 1.0
    stats.admitted(0.010)  # the queue restarts from the arrival after an idle spell
    now[0] = 1.005
    stats.ran(started=True, latency=0.005, queue=0.0, compute=0.005)
    assert stats.behind_quota() == 0
