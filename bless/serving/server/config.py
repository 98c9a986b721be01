"""Server configuration: a YAML file, overridden by command-line flags.

Example (every key optional)::

    host: 127.0.0.1          # listen address of every port
    http_port: 8000          # OIP v2 REST inference (0: any free port, -1: off)
    grpc_port: 8001          # OIP inference + admin API (0: any free port)
    metrics_port: 8002       # Prometheus /metrics (0: any free port, -1: off)
    gpu: a100                # GPU model (bless gpus)
    backend: sim             # sim: simulated GPU in wall-clock time; cuda: a real one
    mechanism: mps           # how contexts are restricted to SMs (mps | green)
    pacing: deadline         # BLESS's rule: deadline (default) or paper (squads, bless policies)
    window: 0.001            # deadline pacing: seconds of each request's kernels per launch
    squad_size: 50           # paper pacing: kernels per squad
    split_ratio: 0.5         # paper pacing: Semi-SP's restricted share (or auto)
    state_dir: ~/.local/state/bless   # registered apps survive restarts here (0700, one server)
    admin_token: null        # null: admin_token_file, else generated once into <state_dir>/admin-token
                             # (a config file holding a token must be chmod 600)
    admin_token_file: null   # a file holding the token (must be chmod 600)
    tls_cert: null           # PEM certificate chain: TLS on every port
    tls_key: null            # its PEM private key
    tls_client_ca: null      # PEM CA bundle: clients must present a certificate it signed (mTLS)
    insecure: false          # allow a non-loopback host without TLS (behind a TLS proxy)
    max_queue: 1024          # requests one app may have queued or running
    shutdown_grace: 10       # seconds to finish admitted requests on SIGTERM
    max_message_bytes: 67108864  # largest gRPC message in or out (64 MiB); bounds declared outputs
    noise: 0.0               # simulated kernel-time noise (lognormal sigma)
    seed: 0
    admission:
      long_kernel_share: 0.25
      max_kernel_ratio: null # null: squad_size / 2
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bless.colocation.advisor import SETTINGS as COLOCATION_SETTINGS
from bless.colocation.advisor import ColocationGate
from bless.documents import is_integer, is_number
from bless.harness.config import ConfigError, read_yaml
from bless.hw.gpus import DEFAULT_GPU, get_gpu
from bless.policies.bless import PACING, WINDOW, parse_split_ratio
from bless.serving.server.admission import AdmissionLimits
from bless.serving.server.exposure import exposure_problem, private_file_problem

PATH_KEYS = ("state_dir", "admin_token_file", "tls_cert", "tls_key", "tls_client_ca")
"""Keys holding paths (``~`` expanded)."""

MAX_MESSAGE_BYTES = 64 * 2**20
"""Default largest gRPC message the server receives or sends (gRPC's own default receive
limit is 4 MiB, too small for batched image inputs); every app's outputs at its
profiled batch must fit in one."""
MIN_MESSAGE_BYTES = 2**20
"""The smallest ``max_message_bytes`` allowed: room for a response's metadata and some outputs."""


def default_state_dir() -> Path:
    base = os.environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
    return Path(base) / "bless"


@dataclass(frozen=True)
class ServerConfig:
    host: str = "127.0.0.1"
    http_port: int = 8000
    grpc_port: int = 8001
    metrics_port: int = 8002
    gpu: str = DEFAULT_GPU
    backend: str = "sim"
    mechanism: str = "mps"
    pacing: str = "deadline"
    window: float = WINDOW
    squad_size: int = 50
    split_ratio: float | str = 0.5
    state_dir: Path = field(default_factory=default_state_dir)
    admin_token: str | None = None
    token_source: str = field(default="the configuration", compare=False)
    """Where ``admin_token`` came from, for the startup banner."""
    admin_token_file: Path | None = None
    tls_cert: Path | None = None
    tls_key: Path | None = None
    tls_client_ca: Path | None = None
    insecure: bool = False
    max_queue: int = 1024
    shutdown_grace: float = 10.0
    max_message_bytes: int = MAX_MESSAGE_BYTES
    noise: float = 0.0
    seed: int = 0
    admission: AdmissionLimits = field(default_factory=AdmissionLimits)

    def __post_init__(self) -> None:
        def bad(key: str, want: str, got: Any) -> ConfigError:
            return ConfigError(f"{key}: expected {want}, got {got!r}")

        for key in ("http_port", "grpc_port", "metrics_port"):
            v = getattr(self, key)
            lo = 0 if key == "grpc_port" else -1
            if not is_integer(v) or not lo <= v <= 65535:
                raise bad(key, f"a port number (0: any free port{', -1: off' if lo < 0 else ''})", v)
        try:
            get_gpu(self.gpu)
        except ValueError as e:
            raise ConfigError(f"gpu: {e}") from None
        if self.backend not in ("sim", "cuda"):
            raise bad("backend", "sim or cuda", self.backend)
        if self.mechanism not in ("mps", "green"):
            raise bad("mechanism", "mps or green", self.mechanism)
        if self.pacing not in PACING:
            raise bad("pacing", " or ".join(PACING), self.pacing)
        if not is_number(self.window) or not self.window > 0:
            raise bad("window", "seconds > 0", self.window)
        if not is_integer(self.squad_size) or self.squad_size < 1:
            raise bad("squad_size", "an integer >= 1", self.squad_size)
        try:
            parse_split_ratio(self.split_ratio)
        except ValueError:
            raise bad("split_ratio", "a number in [0, 1] or 'auto'", self.split_ratio) from None
        if not is_integer(self.max_queue) or self.max_queue < 1:
            raise bad("max_queue", "an integer >= 1", self.max_queue)
        if not is_number(self.shutdown_grace) or self.shutdown_grace < 0:
            raise bad("shutdown_grace", "seconds >= 0", self.shutdown_grace)
        m = self.max_message_bytes
        if not is_integer(m) or not MIN_MESSAGE_BYTES <= m < 2**31:
            raise bad("max_message_bytes", f"bytes from {MIN_MESSAGE_BYTES} to 2**31 - 1 (gRPC's limit)", m)
        if not is_number(self.noise) or not 0 <= self.noise <= 1:
            raise bad("noise", "a number in [0, 1]", self.noise)
        if self.admin_token is not None and (not isinstance(self.admin_token, str) or len(self.admin_token) < 8):
            raise bad("admin_token", "a string of at least 8 characters (or null to generate one)", "<hidden>")
        self._check_tls()

    def _check_tls(self) -> None:
        if (self.tls_cert is None) != (self.tls_key is None):
            raise ConfigError("tls_cert, tls_key: give both (--tls-cert and --tls-key) or neither")
        if self.tls_client_ca is not None and self.tls_cert is None:
            raise ConfigError("tls_client_ca: mutual TLS needs the server's own tls_cert and tls_key too")
        for key in ("tls_cert", "tls_key", "tls_client_ca", "admin_token_file"):
            path = getattr(self, key)
            if path is not None and not Path(path).is_file():
                raise ConfigError(f"{key}: {path} is not a file")
        if not isinstance(self.insecure, bool):
            raise ConfigError(f"insecure: expected true or false, got {self.insecure!r}")
        problem = exposure_problem(self.host, self.tls_cert is not None, self.insecure)
        if problem:
            raise ConfigError(problem)

    def replace(self, **changes: Any) -> ServerConfig:
        """A copy with the given keys changed (None values are ignored: unset flags)."""
        return dataclasses.replace(self, **{k: v for k, v in changes.items() if v is not None})


def config_from_dict(raw: Any, where: str = "config") -> ServerConfig:
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise ConfigError(f"{where}: expected a mapping of server settings")
    known = {f.name for f in dataclasses.fields(ServerConfig)} - {"token_source"}  # set by the loader, not a setting
    unknown = sorted(set(raw) - known)
    if unknown:
        raise ConfigError(f"{where}: {unknown[0]}: unknown key; known keys: {', '.join(sorted(known))}")
    values = dict(raw)
    for key in PATH_KEYS:
        if values.get(key) is not None:
            values[key] = Path(os.path.expanduser(str(values[key])))
    if "admission" in values:
        adm = values["admission"] or {}
        if not isinstance(adm, dict):
            raise ConfigError(f"{where}: admission: expected a mapping")
        try:
            gate = ColocationGate.from_settings({k: adm[k] for k in COLOCATION_SETTINGS if k in adm})
            limits = {k: v for k, v in adm.items() if k not in COLOCATION_SETTINGS}
            values["admission"] = AdmissionLimits(**limits, colocation=gate)
        except TypeError as e:
            raise ConfigError(
                f"{where}: admission: {e}; keys: long_kernel_share, max_kernel_ratio, {', '.join(COLOCATION_SETTINGS)}"
            ) from None
        except ValueError as e:
            raise ConfigError(f"{where}: {e}") from None
    try:
        return ServerConfig(**values)
    except ConfigError as e:
        raise ConfigError(f"{where}: {e}") from None


def load_server_config(path: Path) -> ServerConfig:
    """The config in ``path``; one holding ``admin_token`` must be private to its owner."""
    raw = read_yaml(path)
    if isinstance(raw, dict) and raw.get("admin_token"):
        problem = private_file_problem(path)
        if problem:
            raise ConfigError(f"admin_token: {problem}")
        return config_from_dict(raw, str(path)).replace(token_source=f"admin_token in {path}")
    return config_from_dict(raw, str(path))
