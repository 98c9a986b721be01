"""MIG + MPS: MIG slices with at most two apps co-located by MPS in each (Adufu, Ha, Kim).

``model``: the apps' features, the profiling co-runs and the fitted least-squares model;
``planner``: the search over A100 layouts and app sets; ``policy``: the ``migmps`` policy.
"""
