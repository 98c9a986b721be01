"""Ground-truth app profiles for the simulated GPU, derived from public measurements.

``mps`` reads the A100 MPS kernel measurements, ``batching`` interpolates between
measured batches, ``vgg`` and ``training`` derive the apps the data lacks,
``networks`` holds the architecture facts (parameters, tensor sizes) and
``assemble`` turns per-kernel curves into a validated :class:`bless.profiles.format.Profile`.
"""
