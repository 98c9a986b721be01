"""The modules mypyc compiles into a standard wheel (``hatch_build.py``: the scheduler step
and the simulated GPU's engine) take the same decisions at the same simulated times as the
interpreted source.  Runs under ``make test-native``; an editable install has nothing
compiled to compare."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bless.native import NATIVE_MODULES, compiled_modules

ROOT = Path(__file__).resolve().parents[1]

# Every step's decision over a few short replays, hashed: the launches (request, kernels,
# context, stream), the kernel a launch waits on and when pacing wakes next.
FINGERPRINT = """
import hashlib, json, sys
from bless.core.lifecycle import AppState
from bless.harness.loads import parse_load
from bless.harness.replay import Replay
from bless.native import compiled_modules
from bless.policies.bless import BlessPolicy
from bless.profiles.catalog import load_app
from bless.sim.backend import SimBackend

class Fingerprinted(BlessPolicy):
    def step(self, now, apps):
        d = super().step(now, apps)
        launches = [] if d is None else [(p.request.rid, p.start, p.count, p.sm_limit, p.low_priority) for p in d.launches]
        rest = None if d is None else (d.launch_of_kernel, d.wake_at)
        digest.update(repr((now, launches, rest)).encode())
        return d

out = {"compiled": list(compiled_modules()), "replays": []}
for gpu, names, quotas, loads in json.loads(sys.argv[1]):
    digest = hashlib.sha256()
    apps = [AppState(i, f"{n}{i}", load_app(n, gpu), q) for i, (n, q) in enumerate(zip(names, quotas))]
    Replay(SimBackend(gpu), Fingerprinted(), apps, [parse_load(x) for x in loads], duration=0.5, seed=0).run()
    out["replays"].append(digest.hexdigest())
print(json.dumps(out))
"""

REPLAYS = [
    ("a100", ["resnet50", "bert", "vgg11", "resnet101"] * 2, [1 / 8] * 8, ["A"] * 8),
    ("a100", ["resnet50", "bert", "vgg11", "resnet101"], [0.1, 0.2, 0.3, 0.4], ["B"] * 4),
    ("a100", ["bert", "resnet50"], [0.5, 0.5], ["poisson:300", "B"]),
    (
        "a100",
        ["vgg11", "bert", "nasnet"],
        [5 / 18, 6 / 18, 7 / 18],
        ["poisson:400", "A", {"type": "closed", "interval": 0.0}],
    ),
    ("h100", ["resnet50", "bert"], [0.5, 0.5], ["A", "poisson:200"]),
]


def _fingerprints(pythonpath: str, cwd: Path) -> dict:
    """The replays' fingerprints in a fresh process that finds bless first on ``pythonpath``
    (run from ``cwd``, an empty folder: ``python -c`` puts its working folder first)."""
    env = {**os.environ, "PYTHONPATH": pythonpath}
    run = subprocess.run(
        [sys.executable, "-c", FINGERPRINT, json.dumps(REPLAYS)],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(run.stdout)


@pytest.mark.skipif(
    not compiled_modules(), reason="the scheduler step runs interpreted here (make test-native compiles it)"
)
def test_the_compiled_step_decides_as_the_source_does(tmp_path):
    compiled = _fingerprints(os.environ.get("PYTHONPATH", ""), tmp_path)
    interpreted = _fingerprints(str(ROOT), tmp_path)  # the source tree first: its modules, not the wheel's
    assert compiled["compiled"] == list(NATIVE_MODULES)
    assert interpreted["compiled"] == []
    assert compiled["replays"] == interpreted["replays"]
