"""``python -m einkern.bench SUITE...``: the ``einkern bench`` command on its own."""

from __future__ import annotations

import sys

from ..cli import main as einkern_main


def main(argv: list[str] | None = None) -> int:
    return einkern_main(["bench", *(sys.argv[1:] if argv is None else argv)])


if __name__ == "__main__":
    sys.exit(main())
