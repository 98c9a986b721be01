"""The CUDA backend: BLESS on a real NVIDIA GPU through cuda-python.

Importing this package (or any module in it) makes no CUDA call and does not
need a driver: the driver is loaded when a :class:`~bless.cuda.backend.CudaBackend`
is created, and a missing driver or GPU is reported as a
:class:`~bless.backend.interface.BackendError` that says so.

Modules: ``driver`` (checked calls, error messages), ``device`` (the GPU and
its primary context), ``contexts`` (SM-restricted context pools: green
contexts and MPS), ``memory`` (one VMM arena per app, visible from every
context), ``kernels`` (image
loading and launch parameters), ``timeline`` (events, the device-to-host
clock and launch records), ``backend`` (the Backend), ``mps`` (the MPS
control daemon).  Build plans are read by :mod:`bless.build.plan`.
"""
