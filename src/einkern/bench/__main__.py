"""``python -m einkern.bench SUITE...``: the ``einkern bench`` command on its own."""

from __future__ import annotations

import argparse
import sys

from ..errors import EinkernError
from .cli import add_bench_parser


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m einkern")
    bench = add_bench_parser(parser.add_subparsers(dest="command", required=True))
    bench.prog = "python -m einkern.bench"
    try:
        args = parser.parse_args(["bench", *(sys.argv[1:] if argv is None else argv)])
        return args.handler(args)
    except EinkernError as error:
        print(str(error), file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
