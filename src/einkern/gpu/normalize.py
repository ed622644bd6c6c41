"""Reduction groups: how a statement's sums become per-thread accumulators.

Every top-level :class:`~einkern.ir.nodes.Sum` of a statement's right-hand side
(one not nested in another sum) is computed into its own register accumulator.
Before that, sums over the same indices that are added or subtracted directly
are merged into one (``-Σ_h7 X + Σ_h7 Y`` → ``Σ_h7 (Y - X)``), so a whole
CCSD(T) family or the Riemann tensor's two contractions use one accumulator.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..ir.memo import by_identity
from ..ir.nodes import (
    Access,
    Binary,
    Call,
    Const,
    Expr,
    Neg,
    ScalarRef,
    Statement,
    Sum,
    signed_terms,
)


@dataclass(frozen=True)
class Placeholder:
    """Stands for the value of reduction group ``group`` in the epilogue expression."""

    group: int

    def __str__(self) -> str:
        return f"acc{self.group}"


@dataclass(frozen=True)
class Group:
    """One accumulator: ``Σ over indices of body``."""

    indices: tuple[str, ...]
    body: Expr

    def accesses(self) -> tuple[Access, ...]:
        found: dict[str, Access] = {}
        _collect(self.body, found)
        return tuple(found.values())

    def has_nested_sum(self) -> bool:
        return _has_sum(self.body)


@dataclass(frozen=True)
class Reduction:
    """A statement split into accumulator groups and an epilogue expression in which
    each group appears as a :class:`Placeholder`."""

    groups: tuple[Group, ...]
    epilogue: object  # Expr with Placeholders


def _collect(expr, found: dict[str, Access]) -> None:
    if isinstance(expr, Access):
        found.setdefault(str(expr), expr)
    elif isinstance(expr, Neg):
        _collect(expr.operand, found)
    elif isinstance(expr, Binary):
        _collect(expr.left, found)
        _collect(expr.right, found)
    elif isinstance(expr, Call):
        for arg in expr.args:
            _collect(arg, found)
    elif isinstance(expr, Sum):
        _collect(expr.body, found)


def _has_sum(expr) -> bool:
    if isinstance(expr, Sum):
        return True
    if isinstance(expr, Neg):
        return _has_sum(expr.operand)
    if isinstance(expr, Binary):
        return _has_sum(expr.left) or _has_sum(expr.right)
    if isinstance(expr, Call):
        return any(_has_sum(a) for a in expr.args)
    return False


def _combine(terms: list[tuple[int, Expr]]) -> Expr:
    result: Expr | None = None
    for sign, term in terms:
        if result is None:
            result = Neg(term) if sign < 0 else term
        else:
            result = Binary("+" if sign > 0 else "-", result, term)
    assert result is not None
    return result


def merge_sums(rhs: Expr) -> Expr:
    """Merge directly added/subtracted sums over the same indices into one sum."""
    terms = signed_terms(rhs)
    merged: dict[tuple[str, ...], list[tuple[int, Expr]]] = {}
    order: list[tuple[str, ...] | int] = []
    for position, (sign, term) in enumerate(terms):
        if isinstance(term, Sum):
            key = tuple(sorted(term.indices))
            if key not in merged:
                merged[key] = []
                order.append(key)
            merged[key].append((sign, term.body))
        else:
            order.append(position)
    if all(len(v) == 1 for v in merged.values()):
        return rhs
    rebuilt: list[tuple[int, Expr]] = []
    for item in order:
        if isinstance(item, int):
            rebuilt.append(terms[item])
            continue
        bodies = merged[item]
        if len(bodies) == 1 and bodies[0][0] < 0:
            rebuilt.append((-1, Sum(item, bodies[0][1])))
        elif bodies[0][0] < 0:
            rebuilt.append((-1, Sum(item, _combine([(-s, b) for s, b in bodies]))))
        else:
            rebuilt.append((1, Sum(item, _combine(bodies))))
    return _combine(rebuilt)


@by_identity(maxsize=1024)
def reduction_of(statement: Statement) -> Reduction:
    """Split a statement into accumulator groups and an epilogue (memoised: the
    mapping search asks for it thousands of times per statement)."""
    groups: list[Group] = []

    def replace(expr):
        if isinstance(expr, Sum):
            groups.append(Group(expr.indices, expr.body))
            return Placeholder(len(groups) - 1)
        if isinstance(expr, Neg):
            return Neg(replace(expr.operand))
        if isinstance(expr, Binary):
            return Binary(expr.op, replace(expr.left), replace(expr.right))
        if isinstance(expr, Call):
            return Call(expr.func, tuple(replace(a) for a in expr.args))
        assert isinstance(expr, Access | ScalarRef | Const)
        return expr

    epilogue = replace(merge_sums(statement.rhs))
    return Reduction(tuple(groups), epilogue)
