"""The TTGT rewrite (see :mod:`.rewrite`): transpose, GEMM, transpose.

The indices of a binary contraction fall into four groups: batch (both operands
and the output), M (the first operand and the output), N (the second and the
output) and K (summed: both operands).  Each group is ordered as the output
holds it in memory (K as the first operand does), and each tensor is wanted in
*GEMM order*: its groups one after the other in memory (``[batch, M, K]`` or
``[batch, K, M]`` for the first operand, and so on).  A tensor already in GEMM
order is read (or written) through a view of 1 to 3 fused dimensions; any other
is permuted into a row-major temporary first (the output: permuted back after).
A view hides its accesses from a dependence analysis of the program, so an operand
that some statement writes, and an output that another statement touches, are
copied instead.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from ..semantics import DType
from .nodes import (
    Access,
    Expr,
    Neg,
    Problem,
    Program,
    Statement,
    Sum,
    Tensor,
    accesses,
    product_factors,
    signed_terms,
)
from .rewrite import (
    Rewrite,
    RewriteError,
    _apply,
    _dtype,
    _Edit,
    _Names,
    _product,
    _product_operands,
    _reads_own_output,
    _statement,
    _written,
    memory_order,
)

GROUPS = ("batch", "M", "N", "K")


def binary_parts(statement: Statement) -> tuple[int, list[Expr], Sum, Access, Access]:
    """Sign, index-free factors, the sum, and the two tensor factors of a statement
    that is one binary contraction (else RewriteError)."""
    terms = signed_terms(statement.rhs)
    if len(terms) != 1:
        raise RewriteError("a binary contraction needs a statement of one term")
    sign, term = terms[0]
    factors = product_factors(term)
    sums = [f for f in factors if isinstance(f, Sum)]
    others = [f for f in factors if not isinstance(f, Sum)]
    if len(sums) != 1 or any(accesses(f) for f in others):
        raise RewriteError("a binary contraction needs one sum of a product of two tensors")
    found = _product_operands(sums[0])
    if found is None or len(found[0]) != 2:
        raise RewriteError("a binary contraction needs one sum of a product of exactly two tensors")
    tensors, inner = found
    return sign, others + inner, sums[0], tensors[0], tensors[1]


def groups_of(program: Program, statement: Statement) -> dict[str, list[str]]:
    """The index groups of a binary contraction (first operand's M, second's N),
    each in the order the output (K: the first operand) holds it in memory."""
    _, _, node, a, b = binary_parts(statement)
    out = statement.output
    if len(set(out.indices)) != len(out.indices):
        raise RewriteError("a binary contraction into an output with a repeated index (a diagonal)")
    ia, ib, ic = set(a.indices), set(b.indices), set(out.indices)
    if set(node.indices) != (ia & ib) - ic or not ic <= ia | ib or (ia | ib) - ic - (ia & ib):
        raise RewriteError("a binary contraction sums indices of both operands only")
    if not node.indices:
        raise RewriteError("a binary contraction needs a summed index")
    order = memory_order(program.tensor(out.tensor), out.indices)
    return {
        "batch": [i for i in order if i in ia and i in ib],
        "M": [i for i in order if i in ia and i not in ib],
        "N": [i for i in order if i in ib and i not in ia],
        "K": [i for i in memory_order(program.tensor(a.tensor), a.indices) if i in node.indices],
    }


def ttgt(problem: Problem, position: int) -> Rewrite:
    """Statement ``position`` (a binary contraction) as transposes and one GEMM-shaped
    statement over fused index groups."""
    program = problem.program
    statement = program.statements[position]
    if _reads_own_output(program, statement):
        raise RewriteError(f"statement {position} reads its own output")
    sign, scalars, node, a, b = binary_parts(statement)
    groups = groups_of(program, statement)
    out_order = [
        i
        for i in memory_order(program.tensor(statement.output.tensor), statement.output.indices)
        if i not in groups["batch"]
    ]
    if out_order and out_order[0] in groups["N"]:  # the output holds N first: swap roles
        a, b = b, a
        groups["M"], groups["N"] = groups["N"], groups["M"]
        groups["K"] = [
            i for i in memory_order(program.tensor(a.tensor), a.indices) if i in groups["K"]
        ]
    names = _Names(program, statement, f"g{position}_")
    edit = _Edit([], [], [])
    extents = dict(statement.index_extents)
    fused: dict[str, tuple[str, str]] = {}  # group -> (index, extent)
    for group in GROUPS:
        if groups[group]:
            size = math.prod(problem.index_size(statement, i) for i in groups[group])
            fused[group] = (names.fresh(group.lower()), edit.extent(names, group, size))
            extents[fused[group][0]] = fused[group][1]
    dtype = _dtype(program, statement, (a, b))
    moved: list[str] = []
    left = _operand(program, edit, names, a, groups, ("M", "K"), fused, extents, moved)
    right = _operand(program, edit, names, b, groups, ("K", "N"), fused, extents, moved)
    body = _product([*scalars, Sum((fused["K"][0],), _product([left, right]))])
    body = Neg(body) if sign < 0 else body
    out = statement.output
    target = _arrangement(program.tensor(out.tensor), out, groups, ("M", "N"))
    # views hide accesses from a dependence analysis: only of tensors no other
    # statement touches (an operand: that no statement writes)
    touched = {
        program.storage(name)
        for other in program.statements
        if other is not statement
        for name in other.tensors()
    }
    if target is not None and program.storage(out.tensor) not in touched:
        output = program.tensor(out.tensor)
        result = _view(edit, names, out.tensor, output.dtype, target, fused)
        edit.statements.append(_statement(result, statement.op, body, extents))
    else:
        moved.append(out.tensor)
        canonical = [i for g in ("batch", "M", "N") for i in groups[g]]
        temp = names.fresh(f"{out.tensor}_t")
        edit.tensors.append(
            Tensor(temp, tuple(extents[i] for i in canonical), dtype, "row", temporary=True)
        )
        flat = [g for g in ("batch", "M", "N") if g in fused]
        result = _view(edit, names, temp, dtype, flat, fused)
        edit.statements.append(_statement(result, "=", body, extents))
        edit.statements.append(
            _statement(out, statement.op, Access(temp, tuple(canonical)), extents)
        )
    if not moved and all(len(g) <= 1 for g in groups.values()):
        raise RewriteError("TTGT of a statement that is already a plain GEMM")
    sizes = ", ".join(f"{g} {'·'.join(groups[g])}" for g in GROUPS if groups[g])
    how = f"transposes of {', '.join(moved)}" if moved else "no transposes (views only)"
    reason = f"a GEMM over fused index groups ({sizes}) with {how}"
    return Rewrite(
        "ttgt", position, len(edit.statements), reason, _apply(problem, position, edit), problem
    )


def _arrangement(
    tensor: Tensor, access: Access, groups: dict[str, list[str]], pair: tuple[str, str]
) -> list[str] | None:
    """The group order (batch first) in which ``access`` already is in memory, or None."""
    order = list(memory_order(tensor, access.indices))
    for first, second in (pair, pair[::-1]):
        arrangement = [g for g in ("batch", first, second) if groups[g]]
        if order == [i for g in arrangement for i in groups[g]]:
            return arrangement
    return None


def _view(
    edit: _Edit,
    names: _Names,
    base: str,
    dtype: DType,
    arrangement: Sequence[str],
    fused: dict[str, tuple[str, str]],
) -> Access:
    """A row-major view of ``base`` (in GEMM order) with one dimension per group."""
    name = names.fresh(f"{base}_g")
    shape = tuple(fused[g][1] for g in arrangement)
    edit.tensors.append(Tensor(name, shape, dtype, "row", temporary=True, view_of=base))
    return Access(name, tuple(fused[g][0] for g in arrangement))


def _operand(
    program: Program,
    edit: _Edit,
    names: _Names,
    access: Access,
    groups: dict[str, list[str]],
    pair: tuple[str, str],
    fused: dict[str, tuple[str, str]],
    extents: dict[str, str],
    moved: list[str],
) -> Access:
    """The access the GEMM-shaped statement makes for one operand: a view of it, or
    of its permuted copy."""
    tensor = program.tensor(access.tensor)
    arrangement = _arrangement(tensor, access, groups, pair)
    if arrangement is not None and program.storage(access.tensor) not in _written(program):
        return _view(edit, names, access.tensor, tensor.dtype, arrangement, fused)
    moved.append(access.tensor)
    canonical = [i for g in ("batch", *pair) for i in groups[g]]
    temp = names.fresh(f"{access.tensor}_t")
    edit.tensors.append(
        Tensor(temp, tuple(extents[i] for i in canonical), tensor.dtype, "row", temporary=True)
    )
    edit.statements.append(_statement(Access(temp, tuple(canonical)), "=", access, extents))
    arranged = [g for g in ("batch", *pair) if g in fused]
    return _view(edit, names, temp, tensor.dtype, arranged, fused)
