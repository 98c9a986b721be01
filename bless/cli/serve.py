"""``bless serve [CONFIG.yaml]``: one bless server for one GPU (OIP v2 inference + admin API)."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from bless.hw.gpus import DEFAULT_GPU


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "serve",
        help="serve apps over gRPC (Open Inference Protocol v2 + bless admin API) on one GPU",
        description="Run the BLESS runtime behind gRPC for one GPU (default: a simulated A100 in wall-clock time). "
        "Flags override the config file; see bless/serving/server/README.md.",
    )
    p.add_argument("config", type=Path, nargs="?", help="server config (YAML); see bless/serving/server/config.py")
    p.add_argument("--host", help="listen address (default 127.0.0.1: this machine only)")
    p.add_argument("--http-port", type=int, help="OIP v2 REST port (default 8000; 0: any free port; -1: off)")
    p.add_argument("--grpc-port", type=int, help="gRPC port for inference and admin (default 8001; 0: any free port)")
    p.add_argument("--metrics-port", type=int, help="Prometheus port (default 8002; 0: any free port; -1: off)")
    p.add_argument("--gpu", help=f"GPU model (default {DEFAULT_GPU}; see bless gpus)")
    p.add_argument(
        "--backend", choices=("sim", "cuda"), help="sim: simulated GPU in wall-clock time (default); cuda: a real GPU"
    )
    p.add_argument("--mechanism", choices=("mps", "green"), help="SM restriction mechanism (default mps)")
    p.add_argument("--squad-size", type=int, help="kernels per squad (default 50)")
    p.add_argument(
        "--split-ratio",
        type=_split_ratio,
        help="restricted share of a split squad (default 0.5), or 'auto': the determiner picks one per squad",
    )
    p.add_argument("--state-dir", type=Path, help="where registered apps persist (default ~/.local/state/bless)")
    p.add_argument(
        "--admin-token-file",
        type=Path,
        help="file holding the token for mutating admin calls (must be chmod 600); "
        "default $BLESS_ADMIN_TOKEN, else one generated into the state dir",
    )
    p.add_argument(
        "--admin-token",
        help="the token itself (discouraged: other users see it in ps; use --admin-token-file or $BLESS_ADMIN_TOKEN)",
    )
    add_exposure_arguments(p)
    p.add_argument("--max-queue", type=int, help="requests one app may have queued or running (default 1024)")
    p.add_argument("--shutdown-grace", type=float, help="seconds to finish admitted requests on SIGTERM (default 10)")
    p.add_argument("--noise", type=float, help="simulated kernel-time noise, lognormal sigma (default 0)")
    p.add_argument("--seed", type=int, help="simulator seed (default 0)")
    p.add_argument("--log-level", default="INFO", choices=("DEBUG", "INFO", "WARNING", "ERROR"))
    p.set_defaults(func=serve)


def add_exposure_arguments(p: argparse.ArgumentParser) -> None:
    """TLS (and mutual TLS) on every port, and --insecure: one set of flags for `bless serve`
    and the cluster's front end (`bless cluster up`), which hand them to the same checks."""
    p.add_argument("--tls-cert", type=Path, help="PEM certificate chain: serve every port over TLS")
    p.add_argument("--tls-key", type=Path, help="PEM private key of --tls-cert")
    p.add_argument("--tls-client-ca", type=Path, help="PEM CA bundle: require client certificates it signed (mTLS)")
    p.add_argument(
        "--insecure",
        action="store_true",
        default=None,
        help="allow a --host other than loopback without TLS (behind a TLS proxy or on a trusted network)",
    )


def _token_settings(args: argparse.Namespace) -> dict:
    """The token the command line or environment gives, overriding the config's, with its
    source.  ``--admin-token`` keeps working for scripts that use it, but a token in argv
    is readable by every local user (ps, /proc/PID/cmdline), so it draws a warning."""
    if args.admin_token:
        print(
            "bless serve: warning: --admin-token shows the token to every user of this machine (ps); "
            "use --admin-token-file or $BLESS_ADMIN_TOKEN",
            file=sys.stderr,
            flush=True,
        )
        return {"admin_token": args.admin_token, "admin_token_file": None, "token_source": "--admin-token"}
    if args.admin_token_file:
        return {"admin_token": None, "admin_token_file": args.admin_token_file}
    if os.environ.get("BLESS_ADMIN_TOKEN"):
        return {
            "admin_token": os.environ["BLESS_ADMIN_TOKEN"],
            "admin_token_file": None,
            "token_source": "$BLESS_ADMIN_TOKEN",
        }
    return {}


def serve(args: argparse.Namespace) -> int:
    import dataclasses
    import logging

    from bless import native
    from bless.cli import StopSignals, UserError
    from bless.serving.server.config import ServerConfig, load_server_config
    from bless.serving.server.errors import StartupError
    from bless.serving.server.server import BlessServer

    logging.basicConfig(level=args.log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    cfg = load_server_config(args.config) if args.config else ServerConfig()
    cfg = cfg.replace(
        host=args.host,
        http_port=args.http_port,
        grpc_port=args.grpc_port,
        metrics_port=args.metrics_port,
        gpu=args.gpu,
        backend=args.backend,
        mechanism=args.mechanism,
        squad_size=args.squad_size,
        split_ratio=args.split_ratio,
        state_dir=args.state_dir,
        tls_cert=args.tls_cert,
        tls_key=args.tls_key,
        tls_client_ca=args.tls_client_ca,
        insecure=args.insecure,
        max_queue=args.max_queue,
        shutdown_grace=args.shutdown_grace,
        noise=args.noise,
        seed=args.seed,
    )
    cfg = dataclasses.replace(cfg, **_token_settings(args))
    stop = StopSignals()
    try:
        server = BlessServer(cfg).start()
    except StartupError as e:
        raise UserError(str(e)) from None
    scheme = "https" if cfg.tls_cert else "http"
    metrics = f"{scheme}://{cfg.host}:{server.metrics_port}/metrics" if server.metrics_port is not None else "off"
    rest = f"{scheme}://{server.http_address}/v2" if server.http_port is not None else "off"
    print(
        f"bless serving on {server.address} ({'TLS' if cfg.tls_cert else 'no TLS'}; OIP v2 inference, bless.admin.v1); "
        f"REST {rest}; metrics {metrics}; "
        f"admin token from {server.token_source}; state in {cfg.state_dir}; {native.describe()}",
        flush=True,
    )
    while not stop.wait(0.5):
        if server.core.failure:
            print(f"bless serve: error: {server.core.failure}", flush=True)
            break
    print(f"shutting down (up to {cfg.shutdown_grace:g} s to finish admitted requests)", flush=True)
    server.stop()
    return 1 if server.core.failure else 0


def _split_ratio(text: str) -> float | str:
    return text if text == "auto" else float(text)
