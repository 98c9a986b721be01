"""The analytic model of how a kernel's time scales with its SMs, and its calibration."""
