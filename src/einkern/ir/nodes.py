"""The program IR: immutable, printable data.  Index names are names, not positions.

Summation is explicit: the Einstein convention of the source has been resolved
by the builder into :class:`Sum` nodes, so every index inside a statement's
right-hand side is either an output index (parallel) or bound by exactly one
enclosing :class:`Sum` (a reduction index).

A :class:`Problem` is a program with a size for every extent; backends compile
problems, since generated kernels are specialised to their sizes.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterator
from dataclasses import dataclass, field

from ..semantics import ITEMSIZE, DType, Layout, tolerance
from ..source import Span

# ---- expressions -------------------------------------------------------------


@dataclass(frozen=True)
class Const:
    value: float

    def __str__(self) -> str:
        return repr(self.value)


@dataclass(frozen=True)
class ScalarRef:
    """A scalar parameter, given at call time (or its declared default)."""

    name: str

    def __str__(self) -> str:
        return self.name


@dataclass(frozen=True)
class Access:
    """Element ``tensor[indices]``."""

    tensor: str
    indices: tuple[str, ...]

    def __str__(self) -> str:
        return f"{self.tensor}[{','.join(self.indices)}]"


@dataclass(frozen=True)
class Neg:
    operand: Expr

    def __str__(self) -> str:
        return expr_text(self)


@dataclass(frozen=True)
class Binary:
    op: str  # "+", "-", "*", "/"
    left: Expr
    right: Expr

    def __str__(self) -> str:
        return expr_text(self)


@dataclass(frozen=True)
class Call:
    """Elementwise function (see :data:`einkern.semantics.FUNCTIONS`)."""

    func: str
    args: tuple[Expr, ...]

    def __str__(self) -> str:
        return expr_text(self)


@dataclass(frozen=True)
class Sum:
    """``sum over indices of body``; the indices are reduction indices."""

    indices: tuple[str, ...]
    body: Expr

    def __str__(self) -> str:
        return expr_text(self)


Expr = Const | ScalarRef | Access | Neg | Binary | Call | Sum


def children(expr: Expr) -> tuple[Expr, ...]:
    """Direct sub-expressions."""
    if isinstance(expr, Neg):
        return (expr.operand,)
    if isinstance(expr, Binary):
        return (expr.left, expr.right)
    if isinstance(expr, Call):
        return expr.args
    if isinstance(expr, Sum):
        return (expr.body,)
    return ()


def walk(expr: Expr) -> Iterator[Expr]:
    """All nodes of an expression, pre-order (without recursion)."""
    stack = [expr]
    while stack:
        node = stack.pop()
        yield node
        stack.extend(reversed(children(node)))


def signed_terms(expr: Expr, sign: int = 1) -> list[tuple[int, Expr]]:
    """Split an expression at its top-level ``+``/``-`` (and negations) into
    ``(±1, term)`` pairs, left to right (without recursion)."""
    terms: list[tuple[int, Expr]] = []
    stack = [(sign, expr)]
    while stack:
        sign, node = stack.pop()
        if isinstance(node, Binary) and node.op in "+-":
            stack.append((sign if node.op == "+" else -sign, node.right))
            stack.append((sign, node.left))
        elif isinstance(node, Neg):
            stack.append((-sign, node.operand))
        else:
            terms.append((sign, node))
    return terms


def product_factors(expr: Expr) -> list[Expr]:
    """Flatten a product tree (``*`` and negations, as a ``-1`` factor) into factors,
    left to right (without recursion)."""
    factors: list[Expr] = []
    stack = [expr]
    while stack:
        node = stack.pop()
        if isinstance(node, Binary) and node.op == "*":
            stack.extend((node.right, node.left))
        elif isinstance(node, Neg):
            factors.append(Const(-1.0))
            stack.append(node.operand)
        else:
            factors.append(node)
    return factors


def expr_text(expr: Expr) -> str:
    """The printed form of an expression (what ``str`` gives), built without recursion."""
    parts: list[str] = []
    stack: list[Expr | str] = [expr]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            parts.append(item)
        elif isinstance(item, Neg):
            stack.extend((")", item.operand, "-("))
        elif isinstance(item, Binary):
            stack.extend((")", item.right, f" {item.op} ", item.left, "("))
        elif isinstance(item, Call):
            pieces: list[Expr | str] = [f"{item.func}("]
            for number, arg in enumerate(item.args):
                pieces.extend((", ", arg) if number else (arg,))
            pieces.append(")")
            stack.extend(reversed(pieces))
        elif isinstance(item, Sum):
            stack.extend((")", item.body, f"sum[{','.join(item.indices)}]("))
        else:
            parts.append(str(item))
    return "".join(parts)


def accesses(expr: Expr) -> tuple[Access, ...]:
    return tuple(node for node in walk(expr) if isinstance(node, Access))


def sum_indices(expr: Expr) -> tuple[str, ...]:
    """Every reduction index bound inside ``expr``, in order of first appearance."""
    seen: dict[str, None] = {}
    for node in walk(expr):
        if isinstance(node, Sum):
            for index in node.indices:
                seen.setdefault(index, None)
    return tuple(seen)


# ---- declarations ------------------------------------------------------------


@dataclass(frozen=True)
class Extent:
    """A named extent; ``default`` may be None when it must be given at compile time.

    Integer literals in shapes become extents named after their value (``"3"``)."""

    name: str
    default: int | None = None
    span: Span | None = field(default=None, compare=False, repr=False)


@dataclass(frozen=True)
class Tensor:
    name: str
    shape: tuple[str, ...]  # extent names, outermost first as written
    dtype: DType = "float64"
    layout: Layout = "row"  # "row": last index contiguous; "column": first index contiguous
    span: Span | None = field(default=None, compare=False, repr=False)
    #: A tensor a program rewrite introduced (see :mod:`einkern.ir.rewrite`): the
    #: caller never passes nor receives it; the backend provides its memory.
    temporary: bool = False
    #: For a temporary: the tensor whose memory it reads and writes (a *view*: the
    #: same elements in the same order, dense in this tensor's layout and shape).
    view_of: str | None = None

    @property
    def rank(self) -> int:
        return len(self.shape)

    @property
    def itemsize(self) -> int:
        return ITEMSIZE[self.dtype]

    def contiguous_dim(self) -> int | None:
        """Position of the stride-1 dimension (None for a rank-0 tensor)."""
        if not self.shape:
            return None
        return len(self.shape) - 1 if self.layout == "row" else 0


@dataclass(frozen=True)
class Scalar:
    name: str
    dtype: DType = "float64"
    default: float | None = None
    span: Span | None = field(default=None, compare=False, repr=False)


@dataclass(frozen=True)
class Statement:
    """``output op rhs`` with ``op`` one of ``=``, ``+=``, ``-=``.

    ``index_extents`` maps every index used in the statement (output and
    reduction) to the extent that gives its range."""

    output: Access
    op: str
    rhs: Expr
    index_extents: tuple[tuple[str, str], ...]
    span: Span | None = field(default=None, compare=False, repr=False)

    @functools.cached_property
    def parallel_indices(self) -> tuple[str, ...]:
        """The distinct output indices (an index repeated on the left, a diagonal,
        is one loop)."""
        return tuple(dict.fromkeys(self.output.indices))

    @functools.cached_property
    def reduction_indices(self) -> tuple[str, ...]:
        return sum_indices(self.rhs)

    @property
    def indices(self) -> tuple[str, ...]:
        return self.parallel_indices + self.reduction_indices

    def extent_of(self, index: str) -> str:
        return self._extents[index]

    @functools.cached_property
    def _extents(self) -> dict[str, str]:
        return dict(reversed(self.index_extents))  # the first of a name wins

    def reads(self) -> tuple[Access, ...]:
        """Accesses read by the statement; a compound assignment reads its output."""
        return self._reads

    @functools.cached_property
    def _reads(self) -> tuple[Access, ...]:
        reads = accesses(self.rhs)
        return (self.output, *reads) if self.op in ("+=", "-=") else reads

    def tensors(self) -> tuple[str, ...]:
        """Names of the tensors the statement touches: the output, then every tensor
        read, in order of first appearance."""
        names = [self.output.tensor] + [a.tensor for a in accesses(self.rhs)]
        return tuple(dict.fromkeys(names))

    def __str__(self) -> str:
        return f"{self.output} {self.op} {self.rhs}"


@dataclass(frozen=True)
class Program:
    name: str
    extents: tuple[Extent, ...]
    tensors: tuple[Tensor, ...]
    scalars: tuple[Scalar, ...]
    statements: tuple[Statement, ...]
    #: What float32 products may be computed in (:data:`einkern.semantics.PRECISIONS`).
    precision: str = "fp32"

    def tensor(self, name: str) -> Tensor:
        return self._tensors_by_name[name]

    @functools.cached_property
    def _tensors_by_name(self) -> dict[str, Tensor]:
        return {t.name: t for t in reversed(self.tensors)}  # the first of a name wins

    def extent(self, name: str) -> Extent:
        for extent in self.extents:
            if extent.name == name:
                return extent
        raise KeyError(name)

    def scalar(self, name: str) -> Scalar:
        for scalar in self.scalars:
            if scalar.name == name:
                return scalar
        raise KeyError(name)

    def tolerance(self, name: str) -> float:
        """Accepted relative error of tensor ``name``'s results against the
        reference (:func:`einkern.semantics.tolerance` under the program's precision
        and the dtypes of its tensors)."""
        dtypes = [t.dtype for t in self.tensors]
        return tolerance(self.tensor(name).dtype, self.precision, dtypes)

    def storage(self, name: str) -> str:
        """The tensor whose memory ``name`` uses: ``name`` itself, or the end of its
        chain of views (within this program: a view whose base a program cut out of
        another, a task's view, does not hold ends the chain)."""
        seen = {name}
        tensor = self.tensor(name)
        names = {t.name for t in self.tensors}
        while tensor.view_of is not None and tensor.view_of in names:
            tensor = self.tensor(tensor.view_of)
            if tensor.name in seen:
                raise ValueError(f"views form a cycle through {tensor.name!r}")
            seen.add(tensor.name)
        return tensor.name

    @property
    def temporaries(self) -> tuple[str, ...]:
        """Tensors a rewrite introduced (never passed nor returned), in declaration order."""
        return tuple(t.name for t in self.tensors if t.temporary)

    @property
    def outputs(self) -> tuple[str, ...]:
        """Tensors the caller receives: those written by some statement (directly or
        through a view), in order of first write; temporaries are not outputs."""
        seen: dict[str, None] = {}
        plain = not any(t.temporary for t in self.tensors)
        for statement in self.statements:
            name = statement.output.tensor
            if not plain:
                name = self.storage(name)
                if self.tensor(name).temporary:
                    continue
            seen.setdefault(name, None)
        return tuple(seen)

    @property
    def inputs(self) -> tuple[str, ...]:
        """Tensors whose values on entry are used: read before any statement
        writes them with ``=`` (compound-assigned outputs are inputs too)."""
        assigned: set[str] = set()
        used: dict[str, None] = {}
        plain = not any(t.temporary for t in self.tensors)
        for statement in self.statements:
            for access in statement.reads():
                name = access.tensor if plain else self.storage(access.tensor)
                if name not in assigned and (plain or not self.tensor(name).temporary):
                    used.setdefault(name, None)
            if statement.op == "=":
                target = statement.output.tensor
                assigned.add(target if plain else self.storage(target))
        order = {t.name: i for i, t in enumerate(self.tensors)}
        return tuple(sorted(used, key=order.__getitem__))

    def __str__(self) -> str:
        lines = [f"program {self.name}"]
        lines.append(
            "dims "
            + ", ".join(
                e.name if e.default is None else f"{e.name}={e.default}" for e in self.extents
            )
        )
        for t in self.tensors:
            kind = " temporary" if t.temporary else ""
            kind += f" view of {t.view_of}" if t.view_of is not None else ""
            lines.append(f"tensor {t.name}[{', '.join(t.shape)}] {t.dtype} {t.layout}{kind}")
        for s in self.scalars:
            default = "" if s.default is None else f" = {s.default}"
            lines.append(f"scalar {s.name}{default} {s.dtype}")
        lines.extend(str(s) for s in self.statements)
        return "\n".join(lines)


@dataclass(frozen=True)
class Problem:
    """A program with a positive integer size for every extent."""

    program: Program
    sizes: tuple[tuple[str, int], ...]

    def size(self, extent: str) -> int:
        return self._sizes[extent]

    @functools.cached_property
    def _sizes(self) -> dict[str, int]:
        return dict(reversed(self.sizes))  # the first of a name wins

    def index_size(self, statement: Statement, index: str) -> int:
        return self.size(statement.extent_of(index))

    def shape(self, tensor: str) -> tuple[int, ...]:
        return tuple(self.size(e) for e in self.program.tensor(tensor).shape)

    def numel(self, tensor: str) -> int:
        return math.prod(self.shape(tensor))

    def strides(self, tensor: str) -> tuple[int, ...]:
        """Strides in elements for the tensor's declared layout."""
        shape = self.shape(tensor)
        strides = [0] * len(shape)
        step = 1
        order = range(len(shape) - 1, -1, -1)
        if self.program.tensor(tensor).layout == "column":
            order = range(len(shape))
        for dim in order:
            strides[dim] = step
            step *= shape[dim]
        return tuple(strides)

    def nbytes(self, tensor: str) -> int:
        return self.numel(tensor) * self.program.tensor(tensor).itemsize
