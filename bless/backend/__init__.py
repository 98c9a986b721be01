"""The backend interface (what the core may ask of a GPU) and the timeline records both backends write.

:mod:`bless.sim` and :mod:`bless.cuda` implement it; they register by name in
:data:`bless.backend.interface.BACKENDS`.
"""
