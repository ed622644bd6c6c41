"""Pick the right front-end for a file or a text: :func:`load_program_node`."""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ..errors import RegistrationError, UsageError
from .ast import ProgramNode
from .cfront import parse_c_node
from .mapped import parse_mapped
from .parser import parse_program
from .tensorfile import parse_tensor_file


@dataclass(frozen=True)
class FrontEnd:
    """An input format: its name, ``parse(text, file name) -> ProgramNode`` and the
    file extensions (lower case, with the dot) that select it."""

    name: str
    parse: Callable[[str, str], ProgramNode]
    extensions: tuple[str, ...] = ()


_FRONT_ENDS: dict[str, FrontEnd] = {}
#: File extensions of each input format (filled by :func:`register_front_end`).
EXTENSIONS: dict[str, str] = {}


def register_front_end(front_end: FrontEnd) -> None:
    """Add an input format; a name or an extension already taken is refused with
    :class:`~einkern.errors.RegistrationError`."""
    if front_end.name in _FRONT_ENDS:
        raise RegistrationError(
            f"a front end named {front_end.name!r} is already registered",
            hint="choose another name",
        )
    taken = [ext for ext in front_end.extensions if ext.lower() in EXTENSIONS]
    if taken:
        raise RegistrationError(
            f"extension {taken[0]!r} already belongs to the "
            f"{EXTENSIONS[taken[0].lower()]!r} front end"
        )
    _FRONT_ENDS[front_end.name] = front_end
    EXTENSIONS.update({ext.lower(): front_end.name for ext in front_end.extensions})


def front_end_names() -> tuple[str, ...]:
    """The registered input formats."""
    return tuple(_FRONT_ENDS)


register_front_end(FrontEnd("ein", parse_program, (".ein",)))
register_front_end(FrontEnd("tensor", parse_tensor_file, (".tensor", ".tf")))
register_front_end(FrontEnd("mapped", parse_mapped, (".mapped", ".mf")))
register_front_end(FrontEnd("c", parse_c_node, (".c",)))  # loop nests: docs/affine.md

_PATHLIKE = re.compile(r"^[^\s\[\]=;]+(\.[A-Za-z0-9]+)$")


def _pathlike(text: str) -> bool:
    """True when ``text`` reads like a file name with a registered extension."""
    found = _PATHLIKE.match(text)
    return found is not None and found.group(1).lower() in EXTENSIONS


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
    return _FRONT_ENDS[fmt].parse(text, name)


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
        isinstance(text_or_path, str)
        and "\n" not in text_or_path
        and (_pathlike(text_or_path.strip()) or os.path.isfile(text_or_path))
    ):
        path = Path(text_or_path)
        if not path.is_file():
            raise UsageError(
                f"no such file: {path}", hint="check the path, or pass the program text itself"
            )
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise UsageError(f"cannot read {path}: {exc}") from exc
        fmt = EXTENSIONS.get(path.suffix.lower()) or detect_format(text)
        return _parse(text, str(path), fmt)
    text = str(text_or_path)
    return _parse(text, "<string>", detect_format(text))
