"""``bless serve [CONFIG.yaml]``: one bless server for one GPU (OIP v2 inference + admin API)."""

from __future__ import annotations

import argparse
import os
from pathlib import Path


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
    p.add_argument("--gpu", help="GPU model (default a100; see bless gpus)")
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
        "--admin-token",
        default=os.environ.get("BLESS_ADMIN_TOKEN"),
        help="token for mutating admin calls (default $BLESS_ADMIN_TOKEN, else generated into the state dir)",
    )
    p.add_argument("--max-queue", type=int, help="requests one app may have queued or running (default 1024)")
    p.add_argument("--shutdown-grace", type=float, help="seconds to finish admitted requests on SIGTERM (default 10)")
    p.add_argument("--noise", type=float, help="simulated kernel-time noise, lognormal sigma (default 0)")
    p.add_argument("--seed", type=int, help="simulator seed (default 0)")
    p.add_argument("--log-level", default="INFO", choices=("DEBUG", "INFO", "WARNING", "ERROR"))
    p.set_defaults(func=serve)


def serve(args: argparse.Namespace) -> int:
    import logging
    import signal
    import threading

    from bless.serving.server.config import ServerConfig, load_server_config
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
        admin_token=args.admin_token,
        max_queue=args.max_queue,
        shutdown_grace=args.shutdown_grace,
        noise=args.noise,
        seed=args.seed,
    )
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    server = BlessServer(cfg).start()
    metrics = f"http://{cfg.host}:{server.metrics_port}/metrics" if server.metrics_port is not None else "off"
    rest = f"http://{server.http_address}/v2" if server.http_port is not None else "off"
    print(
        f"bless serving on {server.address} (OIP v2 inference, bless.admin.v1); REST {rest}; metrics {metrics}; "
        f"admin token from {server.token_source}; state in {cfg.state_dir}",
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
