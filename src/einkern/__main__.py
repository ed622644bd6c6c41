"""``python -m einkern ...``: the ``einkern`` command."""

import sys

from .cli import main

sys.exit(main())
