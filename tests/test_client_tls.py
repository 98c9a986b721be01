"""`bless client` and the load helpers over TLS: every subcommand connects with the
credentials of --tls-ca/--tls-cert/--tls-key ($BLESS_TLS_*), and a TLS mismatch is a
one-line error that names the flag to pass."""

import os
import subprocess
import sys

import grpc
import pytest
from server_helpers import make_server, needs_openssl, profile_dir, self_signed  # noqa: F401  (fixtures)

from bless.cli import main
from bless.serving.client import BlessClient
from bless.serving.client.loadtest import hammer
from bless.serving.client.tls import channel_credentials

TOKEN = "client-tls-test-token"


@pytest.fixture(autouse=True)
def no_client_environment(monkeypatch):
    for name in ("BLESS_SERVER", "BLESS_ADMIN_TOKEN", "BLESS_TLS_CA", "BLESS_TLS_CERT", "BLESS_TLS_KEY"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def certs(tmp_path):
    """The server's self-signed certificate and key, and a client's."""
    return {
        **dict(zip(("cert", "key"), self_signed(tmp_path, "server"))),
        **dict(zip(("client_cert", "client_key"), self_signed(tmp_path, "client"))),
    }


def bless_client(address: str, *args) -> int:
    return main(["client", "--server", address, "--token", TOKEN, "--timeout", "10", *map(str, args)])


def one_line_error(capsys) -> str:
    captured = capsys.readouterr()
    err = captured.err.strip()
    assert "\n" not in err and "Traceback" not in err + captured.out, err
    assert err.startswith("bless client: error: "), err
    return err


def succeeded(address: str, cert) -> int:
    trusted = grpc.ssl_channel_credentials(cert.read_bytes())
    with BlessClient(address, timeout=10, credentials=trusted) as c:
        return c.stats("a").apps[0].succeeded


@needs_openssl
def test_every_subcommand_works_over_tls(make_server, certs, capsys, monkeypatch):
    server = make_server(tls_cert=certs["cert"], tls_key=certs["key"], admin_token=TOKEN)
    tls = ("--tls-ca", certs["cert"])
    assert bless_client(server.address, *tls, "register", "a", "--profile", "quick", "--quota", "50%") == 0
    assert "registered a: quota 50%" in capsys.readouterr().out
    assert bless_client(server.address, *tls, "infer", "--app", "a", "-n", "5") == 0
    assert succeeded(server.address, certs["cert"]) == 5
    assert bless_client(server.address, *tls, "replay", "--load", "a=poisson:40", "--duration", "0.3") == 0
    assert "client view" in capsys.readouterr().out
    replayed = succeeded(server.address, certs["cert"]) - 5
    assert replayed > 0
    monkeypatch.setenv("BLESS_TLS_CA", str(certs["cert"]))  # as $BLESS_SERVER stands in for --server
    assert bless_client(server.address, "stats", "a") == 0
    row = next(line for line in capsys.readouterr().out.splitlines() if line.strip("│ ").startswith("a "))
    assert f" {5 + replayed} " in row  # the table's ok column


@needs_openssl
def test_plain_text_at_a_tls_server_says_to_pass_tls_ca(make_server, certs, capsys):
    server = make_server(tls_cert=certs["cert"], tls_key=certs["key"], admin_token=TOKEN)
    for command in (["apps"], ["infer", "--app", "a", "-n", "1"]):  # the admin client and the replay's
        assert bless_client(server.address, *command) == 2
        err = one_line_error(capsys)
        assert f"{server.address} speaks TLS" in err and "pass --tls-ca" in err and "--tls-cert" not in err


@needs_openssl
def test_mutual_tls_with_a_client_certificate(make_server, certs, capsys):
    server = make_server(
        tls_cert=certs["cert"], tls_key=certs["key"], tls_client_ca=certs["client_cert"], admin_token=TOKEN
    )
    tls = ("--tls-ca", certs["cert"])
    mine = ("--tls-cert", certs["client_cert"], "--tls-key", certs["client_key"])
    assert bless_client(server.address, *tls, *mine, "register", "a", "--profile", "quick", "--quota", "50%") == 0
    assert bless_client(server.address, *tls, *mine, "infer", "--app", "a", "-n", "3") == 0
    assert bless_client(server.address, *tls, *mine, "apps") == 0
    capsys.readouterr()

    assert bless_client(server.address, *tls, "apps") == 2
    assert "requires a client certificate (mutual TLS): pass --tls-cert and --tls-key" in one_line_error(capsys)
    assert bless_client(server.address, "apps") == 2
    err = one_line_error(capsys)
    assert "pass --tls-ca" in err and "--tls-cert/--tls-key" in err
    stranger = ("--tls-cert", certs["cert"], "--tls-key", certs["key"])  # a certificate the client CA did not sign
    assert bless_client(server.address, *tls, *stranger, "apps") == 2
    assert "refused the client certificate" in one_line_error(capsys)


@needs_openssl
def test_tls_at_a_plain_server_or_with_the_wrong_ca_says_so(make_server, certs, capsys):
    plain = make_server(admin_token=TOKEN)
    for tls in (["--tls-ca", certs["cert"]], ["--tls"]):  # --tls: TLS trusting the system's CAs
        assert bless_client(plain.address, *tls, "apps") == 2
        assert f"{plain.address} does not speak TLS: leave out --tls" in one_line_error(capsys)
    server = make_server(
        tls_cert=certs["cert"], tls_key=certs["key"], admin_token=TOKEN, state_dir=plain.config.state_dir.parent / "s2"
    )
    # In a process of its own, where gRPC's C core would log the failed handshake on stderr too.
    env = {k: v for k, v in os.environ.items() if k != "GRPC_VERBOSITY"} | {"PYTHONPATH": os.pathsep.join(sys.path)}
    run = subprocess.run(
        [sys.executable, "-m", "bless.cli", "client", "--server", server.address]
        + ["--tls-ca", str(certs["client_cert"]), "apps"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert run.returncode == 2 and run.stdout == ""
    assert run.stderr == (
        f"bless client: error: {server.address}'s certificate is not trusted (self signed certificate): "
        "pass --tls-ca with the server's certificate or the CA that signed it\n"
    )


@needs_openssl
def test_tls_file_errors_name_the_flag(certs, tmp_path, capsys, monkeypatch):
    address = "127.0.0.1:1"  # never reached: the files are checked first
    missing = tmp_path / "missing.pem"
    assert bless_client(address, "--tls-ca", missing, "apps") == 2
    assert f"--tls-ca: cannot read {missing}: No such file or directory" in one_line_error(capsys)
    assert bless_client(address, "--tls-ca", certs["key"], "apps") == 2
    assert f"--tls-ca: {certs['key']} holds no PEM certificate" in one_line_error(capsys)
    assert bless_client(address, "--tls-cert", certs["client_cert"], "apps") == 2
    assert "--tls-cert, --tls-key: give both" in one_line_error(capsys)
    assert bless_client(address, "--tls-cert", certs["client_cert"], "--tls-key", certs["key"], "apps") == 2
    assert "the key is not the certificate's" in one_line_error(capsys)
    monkeypatch.setenv("BLESS_TLS_KEY", str(missing))
    assert bless_client(address, "--tls-cert", certs["client_cert"], "apps") == 2
    assert f"$BLESS_TLS_KEY (--tls-key): cannot read {missing}" in one_line_error(capsys)


@needs_openssl
def test_hammer_over_tls(make_server, certs):
    server = make_server(tls_cert=certs["cert"], tls_key=certs["key"], admin_token=TOKEN)
    trusted = channel_credentials(ca=certs["cert"])
    with BlessClient(server.address, token=TOKEN, timeout=10, credentials=trusted) as c:
        c.register("a", "quick", "50%")
    load = hammer(server.address, ["a"], clients=2, total=10, credentials=trusted)
    assert load.errors == () and len(load.end_to_end) == 10
