"""The C loop-nest front end: static-control C functions → :class:`~.cfront_nodes.AFile`.

The C is parsed by pycparser (a real C99 parser), which needs preprocessed text;
this module does the little preprocessing the accepted files need, keeping every
line and column where it was (so errors point into the original text):

* comments become spaces; ``#include`` lines and ``#pragma scop``/``endscop`` are
  ignored; ``#define NAME <integer>`` defines a constant usable in bounds,
  subscripts and array extents;
* ``#pragma einkern array NAME[e1][e2]…`` gives the extents of a pointer
  parameter (``double *x``), which C does not say;
* ``#pragma einkern sizes n=1000 m=800`` gives default values of size
  parameters (used when a size is not given; each name a size parameter of some
  function of the file, each value a positive integer, no name twice);
* the types ``int64_t``, ``int32_t``, ``size_t``, ``ptrdiff_t`` are known, and
  ``__restrict``/``__restrict__`` read as ``restrict``.

What is accepted (everything else is a located :class:`~einkern.errors.ParseError`
saying what is not affine or not supported): functions returning ``void`` whose
parameters are integers (size parameters), ``float``/``double`` scalars (read
only) and ``float``/``double`` arrays (``double A[n][m]``, or a pointer with the
pragma); bodies of ``for`` loops with affine bounds (``max``/``min`` of affine
expressions via ``&&`` in the condition), unit steps up or down, ``if``/``else``
on affine conditions (``&&`` of comparisons; ``else`` after a single
comparison), and assignments ``= += -= *= /=`` to array elements whose
subscripts are affine in the iterators and sizes.  Right-hand sides use numbers,
scalars, array elements, iterators, ``+ - * /`` and the language's elementwise
functions (C spellings such as ``fabs``/``sqrtf``/``fmax`` included).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, NoReturn

from pycparser import c_ast, c_parser

from ..errors import ParseError
from ..source import Source, Span
from . import cfront_nodes as N
from .cfront_body import FunctionReader
from .cfront_types import LiteralTooLarge, int_literal

_PRELUDE = (
    "typedef long int64_t; typedef int int32_t; typedef unsigned long size_t;"
    " typedef long ptrdiff_t;\n"
)
_PRELUDE_NAMES = frozenset({"int64_t", "int32_t", "size_t", "ptrdiff_t"})
_COMMENT = re.compile(r"/\*.*?\*/|//[^\n]*|\"(?:\\.|[^\"\\\n])*\"", re.S)
_DEFINE = re.compile(r"#\s*define\s+([A-Za-z_]\w*)\s+(-?\d+)\s*$")
_ARRAY_PRAGMA = re.compile(r"#\s*pragma\s+einkern\s+array\s+([A-Za-z_]\w*)((?:\s*\[[^\]]+\])+)\s*$")
_SIZES_PRAGMA = re.compile(r"#\s*pragma\s+einkern\s+sizes\b")
_SIZE_ITEM = re.compile(r"([A-Za-z_]\w*)\s*=\s*(\S+)")
_IGNORED = re.compile(r"#\s*(include\b|pragma\s+(scop|endscop)\b)")
_ASSIGN = {"=", "+=", "-=", "*=", "/="}
_COMPARE = {"<", "<=", ">", ">=", "=="}


@dataclass(frozen=True)
class SizeDefault:
    """One ``NAME=VALUE`` of a ``#pragma einkern sizes`` (``span``: the name)."""

    value: int
    span: Span


def _blank(text: str) -> str:
    """``text`` with every character but newlines replaced by a space."""
    return re.sub(r"[^\n]", " ", text)


class CReader:
    """Reads one C text into an :class:`~.cfront_nodes.AFile`."""

    def __init__(self, text: str, name: str):
        self.source = Source(name, text)
        self.name = name
        self.defines: dict[str, int] = {}
        self.pragma_shapes: dict[str, tuple[tuple[str, int], ...]] = {}
        self.pragma_sizes: dict[str, SizeDefault] = {}
        self._line_starts = [0] + [m.end() for m in re.finditer("\n", text)]

    # -- errors --------------------------------------------------------------------

    def span_at(self, line: int, column: int, width: int = 1) -> Span:
        line = max(1, min(line, len(self._line_starts)))
        start = self._line_starts[line - 1] + max(0, column - 1)
        start = min(start, len(self.source.text))
        return Span(self.source, start, start + max(1, width))

    def span(self, node: Any) -> Span | None:
        coord = getattr(node, "coord", None)
        if coord is None or not coord.line:
            return None
        return self.span_at(coord.line, coord.column or 1, len(_text(node)) or 1)

    def fail(self, node: Any, message: str, hint: str | None = None) -> NoReturn:
        raise ParseError(message, self.span(node), hint)

    # -- preprocessing ---------------------------------------------------------------

    def preprocess(self) -> str:
        text = _COMMENT.sub(
            lambda m: _blank(m.group()) if m.group()[0] == "/" else m.group(), self.source.text
        )
        lines = text.split("\n")
        for number, line in enumerate(lines, 1):
            stripped = line.strip()
            if not stripped.startswith("#"):
                continue
            self._directive(stripped, number, line.index("#") + 1)
            lines[number - 1] = ""
        text = "\n".join(lines)
        text = re.sub(r"\b__restrict__\b", "restrict    ", text)
        text = re.sub(r"\b__restrict\b", "restrict  ", text)
        return _PRELUDE + f'#line 1 "{self.name}"\n' + text

    def _directive(self, text: str, line: int, column: int) -> None:
        if _IGNORED.match(text):
            return
        found = _DEFINE.match(text)
        if found:
            try:
                self.defines[found.group(1)] = int_literal(found.group(2))
            except LiteralTooLarge as error:
                raise ParseError(
                    f"#define {found.group(1)}: {error}",
                    self.span_at(line, column + found.start(2), len(found.group(2))),
                    hint="sizes must be under 2**63",
                ) from None
            return
        found = _ARRAY_PRAGMA.match(text)
        if found:
            extents = re.findall(r"\[([^\]]+)\]", found.group(2))
            self.pragma_shapes[found.group(1)] = tuple((e.strip(), line) for e in extents)
            return
        found = _SIZES_PRAGMA.match(text)
        if found:
            self._sizes_pragma(text, found.end(), line, column)
            return
        raise ParseError(
            "unsupported preprocessor directive",
            self.span_at(line, column, len(text)),
            hint="only #include, #define NAME <integer>, #pragma scop/endscop, "
            "#pragma einkern array NAME[extent]... and #pragma einkern sizes NAME=VALUE... "
            "are understood",
        )

    def _sizes_pragma(self, text: str, start: int, line: int, column: int) -> None:
        """``NAME=VALUE`` pairs from ``text[start:]`` into :attr:`pragma_sizes`."""
        at, count = start, 0
        while True:
            while at < len(text) and text[at].isspace():
                at += 1
            if at == len(text):
                break
            item = _SIZE_ITEM.match(text, at)
            if item is None:
                raise ParseError(
                    "expected NAME=VALUE in #pragma einkern sizes",
                    self.span_at(line, column + at, len(text) - at),
                    hint="e.g. #pragma einkern sizes n=1000 m=800",
                )
            name, value = item.group(1), item.group(2)
            here = self.span_at(line, column + item.start(1), len(name))
            if name in self.pragma_sizes:
                raise ParseError(
                    f"size parameter {name!r} given twice in #pragma einkern sizes",
                    here,
                    hint=f"its first value is on line {self.pragma_sizes[name].span.line}",
                )
            self.pragma_sizes[name] = SizeDefault(
                self._size_value(name, value, line, column + item.start(2)), here
            )
            at, count = item.end(), count + 1
        if not count:
            raise ParseError(
                "#pragma einkern sizes needs NAME=VALUE pairs",
                self.span_at(line, column, len(text)),
                hint="e.g. #pragma einkern sizes n=1000 m=800",
            )

    def _size_value(self, name: str, text: str, line: int, column: int) -> int:
        """The positive integer ``text`` (the value of size ``name``)."""
        where = self.span_at(line, column, len(text))
        if not re.fullmatch(r"[1-9]\d*", text):
            raise ParseError(
                f"size {name} must be a positive integer, got {text!r}",
                where,
                hint="a decimal integer of at least 1, e.g. n=1000 (pairs separated by spaces)",
            )
        if len(text) > 19 or int(text) >= 2**63:
            raise ParseError(
                f"size {name} is too large: {text}", where, "sizes must be under 2**63"
            )
        return int(text)

    # -- the file ----------------------------------------------------------------------

    def read(self) -> N.AFile:
        try:
            return self._read()
        except RecursionError:
            raise ParseError(
                "the C is nested too deeply to read",
                Span(self.source, 0, min(1, len(self.source.text))),
                hint="split deep expressions or blocks",
            ) from None

    def _read(self) -> N.AFile:
        text = self.preprocess()
        try:
            tree = c_parser.CParser().parse(text, filename=self.name)
        except c_parser.ParseError as error:
            raise self._syntax_error(str(error)) from None
        functions = []
        for node in tree.ext:
            if isinstance(node, c_ast.Typedef) and node.name in _PRELUDE_NAMES:
                continue  # the prelude
            if not isinstance(node, c_ast.FuncDef):
                self.fail(
                    node,
                    "only function definitions are accepted at file level",
                    hint="declare arrays and sizes as the function's parameters",
                )
            functions.append(FunctionReader(self, node).read())
        if not functions:
            raise ParseError(
                "no function in the file",
                Span(self.source, 0, 0),
                hint="write a function of loop nests: void f(int n, double A[n])",
            )
        names = [f.name for f in functions]
        for function in functions:
            if names.count(function.name) > 1:
                raise ParseError(f"function {function.name!r} defined twice", function.span)
        self._check_size_defaults(functions)
        return N.AFile(self.name, tuple(functions))

    def _check_size_defaults(self, functions: list[N.AFunction]) -> None:
        """Every name of ``#pragma einkern sizes`` is a size parameter of some function."""
        known = list(dict.fromkeys(s for f in functions for s in f.sizes))
        for name, given in self.pragma_sizes.items():
            if name not in known:
                raise ParseError(
                    f"#pragma einkern sizes: {name!r} is not a size parameter of "
                    + ("any function" if len(functions) > 1 else functions[0].name),
                    given.span,
                    hint=f"size parameters (integer parameters): {', '.join(known) or 'none'}",
                )

    def _syntax_error(self, message: str) -> ParseError:
        found = re.match(r"^[^:]*:(\d+):(\d+): (.*)$", message)
        if found:
            line, column, what = int(found.group(1)), int(found.group(2)), found.group(3)
            return ParseError(f"C syntax error ({what})", self.span_at(line, column))
        what = message.split(": ", 1)[-1]
        end = len(self.source.text.rstrip())
        return ParseError(
            f"C syntax error ({what})",
            Span(self.source, max(0, end - 1), max(1, end)),
            hint="the C parser could not say where; check the statement syntax",
        )


def _text(node: Any) -> str:
    """Source-like text of a node (for the width of a caret)."""
    from pycparser import c_generator

    try:
        text = c_generator.CGenerator().visit(node)
    except Exception:  # noqa: BLE001 - a width is only cosmetic
        return ""
    return text.split("\n", 1)[0].strip()


def parse_c(text: str, name: str = "<string>") -> N.AFile:
    """Read C text (``name`` names it in errors) into its affine functions."""
    return CReader(text, name).read()


def parse_c_node(text: str, name: str) -> NoReturn:
    """The ``c`` front end of the registry (:mod:`.loader`): the C is read (so
    errors are located as for any front end), but a loop nest has no Einstein
    syntax tree — it is loaded by :func:`einkern.load` (raised to a tensor program
    when it is one) or :func:`einkern.api.compile_loops`."""
    parsed = parse_c(text, name)
    raise ParseError(
        f"{parsed.functions[0].name} is a C loop nest, not Einstein notation",
        parsed.functions[0].span,
        hint="load it with einkern.load(path) (tensor programs) or "
        "einkern.api.compile_loops(path, ...) (any loop nest)",
    )
