"""bless cluster: several GPUs, one serving core (agent) per GPU, a controller that places apps.

:mod:`~bless.cluster.placement` (pure: feasibility and policies),
:mod:`~bless.cluster.agent` (one GPU), :mod:`~bless.cluster.controller` (placement
state), :mod:`~bless.cluster.ray_actors` (the two as Ray actors; Ray is the
optional ``cluster`` extra and is imported only there), :mod:`~bless.cluster.frontend`
(one gRPC address speaking OIP v2 and the admin API, routing each model to its agent).
"""
