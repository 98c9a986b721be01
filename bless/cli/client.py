"""``bless client ...``: talk to a running bless server (register apps, send requests, replay loads)."""

from __future__ import annotations

import argparse
import os
import re
from pathlib import Path
from typing import TYPE_CHECKING

from bless.cli import UserError, make_console

if TYPE_CHECKING:
    import grpc


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("client", help="talk to a running bless server: register apps, infer, replay loads, stats")
    p.add_argument(
        "--server",
        default=os.environ.get("BLESS_SERVER", "127.0.0.1:8001"),
        help="host:port of the server (default $BLESS_SERVER or 127.0.0.1:8001)",
    )
    p.add_argument(
        "--token",
        default=None,
        help="admin token for changes (default $BLESS_ADMIN_TOKEN, else the one in --state-dir)",
    )
    p.add_argument(
        "--state-dir",
        type=Path,
        default=None,
        help="state dir of a local server, to read its generated admin token (default ~/.local/state/bless)",
    )
    p.add_argument("--timeout", type=float, default=60.0, help="seconds per call (default 60)")
    p.add_argument(
        "--tls-ca",
        type=Path,
        metavar="PEM",
        help="PEM certificate to trust for the server: its own (self-signed) or its CA's; turns TLS on "
        "(default $BLESS_TLS_CA)",
    )
    p.add_argument(
        "--tls-cert",
        type=Path,
        metavar="PEM",
        help="PEM client certificate, for a server that requires one (mutual TLS; default $BLESS_TLS_CERT)",
    )
    p.add_argument("--tls-key", type=Path, metavar="PEM", help="PEM private key of --tls-cert (default $BLESS_TLS_KEY)")
    p.add_argument(
        "--tls", action="store_true", help="TLS trusting the system's CAs (implied by --tls-ca and --tls-cert)"
    )
    cmds = p.add_subparsers(dest="client_command", required=True, metavar="COMMAND")

    r = cmds.add_parser("register", help="register an app (admission answers accepted or why not)")
    r.add_argument("name", help="the app's model name on the server")
    r.add_argument(
        "--profile",
        required=True,
        help="profile name (profiles/<gpu>/<name>.json) or a profile .json path on the server",
    )
    r.add_argument("--quota", required=True, help="SM share: 50%%, 0.5 or 1/2")
    r.add_argument("--memory", type=int, default=0, help="device memory in bytes (default: the profile's)")
    r.add_argument("--slo", default="", help="latency target: 25ms, 0.025 or 2x (of the ISO latency)")
    r.add_argument(
        "--priority",
        choices=("latency-critical", "best-effort"),
        default="",
        help="priority class (default latency-critical); best-effort runs only in what the others leave",
    )
    r.add_argument(
        "--input",
        action="append",
        default=[],
        metavar="NAME:DTYPE:SHAPE",
        help="input tensor, e.g. INPUT:FP32:-1,16 (repeatable; default INPUT:FP32:-1,16)",
    )
    r.add_argument(
        "--output",
        action="append",
        default=[],
        metavar="NAME:DTYPE:SHAPE",
        help="output tensor (repeatable; default OUTPUT:FP32:-1,4)",
    )
    r.add_argument("--dry-run", action="store_true", help="only ask whether it would be admitted")

    u = cmds.add_parser("unregister", help="remove an app (its queued requests fail with ABORTED)")
    u.add_argument("name")

    q = cmds.add_parser("quota", help="change an app's SM quota")
    q.add_argument("name")
    q.add_argument("quota", help="50%%, 0.5 or 1/2")

    cmds.add_parser("apps", help="list the registered apps and the GPU")

    s = cmds.add_parser("stats", help="latency, counts and squads measured by the server")
    s.add_argument("name", nargs="?", default="", help="one app (default all)")
    s.add_argument("--reset", action="store_true", help="start a new measurement window afterwards")

    f = cmds.add_parser("fault", help="simulated GPU: make the app's next requests fault at a kernel")
    f.add_argument("name")
    f.add_argument("--kernel", type=int, default=0)
    f.add_argument("--count", type=int, default=1)

    i = cmds.add_parser("infer", help="send requests to one app and print latency percentiles")
    i.add_argument("--app", required=True)
    i.add_argument("-n", "--requests", type=int, default=100, help="requests to send (default 100)")
    i.add_argument(
        "--rate",
        type=float,
        default=None,
        help="open loop: Poisson arrivals at this many requests/s (default: one at a time, back to back)",
    )
    i.add_argument("--seed", type=int, default=0)

    rp = cmds.add_parser(
        "replay", help="replay loads (workloads A/B/C, poisson:RATE, traces) with many requests in flight"
    )
    rp.add_argument("--config", type=Path, help="a bless run config: its apps, loads, duration and seed")
    rp.add_argument(
        "--load",
        action="append",
        default=[],
        metavar="APP=LOAD",
        help="an app and its load: A, B, C, poisson:RATE or a YAML mapping (repeatable)",
    )
    rp.add_argument("--duration", type=float, default=None, help="seconds of arrivals (default: the config's, else 10)")
    rp.add_argument("--seed", type=int, default=None, help="load seed (default: the config's, else 0)")
    rp.add_argument("--register", action="store_true", help="register the config's apps first (needs the token)")
    p.set_defaults(func=client)


def _token(args: argparse.Namespace) -> str | None:
    from bless.serving.server.config import default_state_dir
    from bless.serving.server.server import state_token

    return args.token or os.environ.get("BLESS_ADMIN_TOKEN") or state_token(args.state_dir or default_state_dir())


TLS_OPTIONS = {
    "ca": ("--tls-ca", "BLESS_TLS_CA"),
    "cert": ("--tls-cert", "BLESS_TLS_CERT"),
    "key": ("--tls-key", "BLESS_TLS_KEY"),
}
"""Each TLS file: its flag and the environment variable that stands in for it (as $BLESS_SERVER
and $BLESS_ADMIN_TOKEN do for --server and --token)."""


def _tls_files(args: argparse.Namespace) -> tuple[dict[str, Path | None], dict[str, str]]:
    """Each TLS file from its flag, else its environment variable, and how errors name it."""
    files: dict[str, Path | None] = {}
    labels: dict[str, str] = {}
    for name, (flag, env) in TLS_OPTIONS.items():
        given = getattr(args, f"tls_{name}")
        if given is None and os.environ.get(env):
            given, labels[name] = Path(os.environ[env]), f"${env} ({flag})"
        else:
            labels[name] = flag
        files[name] = given
    return files, labels


def _credentials(args: argparse.Namespace) -> grpc.ChannelCredentials | None:
    """The channel credentials of every subcommand: TLS when --tls or a TLS file is given, by
    flag or environment variable (the flag wins); errors name the flag or variable used."""
    from bless.serving.client.tls import channel_credentials

    files, labels = _tls_files(args)
    if not args.tls and all(path is None for path in files.values()):
        return None
    return channel_credentials(**files, labels=labels)


CONNECT_FAILED = "failed to connect to all addresses"
"""gRPC's words when no connection could be set up (the call never reached a server)."""


def _connection_hint(address: str, tls: bool, client_cert: bool, error: grpc.RpcError) -> str | None:
    """Why a call reached no server, when TLS is why: gRPC says only "Socket closed" when a
    plain-text client meets a TLS server or a server misses the client's certificate."""
    import grpc

    from bless.serving.client.tls import Transport, probe

    details = error.details() or ""
    if error.code() != grpc.StatusCode.UNAVAILABLE or CONNECT_FAILED not in details:
        return None
    found = probe(address)
    if not tls:
        if found not in (Transport.TLS, Transport.TLS_CLOSED):
            return None
        also = " and --tls-cert/--tls-key (it wants a client certificate)" if found is Transport.TLS_CLOSED else ""
        return (
            f"{address} speaks TLS and this client sent plain text: pass --tls-ca with the server's "
            f"certificate or the CA that signed it (or set $BLESS_TLS_CA){also}"
        )
    if found is Transport.PLAINTEXT:
        return (
            f"{address} does not speak TLS: leave out --tls, --tls-ca, --tls-cert, --tls-key and $BLESS_TLS_*, "
            "or start the server with --tls-cert and --tls-key"
        )
    untrusted = re.search(r"CERTIFICATE_VERIFY_FAILED: ([^:]+)", details)
    if untrusted:
        return (
            f"{address}'s certificate is not trusted ({untrusted.group(1).strip()}): pass --tls-ca with the "
            "server's certificate or the CA that signed it"
        )
    if found is Transport.TLS_CLOSED:
        if client_cert:
            return f"{address} refused the client certificate: give one signed by the CA of its --tls-client-ca"
        return f"{address} requires a client certificate (mutual TLS): pass --tls-cert and --tls-key"
    return None


def _tensors(specs: list[str], default, flag: str):
    if not specs:
        return default
    out = []
    for spec in specs:
        try:
            name, dtype, shape = spec.split(":")
            out.append((name, dtype.upper(), [int(d) for d in shape.split(",")]))
        except ValueError:
            raise ValueError(f"--{flag} {spec!r}: expected NAME:DTYPE:SHAPE like INPUT:FP32:-1,16") from None
    return out


def _ms(x: float) -> str:
    return "-" if x != x else f"{x * 1e3:.2f}"


GRPC_VERBOSITY = "ERROR"
"""gRPC's C core logs a failed TLS handshake on stderr at INFO level, beside the one-line
error this command prints for it; a $GRPC_VERBOSITY the user set still wins."""


def client(args: argparse.Namespace) -> int:
    os.environ.setdefault("GRPC_VERBOSITY", GRPC_VERBOSITY)  # read when grpc is first imported
    import grpc

    from bless.serving.client import BlessClient

    console = make_console()
    credentials = _credentials(args)
    with BlessClient(args.server, token=_token(args), timeout=args.timeout, credentials=credentials) as c:
        try:
            return _COMMANDS[args.client_command](c, args, console)
        except grpc.RpcError as e:
            client_cert = _tls_files(args)[0]["cert"] is not None
            hint = _connection_hint(args.server, credentials is not None, client_cert, e)
            if hint:
                raise UserError(hint) from None
            console.print(f"[red]{e.code().name}[/red]: {e.details()}")
            return 1


def _register(c, args, console) -> int:
    from bless.serving.client.client import DEFAULT_INPUTS, DEFAULT_OUTPUTS

    r = c.register(
        args.name,
        args.profile,
        args.quota,
        memory_bytes=args.memory,
        slo=args.slo,
        inputs=_tensors(args.input, DEFAULT_INPUTS, "input"),
        outputs=_tensors(args.output, DEFAULT_OUTPUTS, "output"),
        dry_run=args.dry_run,
        priority=args.priority,
    )
    if not r.admission.accepted:
        console.print(f"[red]rejected[/red]: {r.admission.reason}")
        return 1
    if args.dry_run:
        console.print(f"{args.name}: would be admitted")
        return 0
    a = r.app
    console.print(
        f"registered {a.name}: quota {a.quota:.0%}, ISO latency {_ms(a.iso_latency_seconds)} ms, "
        f"solo {_ms(a.solo_latency_seconds)} ms, {a.kernels} kernels"
    )
    return 0


def _unregister(c, args, console) -> int:
    n = c.unregister(args.name)
    console.print(f"unregistered {args.name} ({n} queued requests aborted)")
    return 0


def _quota(c, args, console) -> int:
    a = c.set_quota(args.name, args.quota)
    console.print(f"{a.name}: quota {a.quota:.0%}, ISO latency {_ms(a.iso_latency_seconds)} ms")
    return 0


def _apps(c, args, console) -> int:
    from rich.table import Table

    r = c.apps()
    g = r.gpu
    console.print(
        f"{g.backend}: {g.memory_used_bytes / 2**30:.1f} of {g.memory_bytes / 2**30:.0f} GiB used, "
        f"restricted levels up to {g.max_restricted_level}, squads of {g.squad_size}"
    )
    t = Table("app", "profile", "quota", "ISO ms", "solo ms", "SLO ms", "kernels", "state")
    for a in r.apps:
        t.add_row(
            a.name,
            a.profile,
            f"{a.quota:.0%}",
            _ms(a.iso_latency_seconds),
            _ms(a.solo_latency_seconds),
            _ms(a.slo_seconds) if a.slo_seconds else "-",
            str(a.kernels),
            a.state,
        )
    console.print(t)
    for a in r.apps:
        tensors = lambda ts: ", ".join(f"{x.name}:{x.datatype}{list(x.shape)}" for x in ts)
        console.print(f"{a.name}: inputs {tensors(a.inputs)}; outputs {tensors(a.outputs)}", soft_wrap=True)
    return 0


def _stats(c, args, console) -> int:
    from rich.table import Table

    r = c.stats(args.name)
    t = Table(
        "app",
        "quota",
        "ok",
        "errors",
        "mean ms",
        "p50 ms",
        "p99 ms",
        "queue ms",
        "ISO ms",
        ">target",
        "req/s",
        "behind quota",
        title=f"window {r.window_seconds:.1f} s",
    )
    for a in r.apps:
        errors = ", ".join(
            f"{k} {getattr(a, k)}" for k in ("failed", "rejected", "cancelled", "aborted") if getattr(a, k)
        )
        t.add_row(
            a.name,
            f"{a.quota:.0%}",
            str(a.succeeded),
            errors or "-",
            _ms(a.latency.mean_seconds),
            _ms(a.latency.p50_seconds),
            _ms(a.latency.p99_seconds),
            _ms(a.queue.mean_seconds),
            _ms(a.iso_latency_seconds),
            f"{a.target_violation_rate:.0%}",
            f"{a.throughput_rps:.1f}",
            str(a.behind_quota),
        )
    console.print(t)
    g = r.gpu
    console.print(
        f"GPU utilisation {g.utilisation:.1%}; {g.squads} squads, mean {_ms(g.squad_mean_seconds)} ms, "
        f"p99 {_ms(g.squad_p99_seconds)} ms, {g.restricted_share:.0%} split; up {g.uptime_seconds:.0f} s"
    )
    if args.reset:
        c.reset_stats()
    return 0


def _fault(c, args, console) -> int:
    c.inject_fault(args.name, args.kernel, args.count)
    console.print(f"{args.name}: the next {args.count} request(s) fault at kernel {args.kernel}")
    return 0


def _print_replay(result, console) -> None:
    from rich.table import Table

    t = Table(
        "app",
        "sent",
        "ok",
        "errors",
        "mean ms",
        "p50 ms",
        "p99 ms",
        "server ms",
        "overhead p50/p99",
        "req/s",
        title=f"client view, {result.wall_seconds:.1f} s",
    )
    f = lambda x: "-" if x != x else f"{x:.2f}"
    for row in result.summary():
        errors = ", ".join(f"{k} {v}" for k, v in row["errors"].items()) or "-"
        t.add_row(
            row["app"],
            str(row["sent"]),
            str(row["ok"]),
            errors,
            f(row["mean_ms"]),
            f(row["p50_ms"]),
            f(row["p99_ms"]),
            f(row["server_mean_ms"]),
            f"{f(row['overhead_p50_ms'])}/{f(row['overhead_p99_ms'])}",
            f(row["throughput_rps"]),
        )
    console.print(t)


def _infer(c, args, console) -> int:
    from bless.harness.loads import ClosedLoop, Poisson
    from bless.serving.client import AppLoad, replay

    load = Poisson(args.rate) if args.rate else ClosedLoop(0.0, relative=False)
    result = replay(
        c.address,
        [AppLoad(args.app, load, requests=args.requests)],
        seed=args.seed,
        timeout=args.timeout,
        credentials=c.credentials,
    )
    _print_replay(result, console)
    return 0 if all(s.status == "OK" for s in result.samples) else 1


def _replay(c, args, console) -> int:
    import yaml

    from bless.harness.config import load_config
    from bless.harness.loads import parse_load
    from bless.serving.client import AppLoad, replay

    loads: list[AppLoad] = []
    duration, seed = 10.0, 0
    if args.config:
        cfg = load_config(args.config)
        duration, seed = cfg.duration, cfg.seed
        seen: dict[str, int] = {}
        for i, spec in enumerate(cfg.apps):
            base = Path(spec.app).stem
            seen[base] = seen.get(base, 0) + 1
            name = base if seen[base] == 1 else f"{base}-{seen[base]}"
            if args.register:
                slo = "" if spec.slo is None else str(spec.slo)
                r = c.register(name, spec.app, spec.quota, slo=slo, priority=spec.priority)
                console.print(f"registered {name}: quota {r.app.quota:.0%}")
            loads.append(AppLoad(name, parse_load(spec.load, f"apps[{i}].load")))
    for item in args.load:
        app, sep, spec = item.partition("=")
        if not sep:
            raise ValueError(f"--load {item!r}: expected APP=LOAD, e.g. resnet50=B or bert=poisson:100")
        loads.append(AppLoad(app, parse_load(yaml.safe_load(spec), f"--load {app}")))
    if not loads:
        raise ValueError("nothing to replay: give --config RUN.yaml and/or --load APP=LOAD")
    result = replay(
        c.address,
        loads,
        args.duration or duration,
        seed=args.seed if args.seed is not None else seed,
        timeout=args.timeout,
        credentials=c.credentials,
    )
    _print_replay(result, console)
    return 0


_COMMANDS = {
    "register": _register,
    "unregister": _unregister,
    "quota": _quota,
    "apps": _apps,
    "stats": _stats,
    "fault": _fault,
    "infer": _infer,
    "replay": _replay,
}
