"""Affine statements as kernel-IR expressions: the one lowering of an affine
statement's subscripts, guards and right-hand side, shared by the CUDA kernels
(:mod:`.affine`, :mod:`.affine_reduce`) and the CPU backend's printer."""

from __future__ import annotations

from collections.abc import Mapping

from ..ir import affine as A
from ..lang import cfront_nodes as N
from ..semantics import C_TYPE, compute_dtype
from . import kir
from .ctext import mangle
from .exprs import add

INDEX = "long long"


def plus(a: kir.Expr, b: kir.Expr) -> kir.Expr:
    """``a + b`` with constants folded (:func:`.exprs.add`), ``a - c`` for a
    negative constant ``b``."""
    if isinstance(b, kir.Int) and b.value < 0 and not isinstance(a, kir.Int):
        return kir.Op("-", a, kir.Int(-b.value))
    return add(a, b)


def statement_ctype(problem: A.AffineProblem, statement: N.AStatement) -> str:
    """The C type a statement computes in: the widest of its target's and the
    arrays it reads (scalars and literals take it: :mod:`einkern.semantics`)."""
    function = problem.function
    reads = [function.array(r.array).dtype for r in statement.reads()]
    return C_TYPE[compute_dtype(function.array(statement.target.array).dtype, reads)]


def affine_value(problem: A.AffineProblem, a: N.Aff, values: Mapping[str, kir.Expr]) -> kir.Expr:
    """``a`` as a kernel-IR integer: sizes as numbers, ``values`` for the iterators."""
    sizes = dict(problem.sizes)
    result: kir.Expr = kir.Int(0)
    for name, coefficient in a.terms:
        if name not in sizes:
            term = values[name]
            if coefficient != 1:
                term = kir.Op("*", kir.Int(coefficient), term)
            result = plus(result, term)
    return plus(result, kir.Int(a.const + sum(c * sizes[n] for n, c in a.terms if n in sizes)))


def element_offset(
    problem: A.AffineProblem, ref: N.Ref, values: Mapping[str, kir.Expr]
) -> kir.Expr:
    """The flat (row-major) offset of the element ``ref`` at the point ``values``."""
    shape = problem.shape(ref.array)
    total, stride = N.Aff(), 1
    for subscript, extent in zip(reversed(ref.subscripts), reversed(shape), strict=True):
        total, stride = total + subscript.scale(stride), stride * extent
    return affine_value(problem, total, values)


def statement_store(
    problem: A.AffineProblem, statement: N.AStatement, values: dict[str, kir.Expr]
) -> kir.Store:
    """The statement as a kernel-IR store (arrays ``t_NAME`` indexed flat, row-major;
    scalars ``s_NAME``; sizes as numbers); ``values`` gives each iterator's value.
    The one lowering of affine statements: the CPU backend prints it too."""
    ctype = statement_ctype(problem, statement)

    def aff(a: N.Aff) -> kir.Expr:
        return affine_value(problem, a, values)

    def offset(ref: N.Ref) -> kir.Expr:
        return element_offset(problem, ref, values)

    def expr(e: N.AExpr) -> kir.Expr:
        if isinstance(e, N.Num):
            return kir.Float(e.value)
        if isinstance(e, N.Scal):
            return kir.Var(mangle("s", e.name))
        if isinstance(e, N.Ref):
            return kir.Load(mangle("t", e.array), offset(e))
        if isinstance(e, N.IterValue):
            return kir.Op("*", kir.Float(1.0), aff(e.aff))
        if isinstance(e, N.Neg):
            return kir.Neg(expr(e.operand))
        if isinstance(e, N.Bin):
            return kir.Op(e.op, expr(e.left), expr(e.right))
        args = tuple(expr(a) for a in e.args)
        if e.func in ("max", "min"):
            return kir.Op(e.func, args[0], args[1])
        from .ctext import function_name

        return kir.Call(function_name(e.func, ctype), args)

    return kir.Store(
        mangle("t", statement.target.array),
        offset(statement.target),
        expr(statement.rhs),
        statement.op,
    )


def kernel_params(
    problem: A.AffineProblem, written: set[str], outer: tuple[str, ...]
) -> tuple[kir.Param, ...]:
    """Every array and scalar of the function, then the host loops' iterators."""
    function = problem.function
    arrays = tuple(
        kir.Param(
            mangle("t", a.name), C_TYPE[a.dtype], True, problem.numel(a.name), a.name not in written
        )
        for a in function.arrays
    )
    scalars = tuple(
        kir.Param(mangle("s", s.name), C_TYPE[s.dtype], False) for s in function.scalars
    )
    return arrays + scalars + tuple(kir.Param(name, INDEX, False) for name in outer)
