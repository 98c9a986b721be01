"""The server's load figures, as ranges over repeated runs: throughput and what the stack adds.

    python tools/serve_load.py [--clients 8] [--requests 4000] [--repeats 3]

Starts ``bless serve`` (simulated A100, wall clock) in a child process with
four tiny synthetic apps at 25 % each (8 kernels of ~25 us: the GPU is never
the bottleneck, so the figures measure the serving stack), then sends
``--requests`` requests from ``--clients`` closed-loop ``tritonclient.grpc``
threads, ``--repeats`` times on a fresh server.  Prints, per run and as a
min-max range: requests per second, end to end, the overhead (end to end minus
the GPU time) and the stack's share (end to end minus the server's own
arrival-to-completion time), p50 and p99.  The numbers depend on the machine
(its cores, their load): quote them with the machine, as ranges.
"""

from __future__ import annotations

import argparse
import os
import platform
import tempfile
from pathlib import Path

import numpy as np

from bless.profiles.synthetic import synthetic_profile
from bless.serving.client import BlessClient
from bless.serving.client.loadtest import LoadResult, ServeProcess, hammer

APPS = 4


def one_run(clients: int, requests: int) -> LoadResult:
    with tempfile.TemporaryDirectory() as tmp:
        profiles = Path(tmp) / "profiles"
        synthetic_profile("tiny", n_kernels=8, mean_us=25, seed=7).save(profiles / "a100" / "tiny.json")
        server = ServeProcess(Path(tmp) / "state", profiles)
        try:
            apps = [f"tiny{i}" for i in range(APPS)]
            with BlessClient(server.address, token=server.token) as admin:
                for app in apps:
                    admin.register(app, "tiny", f"{100 // APPS}%")
            hammer(server.address, apps, clients, min(requests, 200))  # warm-up: connections, numba
            return hammer(server.address, apps, clients, requests)
        finally:
            server.terminate()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--requests", type=int, default=4000)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    print(
        f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores; Python {platform.python_version()}"
    )
    rows = []
    for i in range(args.repeats):
        r = one_run(args.clients, args.requests)
        ms = {
            name: (np.percentile(x, 50) * 1e3, np.percentile(x, 99) * 1e3)
            for name, x in (("end to end", r.end_to_end), ("overhead", r.overhead), ("stack", r.stack))
        }
        rows.append((r.throughput, ms, len(r.errors)))
        cells = "; ".join(f"{k} p50 {a:.3f} / p99 {b:.3f} ms" for k, (a, b) in ms.items())
        print(f"run {i + 1}: {r.throughput:.0f} req/s; {cells}; {len(r.errors)} errors")
    tput = [t for t, _, _ in rows]
    print(f"\n{args.clients} clients, {args.requests} requests, {args.repeats} runs (min-max):")
    print(f"  throughput {min(tput):.0f}-{max(tput):.0f} req/s")
    for k in rows[0][1]:
        p50 = [m[k][0] for _, m, _ in rows]
        p99 = [m[k][1] for _, m, _ in rows]
        print(f"  {k}: p50 {min(p50):.3f}-{max(p50):.3f} ms, p99 {min(p99):.3f}-{max(p99):.3f} ms")


if __name__ == "__main__":
    main()
