"""Hardware models: GPU specs (SMs, levels, MIG slices), their fitted cost constants, and the interference model.

The bottom layer: everything else may import it; it imports nothing of bless.
"""
