"""Checked calls into the CUDA driver (``cuda.bindings.driver``) with messages that say what to do.

Every cuda-python driver call returns a tuple whose first item is a
``CUresult``; :meth:`Driver.call` checks it, raises :class:`CudaError` (a
:class:`~bless.backend.interface.BackendError`) naming the call, the error and a hint,
and returns the remaining items (one value, a tuple, or None).

:func:`load_driver` is the only place that imports the bindings and calls
``cuInit``; a machine without the bindings, the driver library or a GPU gets
a ``BackendError("no NVIDIA driver / no GPU found (...)")`` instead of a
traceback.  Tests pass a fake module to :class:`Driver` instead.
"""

from __future__ import annotations

from typing import Any

from bless.backend.interface import BackendError

SUCCESS = 0
NOT_READY = 600

GREEN_CONTEXT_DRIVER = 12040
"""First driver with green contexts (CUDA 12.4 driver API)."""
GREEN_STREAM_DRIVER = 12050
"""First driver with ``cuGreenCtxStreamCreate`` (CUDA 12.5 driver API)."""

_NAMES = {
    1: "CUDA_ERROR_INVALID_VALUE",
    2: "CUDA_ERROR_OUT_OF_MEMORY",
    3: "CUDA_ERROR_NOT_INITIALIZED",
    34: "CUDA_ERROR_STUB_LIBRARY",
    36: "CUDA_ERROR_CALL_REQUIRES_NEWER_DRIVER",
    46: "CUDA_ERROR_DEVICE_UNAVAILABLE",
    100: "CUDA_ERROR_NO_DEVICE",
    201: "CUDA_ERROR_INVALID_CONTEXT",
    209: "CUDA_ERROR_NO_BINARY_FOR_GPU",
    218: "CUDA_ERROR_INVALID_PTX",
    221: "CUDA_ERROR_JIT_COMPILER_NOT_FOUND",
    222: "CUDA_ERROR_UNSUPPORTED_PTX_VERSION",
    224: "CUDA_ERROR_UNSUPPORTED_EXEC_AFFINITY",
    400: "CUDA_ERROR_INVALID_HANDLE",
    500: "CUDA_ERROR_NOT_FOUND",
    600: "CUDA_ERROR_NOT_READY",
    700: "CUDA_ERROR_ILLEGAL_ADDRESS",
    701: "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES",
    719: "CUDA_ERROR_LAUNCH_FAILED",
    801: "CUDA_ERROR_NOT_SUPPORTED",
    803: "CUDA_ERROR_SYSTEM_DRIVER_MISMATCH",
    805: "CUDA_ERROR_MPS_CONNECTION_FAILED",
    807: "CUDA_ERROR_MPS_SERVER_NOT_READY",
    808: "CUDA_ERROR_MPS_MAX_CLIENTS_REACHED",
    914: "CUDA_ERROR_INVALID_RESOURCE_TYPE",
    915: "CUDA_ERROR_INVALID_RESOURCE_CONFIGURATION",
    999: "CUDA_ERROR_UNKNOWN",
}
"""Names of the codes bless gives hints for (the driver's own enum names the rest)."""

HINTS = {
    2: "out of GPU memory: deploy fewer or smaller apps, or free memory held by other processes (nvidia-smi)",
    3: "the driver is not initialised (cuInit was not called or failed)",
    34: "the CUDA driver library found is a stub: install the NVIDIA driver on this machine",
    36: "the driver is older than this call needs: upgrade the NVIDIA driver, or install cuda-bindings "
    "of the driver's CUDA major version (pip install 'cuda-bindings==12.*' for a 12.x driver)",
    46: "the GPU is busy or in exclusive-process compute mode: stop the other process or set the "
    "compute mode to DEFAULT (nvidia-smi -c DEFAULT)",
    100: "no CUDA-capable GPU is visible: check nvidia-smi and CUDA_VISIBLE_DEVICES",
    209: "the kernel image has no code for this GPU: rebuild the app for its architecture "
    "(bless apps build APP --gpu h100)",
    218: "the driver could not compile the PTX: rebuild the app (bless apps build APP --gpu h100)",
    221: "the driver's PTX JIT compiler is missing: install the full NVIDIA driver",
    222: "the PTX was written by a newer CUDA toolkit than this driver can compile: upgrade the driver "
    "or rebuild the app with a toolkit no newer than the driver",
    224: "SM-count execution affinity needs the MPS control daemon: start it with `bless mps start` "
    "(before starting bless) or use green contexts (mechanism green)",
    500: "a kernel name or driver entry point was not found: the build plan and the kernel image "
    "disagree (rebuild the app), or the driver is too old for this call",
    700: "a kernel accessed memory out of bounds: its argument buffers do not match what it expects",
    701: "the launch needs more registers, shared memory or threads than an SM has",
    719: "a kernel failed on the GPU (the context is now unusable; restart the process)",
    801: "this GPU, driver or mode does not support the operation",
    803: "the kernel-mode driver and libcuda do not match: reboot or reinstall the NVIDIA driver",
    805: "cannot reach the MPS daemon: start it with `bless mps start`, and start bless with the "
    "same CUDA_MPS_PIPE_DIRECTORY",
    807: "the MPS server is not ready yet: retry, or check the MPS log directory",
    808: "the MPS server has no room for more clients: stop other MPS clients",
    914: "the device resource type is not supported by this driver",
    915: "the SM groups cannot be combined into one green context: use groups from one split",
}


def error_name(code: int) -> str:
    """The ``CUDA_ERROR_*`` name of a result code, without needing a driver."""
    if code in _NAMES:
        return _NAMES[code]
    try:
        from cuda.bindings import driver as cu

        return cu.CUresult(code).name
    except (ImportError, ValueError):
        return f"CUresult {code}"


def explain(call: str, code: int, description: str = "") -> str:
    """One line: which call failed, how, and what to do about it."""
    text = f"{call} failed with {error_name(code)} ({code})"
    if description:
        text += f": {description}"
    hint = HINTS.get(code)
    return f"{text}; {hint}" if hint else text


class CudaError(BackendError):
    """A driver call returned an error; ``code`` is its CUresult."""

    def __init__(self, call: str, code: int, description: str = "") -> None:
        super().__init__(explain(call, code, description))
        self.call = call
        self.code = code


class Driver:
    """The bindings module behind one checked calling convention."""

    def __init__(self, module: Any) -> None:
        self.cu = module

    def call(self, name: str, *args: Any) -> Any:
        """Call ``name`` and return its outputs after the CUresult (None, one value or a tuple)."""
        out = getattr(self.cu, name)(*args)
        code = int(out[0])
        if code != SUCCESS:
            raise CudaError(name, code, self.describe(code))
        if len(out) == 1:
            return None
        return out[1] if len(out) == 2 else tuple(out[1:])

    def done(self, name: str, *args: Any) -> bool:
        """For queries (``cuEventQuery``): True when complete, False when not ready, else raise."""
        code = int(getattr(self.cu, name)(*args)[0])
        if code == SUCCESS:
            return True
        if code == NOT_READY:
            return False
        raise CudaError(name, code, self.describe(code))

    def describe(self, code: int) -> str:
        """The driver's own description of ``code`` ('' when it has none)."""
        try:
            err, text = self.cu.cuGetErrorString(self.cu.CUresult(code))
        except Exception:
            return ""
        if int(err) != SUCCESS or not text:
            return ""
        return text.decode() if isinstance(text, bytes) else str(text)

    def has(self, name: str) -> bool:
        return hasattr(self.cu, name)

    def version(self) -> int:
        """Driver CUDA version as 1000*major + 10*minor (12040 for 12.4); needs no cuInit."""
        return int(self.call("cuDriverGetVersion"))


def _no_gpu(reason: str) -> BackendError:
    return BackendError(f"no NVIDIA driver / no GPU found ({reason})")


def import_bindings() -> Any:
    """The ``cuda.bindings.driver`` module, or a BackendError saying how to install it."""
    try:
        from cuda.bindings import driver as cu
    except ImportError as e:
        raise _no_gpu(f"cuda-python is not installed: pip install 'bless[cuda]' ({e})") from None
    return cu


def load_driver(module: Any = None) -> Driver:
    """Load libcuda, ``cuInit`` it and check that a GPU is visible."""
    drv = Driver(module if module is not None else import_bindings())
    try:
        (err,) = drv.cu.cuInit(0)
    except Exception as e:
        raise _no_gpu(f"the CUDA driver library could not be loaded: {e}") from None
    code = int(err)
    if code != SUCCESS:
        raise _no_gpu(explain("cuInit", code))
    count = int(drv.call("cuDeviceGetCount"))
    if count == 0:
        raise _no_gpu("the driver sees no device; check nvidia-smi and CUDA_VISIBLE_DEVICES")
    return drv


def probe() -> tuple[bool, str]:
    """(True, description) when a GPU is usable here, else (False, why not); never raises."""
    try:
        drv = load_driver()
        dev = drv.call("cuDeviceGet", 0)
        name = drv.call("cuDeviceGetName", 256, dev)
        name = name.split(b"\0", 1)[0].decode() if isinstance(name, bytes) else str(name)
        return True, f"{name}, driver {format_version(drv.version())}"
    except BackendError as e:
        return False, str(e)


def format_version(v: int) -> str:
    return f"{v // 1000}.{v % 1000 // 10}"
