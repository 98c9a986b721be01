"""Sub-commands of the ``bless`` CLI, one module each (see :mod:`bless.cli`)."""
