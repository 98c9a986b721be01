"""bless cluster on a local Ray cluster of 4 simulated GPUs (skipped where Ray is not installed)."""

from __future__ import annotations

import pytest

ray = pytest.importorskip("ray")

from bless.cluster import ray_actors as ra  # noqa: E402
from bless.serving.server.errors import AlreadyExists, FailedPrecondition, NotFound  # noqa: E402

GPUS = 4


@pytest.fixture(scope="module")
def cluster(ray_local, tmp_path_factory):
    ra.start_cluster(GPUS, tmp_path_factory.mktemp("cluster"), warm_up=False)
    try:
        yield ra.ClusterClient()
    finally:
        ra.stop_cluster()


def test_placement_through_the_controller_never_overcommits(cluster):
    placed = [cluster.register(f"r{i}", "resnet50", "60%")["gpu"] for i in range(GPUS)]
    assert placed == [f"gpu-{i}" for i in range(GPUS)]
    with pytest.raises(FailedPrecondition, match="no GPU can take 'x'"):
        cluster.register("x", "bert", "50%")
    with pytest.raises(AlreadyExists):
        cluster.register("r0", "bert", "10%")
    p = cluster.register("small", "resnet50", "40%", policy="best-fit-memory")
    assert p["gpu"] in placed and "least free memory" in p["why"]
    for g in cluster.status():
        assert g["quota_used"] <= 1 + 1e-9 and g["memory_used_bytes"] <= g["memory_bytes"]
    for name in ["small", *(f"r{i}" for i in range(GPUS))]:
        cluster.unregister(name)


def test_a_registered_app_runs_inferences_on_its_gpu(cluster):
    gpu = cluster.register("bert", "bert", "50%")["gpu"]
    runs = [cluster.infer("bert") for _ in range(5)]
    assert all(r["gpu"] == gpu and r["latency"] > 0 for r in runs)
    with pytest.raises(NotFound):
        cluster.infer("nobody")
    cluster.unregister("bert")


def test_status_lists_each_gpu_with_its_apps_and_quotas(cluster):
    cluster.register("a", "resnet50", "70%")
    cluster.register("b", "vgg11", "50%")
    cluster.register("c", "resnet50", "30%")
    status = cluster.status()
    assert [g["gpu_id"] for g in status] == [f"gpu-{i}" for i in range(GPUS)]
    apps = {g["gpu_id"]: [(a["name"], a["quota"]) for a in g["apps"]] for g in status}
    assert apps == {"gpu-0": [("a", 0.7), ("c", 0.3)], "gpu-1": [("b", 0.5)], "gpu-2": [], "gpu-3": []}
    assert all("iso_latency" in a for g in status for a in g["apps"])
    assert all(a["behind_quota"] == 0 for g in status for a in g["apps"])  # idle: none behind
    assert cluster.placements()["c"]["gpu"] == "gpu-0"
    for name in "abc":
        cluster.unregister(name)
