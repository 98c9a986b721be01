"""Kernel profiles: the format, the catalog that finds them, the t[n] curves, and the models that make them.

``predict/`` predicts a kernel's scaling from its features (the analytic model);
``groundtruth/`` assembles profiles from real A100 measurements.
"""
