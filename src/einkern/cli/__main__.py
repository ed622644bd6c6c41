"""``python -m einkern.cli ...``: the ``einkern`` command."""

import sys

from .app import main

sys.exit(main())
