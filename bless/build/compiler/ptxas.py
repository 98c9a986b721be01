"""Registers and static shared memory of every kernel in a PTX file, from ``ptxas -v``."""

from __future__ import annotations

import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

_ENTRY = re.compile(r"Compiling entry function '([^']+)' for '(sm_\w+)'")
_USED = re.compile(r"Used (\d+) registers(?:.*?(\d+) bytes smem)?")


@dataclass(frozen=True)
class KernelResources:
    registers: int
    shared_mem_static: int


def available() -> bool:
    return shutil.which("ptxas") is not None


def kernel_resources(ptx_file: Path, arch: str) -> dict[str, KernelResources]:
    """``ptxas -arch=ARCH -v`` on the PTX: kernel name -> registers and static shared memory bytes."""
    result = subprocess.run(
        ["ptxas", f"-arch={arch}", "-v", str(ptx_file), "-o", "/dev/null"], capture_output=True, text=True
    )
    if result.returncode != 0:
        raise RuntimeError(f"ptxas failed on {ptx_file} for {arch}: {result.stderr.strip()[-2000:]}")
    return parse_verbose(result.stderr)


def parse_verbose(text: str) -> dict[str, KernelResources]:
    """Parse ``ptxas -v`` output (each kernel's 'Compiling entry function' line, then its 'Used' line)."""
    found: dict[str, KernelResources] = {}
    kernel = None
    for line in text.splitlines():
        entry = _ENTRY.search(line)
        if entry:
            kernel = entry.group(1)
            continue
        used = _USED.search(line)
        if used and kernel is not None:
            found[kernel] = KernelResources(int(used.group(1)), int(used.group(2) or 0))
            kernel = None
    return found
