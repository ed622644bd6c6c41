"""The *raise* pass: an affine program whose statements have Einstein semantics on
box domains becomes a tensor :class:`~einkern.ir.nodes.Program`, so it reuses
every existing mapping (CPU schedules, CUDA mappings, the tuner).

A function is raised when every statement

* runs over a box: each loop from 0 to a size parameter (or an integer) minus
  one, counting up, without guards;
* subscripts every array with plain iterators (``A[i][k]``), each dimension
  ranging over the array's extent;
* assigns with ``=`` over exactly its target's iterators, or accumulates with
  ``+=``/``-=`` (the loops missing from the target are summed: a reduction), or
  scales with ``*=``/``/=`` elementwise;
* reads its target only at the target's own element;

and no dependence runs from a later statement back to an earlier one (the
tensor program runs its statements one after another, the loop nest
interleaves them; the two agree exactly when every dependence goes forward).
:func:`raise_function` returns the program, or the first reason it cannot.
"""

from __future__ import annotations

import os
from pathlib import Path

from ..errors import SemanticError, UsageError
from ..lang.cfront_nodes import (
    AExpr,
    AFunction,
    AStatement,
    Bin,
    Fn,
    IterValue,
    Num,
    Ref,
    Scal,
    refs,
)
from ..lang.cfront_nodes import Neg as ANeg
from . import nodes as T
from .affine import accumulation, dependences


def raise_function(function: AFunction) -> T.Program | str:
    """The tensor program of ``function``, or why it has none (a sentence)."""
    statements = []
    for statement in function.statements:
        raised = _statement(function, statement)
        if isinstance(raised, str):
            return f"{statement.name} ({statement}): {raised}"
        statements.append(raised)
    order = {s.name: n for n, s in enumerate(function.statements)}
    for dependence in dependences(function):
        if order[dependence.source] > order[dependence.target]:
            return (
                f"a {dependence.kind} dependence runs from {dependence.source} back to "
                f"{dependence.target} (the loop nest interleaves them)"
            )
    extents = dict.fromkeys(e for a in function.arrays for e in a.shape)
    defaults = function.default_sizes()  # from #pragma einkern sizes
    return T.Program(
        function.name,
        tuple(T.Extent(e, int(e) if e.isdigit() else defaults.get(e)) for e in extents),
        tuple(T.Tensor(a.name, a.shape, a.dtype, "row", a.span) for a in function.arrays),
        tuple(T.Scalar(s.name, s.dtype, None, s.span) for s in function.scalars),
        tuple(statements),
    )


def _extent(statement: AStatement, depth: int) -> str | None:
    """The extent a box loop ranges over, or None."""
    loop = statement.loops[depth]
    if loop.step != 1 or len(loop.lower) != 1 or len(loop.upper) != 1:
        return None
    if not loop.lower[0].is_constant() or loop.lower[0].const != 0:
        return None
    upper = loop.upper[0]
    if upper.is_constant():
        return str(upper.const + 1) if upper.const >= 0 else None
    if len(upper.terms) == 1 and upper.terms[0][1] == 1 and upper.const == -1:
        name = upper.terms[0][0]
        return name if name not in statement.iterators else None
    return None


def _indices(function: AFunction, ref: Ref, extents: dict[str, str]) -> tuple[str, ...] | str:
    names = []
    shape = function.array(ref.array).shape
    for subscript, extent in zip(ref.subscripts, shape, strict=True):
        if len(subscript.terms) != 1 or subscript.terms[0][1] != 1 or subscript.const:
            return f"subscript {subscript} of {ref.array} is not a plain iterator"
        name = subscript.terms[0][0]
        if extents.get(name) != extent:
            return f"{name} does not range over {ref.array}'s extent {extent}"
        names.append(name)
    return tuple(names)


def _statement(function: AFunction, statement: AStatement) -> T.Statement | str:
    if statement.guards:
        return "it is guarded by an if"
    extents: dict[str, str] = {}
    for depth, iterator in enumerate(statement.iterators):
        extent = _extent(statement, depth)
        if extent is None:
            return f"the loop over {iterator} is not a box (0 to a size minus one)"
        extents[iterator] = extent
    target = _indices(function, statement.target, extents)
    if isinstance(target, str):
        return target
    if len(set(target)) != len(target):
        return "its target repeats an iterator"
    for ref in statement.reads():
        found = _indices(function, ref, extents)
        if isinstance(found, str):
            return found
        if ref.array == statement.target.array and found != target:
            return "it reads its target at another element"
    summed = tuple(i for i in statement.iterators if i not in target)
    op, body = accumulation(statement)
    if op != statement.op and any(r.array == statement.target.array for r in refs(body)):
        op, body = statement.op, statement.rhs  # T = T + f(T): not a plain accumulation
    rhs = _expr(body)
    if isinstance(rhs, str):
        return rhs
    output = T.Access(statement.target.array, target)
    if op in ("*=", "/=") or (op == "=" and summed):
        if summed:
            return f"{op} inside a loop over {', '.join(summed)} is not a sum"
        rhs, op = T.Binary(op[0], output, rhs), "="
    elif summed:
        rhs = summed_product(summed, rhs)
    return T.Statement(output, op, rhs, tuple(extents.items()), statement.span)


def _factors(expr: T.Expr) -> list[T.Expr]:
    """The operands of a product ``a * b * c`` (left-nested or not), in order."""
    if isinstance(expr, T.Binary) and expr.op == "*":
        return [*_factors(expr.left), *_factors(expr.right)]
    return [expr]


def _product(factors: list[T.Expr]) -> T.Expr:
    result = factors[0]
    for factor in factors[1:]:
        result = T.Binary("*", result, factor)
    return result


def summed_product(summed: tuple[str, ...], body: T.Expr) -> T.Expr:
    """``sum[summed](body)``, with the factors of a product ``body`` that use none of
    the summed iterators (``alpha`` in ``alpha * A[i,p] * B[p,j]``) taken out of
    the sum: ``alpha * sum[p](A[i,p] * B[p,j])``, as BLAS computes it — one scaling
    per output, not one per term (and a float64 scalar never widens a float32
    sum)."""
    factors = _factors(body)
    constant = [
        not any(
            isinstance(n, T.Sum) or (isinstance(n, T.Access) and set(n.indices) & set(summed))
            for n in T.walk(f)
        )
        for f in factors
    ]
    outside = [f for f, c in zip(factors, constant, strict=True) if c]
    inside = [f for f, c in zip(factors, constant, strict=True) if not c]
    if not outside or not inside:
        return T.Sum(summed, body)
    return T.Binary("*", _product(outside), T.Sum(summed, _product(inside)))


def _expr(expr: AExpr) -> T.Expr | str:
    if isinstance(expr, Num):
        return T.Const(expr.value)
    if isinstance(expr, Scal):
        return T.ScalarRef(expr.name)
    if isinstance(expr, Ref):
        return T.Access(expr.array, tuple(s.terms[0][0] for s in expr.subscripts))
    if isinstance(expr, IterValue):
        return "an iterator is used as a value"
    if isinstance(expr, ANeg):
        inner = _expr(expr.operand)
        return inner if isinstance(inner, str) else T.Neg(inner)
    if isinstance(expr, Bin):
        left, right = _expr(expr.left), _expr(expr.right)
        if isinstance(left, str):
            return left
        if isinstance(right, str):
            return right
        return T.Binary(expr.op, left, right)
    assert isinstance(expr, Fn)
    args = [_expr(a) for a in expr.args]
    for arg in args:
        if isinstance(arg, str):
            return arg
    return T.Call(expr.func, tuple(a for a in args if not isinstance(a, str)))


def load_raised(path: str | os.PathLike, function: str | None = None) -> T.Program:
    """The tensor program of a C file's function (the first by default), raised;
    :class:`~einkern.errors.SemanticError` saying why when it cannot be."""
    from ..lang.cfront import parse_c

    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise UsageError(f"cannot read {path}: {error}") from None
    parsed = parse_c(text, str(path))
    try:
        chosen = parsed.function(function)
    except KeyError:
        raise UsageError(f"{path} has no function {function!r}") from None
    raised = raise_function(chosen)
    if isinstance(raised, str):
        raise SemanticError(
            f"{chosen.name} is not a tensor (Einstein) program: {raised}",
            chosen.span,
            hint="run it as a loop nest: einkern.api.compile_loops(...), or the CLI's cpu backend",
        )
    return raised
