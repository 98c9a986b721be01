"""Operator-grade security of `bless serve`: the admin token's sources, TLS (and mutual
TLS), refusing clear text off loopback, slowing token guesses, what unauthenticated
reads show, and input validation (malformed messages, quotas, SLOs, ports)."""

import logging
import os
import signal
import socket
import ssl
import subprocess
import sys
import time
import urllib.request

import grpc
import pytest
from server_helpers import (  # noqa: F401  (fixtures)
    admin,
    make_server,
    needs_openssl,
    profile_dir,
    self_signed,
    server,
)

from bless.harness.config import ConfigError
from bless.serving.api import ADMIN_SERVICE, OIP_SERVICE, methods
from bless.serving.client import BlessClient
from bless.serving.server import ServerConfig
from bless.serving.server.config import load_server_config
from bless.serving.server.errors import StartupError
from bless.serving.server.security import AUTH_BURST, AUTH_MAX_WAIT, AUTH_REFILL_SECONDS, new_token

TOKEN = "s3cret-token-for-tests"


def code_and_details(call) -> tuple[grpc.StatusCode, str]:
    try:
        call()
    except grpc.RpcError as e:
        return e.code(), e.details()
    return grpc.StatusCode.OK, ""


# ---------------------------------------------------------------------------- TLS
@needs_openssl
def test_tls_round_trip_on_grpc_rest_and_metrics(make_server, tmp_path):
    cert, key = self_signed(tmp_path, "server")
    server = make_server(tls_cert=cert, tls_key=key, admin_token=TOKEN, http_port=0)
    trusted = grpc.ssl_channel_credentials(root_certificates=cert.read_bytes())
    with BlessClient(server.address, token=TOKEN, timeout=10, credentials=trusted) as c:
        c.register("a", "quick", "50%")
        assert c.infer("a").outputs
    with BlessClient(server.address, timeout=2) as plain:
        code, _ = code_and_details(plain.apps)
    assert code == grpc.StatusCode.UNAVAILABLE  # no clear text on a TLS port
    ctx = ssl.create_default_context(cafile=cert)
    with urllib.request.urlopen(f"https://127.0.0.1:{server.metrics_port}/metrics", context=ctx, timeout=10) as r:
        assert b"bless_requests_total" in r.read()
    with urllib.request.urlopen(f"https://127.0.0.1:{server.http_port}/v2/health/ready", context=ctx, timeout=10) as r:
        assert r.status == 200
    with pytest.raises(OSError):  # no clear text on the TLS REST port either
        urllib.request.urlopen(f"http://127.0.0.1:{server.http_port}/v2/health/ready", timeout=5).read()


@needs_openssl
def test_mutual_tls_requires_a_client_certificate_the_ca_signed(make_server, tmp_path):
    cert, key = self_signed(tmp_path, "server")
    client_cert, client_key = self_signed(tmp_path, "client")
    stranger_cert, stranger_key = self_signed(tmp_path, "stranger")
    server = make_server(tls_cert=cert, tls_key=key, tls_client_ca=client_cert)

    def list_apps_as(chain, private_key) -> grpc.StatusCode:
        creds = grpc.ssl_channel_credentials(
            root_certificates=cert.read_bytes(),
            private_key=private_key.read_bytes() if private_key else None,
            certificate_chain=chain.read_bytes() if chain else None,
        )
        with BlessClient(server.address, timeout=5, credentials=creds) as c:
            return code_and_details(c.apps)[0]

    assert list_apps_as(client_cert, client_key) == grpc.StatusCode.OK
    assert list_apps_as(None, None) == grpc.StatusCode.UNAVAILABLE
    assert list_apps_as(stranger_cert, stranger_key) == grpc.StatusCode.UNAVAILABLE


@needs_openssl
def test_a_non_loopback_host_needs_tls_or_insecure(tmp_path):
    for host in ("0.0.0.0", "::", "192.0.2.1"):
        with pytest.raises(ConfigError) as e:
            ServerConfig(host=host)
        message = str(e.value)
        assert "\n" not in message and f"host: {host}" in message
        assert "--tls-cert" in message and "--insecure" in message
    ServerConfig(host="0.0.0.0", insecure=True)
    cert, key = self_signed(tmp_path, "server")
    ServerConfig(host="0.0.0.0", tls_cert=cert, tls_key=key)
    for host in ("127.0.0.1", "127.0.0.2", "::1", "localhost"):
        ServerConfig(host=host)
    with pytest.raises(ConfigError, match="tls_cert, tls_key: give both"):
        ServerConfig(tls_cert=cert)


# ---------------------------------------------------------------------------- the admin token
def test_wrong_tokens_are_slowed_per_peer_and_logged_without_the_token(make_server, caplog):
    server = make_server(admin_token=TOKEN)
    wrong = "wrong-token-guess"
    channel = grpc.insecure_channel(server.address)
    m = methods(ADMIN_SERVICE)["ResetStats"]
    call = channel.unary_unary(m.path, m.request.SerializeToString, m.response.FromString)
    tries = 1000
    start = time.monotonic()
    with caplog.at_level(logging.INFO, logger="bless.serving.server"):
        futures = [
            call.future(m.request(), metadata=(("authorization", f"Bearer {wrong}"),), timeout=30) for _ in range(tries)
        ]
        errors = [f.exception() for f in futures]
    elapsed = time.monotonic() - start
    channel.close()
    assert {e.code() for e in errors} == {grpc.StatusCode.UNAUTHENTICATED}
    checked = sum("the admin token is wrong" in e.details() for e in errors)
    refused = sum("too many wrong admin tokens from 127.0.0.1" in e.details() for e in errors)
    assert checked + refused == tries
    # Only the burst and the calls that waited their turn were checked: at this rate the
    # 1,000 guesses would take (1000 - AUTH_BURST) * AUTH_REFILL_SECONDS, not a fraction of a second.
    assert checked <= AUTH_BURST + (elapsed + AUTH_MAX_WAIT) / AUTH_REFILL_SECONDS + 1
    failures = [r.getMessage() for r in caplog.records if "admin authentication failed" in r.getMessage()]
    assert len(failures) == checked
    assert "from 127.0.0.1 on ResetStats: wrong token" in failures[0]
    assert not [r for r in caplog.records if wrong in r.getMessage() or TOKEN in r.getMessage()]
    refusals = [r for r in caplog.records if "refusing admin calls from 127.0.0.1" in r.getMessage()]
    assert len(refusals) == 1  # one line per episode, not one per refused call


def test_a_correct_token_after_a_few_typos_is_not_slowed(make_server):
    server = make_server(admin_token=TOKEN)
    with BlessClient(server.address, token="typo-" + TOKEN, timeout=10) as c:
        for _ in range(AUTH_BURST - 1):
            assert code_and_details(c.reset_stats)[0] == grpc.StatusCode.UNAUTHENTICATED
    with BlessClient(server.address, token=TOKEN, timeout=10) as c:
        start = time.monotonic()
        c.reset_stats()
        assert time.monotonic() - start < AUTH_REFILL_SECONDS / 2


def test_the_token_comes_from_a_private_file(make_server, tmp_path):
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN + "\n")
    token_file.chmod(0o644)
    with pytest.raises(StartupError) as e:
        make_server(admin_token_file=token_file)
    assert f"chmod 600 {token_file}" in str(e.value) and "admin_token_file" in str(e.value)
    token_file.chmod(0o600)
    server = make_server(admin_token_file=token_file)
    assert server.token == TOKEN and server.token_source == f"the file {token_file}"


def test_generated_tokens_pass_on_a_command_line():
    """``bless client --token T``: a token starting with ``-`` would read as an option (a
    base64url token does once in 64; the CLI test met one)."""
    tokens = {new_token() for _ in range(2000)}
    assert len(tokens) == 2000
    assert all(t[0] != "-" and len(t) >= 32 and t.isalnum() for t in tokens)


def test_a_config_file_holding_a_token_must_be_private(tmp_path):
    config = tmp_path / "server.yaml"
    config.write_text(f"admin_token: {TOKEN}\n")
    config.chmod(0o640)
    with pytest.raises(ConfigError, match=f"admin_token: .*chmod 600 {config}"):
        load_server_config(config)
    config.chmod(0o600)
    cfg = load_server_config(config)
    assert cfg.admin_token == TOKEN and cfg.token_source == f"admin_token in {config}"
    config.write_text("grpc_port: 9001\n")
    config.chmod(0o644)  # no secret in it: anyone may read it
    assert load_server_config(config).grpc_port == 9001


def test_bless_serve_banner_names_the_token_file(tmp_path, profile_dir):
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN)
    token_file.chmod(0o600)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    env.pop("BLESS_ADMIN_TOKEN", None)
    proc = subprocess.Popen(
        [sys.executable, "-m", "bless.cli", "serve", "--grpc-port", "0", "--http-port", "0", "--metrics-port", "-1"]
        + ["--state-dir", str(tmp_path / "state"), "--admin-token-file", str(token_file)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        banner = proc.stdout.readline()
        proc.send_signal(signal.SIGTERM)  # at once: the main loop has just begun to wait
        rc = proc.wait(timeout=20)
    finally:
        if proc.poll() is None:
            proc.kill()  # a server that ignored SIGTERM must not keep its ports past the test
            proc.wait()
    assert f"admin token from the file {token_file};" in banner and "no TLS" in banner
    assert rc == 0, proc.stderr.read()


def test_a_signal_stops_a_waiting_command_and_the_first_one_is_kept():
    import os
    import time

    from bless.cli import StopSignals

    handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        stop = StopSignals()
        assert not stop.wait(0.01) and stop.received is None
        os.kill(os.getpid(), signal.SIGTERM)
        os.kill(os.getpid(), signal.SIGINT)
        t0 = time.monotonic()
        assert stop.wait(10) and stop.received == signal.SIGTERM
        assert time.monotonic() - t0 < 1
    finally:
        for sig, handler in handlers.items():
            signal.signal(sig, handler)


def test_port_in_use_is_one_line_naming_the_port_and_flag(tmp_path, capsys, profile_dir):
    from bless.cli import main

    busy = socket.socket()
    busy.bind(("127.0.0.1", 0))
    busy.listen()
    port = busy.getsockname()[1]
    handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        rc = main(["serve", "--grpc-port", str(port), "--metrics-port", "-1", "--state-dir", str(tmp_path / "s")]
                  + ["--admin-token", TOKEN])  # fmt: skip
        err = capsys.readouterr().err
        assert rc == 2
        lines = err.strip().splitlines()
        assert len(lines) == 2, err  # the --admin-token warning and the error
        assert "--admin-token shows the token to every user" in lines[0] and TOKEN not in err
        assert f"127.0.0.1:{port}" in lines[1] and "--grpc-port" in lines[1]
        rc = main(["serve", "--grpc-port", "0", "--metrics-port", str(port), "--state-dir", str(tmp_path / "s")])
        err = capsys.readouterr().err.strip()
        assert rc == 2 and "\n" not in err and f"127.0.0.1:{port}" in err and "--metrics-port" in err
    finally:
        busy.close()
        for sig, handler in handlers.items():
            signal.signal(sig, handler)


# ---------------------------------------------------------------------------- what strangers see
def test_unauthenticated_reads_show_no_server_paths(admin, server, profile_dir):
    path = profile_dir / "a100" / "quick.json"
    admin.register("a", str(path), "50%")
    admin.infer("a")
    with BlessClient(server.address, timeout=10) as stranger:
        apps = stranger.apps()
        stats = stranger.stats()
    assert [a.profile for a in apps.apps] == ["quick.json"]
    for answer in (apps, stats):
        assert str(profile_dir) not in str(answer) and str(server.config.state_dir) not in str(answer)


# ---------------------------------------------------------------------------- validation
def test_a_malformed_message_is_invalid_argument_without_a_traceback(server, caplog):
    channel = grpc.insecure_channel(server.address)
    with caplog.at_level(logging.INFO):
        for service in (ADMIN_SERVICE, OIP_SERVICE):
            for name, m in methods(service).items():
                call = channel.unary_unary(m.path)  # raw bytes
                code, details = code_and_details(lambda call=call: call(b"\xff\xff\xff\xff", timeout=10))
                assert code == grpc.StatusCode.INVALID_ARGUMENT, (name, code, details)
                assert "malformed request" in details
    channel.close()
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert not [r for r in caplog.records if r.exc_info or "Traceback" in r.getMessage()]


def test_a_quota_below_the_smallest_partition_is_refused_naming_the_minimum(admin):
    # A100: partition level 1 is 6 of 108 SMs, 5.56 %.
    for quota in ("5%", "0.01", "1/100"):
        code, details = code_and_details(lambda q=quota: admin.register("a", "quick", q))
        assert code == grpc.StatusCode.INVALID_ARGUMENT and details.startswith("quota:"), details
        assert "5.56%" in details and "'5.6%'" in details
    admin.register("a", "quick", "5.6%")
    code, details = code_and_details(lambda: admin.set_quota("a", "2%"))
    assert code == grpc.StatusCode.INVALID_ARGUMENT and details.startswith("quota:") and "'5.6%'" in details


def test_slos_must_be_finite_and_positive(admin):
    for slo in ("nan", "inf", "-inf", "0", "-1", "nanms", "infms", "0ms", "nanx", "infx", "0x", "-2x"):
        code, details = code_and_details(lambda s=slo: admin.register("a", "quick", "50%", slo=s))
        assert code == grpc.StatusCode.INVALID_ARGUMENT and details.startswith("slo:"), (slo, details)
    admin.register("a", "quick", "50%", slo="2x")
