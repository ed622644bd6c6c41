"""The syntax tree of an affine loop-nest program (what :mod:`.cfront` reads from C).

Plain frozen data, no isl: the polyhedral form (domains as isl sets, accesses as
isl maps, schedules, dependences) is built from it by :mod:`einkern.ir.affine`.

* :class:`Aff` — an affine expression ``Σ coefficient·name + constant`` over loop
  iterators and size parameters (names, not positions);
* body expressions :data:`AExpr` — numbers, scalar parameters, array elements,
  iterators used as values, arithmetic and the language's elementwise functions;
* :class:`AStatement` — one assignment with the loops around it (iterators,
  bounds, directions), the affine conditions of the enclosing ``if``s and its
  textual position at each depth (the 2d+1 source-order schedule);
* :class:`AFunction` — one C function: size parameters (with their defaults, if
  the file gives them), arrays, scalars, statements.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field

from ..semantics import DType
from ..source import Span

# ---- affine expressions -------------------------------------------------------


@dataclass(frozen=True)
class Aff:
    """``Σ coefficient·name + const``; ``terms`` sorted by name, no zero coefficient."""

    terms: tuple[tuple[str, int], ...] = ()
    const: int = 0

    @staticmethod
    def of(coefficients: Mapping[str, int], const: int = 0) -> Aff:
        terms = tuple(sorted((n, c) for n, c in coefficients.items() if c != 0))
        return Aff(terms, const)

    @staticmethod
    def name(name: str) -> Aff:
        return Aff(((name, 1),), 0)

    def coefficients(self) -> dict[str, int]:
        return dict(self.terms)

    def names(self) -> tuple[str, ...]:
        return tuple(n for n, _ in self.terms)

    def __add__(self, other: Aff) -> Aff:
        merged = self.coefficients()
        for n, c in other.terms:
            merged[n] = merged.get(n, 0) + c
        return Aff.of(merged, self.const + other.const)

    def scale(self, factor: int) -> Aff:
        return Aff.of({n: c * factor for n, c in self.terms}, self.const * factor)

    def __sub__(self, other: Aff) -> Aff:
        return self + other.scale(-1)

    def is_constant(self) -> bool:
        return not self.terms

    def value(self, env: Mapping[str, int]) -> int:
        return self.const + sum(c * env[n] for n, c in self.terms)

    def __str__(self) -> str:
        parts = []
        for n, c in self.terms:
            text = n if abs(c) == 1 else f"{abs(c)}*{n}"
            parts.append(("- " if c < 0 else "+ ") + text)
        if self.const or not parts:
            parts.append(("- " if self.const < 0 else "+ ") + str(abs(self.const)))
        text = " ".join(parts)
        return text[2:] if text.startswith("+ ") else "-" + text[2:]


@dataclass(frozen=True)
class Constraint:
    """``aff >= 0`` (``equal`` False) or ``aff == 0`` (``equal`` True)."""

    aff: Aff
    equal: bool = False

    def __str__(self) -> str:
        return f"{self.aff} {'=' if self.equal else '>='} 0"


# ---- body expressions ------------------------------------------------------------


@dataclass(frozen=True)
class Num:
    value: float


@dataclass(frozen=True)
class Scal:
    """A scalar parameter of the function (read only)."""

    name: str


@dataclass(frozen=True)
class Ref:
    """Array element ``array[subscripts]`` (row-major, as C)."""

    array: str
    subscripts: tuple[Aff, ...]

    def __str__(self) -> str:
        return self.array + "".join(f"[{s}]" for s in self.subscripts)


@dataclass(frozen=True)
class IterValue:
    """An affine expression of iterators and sizes used as a number."""

    aff: Aff


@dataclass(frozen=True)
class Bin:
    op: str  # + - * /
    left: AExpr
    right: AExpr


@dataclass(frozen=True)
class Neg:
    operand: AExpr


@dataclass(frozen=True)
class Fn:
    """An elementwise function of :data:`einkern.semantics.FUNCTIONS`."""

    func: str
    args: tuple[AExpr, ...]


AExpr = Num | Scal | Ref | IterValue | Bin | Neg | Fn


def children(expr: AExpr) -> tuple[AExpr, ...]:
    if isinstance(expr, Bin):
        return (expr.left, expr.right)
    if isinstance(expr, Neg):
        return (expr.operand,)
    if isinstance(expr, Fn):
        return expr.args
    return ()


def walk(expr: AExpr) -> Iterator[AExpr]:
    stack = [expr]
    while stack:
        node = stack.pop()
        yield node
        stack.extend(reversed(children(node)))


def refs(expr: AExpr) -> tuple[Ref, ...]:
    return tuple(e for e in walk(expr) if isinstance(e, Ref))


def expr_text(expr: AExpr) -> str:
    if isinstance(expr, Num):
        return repr(expr.value)
    if isinstance(expr, Scal):
        return expr.name
    if isinstance(expr, Ref):
        return str(expr)
    if isinstance(expr, IterValue):
        return f"({expr.aff})"
    if isinstance(expr, Bin):
        return f"({expr_text(expr.left)} {expr.op} {expr_text(expr.right)})"
    if isinstance(expr, Neg):
        return f"-{expr_text(expr.operand)}"
    return f"{expr.func}({', '.join(expr_text(a) for a in expr.args)})"


# ---- statements and functions ----------------------------------------------------------


@dataclass(frozen=True)
class Loop:
    """One ``for`` loop: ``iterator`` from ``lower`` to ``upper`` (bounds inclusive,
    each the max/min of its list), ``step`` +1 or -1."""

    iterator: str
    lower: tuple[Aff, ...]
    upper: tuple[Aff, ...]
    step: int = 1


@dataclass(frozen=True)
class AStatement:
    """``target op rhs`` (op one of ``= += -= *= /=``) inside ``loops`` (outermost
    first), executed where every constraint of ``guards`` holds.  ``position[d]``
    is the statement's textual rank among the siblings at depth ``d`` (so
    ``(position[0], i_1, position[1], i_2, …)`` is its source-order schedule)."""

    name: str
    loops: tuple[Loop, ...]
    guards: tuple[Constraint, ...]
    target: Ref
    op: str
    rhs: AExpr
    position: tuple[int, ...]
    span: Span | None = field(default=None, compare=False, repr=False)

    @property
    def iterators(self) -> tuple[str, ...]:
        return tuple(loop.iterator for loop in self.loops)

    def reads(self) -> tuple[Ref, ...]:
        """Elements read, the target first for a compound assignment."""
        own = (self.target,) if self.op != "=" else ()
        return own + refs(self.rhs)

    def __str__(self) -> str:
        return f"{self.target} {self.op} {expr_text(self.rhs)}"


@dataclass(frozen=True)
class AArray:
    """An array parameter: element type and extents (size-parameter names or
    integer literals as text, outermost first; row-major)."""

    name: str
    dtype: DType
    shape: tuple[str, ...]
    span: Span | None = field(default=None, compare=False, repr=False)


@dataclass(frozen=True)
class AScalar:
    name: str
    dtype: DType
    span: Span | None = field(default=None, compare=False, repr=False)


@dataclass(frozen=True)
class AFunction:
    """One C function of static-control loop nests.  ``defaults`` holds the default
    values of size parameters given by ``#pragma einkern sizes n=… m=…`` (in the
    order of ``sizes``; a size without one must be given when binding)."""

    name: str
    sizes: tuple[str, ...]  # integer parameters, in order
    arrays: tuple[AArray, ...]
    scalars: tuple[AScalar, ...]
    statements: tuple[AStatement, ...]
    defaults: tuple[tuple[str, int], ...] = ()
    span: Span | None = field(default=None, compare=False, repr=False)

    def default_sizes(self) -> dict[str, int]:
        """The size parameters' default values (those the file gives)."""
        return dict(self.defaults)

    def array(self, name: str) -> AArray:
        for array in self.arrays:
            if array.name == name:
                return array
        raise KeyError(name)

    def statement(self, name: str) -> AStatement:
        for statement in self.statements:
            if statement.name == name:
                return statement
        raise KeyError(name)


@dataclass(frozen=True)
class AFile:
    """Every function of one C file or text."""

    name: str
    functions: tuple[AFunction, ...]

    def function(self, name: str | None = None) -> AFunction:
        if name is None:
            return self.functions[0]
        for function in self.functions:
            if function.name == name:
                return function
        raise KeyError(name)
