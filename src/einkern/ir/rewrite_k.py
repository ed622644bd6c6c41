"""The split-K rewrite (see :mod:`.rewrite`): a long sum onto a small output as
partial sums over slices of the summed index, then a sum over the slices."""

from __future__ import annotations

import math
from dataclasses import replace

from .nodes import Access, Const, Problem, Program, Statement, Sum, Tensor, accesses
from .rewrite import (
    Rewrite,
    RewriteError,
    _apply,
    _dtype,
    _Edit,
    _Names,
    _reads_own_output,
    _rename,
    _statement,
    _substitute,
    _written,
    free_indices,
    outer_sums,
)


def split_k_target(statement: Statement, index: str | None = None) -> tuple[Sum, str]:
    """The outer sum split-K would split and its index (``index``, else the first
    summed index), or :class:`~.rewrite.RewriteError`: the sum's other indices must
    be output indices."""
    parallel = set(statement.parallel_indices)
    for node in outer_sums(statement):
        if not set(free_indices(node)) <= parallel:
            continue
        for candidate in node.indices:
            if index is None or candidate == index:
                return node, candidate
    raise RewriteError(
        "split-K needs a sum (not nested in another) over "
        + (f"index {index!r}" if index else "some index")
        + " whose other indices are the statement's output indices"
    )


def longest_index(problem: Problem, statement: Statement) -> str | None:
    """The summed index over the largest extent among the statement's outer sums."""
    best: tuple[int, str] | None = None
    parallel = set(statement.parallel_indices)
    for node in outer_sums(statement):
        if set(free_indices(node)) <= parallel:
            for index in node.indices:
                size = problem.index_size(statement, index)
                if best is None or size > best[0]:
                    best = (size, index)
    return None if best is None else best[1]


def slice_count(size: int, wanted: int) -> tuple[int, bool]:
    """``(S, divides)``: a number of slices near ``wanted`` that divides ``size``
    (within a factor of two) when one exists, else ``wanted``, not dividing."""
    for delta in range(wanted):
        for candidate in (wanted + delta, wanted - delta):
            if wanted // 2 <= candidate <= 2 * wanted and candidate >= 2 and size % candidate == 0:
                return candidate, True
    return wanted, False


#: A slice count that divides an index's extent is taken for ``wanted`` slices when
#: within this factor of it; padding (copies of the operands) only when none is.
FREE_FACTOR = 4


def split_choices(
    problem: Problem, statement: Statement, wanted: int
) -> tuple[tuple[str, int], ...]:
    """``(index, slices)`` pairs for about ``wanted`` partial sums of the outer sum
    over the statement's longest summed index: of that sum's indices, the slice
    count dividing an index's extent (a free view) within :data:`FREE_FACTOR` of
    ``wanted`` that is nearest to it (a longer index on ties), and the nearest such
    count of the longest index when that is another; when no count divides, the
    longest index, padded, in ``min(wanted, extent)`` slices."""
    longest = longest_index(problem, statement)
    if longest is None:
        raise RewriteError("split-K needs a sum whose other indices are output indices")
    node, _ = split_k_target(statement, longest)
    options: list[tuple[float, int, str, int]] = []
    for index in node.indices:
        size = problem.index_size(statement, index)
        for count in _divisors(size):
            ratio = abs(math.log(count / wanted))
            if ratio <= math.log(FREE_FACTOR):
                options.append((round(ratio, 9), -size, index, count))
    if not options:
        return ((longest, min(wanted, problem.index_size(statement, longest))),)
    found = [min(options)[2:]]
    along = [o for o in options if o[2] == longest]
    if along:
        found.append(min(along)[2:])
    return tuple(dict.fromkeys(found))


def _divisors(size: int) -> list[int]:
    """The divisors of ``size`` from 2 up (``size`` itself: the whole index)."""
    small = [d for d in range(2, math.isqrt(size) + 1) if size % d == 0]
    return sorted({*small, *(size // d for d in small), size} - {1})


def split_k(problem: Problem, position: int, slices: int, index: str | None = None) -> Rewrite:
    """Split the sum over ``index`` (default: the longest summed index) of statement
    ``position`` into ``slices`` partial sums."""
    program = problem.program
    statement = program.statements[position]
    if _reads_own_output(program, statement):
        raise RewriteError(
            f"statement {position} reads its own output {statement.output.tensor!r}: its "
            "partial sums would have to read values the statement overwrites"
        )
    index = index if index is not None else longest_index(problem, statement)
    node, index = split_k_target(statement, index)
    size = problem.index_size(statement, index)
    if slices < 2 or slices > size:
        raise RewriteError(f"split-K into {slices} slices of an index over {size}")
    names = _Names(program, statement, f"k{position}_")
    edit = _Edit([], [], [])
    extents = dict(statement.index_extents)
    count, divides = slice_count(size, slices)
    inner = size // count if divides else math.ceil(size / count)
    s = names.fresh("s")
    k = names.fresh("k")
    extents[s] = edit.extent(names, "S", count)
    extents[k] = edit.extent(names, "K", inner)
    written = _written(program)
    renamed: dict[str, Access] = {}
    copied = False
    for access in accesses(node.body):
        if index not in access.indices or str(access) in renamed:
            continue
        if access.indices.count(index) > 1:
            raise RewriteError(f"split-K of {index!r}, which {access} uses twice")
        source = access
        if not divides or program.storage(access.tensor) in written:
            source = _padded_copy(problem, statement, access, index, count * inner, names, edit)
            copied = True
        renamed[str(access)] = _split_view(
            program, edit, names, source, index, (s, k), (extents[s], extents[k])
        )
    body = _rename(node.body, renamed)
    free = [i for i in statement.parallel_indices if i in free_indices(node)]
    output = program.tensor(statement.output.tensor)
    dims = [s, *free] if output.layout == "row" else [*free, s]
    partial = names.fresh("P")
    dtype = _dtype(program, statement, accesses(node.body))
    edit.tensors.append(
        Tensor(partial, tuple(extents[i] for i in dims), dtype, output.layout, temporary=True)
    )
    bound = tuple(i for i in node.indices if i != index) + (k,)
    edit.statements.append(_statement(Access(partial, tuple(dims)), "=", Sum(bound, body), extents))
    if node is statement.rhs and tuple(free) == statement.output.indices:
        edit.statements.append(
            _flat_sum(problem, statement, partial, s, dims, names, edit, extents)
        )
    else:
        rhs = _substitute(statement.rhs, node, Sum((s,), Access(partial, tuple(dims))))
        edit.statements.append(_statement(statement.output, statement.op, rhs, extents))
    how = (
        f"{index} = {count}·{inner} split by views (free)"
        if divides and not copied
        else f"{index} over {size} padded to {count}·{inner} (copies of its operands)"
    )
    reason = f"the sum over {index} ({size} terms) in {count} partial sums: {how}"
    return Rewrite(
        "split_k", position, len(edit.statements), reason, _apply(problem, position, edit), problem
    )


def split_outer(problem: Problem, position: int) -> Rewrite:
    """Split-K over every index of the outer sum but the ones the operands' loads
    run along: of each factor's summed indices, the one of the smallest stride is
    kept in the sum; each other summed index becomes a slice index of its own
    (one slice per value, views: free), nested.  The partial sums then read each
    operand in runs along its own contiguous summed index, however the operands
    order the rest (seed 47's ``ptexbi,gbtxp->gei``, A's summed order ``b, x, t,
    p`` and B's ``p, x, t, b``: split over ``t`` and ``x``, 0.39 -> 0.074 ms on an
    H100; docs/rewrites.md "split_k").  The partial sums may hold at most as many
    elements as the largest operand."""
    statement = problem.program.statements[position]
    node, _ = split_k_target(statement)
    kept: dict[str, None] = {}
    operands = [a for a in dict.fromkeys(accesses(node.body)) if set(a.indices) & set(node.indices)]
    for access in operands:
        strides = problem.strides(access.tensor)
        summed = [(s, i) for i, s in zip(access.indices, strides, strict=True) if i in node.indices]
        kept[min(summed)[1]] = None
    split = [i for i in node.indices if i not in kept and problem.index_size(statement, i) > 1]
    if not split:
        raise RewriteError("split over the outer indices: every summed index is an operand's run")
    slices = math.prod(problem.index_size(statement, i) for i in split)
    outputs = math.prod(problem.index_size(statement, i) for i in free_indices(node))
    largest = max(problem.numel(a.tensor) for a in operands)
    if slices * outputs > largest:
        raise RewriteError(
            f"split over {', '.join(split)}: {slices * outputs} partial sums, more than the "
            f"largest operand's {largest} elements"
        )
    current, count = problem, 1
    for index in split:
        step = split_k(current, position, current.index_size(statement, index), index)
        current, count = step.problem, count + step.count - 1
    reason = (
        f"the sums over {', '.join(split)} in {slices} partial sums, each over "
        f"{', '.join(kept)} (the indices the operands are read along)"
    )
    return Rewrite("split_k", position, count, reason, current, problem, f"over {'+'.join(split)}")


def _flat_sum(
    problem: Problem,
    statement: Statement,
    partial: str,
    s: str,
    dims: list[str],
    names: _Names,
    edit: _Edit,
    extents: dict[str, str],
) -> Statement:
    """The sum of the partial sums when the statement is nothing but the split sum
    and the partials hold the output's indices in its order: through views of the
    output and the partials with those indices as one (``C_f[o] = sum[s] P_f[s,o]``),
    so that the sum's kernel runs along the outputs' memory however short the
    output's own stride-1 extent is (a tiny one left most threads idle)."""
    program = problem.program
    output = program.tensor(statement.output.tensor)
    flat = names.fresh("o")
    size = math.prod(problem.index_size(statement, i) for i in statement.output.indices)
    extents[flat] = edit.extent(names, "F", size)
    partial_dims = [s, flat] if dims[0] == s else [flat, s]
    out_view = names.fresh(f"{output.name}_f")
    partial_view = names.fresh("P_f")
    edit.tensors.append(
        Tensor(
            out_view,
            (extents[flat],),
            output.dtype,
            output.layout,
            temporary=True,
            view_of=output.name,
        )
    )
    edit.tensors.append(
        Tensor(
            partial_view,
            tuple(extents[d] for d in partial_dims),
            _tensor(program, edit, partial).dtype,
            output.layout,
            temporary=True,
            view_of=partial,
        )
    )
    total = Sum((s,), Access(partial_view, tuple(partial_dims)))
    return _statement(Access(out_view, (flat,)), statement.op, total, extents)


def _split_view(
    program: Program,
    edit: _Edit,
    names: _Names,
    access: Access,
    index: str,
    pair: tuple[str, str],
    pair_extents: tuple[str, str],
) -> Access:
    """A view of ``access``'s tensor with ``index``'s dimension split in two (slowest
    first in memory), and the access through it."""
    tensor = _tensor(program, edit, access.tensor)
    where = access.indices.index(index)
    outer, inner = (0, 1) if tensor.layout == "row" else (1, 0)
    indices = list(access.indices)
    shape = list(tensor.shape)
    indices[where : where + 1] = [pair[outer], pair[inner]]
    shape[where : where + 1] = [pair_extents[outer], pair_extents[inner]]
    name = names.fresh(f"{access.tensor}_v")
    edit.tensors.append(
        Tensor(name, tuple(shape), tensor.dtype, tensor.layout, temporary=True, view_of=tensor.name)
    )
    return Access(name, tuple(indices))


def _tensor(program: Program, edit: _Edit, name: str) -> Tensor:
    for tensor in edit.tensors:
        if tensor.name == name:
            return tensor
    return program.tensor(name)


def _padded_copy(
    problem: Problem,
    statement: Statement,
    access: Access,
    index: str,
    padded: int,
    names: _Names,
    edit: _Edit,
) -> Access:
    """A temporary copy of ``access``'s tensor, its ``index`` dimension padded with
    zeros to ``padded``: two statements (zero-fill, then copy of the elements)."""
    program = problem.program
    tensor = program.tensor(access.tensor)
    extents = dict(statement.index_extents)
    long = edit.extent(names, "Kp", padded)
    over = names.fresh("kp")
    extents[over] = long
    shape = tuple(
        long if i == index else d for i, d in zip(access.indices, tensor.shape, strict=True)
    )
    name = names.fresh(f"{access.tensor}_p")
    edit.tensors.append(replace(tensor, name=name, shape=shape, span=None, temporary=True))
    fill = tuple(over if i == index else i for i in access.indices)
    edit.statements.append(_statement(Access(name, fill), "=", Const(0.0), extents))
    edit.statements.append(_statement(Access(name, access.indices), "=", access, extents))
    return Access(name, access.indices)
