"""Syntax tree shared by every input format (.ein, tensor file, mapped functions).

Front-ends produce a :class:`ProgramNode`; :func:`einkern.ir.build.build_program`
checks it and turns it into the IR.  Every node keeps the :class:`Span` it came
from so that semantic errors can point at the text.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..source import Source, Span


@dataclass(frozen=True)
class Ident:
    """A name with its position."""

    name: str
    span: Span


# ---- expressions -------------------------------------------------------------


@dataclass(frozen=True)
class NumberNode:
    value: float
    span: Span


@dataclass(frozen=True)
class NameNode:
    """A bare name in an expression: a scalar parameter."""

    name: str
    span: Span


@dataclass(frozen=True)
class AccessNode:
    """``T[i, j, ...]``; ``T[]`` is a rank-0 tensor."""

    tensor: Ident
    indices: tuple[Ident, ...]
    span: Span


@dataclass(frozen=True)
class UnaryNode:
    op: str  # "-" or "+"
    operand: ExprNode
    span: Span


@dataclass(frozen=True)
class BinaryNode:
    op: str  # "+", "-", "*", "/"
    left: ExprNode
    right: ExprNode
    span: Span


@dataclass(frozen=True)
class CallNode:
    func: Ident
    args: tuple[ExprNode, ...]
    span: Span


ExprNode = NumberNode | NameNode | AccessNode | UnaryNode | BinaryNode | CallNode


# ---- declarations and statements ---------------------------------------------


@dataclass(frozen=True)
class ExtentDeclNode:
    """``dims n = 64`` (value may be omitted: it must then be given at compile time)."""

    name: Ident
    value: int | None
    span: Span


@dataclass(frozen=True)
class DimRef:
    """One dimension of a tensor shape: an extent name or an integer literal."""

    name: str | None
    value: int | None
    span: Span


@dataclass(frozen=True)
class TensorDeclNode:
    name: Ident
    shape: tuple[DimRef, ...]
    dtype: str | None  # None: program default
    layout: str | None  # "row" | "column" | None: program default
    span: Span
    #: Neither passed nor returned: a mapped function's local variable
    temporary: bool = False


@dataclass(frozen=True)
class ScalarDeclNode:
    name: Ident
    dtype: str | None
    value: float | None
    span: Span


@dataclass(frozen=True)
class StatementNode:
    target: AccessNode
    op: str  # "=", "+=", "-="
    rhs: ExprNode
    span: Span


@dataclass(frozen=True)
class ProgramNode:
    """A whole program as written.  ``default_dtype``/``default_layout`` apply to
    tensors and scalars that do not name their own."""

    name: str
    source: Source
    extents: tuple[ExtentDeclNode, ...]
    tensors: tuple[TensorDeclNode, ...]
    scalars: tuple[ScalarDeclNode, ...]
    statements: tuple[StatementNode, ...]
    default_dtype: str = "float64"
    default_layout: str = "row"
    # Span of the `dtype`/`layout` directive, for error messages (None: built in).
    default_dtype_span: Span | None = None
    default_layout_span: Span | None = None
