"""Declaration-level checks shared by every front-end.

:class:`DeclCollector` gathers extents, tensors, scalars, statements and the
program defaults while a front-end reads its input, rejects a name declared
twice, an unknown dtype or layout and a bad extent value on the spot, and at
the end (:meth:`DeclCollector.finish`) checks that every extent named in a
tensor shape is declared somewhere, then builds the :class:`ProgramNode`.
"""

from __future__ import annotations

import difflib
import re
from pathlib import PurePath

from ..errors import (
    DtypeError,
    DuplicateDeclarationError,
    ExtentError,
    LayoutError,
    UnknownNameError,
)
from ..semantics import DTYPES, LAYOUTS
from ..source import Source, Span
from .ast import (
    DimRef,
    ExtentDeclNode,
    Ident,
    ProgramNode,
    ScalarDeclNode,
    StatementNode,
    TensorDeclNode,
)
from .limits import MAX_ELEMENTS, MAX_NAME_LENGTH, check_name, check_size, check_statement

_DTYPE_ALIASES = {
    "double": "float64",
    "float": "float32",
    "real": "float64",
    "f64": "float64",
    "f32": "float32",
    "fp64": "float64",
    "fp32": "float32",
    "bf16": "bfloat16",
    "f16": "float16",
    "fp16": "float16",
    "half": "float16",
}
_DTYPE_LIKE = re.compile(
    r"^(u?int\d*|float\d*|f\d+|fp\d+|double|half|real|bf\d+|bfloat\d*|"
    r"complex\d*|bool|tf32)$"
)


def looks_like_dtype(word: str) -> bool:
    """Whether an unknown word was probably meant as an element type."""
    return bool(_DTYPE_LIKE.match(word.lower()))


def check_dtype(word: str, span: Span) -> str:
    """``word`` if it is a supported dtype, else a :class:`DtypeError` at ``span``."""
    if word in DTYPES:
        return word
    alias = _DTYPE_ALIASES.get(word.lower())
    hint = f"write {alias}" if alias else "supported dtypes: " + ", ".join(DTYPES)
    raise DtypeError(f"unknown dtype '{word}'", span, hint=hint)


def check_layout(word: str, span: Span) -> str:
    """``word`` if it is a known layout, else a :class:`LayoutError` at ``span``."""
    if word in LAYOUTS:
        return word
    lowered = word.lower()
    if lowered.startswith("col") or lowered in ("fortran", "f"):
        hint = "write column"
    elif lowered.startswith("row") or lowered in ("c",):
        hint = "write row"
    else:
        hint = "known layouts: row (last index contiguous), column (first index contiguous)"
    raise LayoutError(f"unknown layout '{word}'", span, hint=hint)


def check_extent_value(text: str, span: Span, name: str | None) -> int:
    """The value of extent ``name`` written as ``text``: a positive integer.

    ``name`` is None for an integer literal in a tensor shape.  At most
    :data:`~einkern.lang.limits.MAX_ELEMENTS` (64-bit signed offsets)."""
    if text.isascii() and text.isdigit() and text.strip("0"):
        what = "a dimension" if name is None else f"extent '{name}'"
        if len(text.lstrip("0")) > 19:  # more than 2**63 - 1, and int() could refuse it
            raise ExtentError(
                f"{what} has {len(text.lstrip('0'))} digits, more than 2**63 - 1 = {MAX_ELEMENTS}",
                span,
                hint="generated kernels index elements with 64-bit signed offsets",
            )
        return check_size(int(text), span, what)
    if len(text) > 40:
        text = text[:20] + "..."
    if name is None:
        raise ExtentError(
            f"a dimension must be a positive integer, not {text}",
            span,
            hint="write a size of at least 1, or an extent name",
        )
    raise ExtentError(
        f"extent '{name}' must be a positive integer, not {text}",
        span,
        hint=f"write e.g. `dims {name} = 16`, or leave the value out to give it at compile time",
    )


def default_program_name(source_name: str, fallback: str = "program") -> str:
    """The stem of a file name made into an ASCII identifier; ``fallback`` for
    ``<string>``."""
    if source_name.startswith("<"):
        return fallback
    stem = PurePath(source_name).stem
    stem = re.sub(r"[^A-Za-z0-9_]", "_", stem)[:MAX_NAME_LENGTH]
    if not stem:
        return fallback
    return f"_{stem}" if stem[0].isdigit() else stem


class DeclCollector:
    """Mutable accumulator of one program's declarations (internal to front-ends)."""

    def __init__(self, source: Source):
        self.source = source
        self.extents: list[ExtentDeclNode] = []
        self.tensors: list[TensorDeclNode] = []
        self.scalars: list[ScalarDeclNode] = []
        self.statements: list[StatementNode] = []
        self.declared: dict[str, tuple[str, Span]] = {}
        self.name: str | None = None
        self.name_span: Span | None = None
        self.default_dtype: str = "float64"
        self.default_layout: str = "row"
        self.default_dtype_span: Span | None = None
        self.default_layout_span: Span | None = None

    # ---- names ----------------------------------------------------------------

    def _claim(self, name: Ident, kind: str) -> None:
        check_name(name.name, name.span, f"the name of {kind}")
        previous = self.declared.get(name.name)
        if previous is not None:
            first_kind, first_span = previous
            raise DuplicateDeclarationError(
                f"'{name.name}' is declared twice: already declared as {first_kind} "
                f"on line {first_span.line}",
                name.span,
                hint="rename one of them, or remove the second declaration",
            )
        self.declared[name.name] = (kind, name.span)

    def set_name(self, name: Ident) -> None:
        if self.name_span is not None:
            raise DuplicateDeclarationError(
                f"the program is named twice (first '{self.name}' on line {self.name_span.line})",
                name.span,
                hint="keep a single `program NAME` line",
            )
        check_name(name.name, name.span, "the program name")
        self.name, self.name_span = name.name, name.span

    def set_default_dtype(self, word: str, span: Span) -> None:
        dtype = check_dtype(word, span)
        if self.default_dtype_span is not None:
            raise DuplicateDeclarationError(
                f"the default dtype is set twice (first on line {self.default_dtype_span.line})",
                span,
                hint="keep a single dtype line; give single tensors their own dtype",
            )
        self.default_dtype, self.default_dtype_span = dtype, span

    def set_default_layout(self, word: str, span: Span) -> None:
        layout = check_layout(word, span)
        if self.default_layout_span is not None:
            raise DuplicateDeclarationError(
                f"the default layout is set twice (first on line {self.default_layout_span.line})",
                span,
                hint="keep a single layout line; give single tensors their own layout",
            )
        self.default_layout, self.default_layout_span = layout, span

    # ---- declarations ------------------------------------------------------------

    def add_extent(self, name: Ident, value: int | None, span: Span) -> None:
        self._claim(name, "an extent")
        self.extents.append(ExtentDeclNode(name, value, span))

    def add_tensor(
        self,
        name: Ident,
        shape: tuple[DimRef, ...],
        dtype: str | None,
        layout: str | None,
        span: Span,
        temporary: bool = False,
    ) -> None:
        self._claim(name, "a tensor")
        self.tensors.append(TensorDeclNode(name, shape, dtype, layout, span, temporary))

    def add_scalar(self, name: Ident, dtype: str | None, value: float | None, span: Span) -> None:
        self._claim(name, "a scalar")
        self.scalars.append(ScalarDeclNode(name, dtype, value, span))

    def add_statement(self, statement: StatementNode) -> None:
        check_statement(statement)
        self.statements.append(statement)

    # ---- the end ---------------------------------------------------------------

    def _check_shapes(self) -> None:
        extents = {e.name.name for e in self.extents}
        for tensor in self.tensors:
            for dim in tensor.shape:
                if dim.name is None or dim.name in extents:
                    continue
                other = self.declared.get(dim.name)
                if other is not None:
                    hint = (
                        f"'{dim.name}' is {other[0]} (line {other[1].line}); a shape "
                        "lists extents declared with `dims` or integer sizes"
                    )
                else:
                    close = difflib.get_close_matches(dim.name, sorted(extents), n=1)
                    hint = (
                        f"did you mean '{close[0]}'? " if close else ""
                    ) + f"declare it with `dims {dim.name} = ...`"
                raise UnknownNameError(
                    f"unknown extent '{dim.name}' in the shape of tensor '{tensor.name.name}'",
                    dim.span,
                    hint=hint,
                )

    def finish(self, fallback_name: str = "program") -> ProgramNode:
        """Check the shapes and return the program."""
        self._check_shapes()
        name = self.name or default_program_name(self.source.name, fallback_name)
        return ProgramNode(
            name=name,
            source=self.source,
            extents=tuple(self.extents),
            tensors=tuple(self.tensors),
            scalars=tuple(self.scalars),
            statements=tuple(self.statements),
            default_dtype=self.default_dtype,
            default_layout=self.default_layout,
            default_dtype_span=self.default_dtype_span,
            default_layout_span=self.default_layout_span,
        )
