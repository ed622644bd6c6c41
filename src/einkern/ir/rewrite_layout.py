"""The ``relayout`` rewrite (see :mod:`.rewrite`): one operand of a binary
contraction copied into the order its kernel reads best, the contraction kept.

A contraction's kernel stages each operand tile along the operand's contiguous
(stride-1) index.  Where that index is a batch index (each block reads one batch,
so every element of the tile lies in a sector of its own), or a summed index that
the other operand holds in a different order (the shared K order walks it with a
large stride), the copies gather one element per 32-byte sector.  ``relayout``
copies such an operand, once, into a row-major temporary ordered *batch, its free
indices, summed indices*: batch and free indices as the output holds them, summed
indices as the other operand holds them, so that both operands' tiles run along
the same contiguous summed index.  Unlike TTGT the statement keeps its indices
and its output: only one transpose is added, and the contraction's own kernel
(any tile, any family) reads the copy.
"""

from __future__ import annotations

from .nodes import Access, Problem, Program, Tensor
from .rewrite import (
    Rewrite,
    RewriteError,
    _apply,
    _Edit,
    _Names,
    _rename,
    _statement,
    memory_order,
)
from .rewrite_ttgt import binary_parts, groups_of

#: Which operand :func:`relayout` copies: the first or the second tensor factor.
OPERANDS = (0, 1)


def target_order(problem: Problem, position: int, operand: int) -> tuple[str, ...]:
    """The memory order (slowest first) :func:`relayout` gives operand ``operand``
    (0 or 1) of statement ``position``: batch, its free indices, summed indices."""
    program = problem.program
    statement = program.statements[position]
    _, _, _, a, b = binary_parts(statement)
    return _order(program, groups_of(program, statement), b if operand == 0 else a, operand)


def _order(
    program: Program, groups: dict[str, list[str]], other: Access, operand: int
) -> tuple[str, ...]:
    """:func:`target_order` from the statement's index groups and the other operand."""
    held = memory_order(program.tensor(other.tensor), other.indices)
    summed = [i for i in held if i in groups["K"]]
    return (*groups["batch"], *groups["M" if operand == 0 else "N"], *summed)


def relayout(problem: Problem, position: int, operand: int) -> Rewrite:
    """Statement ``position`` (a binary contraction) with operand ``operand`` (0:
    the first tensor factor, 1: the second) read from a row-major copy in
    :func:`target_order`; :class:`RewriteError` when it already is in that order,
    or the statement is not one binary contraction."""
    if operand not in OPERANDS:
        raise RewriteError(f"relayout of operand {operand}: a contraction has two (0 and 1)")
    program = problem.program
    statement = program.statements[position]
    _, _, _, a, b = binary_parts(statement)
    groups = groups_of(program, statement)  # a binary contraction, else RewriteError
    access, other = (a, b) if operand == 0 else (b, a)
    if a.tensor == b.tensor:
        raise RewriteError("relayout of a tensor that is both operands")
    tensor = program.tensor(access.tensor)
    order = _order(program, groups, other, operand)
    held = memory_order(tensor, access.indices)
    if held == order:
        raise RewriteError(f"{access.tensor} is already in the order {', '.join(order)}")
    names = _Names(program, statement, f"r{position}_")
    edit = _Edit([], [], [])
    extents = dict(statement.index_extents)
    temp = names.fresh(f"{access.tensor}_r")
    edit.tensors.append(
        Tensor(temp, tuple(extents[i] for i in order), tensor.dtype, "row", temporary=True)
    )
    copy = Access(temp, order)
    edit.statements.append(_statement(copy, "=", access, extents))
    rhs = _rename(statement.rhs, {str(access): copy})
    edit.statements.append(_statement(statement.output, statement.op, rhs, extents))
    why = (
        "its contiguous index is a batch index"
        if held[-1] in groups["batch"]
        else "its tiles then run along the summed indices in the other operand's order"
    )
    reason = f"{access.tensor} copied into the order {', '.join(order)} ({why})"
    return Rewrite(
        "relayout",
        position,
        2,
        reason,
        _apply(problem, position, edit),
        problem,
        variant=f"of {access.tensor}",
    )
