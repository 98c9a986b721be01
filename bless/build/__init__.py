"""The offline pipeline: the model zoo, compilation to a launch plan (PTX), and the profiler."""
