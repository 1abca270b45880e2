"""``python -m swdask.cli``: the ``swdask`` command."""
import sys

from . import main

sys.exit(main())
