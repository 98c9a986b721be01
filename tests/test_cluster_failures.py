"""Failures of bless cluster on a local Ray cluster of 4 simulated GPUs: a GPU agent killed
(its apps re-placed, its requests UNAVAILABLE, the others served), an agent that comes back,
a controller restarted from its state (skipped where Ray is not installed)."""

from __future__ import annotations

import contextlib
import json
import threading
import time

import pytest

ray = pytest.importorskip("ray")
grpc = pytest.importorskip("grpc")

# Each test starts and kills a 4-GPU Ray cluster (35 s for the file): the slow tier, which CI runs
# as its own step, keeps `make test` under two minutes.
pytestmark = pytest.mark.slow

from bless.cli import main  # noqa: E402
from bless.cluster import ray_actors as ra  # noqa: E402
from bless.cluster.controller import STATE_FILE  # noqa: E402
from bless.cluster.frontend import ClusterFrontend  # noqa: E402
from bless.serving.api import oip  # noqa: E402
from bless.serving.server.errors import Unavailable  # noqa: E402
from bless.serving.server.rpc import RETRY_PUSHBACK  # noqa: E402

GPUS = 4
INFER = "/inference.GRPCInferenceService/ModelInfer"


@pytest.fixture
def cluster(ray_local, tmp_path):
    """A fresh cluster per test (the tests kill its actors): the client and the state dir."""
    ra.start_cluster(GPUS, tmp_path, warm_up=False)
    try:
        yield ra.ClusterClient(), tmp_path
    finally:
        with contextlib.suppress(ValueError):  # no controller: a test killed it
            ra.stop_cluster()
        for g in range(GPUS):  # agents started again by a test
            with contextlib.suppress(ValueError):
                ray.kill(ray.get_actor(ra.agent_name(f"gpu-{g}"), namespace=ra.NAMESPACE))


def kill_agent(gpu_id: str) -> None:
    ray.kill(ray.get_actor(ra.agent_name(gpu_id), namespace=ra.NAMESPACE))


def wait_for(predicate, timeout: float = 20.0, period: float = 0.05):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        value = predicate()
        if value:
            return value
        time.sleep(period)
    raise AssertionError("timed out waiting")


def request(model: str) -> bytes:
    return oip.ModelInferRequest(
        model_name=model,
        inputs=[oip.ModelInferRequest.InferInputTensor(name="INPUT", datatype="FP32", shape=[1, 16])],
        raw_input_contents=[bytes(64)],
    ).SerializeToString()


class Hammer:
    """Threads sending ModelInfer for one model through the front end, back to back, each
    answer (or error, by status code) counted: sent == answered means none was lost."""

    def __init__(self, address: str, model: str, threads: int = 2) -> None:
        self.model = model
        self.raw = request(model)
        self.channel = grpc.insecure_channel(address)
        self.call = self.channel.unary_unary(INFER)
        self.lock = threading.Lock()
        self.sent = self.answered = 0
        self.ok: list[float] = []  # when each success came
        self.errors: list[tuple[float, grpc.StatusCode, dict]] = []
        self.stop = threading.Event()
        self.threads = [threading.Thread(target=self.run, daemon=True) for _ in range(threads)]
        for t in self.threads:
            t.start()

    def run(self) -> None:
        while not self.stop.is_set():
            with self.lock:
                self.sent += 1
            try:
                self.call(self.raw, timeout=15.0)
                with self.lock:
                    self.answered += 1
                    self.ok.append(time.monotonic())
            except grpc.RpcError as e:
                with self.lock:
                    self.answered += 1
                    self.errors.append((time.monotonic(), e.code(), dict(e.trailing_metadata() or ())))

    def join(self) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(30.0)
            assert not t.is_alive(), f"a request of {self.model} hangs"
        self.channel.close()


def test_a_killed_agents_app_answers_unavailable_then_is_served_from_another_gpu(cluster):
    client, state_dir = cluster
    with ClusterFrontend(client) as fe:
        # quotas 60% + 60%: a on gpu-0, b on gpu-1
        assert client.register("a", "resnet50", "60%")["gpu"] == "gpu-0"
        assert client.register("b", "bert", "60%")["gpu"] == "gpu-1"
        a, b = Hammer(fe.address, "a"), Hammer(fe.address, "b")
        try:
            wait_for(lambda: len(a.ok) > 20 and len(b.ok) > 20)
            killed = time.monotonic()
            kill_agent("gpu-1")
            # b is served again, from another GPU, after its failures
            wait_for(lambda: b.errors and sum(t > b.errors[-1][0] for t in b.ok) >= 20)
            a_before = len(a.ok)
            wait_for(lambda: len(a.ok) > a_before + 20)
        finally:
            a.join()
            b.join()
    assert a.sent == a.answered and b.sent == b.answered  # every request answered: none lost
    assert a.errors == []  # the other app never failed
    assert b.errors, "b's requests should have failed while its GPU was down"
    assert {code for _, code, _ in b.errors} == {grpc.StatusCode.UNAVAILABLE}
    assert all(RETRY_PUSHBACK in trailing for _, _, trailing in b.errors)  # the retry hint
    outage = b.errors[-1][0] - killed
    print(f"b: {len(b.errors)} UNAVAILABLE over {outage:.2f} s, {len(b.ok)} ok; a: {len(a.ok)} ok")
    assert outage < 10.0, f"b was down {outage:.1f} s"
    placements = client.placements()
    assert placements["a"]["gpu"] == "gpu-0"
    assert placements["b"]["gpu"] == "gpu-2"  # first-fit over the survivors: gpu-0 is too full
    assert "re-placed from gpu-1" in placements["b"]["placement"]["why"]
    assert client.infer("b")["gpu"] == "gpu-2"
    state = json.loads((state_dir / "controller" / STATE_FILE).read_text())
    assert state["apps"]["b"]["gpu"] == "gpu-2" and "gpu-1" in state["down"] and state["unplaced"] == {}
    status = {g["gpu_id"]: g for g in client.status()}
    assert status["gpu-1"]["down"] and [x["name"] for x in status["gpu-2"]["apps"]] == ["b"]


def test_an_app_that_fits_nowhere_is_unplaced_then_placed_when_its_agent_rejoins(cluster, capsys):
    client, state_dir = cluster
    for i in range(GPUS):
        assert client.register(f"r{i}", "resnet50", "60%")["gpu"] == f"gpu-{i}"
    kill_agent("gpu-3")
    with pytest.raises(Unavailable, match="down"):  # the controller finds it dead on the call
        client.infer("r3")
    health = client.health()
    assert "gpu-3" in health["down"]
    assert "no GPU can take 'r3'" in health["unplaced"]["r3"]["reason"]  # listed with why, not dropped
    with pytest.raises(Unavailable, match="no GPU"):
        client.infer("r3")
    state = json.loads((state_dir / "controller" / STATE_FILE).read_text())
    assert "r3" in state["unplaced"] and "r3" not in state["apps"]
    capsys.readouterr()
    assert main(["cluster", "status", "--address", "auto"]) == 0  # this process is on the cluster already
    shown = capsys.readouterr().out
    assert "gpu-3 is down" in shown and "r3 has no GPU" in shown  # the operator sees both, with why
    with ClusterFrontend(client) as fe:
        channel = grpc.insecure_channel(fe.address)
        with pytest.raises(grpc.RpcError) as e:
            channel.unary_unary(INFER)(request("r3"), timeout=10.0)
        assert e.value.code() == grpc.StatusCode.UNAVAILABLE and "no GPU" in e.value.details()
        channel.unary_unary(INFER)(request("r0"), timeout=10.0)  # the others are served

        # the agent of gpu-3 comes back (a new actor, its store has r3): r3 is placed again
        ra.start_agent("gpu-3", state_dir, warm_up=False)  # (the health check may see it first)
        assert client.placements()["r3"]["gpu"] == "gpu-3"
        health = client.health()
        assert health["down"] == {} and health["unplaced"] == {}
        assert client.infer("r3")["gpu"] == "gpu-3"
        wait_for(lambda: _serves(channel, "r3"))
        channel.close()


def _serves(channel, model: str) -> bool:
    try:
        channel.unary_unary(INFER)(request(model), timeout=10.0)
        return True
    except grpc.RpcError:
        return False


def test_a_rejoining_agent_drops_apps_moved_away_and_takes_new_ones(cluster):
    client, state_dir = cluster
    assert client.register("a", "resnet50", "60%")["gpu"] == "gpu-0"
    assert client.register("b", "bert", "60%")["gpu"] == "gpu-1"
    kill_agent("gpu-1")
    # no call needed: the controller's health check finds the dead agent and moves b
    wait_for(lambda: client.placements().get("b", {}).get("gpu") == "gpu-2")
    ray.get(ra.controller_handle().stop_checks.remote())  # the join below, not a health check
    joined = ra.start_agent("gpu-1", state_dir, warm_up=False)
    assert joined["removed"] == ["b"]  # its store brought b back; b runs on gpu-2 now
    assert client.health()["down"] == {}
    # gpu-1 is a placement target again: first-fit puts a 50 % app there (gpu-0 holds 60 %)
    placed = client.register("d", "resnet50", "40%")
    assert placed["gpu"] in ("gpu-0", "gpu-1")
    e = client.register("e", "bert", "50%")
    assert e["gpu"] == "gpu-1"
    assert client.infer("e")["gpu"] == "gpu-1" and client.infer("b")["gpu"] == "gpu-2"
    status = {g["gpu_id"]: [x["name"] for x in g["apps"]] for g in client.status()}
    assert "b" not in status["gpu-1"] and "e" in status["gpu-1"]


def test_a_controller_restarted_from_its_state_finds_its_agents_and_placements(cluster):
    client, state_dir = cluster
    assert client.register("a", "resnet50", "60%")["gpu"] == "gpu-0"
    assert client.register("b", "bert", "60%")["gpu"] == "gpu-1"
    client.set_quota("a", "45%")  # the controller stores it: the restart and the failover below keep it
    before = client.placements()
    assert before["a"]["spec"]["quota"] == pytest.approx(0.45)
    ray.kill(ra.controller_handle())
    ra.wait_gone(timeout=20.0)
    ra.restart_controller(state_dir)
    client = ra.ClusterClient()
    assert client.placements() == before
    assert client.health()["found"] == {f"gpu-{i}": "up" for i in range(GPUS)}
    assert client.infer("a")["gpu"] == "gpu-0" and client.infer("b")["gpu"] == "gpu-1"
    with ClusterFrontend(client) as fe:
        channel = grpc.insecure_channel(fe.address)
        assert _serves(channel, "a") and _serves(channel, "b")
        channel.close()
    # it watches the agents it found: one killed now is failed over
    kill_agent("gpu-0")
    wait_for(lambda: client.placements()["a"]["gpu"] != "gpu-0")
    assert client.infer("a")["gpu"] == "gpu-2"
    status = {g["gpu_id"]: {x["name"]: x["quota"] for x in g["apps"]} for g in client.status()}
    assert status["gpu-2"] == {"a": pytest.approx(0.45)}  # re-placed with the quota set, not the one registered


def test_a_controller_restarted_while_an_agent_was_dead_fails_it_over(cluster):
    client, state_dir = cluster
    assert client.register("a", "resnet50", "60%")["gpu"] == "gpu-0"
    ray.get(ra.controller_handle().stop_checks.remote())
    ray.kill(ra.controller_handle())
    ra.wait_gone(timeout=20.0)
    kill_agent("gpu-0")
    ra.restart_controller(state_dir)
    client = ra.ClusterClient()
    assert client.health()["found"]["gpu-0"] == "down"
    assert client.placements()["a"]["gpu"] == "gpu-1"
    assert client.infer("a")["gpu"] == "gpu-1"


def test_unregistering_an_app_whose_agent_just_died_removes_it_where_it_was_moved(cluster):
    client, _ = cluster
    ray.get(ra.controller_handle().stop_checks.remote())  # the unregister finds the death
    assert client.register("a", "resnet50", "60%")["gpu"] == "gpu-0"
    kill_agent("gpu-0")
    client.unregister("a")
    assert client.placements() == {} and client.health()["unplaced"] == {}
    assert all(g.get("apps") == [] for g in client.status())
