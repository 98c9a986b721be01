"""Experiments: run configs, the replay of loads in virtual time, results, reports, sweeps, benchmarks and the lower bound."""
