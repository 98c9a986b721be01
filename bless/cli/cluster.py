"""``bless cluster up|status|down|replay``: several (simulated) GPUs on Ray, one serving core each, a placing controller."""

from __future__ import annotations

import argparse
import json
import math
import os
from pathlib import Path

from bless.cli import StopSignals, UserError, make_console
from bless.cli.serve import add_exposure_arguments
from bless.hw.gpus import DEFAULT_GPU

ADDRESS_FILE = "cluster.json"
"""In the state directory: the Ray address of the cluster `up` started or joined."""


def default_cluster_dir() -> Path:
    from bless.serving.server.config import default_state_dir

    return default_state_dir() / "cluster"


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("cluster", help="several GPUs on a Ray cluster: up, status, down; replay (virtual time, no Ray)")
    csub = p.add_subparsers(dest="action", required=True, metavar="ACTION")

    def common(q: argparse.ArgumentParser) -> None:
        q.add_argument(
            "--state-dir",
            type=Path,
            default=None,
            help="placement state and agents' stores (default: ~/.local/state/bless/cluster)",
        )
        q.add_argument("--address", default=None, help="Ray cluster address (default: the one `up` recorded)")

    up = csub.add_parser("up", help="start (or, with --address, join) a Ray cluster and the bless actors")
    common(up)
    up.add_argument("--gpus", type=int, required=True, help="GPUs: one agent each")
    up.add_argument(
        "--backend",
        default="sim",
        choices=("sim", "cuda"),
        help="sim: simulated GPUs (default); cuda: one real GPU per agent (Ray num_gpus=1; not yet tested on GPUs)",
    )
    up.add_argument("--gpu", default=DEFAULT_GPU, help="GPU model (of the simulated GPUs; with cuda: the nodes' model)")
    up.add_argument(
        "--policy", default="first-fit", choices=("first-fit", "best-fit-memory", "colocation"), help="placement policy"
    )
    up.add_argument("--kace-model", default=None, help="a `bless kace fit` model for --policy colocation")
    up.add_argument(
        "--grpc-port",
        type=int,
        default=None,
        help="serve the cluster's front end (OIP v2 gRPC and the admin API, as `bless serve`) on this port "
        "(0: any free port; default: no front end)",
    )
    up.add_argument(
        "--http-port",
        type=int,
        default=-1,
        help="and the OIP v2 REST API on this port (needs --grpc-port; 0: any free port; default -1: off)",
    )
    up.add_argument("--host", default="127.0.0.1", help="address the front end listens on (default: this machine only)")
    up.add_argument(
        "--admin-token-file",
        type=Path,
        default=None,
        help="file holding the front end's admin token (must be chmod 600); default: one generated into the state dir",
    )
    add_exposure_arguments(up)
    up.add_argument(
        "--agent-host",
        default="127.0.0.1",
        help="address the GPU agents listen on (default: loopback, the front end on the same node; "
        "another node's front end needs 0.0.0.0 and --insecure: agents speak clear text)",
    )
    up.add_argument(
        "--advertise-host",
        default=None,
        help="address the front end dials to reach an agent (default: --agent-host, or each node's IP "
        "when that is 0.0.0.0)",
    )
    up.set_defaults(func=run_up)
    st = csub.add_parser("status", help="per GPU: apps, quotas, memory, utilisation, latency against ISO")
    common(st)
    st.add_argument("--json", action="store_true", help="print the status as JSON")
    st.set_defaults(func=run_status)
    down = csub.add_parser("down", help="stop the bless actors (and the local Ray cluster `up` started)")
    common(down)
    down.set_defaults(func=run_down)
    from bless.cli._cluster_replay import add_replay

    add_replay(csub)


def _state_dir(args: argparse.Namespace) -> Path:
    return (args.state_dir or default_cluster_dir()).expanduser()


def _address(args: argparse.Namespace) -> str:
    if args.address:
        return args.address
    path = _state_dir(args) / ADDRESS_FILE
    try:
        return json.loads(path.read_text())["address"]
    except FileNotFoundError:
        raise UserError(f"no cluster recorded in {path}: `bless cluster up` first, or give --address") from None


def run_up(args: argparse.Namespace) -> int:
    from bless.cluster import ray_actors as ra

    if args.gpus < 1:
        raise UserError(f"--gpus: at least 1, got {args.gpus}")
    state_dir = _state_dir(args)
    state_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    front_config = _front_config(args, state_dir)  # bad flags: an error before Ray starts
    local = args.address is None
    reach = ra.AgentReach(args.agent_host, args.advertise_host, bool(args.insecure))
    ra.agent_config("gpu-0", state_dir, gpu=args.gpu, backend=args.backend, warm_up=False, reach=reach)  # checks
    simulated = local and args.backend == "sim"
    ray = ra.connect(args.address, **({"resources": {ra.SIM_RESOURCE: args.gpus}} if simulated else {}))
    address = ray.get_runtime_context().gcs_address
    ra.start_cluster(
        args.gpus,
        state_dir,
        gpu=args.gpu,
        backend=args.backend,
        policy=args.policy,
        kace_model=args.kace_model,
        reach=reach,
    )
    front = None
    if front_config is not None:
        from bless.cluster.frontend import ClusterFrontend
        from bless.serving.server.errors import StartupError

        try:
            front = ClusterFrontend(ra.ClusterClient(address), front_config).start()
        except BaseException as e:
            ra.stop_cluster()
            if isinstance(e, StartupError):
                raise UserError(str(e)) from None
            raise
    record = state_dir / ADDRESS_FILE
    record.write_text(json.dumps({"address": address, "gpus": args.gpus, "pid": os.getpid(), "local": local}))
    print(
        f"bless cluster up: {args.gpus} {'simulated' if args.backend == 'sim' else 'CUDA'} {args.gpu} GPUs, "
        f"placement {args.policy}, Ray at {address}",
        flush=True,
    )
    if front is not None:
        scheme = "https" if front.tls else "http"
        rest = f"{scheme}://{front.http_address}/v2" if front.http_port is not None else "off"
        print(
            f"front end (OIP v2 gRPC + admin API) on {front.address} ({'TLS' if front.tls else 'no TLS'}); "
            f"REST {rest}; admin token from {front.token_source}",
            flush=True,
        )
    print(f"state in {state_dir}; `bless cluster status`, `bless cluster down`", flush=True)
    if not local and front is None:
        return 0  # the actors are detached: they outlive this command
    # The local Ray cluster lives as long as this process: serve until `down` or a signal.
    stop = StopSignals()
    try:
        while stop.received is None:
            if ra.wait_gone(timeout=0.5, period=0.25):
                break
        else:
            if local:
                ra.stop_cluster()
    finally:
        if front is not None:
            front.stop()
        record.unlink(missing_ok=True)
        if local:
            ray.shutdown()
    print("bless cluster down", flush=True)
    return 0


def _front_config(args: argparse.Namespace, state_dir: Path):
    """The front end's settings from the flags (None: no front end), checked as `bless serve`'s."""
    from bless.cluster.frontend import FrontendConfig

    if args.grpc_port is None:
        if args.http_port >= 0:
            raise UserError("--http-port: the REST API is part of the front end; give --grpc-port too (0: any port)")
        for flag in ("tls_cert", "tls_key", "tls_client_ca", "admin_token_file"):
            if getattr(args, flag) is not None:
                raise UserError(f"--{flag.replace('_', '-')}: applies to the front end; give --grpc-port too")
        return None
    return FrontendConfig(
        host=args.host,
        grpc_port=args.grpc_port,
        http_port=args.http_port,
        state_dir=state_dir,
        admin_token_file=args.admin_token_file,
        tls_cert=args.tls_cert,
        tls_key=args.tls_key,
        tls_client_ca=args.tls_client_ca,
        insecure=bool(args.insecure),
    )


def run_status(args: argparse.Namespace) -> int:
    from bless.cluster import ray_actors as ra

    ra.connect(_address(args))
    controller = ra.controller_handle()
    gpus = ra.call(controller, "status")
    health = ra.call(controller, "health")
    if args.json:
        print(
            json.dumps(
                {"gpus": gpus, "down": health["down"], "unplaced": health["unplaced"]}, indent=1, default=lambda x: None
            )
        )
        return 0
    from rich.table import Table

    def ms(x: float | None) -> str:
        return "-" if x is None or not math.isfinite(x) else f"{x * 1e3:.2f}"

    table = Table(title="bless cluster")
    columns = (
        *("GPU", "memory GiB", "util", "app", "quota", "requests"),
        *("p50 ms", "p99 ms", "ISO ms", "over target", "behind quota"),
    )
    for col in columns:
        table.add_column(col)
    for g in gpus:
        if "error" in g:
            table.add_row(g["gpu_id"], "-", "-", f"[red]{g['error']}[/red]", *[""] * (len(columns) - 4))
            continue
        util = g["utilisation"]
        head = [
            g["gpu_id"],
            f"{g['memory_used_bytes'] / 2**30:.1f} / {g['memory_bytes'] / 2**30:.0f}",
            "-" if not math.isfinite(util) else f"{util:.0%}",
        ]
        if not g["apps"]:
            table.add_row(*head, "(none)", "0%", *[""] * (len(columns) - 5))
        for i, a in enumerate(g["apps"]):
            viol = a["target_violation_rate"]
            table.add_row(
                *(head if i == 0 else ["", "", ""]),
                a["name"],
                f"{a['quota']:.0%}",
                str(a["received"]),
                ms(a["latency_p50"]),
                ms(a["latency_p99"]),
                ms(a["iso_latency"]),
                "-" if not math.isfinite(viol) else f"{viol:.0%}",
                str(a["behind_quota"]),
            )
    console = make_console()
    console.print(table)
    for gpu_id, why in sorted(health["down"].items()):
        console.print(f"[red]{gpu_id} is down[/red]: {why}")
    for name, app in sorted(health["unplaced"].items()):
        console.print(f"[red]{name} has no GPU[/red] (answers UNAVAILABLE until one can take it): {app['reason']}")
    return 0


def run_down(args: argparse.Namespace) -> int:
    from bless.cluster import ray_actors as ra

    ra.connect(_address(args))
    stopped = ra.stop_cluster()
    print(f"bless cluster down: stopped {len(stopped)} actors (state kept in {_state_dir(args)})")
    return 0
