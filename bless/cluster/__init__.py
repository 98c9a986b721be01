"""bless cluster: several GPUs, one serving core (agent) per GPU, a controller that places apps.

:mod:`~bless.cluster.placement` (pure: feasibility and policies),
:mod:`~bless.cluster.agent` (one GPU), :mod:`~bless.cluster.controller` (placement
state), :mod:`~bless.cluster.ray_actors` (the two as Ray actors; Ray is the
optional ``cluster`` extra and is imported only there), :mod:`~bless.cluster.frontend`
(what ``bless serve`` speaks, OIP v2 over gRPC and REST and the admin API, with its TLS,
token and health checks, routing each model to its agent).
"""
