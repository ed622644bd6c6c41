"""Sample problems built directly as IR, for the CUDA backend's tests and smoke script.

GEMM with ``alpha``/``beta``, NWChem CCSD(T) ``sd_t_d1_1``, nekbone
``local_grad3`` (one direction), a Riemann-tensor-like statement with two sums
that reuse an index name, a row norm (a sum inside a function call) and a
program that exercises the elementwise functions, a rank-0 output and
several statements.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from ...ir.nodes import (
    Access,
    Binary,
    Call,
    Const,
    Expr,
    Extent,
    Neg,
    Problem,
    Program,
    Scalar,
    ScalarRef,
    Statement,
    Sum,
    Tensor,
    accesses,
    walk,
)


def acc(tensor: str, *indices: str) -> Access:
    return Access(tensor, tuple(indices))


def mul(*factors: Expr) -> Expr:
    expr = factors[0]
    for factor in factors[1:]:
        expr = Binary("*", expr, factor)
    return expr


def add(left: Expr, right: Expr) -> Expr:
    return Binary("+", left, right)


def sub(left: Expr, right: Expr) -> Expr:
    return Binary("-", left, right)


def statement(
    tensors: Sequence[Tensor],
    output: Access,
    op: str,
    rhs: Expr,
    extra: Mapping[str, str] | None = None,
) -> Statement:
    """A statement whose index extents are read off the accesses (``extra`` for
    indices that no access uses)."""
    shapes = {t.name: t.shape for t in tensors}
    bound: dict[str, str] = dict(extra or {})
    for access in (output, *accesses(rhs)):
        for index, extent in zip(access.indices, shapes[access.tensor], strict=True):
            bound.setdefault(index, extent)
    return Statement(output, op, rhs, tuple(bound.items()))


def problem(
    name: str,
    sizes: Mapping[str, int],
    tensors: Sequence[Tensor],
    statements: Sequence[tuple],
    scalars: Sequence[Scalar] = (),
) -> Problem:
    """A problem from tensors and ``(output, op, rhs[, extra])`` tuples."""
    built = tuple(statement(tensors, *s) for s in statements)
    program = Program(
        name,
        tuple(Extent(n) for n in sizes),
        tuple(tensors),
        tuple(scalars),
        built,
    )
    return Problem(program, tuple(sizes.items()))


def gemm(m=64, n=64, k=64, dtype="float64", layout="row") -> Problem:
    """``C[i,j] = alpha * sum_k A[i,k] * B[k,j] + beta * C[i,j]``."""
    tensors = [
        Tensor("A", ("m", "k"), dtype, layout),
        Tensor("B", ("k", "n"), dtype, layout),
        Tensor("C", ("m", "n"), dtype, layout),
    ]
    rhs = add(
        mul(ScalarRef("alpha"), Sum(("k",), mul(acc("A", "i", "k"), acc("B", "k", "j")))),
        mul(ScalarRef("beta"), acc("C", "i", "j")),
    )
    return problem(
        "gemm",
        {"m": m, "n": n, "k": k},
        tensors,
        [(acc("C", "i", "j"), "=", rhs)],
        [Scalar("alpha", default=1.0), Scalar("beta", default=0.0)],
    )


def ccsd_t(n=16, h7=None, dtype="float64", layout="column", **extents: int) -> Problem:
    """NWChem ``sd_t_d1_1``: ``t3[h3,h2,h1,p6,p5,p4] -= t2[h7,p4,p5,h1] * v2[h3,h2,p6,h7]``.

    Every extent is ``n`` (``h7u``: ``h7``) unless given by name (``p4u=33``)."""
    sizes = {e: n for e in ("h3u", "h2u", "h1u", "p6u", "p5u", "p4u")}
    sizes["h7u"] = h7 or n
    sizes.update(extents)
    tensors = [
        Tensor("t3", ("h3u", "h2u", "h1u", "p6u", "p5u", "p4u"), dtype, layout),
        Tensor("t2", ("h7u", "p4u", "p5u", "h1u"), dtype, layout),
        Tensor("v2", ("h3u", "h2u", "p6u", "h7u"), dtype, layout),
    ]
    rhs = Sum(("h7",), mul(acc("t2", "h7", "p4", "p5", "h1"), acc("v2", "h3", "h2", "p6", "h7")))
    out = acc("t3", "h3", "h2", "h1", "p6", "p5", "p4")
    return problem("sd_t_d1_1", sizes, tensors, [(out, "-=", rhs)])


def nekbone(elements=100, p=12, dtype="float64", layout="row") -> Problem:
    """nekbone ``local_grad3``, one direction: ``ur[e,i,j,k] += D[k,m] * u[e,i,m,j]``."""
    tensors = [
        Tensor("ur", ("E", "p", "p", "p"), dtype, layout),
        Tensor("D", ("p", "p"), dtype, layout),
        Tensor("u", ("E", "p", "p", "p"), dtype, layout),
    ]
    rhs = Sum(("m",), mul(acc("D", "k", "m"), acc("u", "e", "i", "m", "j")))
    return problem(
        "nekbone", {"E": elements, "p": p}, tensors, [(acc("ur", "e", "i", "j", "k"), "+=", rhs)]
    )


def riemann(n=8, dtype="float64", layout="row") -> Problem:
    """``R = A[i,j,k,l] - A[i,l,k,j] + sum_m B[m,j,k]*B[i,m,l] - sum_m B[m,l,k]*B[i,m,j]``."""
    tensors = [
        Tensor("R", ("n", "n", "n", "n"), dtype, layout),
        Tensor("A", ("n", "n", "n", "n"), dtype, layout),
        Tensor("B", ("n", "n", "n"), dtype, layout),
    ]
    first = Sum(("m",), mul(acc("B", "m", "j", "k"), acc("B", "i", "m", "l")))
    second = Sum(("m",), mul(acc("B", "m", "l", "k"), acc("B", "i", "m", "j")))
    rhs = sub(add(sub(acc("A", "i", "j", "k", "l"), acc("A", "i", "l", "k", "j")), first), second)
    return problem("riemann", {"n": n}, tensors, [(acc("R", "i", "j", "k", "l"), "=", rhs)])


def row_norm(batch=100, length=37, dtype="float64", layout="row") -> Problem:
    """``s[b] = sqrt(sum_i v[b,i] * v[b,i])``: a sum inside a function call."""
    tensors = [Tensor("v", ("B", "L"), dtype, layout), Tensor("s", ("B",), dtype, layout)]
    rhs = Call("sqrt", (Sum(("i",), mul(acc("v", "b", "i"), acc("v", "b", "i"))),))
    return problem("row_norm", {"B": batch, "L": length}, tensors, [(acc("s", "b"), "=", rhs)])


def functions(n=13, m=7, dtype="float64") -> Problem:
    """Several statements: elementwise functions, mixed dtypes, nested sums, rank 0,
    a sum over an index no tensor uses, and an output reused by a later statement."""
    tensors = [
        Tensor("x", ("n", "m"), dtype, "row"),
        Tensor("y", ("m", "n"), "float32", "column"),
        Tensor("z", ("n", "m"), dtype, "column"),
        Tensor("total", (), "float64", "row"),
        Tensor("w", ("n",), dtype, "row"),
    ]
    xij, yji = acc("x", "i", "j"), acc("y", "j", "i")
    elementwise = add(
        Call("max", (Call("exp", (Neg(xij),)), Call("abs", (yji,)))),
        sub(
            Call("pow", (Call("abs", (xij,)), Const(1.5))),
            mul(Const(0.5), Call("min", (Call("tanh", (yji,)), Call("cos", (xij,))))),
        ),
    )
    squares = Sum(("j",), mul(acc("z", "i", "j"), acc("z", "i", "j")))
    log_norm = Call("log", (add(Const(1.0), squares),))
    counted = Sum(("q",), mul(ScalarRef("gamma"), Call("sin", (acc("w", "i"),))))
    update = add(Binary("/", counted, acc("total")), Sum(("j",), acc("z", "i", "j")))
    statements = [
        (acc("z", "i", "j"), "=", elementwise),
        (acc("total"), "=", Sum(("i",), log_norm)),
        (acc("w", "i"), "+=", update, {"q": "q"}),
    ]
    sizes = {"n": n, "m": m, "q": 3}
    return problem("functions", sizes, tensors, statements, [Scalar("gamma", default=0.25)])


def diagonal(n=11, dtype="float64", layout="column") -> Problem:
    """Repeated indices: ``d[i,i] = 2 * x[i,i]`` (only the diagonal is written) and
    the trace ``t = sum_i x[i,i]``."""
    tensors = [
        Tensor("x", ("n", "n"), dtype, layout),
        Tensor("d", ("n", "n"), dtype, layout),
        Tensor("t", (), dtype, layout),
    ]
    statements = [
        (acc("d", "i", "i"), "=", mul(Const(2.0), acc("x", "i", "i"))),
        (acc("t"), "=", Sum(("i",), acc("x", "i", "i"))),
    ]
    return problem("diagonal", {"n": n}, tensors, statements)


SAMPLES = {
    "gemm": gemm,
    "sd_t_d1_1": ccsd_t,
    "nekbone": nekbone,
    "riemann": riemann,
    "row_norm": row_norm,
    "functions": functions,
    "diagonal": diagonal,
}


def random_arrays(problem: Problem, seed: int = 0) -> dict[str, np.ndarray]:
    """Fresh random host arrays (uniform in [0.5, 1.5)) for every tensor, in the
    declared dtype and layout."""
    from ...arrays import random_arrays as random_tensors

    return random_tensors(problem, seed)


def used_functions(problem: Problem) -> set[str]:
    """Names of the elementwise functions a problem calls."""
    return {
        node.func
        for s in problem.program.statements
        for node in walk(s.rhs)
        if isinstance(node, Call)
    }
