"""The simulated GPU: a calibrated, deterministic discrete-event model behind the backend interface.

:mod:`.engine` advances kernels on SMs with the fitted interference model;
:mod:`.kernels` turns profiles into simulated kernels; :mod:`.backend` is the
backend (registered as ``sim``); :mod:`.corun` replays measured co-located
pairs on it, to validate the interference model against real data.
"""
