"""``python -m bless.cli``: the ``bless`` command without its console script."""

import sys

from bless.cli import main

sys.exit(main())
