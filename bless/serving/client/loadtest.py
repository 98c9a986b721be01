"""Load-testing a running ``bless serve`` with Triton's own gRPC client.

Used by the load test (``tests/test_server_load.py``) and by
``tools/serve_load.py``, which prints the figures the server README quotes, as
ranges over repeated runs.  A load is ``clients`` threads, each with its own
``tritonclient.grpc`` connection, sending back-to-back requests (a closed loop
with no think time) round-robin over the apps; every request is timed end to
end at the client and split with the timing parameters the server returns:

* **compute**: the simulated (or real) GPU time of the request's kernels;
* **overhead**: end to end minus compute -- what the serving stack, the
  scheduler's queueing and the squad synchronisation add;
* **stack**: end to end minus the server's own arrival-to-completion time --
  gRPC, decoding, encoding, threads: the share an engineer can cut without
  touching the scheduler.

``tritonclient[grpc]`` comes with the ``test`` extra.
"""

from __future__ import annotations

import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import grpc
import numpy as np

from bless.serving.server.server import state_token

BANNER_TIMEOUT_S = 60.0
"""How long a fresh ``bless serve`` may take to print its banner (imports, numba's cache)."""


class ServeProcess:
    """``bless serve`` in a child process, on free ports, with its own state directory."""

    def __init__(self, state_dir: Path, profile_path: Path | None = None, *extra: str) -> None:
        env = dict(os.environ)
        if profile_path is not None:
            env["BLESS_PROFILE_PATH"] = str(profile_path)
        self.state = Path(state_dir)
        ports = ["--http-port", "0", "--grpc-port", "0", "--metrics-port", "0"]
        args = [*ports, "--state-dir", str(self.state), "--log-level", "WARNING"]
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "bless.cli", "serve", *args, *extra],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=env,
        )
        self.lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()
        banner = self.wait_for_line("bless serving on", timeout=BANNER_TIMEOUT_S)
        address = re.search(r"serving on (\S+) ", banner)
        metrics = re.search(r"metrics (\S+);", banner)
        rest = re.search(r"REST (\S+);", banner)
        if address is None or metrics is None or rest is None:
            raise RuntimeError(f"bless serve's banner names no address, REST or metrics URL: {banner!r}")
        self.address = address.group(1)
        self.metrics_url = metrics.group(1)
        self.rest_url = rest.group(1).removesuffix("/v2")
        """The REST API's base URL (``http://127.0.0.1:PORT``)."""
        self.token = state_token(self.state)

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(line)

    def wait_for_line(self, text: str, timeout: float) -> str:
        """The first line of the server's output containing ``text``."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                line = self.lines.get(timeout=0.1)
            except queue.Empty:
                if self.proc.poll() is not None:
                    break
                continue
            if text in line:
                return line
        raise RuntimeError(f"bless serve did not print {text!r} (exit code {self.proc.poll()})")

    def terminate(self, timeout: float = 30.0) -> int:
        """SIGTERM, as an operator stops it; its exit code."""
        self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout=timeout)

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


@dataclass(frozen=True)
class LoadResult:
    """Every answered request of one load, timed (seconds)."""

    requests: int
    wall: float
    apps: np.ndarray
    """The app of each successful request."""
    end_to_end: np.ndarray
    compute: np.ndarray
    server: np.ndarray
    """Arrival at the server to the host seeing the last kernel end (latency + sync wait)."""
    errors: tuple[str, ...]
    """The gRPC status of each request that failed."""

    @property
    def throughput(self) -> float:
        return self.requests / self.wall

    @property
    def overhead(self) -> np.ndarray:
        return self.end_to_end - self.compute

    @property
    def stack(self) -> np.ndarray:
        return self.end_to_end - self.server


def hammer(
    address: str,
    apps: list[str],
    clients: int,
    total: int,
    input_shape: tuple[int, ...] = (1, 16),
    *,
    credentials: grpc.ChannelCredentials | None = None,
) -> LoadResult:
    """``total`` requests from ``clients`` closed-loop threads, app ``i % len(apps)`` for client ``i``;
    ``credentials`` (e.g. :func:`~bless.serving.client.tls.channel_credentials`) for a server with TLS."""
    import tritonclient.grpc as triton

    rows: list[tuple[int, float, float, float]] = []
    errors: list[str] = []
    lock = threading.Lock()

    def client(i: int) -> None:
        app = apps[i % len(apps)]
        c = triton.InferenceServerClient(address, creds=credentials)
        x = triton.InferInput("INPUT", list(input_shape), "FP32")
        x.set_data_from_numpy(np.full(input_shape, i, dtype=np.float32))
        for _ in range(total // clients + (i < total % clients)):
            t0 = time.perf_counter()
            try:
                r = c.infer(app, [x])
            except triton.InferenceServerException as e:
                with lock:
                    errors.append(str(e.status()))
                continue
            e2e = time.perf_counter() - t0
            p = r.get_response().parameters
            server = p["bless_latency_seconds"].double_param + p["bless_sync_wait_seconds"].double_param
            with lock:
                rows.append((i % len(apps), e2e, p["bless_compute_seconds"].double_param, server))

    start = time.perf_counter()
    threads = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - start
    a = np.array(rows).reshape(-1, 4)
    return LoadResult(total, wall, a[:, 0].astype(int), a[:, 1], a[:, 2], a[:, 3], tuple(errors))


def percentiles(x: np.ndarray) -> str:
    """``p50 …, p99 …`` in milliseconds."""
    return f"p50 {np.percentile(x, 50) * 1e3:.3f} ms, p99 {np.percentile(x, 99) * 1e3:.3f} ms"
