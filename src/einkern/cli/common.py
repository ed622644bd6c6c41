"""What every ``einkern`` command shares: the parser class, ``-e NAME=VALUE``, and
loading the program file a command names."""

from __future__ import annotations

import argparse
from pathlib import Path

from ..errors import UsageError

#: The ``--backend`` option's help, for every command that has one.
BACKEND_HELP = "cpu: C with OpenMP; cuda: NVIDIA GPUs; auto (default): cuda when a GPU is usable"


class Parser(argparse.ArgumentParser):
    """argparse that raises :class:`~einkern.errors.UsageError` instead of exiting."""

    def error(self, message: str):  # type: ignore[override]
        raise UsageError(message, hint=f"see `{self.prog} --help`")


def extent_arg(text: str) -> tuple[str, str]:
    """``NAME=VALUE`` (an ``--extent``) as ``(name, value)``."""
    if "=" not in text:
        raise argparse.ArgumentTypeError(f"expected NAME=VALUE, got {text!r}")
    name, value = text.split("=", 1)
    return name.strip(), value.strip()


def add_extent_argument(parser: argparse.ArgumentParser) -> None:
    """The ``--extent/-e NAME=VALUE`` option (repeatable) of every command that
    loads a program."""
    parser.add_argument(
        "--extent",
        "-e",
        action="append",
        default=[],
        type=extent_arg,
        metavar="NAME=VALUE",
        help="set an extent (repeatable)",
    )


def load_problem(args: argparse.Namespace):
    """The problem of ``args.program`` (a file path) with ``args.extent`` bound (and
    ``args.precision`` where the command has it)."""
    from ..api import load, with_precision
    from ..ir.bind import make_problem

    path = Path(args.program)
    if not path.exists():
        raise UsageError(f"no such file: {args.program}", hint="give the path of a program file")
    if path.is_dir():
        raise UsageError(f"{args.program} is a directory, not a program file")
    program = with_precision(load(path), getattr(args, "precision", "fp32"))
    return make_problem(program, dict(args.extent))


def format_bytes(nbytes: int) -> str:
    """``nbytes`` in binary units: ``512 B``, ``1.5 KiB``, ``256 MiB``, ... ``EiB``
    (three significant digits), then in powers of ten (exact for integers of any
    size)."""
    if nbytes < 1024:
        return f"{nbytes} B"
    if nbytes >= 1024**7:
        digits = len(str(nbytes))
        lead = nbytes // 10 ** (digits - 3)
        return f"{lead // 100}.{lead % 100:02d}e+{digits - 1} B"
    power = 1
    while nbytes >= 1024 ** (power + 1):
        power += 1
    unit = ("KiB", "MiB", "GiB", "TiB", "PiB", "EiB")[power - 1]
    return f"{nbytes / 1024**power:.3g} {unit}"
