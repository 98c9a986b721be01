"""The server's Triton statistics agree with themselves at any reading."""

from bless.serving.server.stats import AppStats


def test_compute_counts_agree_while_a_request_is_between_running_and_answering():
    """perf_analyzer takes the difference of two ModelStatistics readings and aborts when the
    input, infer and output counts differ ("Server side statistics compute counts must be the
    same"); a request whose kernels ran but whose RPC had not answered made them differ."""
    stats = AppStats("app", 0.5)
    stats.admitted()
    stats.started()
    stats.ran(started=True, latency=0.004, queue=0.001, compute=0.003)
    mid = stats.cumulative()
    assert mid.compute_input.count == mid.compute_infer.count == mid.compute_output.count == 0
    stats.answered(0.005, compute=0.003, decode=0.0002, encode=0.0001)
    done = stats.cumulative()
    assert done.compute_input.count == done.compute_infer.count == done.compute_output.count == 1
    assert done.compute_infer.ns == 3_000_000
