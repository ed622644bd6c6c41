"""Counting: flops, the fewest bytes that must move, and memory contiguity.

Flop convention (exact operation counts, stated so that figures can be checked):
each ``+ - * /`` and each elementwise function call is one flop; a negation is
free; a sum of ``K`` terms costs its body ``K`` times plus ``K - 1`` additions;
``+=``/``-=`` costs one addition per output element.  So
``t3[...] -= t2[h7,...]*v2[...,h7]`` costs ``2·T⁶·T`` (``2·T⁷`` at extent T) and
``C[i,j] = A[i,k]*B[k,j]`` costs ``(2K - 1)·M·N``.

Bytes: each tensor a statement reads is read once, its output written once
(and read once as well for ``+=``/``-=``).  The *kernel floor* of a program is
the sum over its statements (one kernel per statement); the *fused floor*
counts every tensor once (inputs read, outputs written), which is what a
single fused kernel could reach.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from .nodes import Access, Binary, Call, Expr, Neg, Problem, Statement, Sum, accesses


def _expr_flops(problem: Problem, statement: Statement, expr: Expr) -> int:
    if isinstance(expr, Binary):
        return (
            1
            + _expr_flops(problem, statement, expr.left)
            + _expr_flops(problem, statement, expr.right)
        )
    if isinstance(expr, Neg):
        return _expr_flops(problem, statement, expr.operand)
    if isinstance(expr, Call):
        return 1 + sum(_expr_flops(problem, statement, a) for a in expr.args)
    if isinstance(expr, Sum):
        terms = math.prod(problem.index_size(statement, i) for i in expr.indices)
        return terms * _expr_flops(problem, statement, expr.body) + terms - 1
    return 0


def statement_flops(problem: Problem, statement: Statement) -> int:
    outputs = math.prod(problem.index_size(statement, i) for i in statement.parallel_indices)
    per_output = _expr_flops(problem, statement, statement.rhs)
    if statement.op in ("+=", "-="):
        per_output += 1
    return outputs * per_output


def statement_bytes(problem: Problem, statement: Statement) -> int:
    """Fewest bytes a kernel for this statement alone must move."""
    read = {a.tensor for a in statement.reads()}
    total = sum(problem.nbytes(t) for t in read)
    return total + problem.nbytes(statement.output.tensor)


def program_flops(problem: Problem) -> int:
    return sum(statement_flops(problem, s) for s in problem.program.statements)


def kernel_floor_bytes(problem: Problem) -> int:
    """Bytes with one kernel per statement: the sum of the statements' minima."""
    return sum(statement_bytes(problem, s) for s in problem.program.statements)


def fused_floor_bytes(problem: Problem) -> int:
    """Bytes if the whole program ran as one kernel: inputs read once, outputs written once."""
    program = problem.program
    total = sum(problem.nbytes(t) for t in program.inputs)
    return total + sum(problem.nbytes(t) for t in program.outputs)


@dataclass(frozen=True)
class AccessContiguity:
    """For one access: the index that walks the tensor's stride-1 dimension, and the
    stride (in elements) of every index of the access."""

    access: Access
    contiguous_index: str | None
    strides: tuple[tuple[str, int], ...]


def contiguity(problem: Problem, statement: Statement) -> tuple[AccessContiguity, ...]:
    """Which index is contiguous in memory, for the output and every input access."""
    result = []
    for access in (statement.output, *accesses(statement.rhs)):
        tensor = problem.program.tensor(access.tensor)
        strides = problem.strides(access.tensor)
        dim = tensor.contiguous_dim()
        index = access.indices[dim] if dim is not None else None
        per_index: dict[str, int] = {}
        for name, stride in zip(access.indices, strides, strict=True):
            per_index[name] = per_index.get(name, 0) + stride
        result.append(AccessContiguity(access, index, tuple(per_index.items())))
    return tuple(result)


@dataclass(frozen=True)
class CoalescingTuple:
    """R-Stream's (A, d, j, w): if index ``index`` is the fastest thread dimension,
    the ``access`` of ``tensor`` walks its stride-1 dimension ``dim`` across a warp,
    which pays off ``weight`` times (its dynamic execution count; the output counts
    twice under ``+=``/``-=``, read and written)."""

    tensor: str
    dim: int
    index: str
    weight: int


def coalescing_tuples(problem: Problem, statement: Statement) -> tuple[CoalescingTuple, ...]:
    """The coalescing tuples of a statement's accesses whose stride-1 dimension is
    walked by an output (thread-candidate) index."""
    parallel = set(statement.parallel_indices)
    outputs = math.prod(problem.index_size(statement, i) for i in statement.parallel_indices)
    found: list[CoalescingTuple] = []

    def visit(expr: Expr, repeats: int) -> None:
        if isinstance(expr, Sum):
            terms = math.prod(problem.index_size(statement, i) for i in expr.indices)
            visit(expr.body, repeats * terms)
        elif isinstance(expr, Access):
            add(expr, repeats)
        elif isinstance(expr, Binary):
            visit(expr.left, repeats)
            visit(expr.right, repeats)
        elif isinstance(expr, Neg):
            visit(expr.operand, repeats)
        elif isinstance(expr, Call):
            for arg in expr.args:
                visit(arg, repeats)

    def add(access: Access, repeats: int) -> None:
        dim = problem.program.tensor(access.tensor).contiguous_dim()
        if dim is not None and access.indices[dim] in parallel:
            found.append(CoalescingTuple(access.tensor, dim, access.indices[dim], repeats))

    add(statement.output, outputs * (2 if statement.op in ("+=", "-=") else 1))
    visit(statement.rhs, outputs)
    return tuple(found)


def coalescing_weights(problem: Problem, statement: Statement) -> dict[str, int]:
    """Total weight of the coalescing tuples per candidate thread index."""
    weights: dict[str, int] = {}
    for entry in coalescing_tuples(problem, statement):
        weights[entry.index] = weights.get(entry.index, 0) + entry.weight
    return weights
