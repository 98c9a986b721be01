"""A user-level MPS control daemon under bless's state directory.

MPS execution affinity (SM-count-limited contexts) only works in processes
that reach an MPS control daemon.  ``bless mps start`` runs
``nvidia-cuda-mps-control -d`` with its pipe and log directories under
``~/.local/state/bless/mps`` (or ``$XDG_STATE_HOME/bless/mps``, or
``--dir``), so no root and no system-wide daemon are needed;
``bless mps stop`` sends it ``quit``.  A CUDA process joins the daemon whose
pipe directory is in ``CUDA_MPS_PIPE_DIRECTORY`` when the driver initialises;
:func:`point_client_at_daemon` sets it for the CUDA backend.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from bless.backend.interface import BackendError

CONTROL = "nvidia-cuda-mps-control"
START_TIMEOUT = 10.0
"""Seconds to wait for the daemon to answer after starting, or to exit after quit."""


class MpsError(BackendError):
    """The MPS daemon cannot be started, reached or stopped."""


@dataclass(frozen=True)
class MpsPaths:
    root: Path

    @property
    def pipe(self) -> Path:
        return self.root / "pipe"

    @property
    def log(self) -> Path:
        return self.root / "log"

    def env(self) -> dict[str, str]:
        return {**os.environ, "CUDA_MPS_PIPE_DIRECTORY": str(self.pipe), "CUDA_MPS_LOG_DIRECTORY": str(self.log)}

    @classmethod
    def default(cls) -> MpsPaths:
        state = os.environ.get("XDG_STATE_HOME")
        base = Path(state).expanduser() if state else Path.home() / ".local" / "state"
        return cls(base / "bless" / "mps")


@dataclass(frozen=True)
class MpsStatus:
    running: bool
    paths: MpsPaths
    servers: tuple[int, ...] = ()
    """PIDs of the MPS servers the daemon runs (one per user with clients)."""

    def describe(self) -> str:
        if not self.running:
            return f"MPS daemon not running (pipe directory {self.paths.pipe})"
        servers = ", ".join(map(str, self.servers)) or "none yet (one starts with the first client)"
        return (
            f"MPS daemon running: pipe directory {self.paths.pipe}, logs {self.paths.log}, servers: {servers}; "
            f"clients need CUDA_MPS_PIPE_DIRECTORY={self.paths.pipe} (the CUDA backend sets it itself)"
        )


def control_binary() -> str:
    path = shutil.which(CONTROL)
    if path is None:
        raise MpsError(
            f"{CONTROL} is not on PATH: it ships with the NVIDIA driver (e.g. the nvidia-compute-utils package); "
            f"MPS needs an NVIDIA GPU and its driver on this machine"
        )
    return path


def control(paths: MpsPaths, command: str) -> subprocess.CompletedProcess:
    """Send one command to the daemon (``quit``, ``get_server_list``, ...)."""
    return subprocess.run(
        [control_binary()],
        input=command + "\n",
        env=paths.env(),
        capture_output=True,
        text=True,
        timeout=START_TIMEOUT,
    )


def status(paths: MpsPaths) -> MpsStatus:
    """Whether the daemon of ``paths`` answers, and its servers."""
    if not (paths.pipe / "control").exists():
        return MpsStatus(False, paths)
    answer = control(paths, "get_server_list")
    if answer.returncode != 0:
        return MpsStatus(False, paths)
    servers = tuple(int(tok) for tok in answer.stdout.split() if tok.isdigit())
    return MpsStatus(True, paths, servers)


def start(paths: MpsPaths, gpu_probe=None) -> MpsStatus:
    """Start the daemon (no-op if it already runs); ``gpu_probe()`` -> (ok, why) checks for a GPU first."""
    binary = control_binary()
    current = status(paths)
    if current.running:
        return current
    if gpu_probe is not None:
        ok, why = gpu_probe()
        if not ok:
            raise MpsError(f"cannot start MPS: {why}")
    paths.pipe.mkdir(parents=True, exist_ok=True)
    paths.log.mkdir(parents=True, exist_ok=True)
    started = subprocess.run([binary, "-d"], env=paths.env(), capture_output=True, text=True, timeout=START_TIMEOUT)
    if started.returncode != 0:
        raise MpsError(f"{CONTROL} -d failed ({started.returncode}): {(started.stderr or started.stdout).strip()}")
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        current = status(paths)
        if current.running:
            return current
        time.sleep(0.1)
    raise MpsError(f"the MPS daemon did not answer within {START_TIMEOUT:.0f} s; see {paths.log / 'control.log'}")


def stop(paths: MpsPaths) -> bool:
    """Ask the daemon to quit; False if it was not running."""
    if not status(paths).running:
        return False
    answer = control(paths, "quit")
    if answer.returncode != 0:
        raise MpsError(f"{CONTROL} quit failed: {(answer.stderr or answer.stdout).strip()}")
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        if not status(paths).running:
            return True
        time.sleep(0.1)
    raise MpsError(f"the MPS daemon did not quit within {START_TIMEOUT:.0f} s; see {paths.log / 'control.log'}")


def point_client_at_daemon(paths: MpsPaths | None = None) -> bool:
    """Before cuInit: join bless's daemon unless ``CUDA_MPS_PIPE_DIRECTORY`` already names one."""
    if "CUDA_MPS_PIPE_DIRECTORY" in os.environ:
        return True
    paths = paths or MpsPaths.default()
    if (paths.pipe / "control").exists():
        os.environ["CUDA_MPS_PIPE_DIRECTORY"] = str(paths.pipe)
        return True
    return False
