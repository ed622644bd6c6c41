"""The ``einkern`` command line: the top layer, which nothing in the library imports.

:func:`main` is the console script ``einkern`` (also ``python -m einkern``).
Each command lives in its own module: :mod:`~einkern.cli.app` holds the parser
and ``check``, ``run``, ``emit``; :mod:`~einkern.cli.tune` ``tune`` and ``db``;
:mod:`~einkern.cli.bench` ``bench``.
"""

from .app import main

__all__ = ["main"]
