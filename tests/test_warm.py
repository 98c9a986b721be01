"""A policy's compiled code is loaded before a wall clock starts (``bless.harness.warm``).

On a wall-clock backend (a GPU, the server's simulator) whatever the determiner compiles on
its first call falls on the first request: on a fresh H200 that held a run's first kernels
back for 3.4 s. The property: after :func:`warm_up_policy`, running the policy over real apps
compiles nothing more. Each case runs in a fresh process, where nothing is compiled yet.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

SCRIPT = """
import json, sys
import numba
from bless.core import determiner
from bless.harness.config import config_from_dict
from bless.harness.run import app_states, make_policy, run_config
from bless.harness.warm import warm_up_policy
from bless.profiles.catalog import load_app

def compiled():
    return {name: len(f.signatures) for name, f in vars(determiner).items()
            if isinstance(f, numba.core.registry.CPUDispatcher)}

cfg = config_from_dict(json.loads(sys.argv[1]))
apps = app_states(cfg, [load_app(a.app, cfg.gpu) for a in cfg.apps])
warm_up_policy(make_policy(cfg), cfg.gpu, like=apps)
warm = compiled()
run_config(cfg)
print(json.dumps({"warm": warm, "after_run": compiled()}))
"""

APPS = [
    {"app": "resnet50", "quota": 0.25, "load": "B"},
    {"app": "bert", "quota": 0.25, "load": {"type": "poisson", "rate": 200}},
    {"app": "vgg11", "quota": 0.25, "load": "A"},
    {"app": "nasnet", "quota": 0.25, "load": "C"},
]


@pytest.mark.parametrize(
    "policy, apps",
    [
        ("bless", APPS[:2]),
        ("bless", APPS),
        ({"name": "bless", "pacing": "paper"}, APPS[:2]),
        ({"name": "bless", "pacing": "paper"}, APPS),
    ],
    ids=["deadline-2-apps", "deadline-4-apps", "paper-2-apps", "paper-4-apps"],
)
def test_nothing_compiles_after_the_warm_up(policy, apps):
    cfg = {"gpu": "a100", "policy": policy, "duration": 0.3, "seed": 0, "apps": apps}
    out = subprocess.run(
        [sys.executable, "-c", SCRIPT, json.dumps(cfg)], capture_output=True, text=True, check=True, timeout=120
    )
    counts = json.loads(out.stdout.strip().splitlines()[-1])
    assert any(counts["warm"].values()), "the warm-up compiled nothing: the check would prove nothing"
    assert counts["after_run"] == counts["warm"]


@pytest.mark.parametrize(
    "policy, apps", [("zico", ["resnet50_train", "vgg11_train"]), ("gslice", ["resnet50", "bert"])]
)
def test_a_policy_warms_up_on_the_apps_it_will_run(policy, apps):
    """ZICO takes training jobs only: a warm-up on synthetic inference apps would refuse to run."""
    from bless.harness.config import config_from_dict
    from bless.harness.run import app_states, make_policy
    from bless.harness.warm import warm_up_policy
    from bless.profiles.catalog import load_app

    raw = {"gpu": "a100", "policy": policy, "apps": [{"app": a, "quota": 0.5, "load": "A"} for a in apps]}
    cfg = config_from_dict(raw)
    states = app_states(cfg, [load_app(a, "a100") for a in apps])
    warm_up_policy(make_policy(cfg), "a100", like=states)
    assert all(not a.queue and a.active is None and a.handle is None for a in states)  # copies ran, not these
