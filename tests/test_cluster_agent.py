"""A GPU agent's reach and resources without Ray: where it listens and what it advertises, the
checks that keep clear text on loopback, the Ray resources a simulated or CUDA agent asks for,
and `bless cluster up`'s flags refused before any Ray cluster starts."""

from __future__ import annotations

import types

import grpc
import pytest

from bless.cli import main
from bless.cluster import ray_actors as ra
from bless.cluster.agent import AgentConfig, GpuAgent
from bless.serving.api import oip


def test_an_agent_off_loopback_needs_insecure_and_an_address_to_advertise(tmp_path):
    with pytest.raises(ValueError, match="--agent-host: 0.0.0.0 is reachable from other machines.*--insecure"):
        AgentConfig("gpu-0", tmp_path, grpc_host="0.0.0.0", grpc_port=0)
    wildcard = AgentConfig("gpu-0", tmp_path, grpc_host="0.0.0.0", grpc_port=0, insecure=True)
    with pytest.raises(ValueError, match="--advertise-host: the agent listens on every interface"):
        _ = wildcard.dial_host
    assert AgentConfig("gpu-0", tmp_path, grpc_host="0.0.0.0", advertise_host="10.0.0.7", insecure=True).dial_host == (
        "10.0.0.7"
    )
    assert AgentConfig("gpu-0", tmp_path).dial_host == "127.0.0.1"
    with pytest.raises(ValueError, match="backend: bless cluster runs sim or cuda agents, got 'tpu'"):
        AgentConfig("gpu-0", tmp_path, backend="tpu")


def test_an_agent_on_every_interface_advertises_its_node_address(tmp_path, monkeypatch):
    """On Ray, an agent given no address to advertise takes its node's IP (here: loopback),
    and the front end reaches it there."""
    fake_ray = types.SimpleNamespace(util=types.SimpleNamespace(get_node_ip_address=lambda: "127.0.0.1"))
    monkeypatch.setattr(ra, "import_ray", lambda: fake_ray)
    config = AgentConfig("gpu-0", tmp_path, grpc_host="0.0.0.0", grpc_port=0, insecure=True, warm_up=False)
    agent = ra.RayGpuAgent(config)
    try:
        address = agent.endpoint()["address"]
        assert address.startswith("127.0.0.1:")
        with grpc.insecure_channel(address) as channel:
            live = channel.unary_unary(
                "/inference.GRPCInferenceService/ServerLive",
                request_serializer=oip.ServerLiveRequest.SerializeToString,
                response_deserializer=oip.ServerLiveResponse.FromString,
            )(oip.ServerLiveRequest(), timeout=10)
        assert live.live
    finally:
        agent.close()


def test_an_advertised_host_is_what_the_endpoint_names(tmp_path):
    agent = GpuAgent(AgentConfig("gpu-0", tmp_path, grpc_port=0, advertise_host="localhost", warm_up=False))
    try:
        assert agent.endpoint()["address"].startswith("localhost:")
    finally:
        agent.close()


def test_simulated_agents_take_a_sim_unit_and_cuda_agents_a_ray_gpu():
    """The CUDA path's resource request (not run on a GPU here): Ray gives the actor one GPU and
    sets its CUDA_VISIBLE_DEVICES, so its backend sees that GPU alone."""
    assert ra.agent_options("sim") == {"num_cpus": 0, "resources": {ra.SIM_RESOURCE: 1}}
    assert ra.agent_options("cuda") == {"num_cpus": 0, "num_gpus": 1}
    with pytest.raises(ValueError, match="--backend: sim or cuda"):
        ra.agent_options("tpu")
    offers = types.SimpleNamespace(cluster_resources=lambda: {"GPU": 1.0, ra.SIM_RESOURCE: 4.0})
    with pytest.raises(ValueError, match=r"offers 1 GPUs, fewer than --gpus 2; .*ray start --num-gpus"):
        ra.check_resources(offers, "cuda", 2)
    ra.check_resources(offers, "cuda", 1)
    ra.check_resources(offers, "sim", 4)
    with pytest.raises(ValueError, match="offers 4 simulated GPUs"):
        ra.check_resources(offers, "sim", 5)


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--http-port", "0"], "--http-port: the REST API is part of the front end; give --grpc-port too"),
        (["--tls-cert", "cert.pem"], "--tls-cert: applies to the front end; give --grpc-port too"),
        (["--grpc-port", "0", "--host", "0.0.0.0"], "host: 0.0.0.0 is reachable from other machines"),
        (["--grpc-port", "0", "--tls-cert", "cert.pem"], "tls_cert, tls_key: give both (--tls-cert and --tls-key)"),
        (["--agent-host", "0.0.0.0"], "--agent-host: 0.0.0.0 is reachable from other machines"),
    ],
)
def test_cluster_up_refuses_bad_flags_before_starting_ray(tmp_path, capsys, flags, message, monkeypatch):
    monkeypatch.setattr(ra, "connect", lambda *a, **k: pytest.fail("Ray was started"))
    assert main(["cluster", "up", "--gpus", "2", "--state-dir", str(tmp_path), *flags]) == 2
    assert message in capsys.readouterr().err
