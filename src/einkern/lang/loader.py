"""Pick the right front-end for a file or a text: :func:`load_program_node`."""

from __future__ import annotations

import os
import re
from pathlib import Path

from ..errors import UsageError
from .ast import ProgramNode
from .mapped import parse_mapped
from .parser import parse_program
from .tensorfile import parse_tensor_file

#: File extensions of each input format.
EXTENSIONS = {
    ".ein": "ein",
    ".tensor": "tensor",
    ".tf": "tensor",
    ".mapped": "mapped",
    ".mf": "mapped",
}
_PATHLIKE = re.compile(r"^[^\s\[\]=;]+\.(ein|tensor|tf|mapped|mf)$")


def detect_format(text: str) -> str:
    """``"tensor"``, ``"mapped"`` or ``"ein"``, by looking at the text.

    A tensor file has lines that are exactly ``variables:`` and ``operations:``;
    a mapped-function file has a line starting with ``input`` and one starting
    with ``return``; anything else is read as .ein.
    """
    lines = [line.strip() for line in text.splitlines()]
    if "variables:" in lines and "operations:" in lines:
        return "tensor"
    if any(line.startswith("input ") for line in lines) and any(
        line.startswith("return") for line in lines
    ):
        return "mapped"
    return "ein"


def _parse(text: str, name: str, fmt: str) -> ProgramNode:
    if fmt == "tensor":
        return parse_tensor_file(text, name)
    if fmt == "mapped":
        return parse_mapped(text, name)
    return parse_program(text, name)


def parse_text(text: str, name: str) -> ProgramNode:
    """Parse program ``text`` (format by :func:`detect_format`); ``name`` names it in
    error messages (e.g. ``<stdin>``)."""
    return _parse(text, name, detect_format(text))


def load_program_node(text_or_path: str | os.PathLike[str]) -> ProgramNode:
    """Parse a program given as a file path or as program text.

    An existing path is read and parsed by the format its extension names
    (``.ein``; ``.tensor``/``.tf`` tensor file; ``.mapped``/``.mf`` mapped
    function), or by :func:`detect_format` for other extensions.  A string
    that is not a file is program text (format by :func:`detect_format`), unless
    it reads like a file name with one of those extensions: then it is
    a missing file and a :class:`~einkern.errors.UsageError` says so.
    """
    if isinstance(text_or_path, os.PathLike) or (
        isinstance(text_or_path, str) and "\n" not in text_or_path
        and (_PATHLIKE.match(text_or_path.strip()) or os.path.isfile(text_or_path))
    ):
        path = Path(text_or_path)
        if not path.is_file():
            raise UsageError(f"no such file: {path}",
                             hint="check the path, or pass the program text itself")
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise UsageError(f"cannot read {path}: {exc}") from exc
        fmt = EXTENSIONS.get(path.suffix.lower()) or detect_format(text)
        return _parse(text, str(path), fmt)
    text = str(text_or_path)
    return _parse(text, "<string>", detect_format(text))
