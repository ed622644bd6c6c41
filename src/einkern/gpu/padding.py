"""The ``pad`` boundary policy (MAGMA §4.3.2, "copied into another padded matrix"):
the padded extents and whether padding applies.

Every extent of the task's statement is rounded up to a multiple of the tiles
(and k-steps) of the indices that range over it (:func:`pad_multiples`,
:func:`padded_task`); the tensors are copied into zero-filled buffers of the
padded shapes, the kernel runs with no boundary checks at all (``exact``), and
the output is cropped back (:func:`einkern.gpu.plan.plan_task`).  Zeros in the
padded inputs make the extra reduction terms vanish; the extra outputs are
dropped.  :func:`padding_problems` says when that would be wrong or too costly.
"""

from __future__ import annotations

import math
from dataclasses import replace

from ..ir.bind import make_problem
from ..ir.nodes import Access, Problem, product_factors, signed_terms
from ..ir.task import Task
from .mapping import Mapping
from .normalize import reduction_of
from .staging import natural_order

#: Padded copies align their rows to cache lines where it is cheap (see pad_multiples).
LINE_BYTES = 128
#: Padded copies may hold at most this many times the elements of the tensor.
MAX_GROWTH = 2


def pad_multiples(task: Task, mapping: Mapping) -> dict[str, int]:
    """For each extent of the statement, the multiple its size is rounded up to."""
    problem = task.problem
    statement = task.statement
    multiples: dict[str, int] = {}
    staged_groups = {
        i
        for g in reduction_of(statement).groups
        if any(mapping.staging_of(str(a)) for a in g.accesses())
        for i in g.indices
    }
    for index in statement.indices:
        extent = statement.extent_of(index)
        if index in statement.parallel_indices:
            multiple = mapping.tile_of(index).tile
        elif index in staged_groups:
            multiple = dict(mapping.k_step).get(index, 1)
        else:
            multiple = 1
        multiples[extent] = math.lcm(multiples.get(extent, 1), multiple)
    # Each tensor's contiguous extent is also rounded up to whole 128-byte lines when
    # that adds at most 1/32 to it: the rows of the padded copies then start on line
    # boundaries (SGEMM n = 3000: k 3000 -> 3008).
    for access in (statement.output, *statement.reads()):
        extent = statement.extent_of(natural_order(problem, access)[0])
        if extent.isdigit():
            continue
        line = LINE_BYTES // problem.program.tensor(access.tensor).itemsize
        size, multiple = problem.size(extent), multiples[extent]
        aligned = math.lcm(multiple, line)
        by_tile, by_line = -(-size // multiple) * multiple, -(-size // aligned) * aligned
        if by_line - by_tile <= by_tile // 32:
            multiples[extent] = aligned
    return _tie_extents(problem, statement, multiples)


def _tie_extents(problem: Problem, statement, multiples: dict[str, int]) -> dict[str, int]:
    """Extents that one index ranges over (``D[k,m]`` with ``k`` over ``lz`` and D's
    first extent ``lx``) must stay equal once padded: each gets the lcm of the
    multiples of its class."""
    tied: dict[str, set[str]] = {}
    for access in (statement.output, *statement.reads()):
        shape = problem.program.tensor(access.tensor).shape
        for index, extent in zip(access.indices, shape, strict=True):
            group = tied.get(extent, {extent}) | tied.get(
                statement.extent_of(index), {statement.extent_of(index)}
            )
            for member in group:
                tied[member] = group
    for extent in list(multiples):
        group = tied.get(extent, {extent})
        common = math.lcm(*(multiples.get(e, 1) for e in group))
        multiples.update({e: common for e in group})
    return multiples


def padded_task(task: Task, mapping: Mapping) -> Task:
    """The task alone (its view), over extents rounded up to the tiles' multiples.
    The view keeps every scalar of the program: the padded kernel takes the same
    scalar parameters as an unpadded one."""
    view = task.view
    sizes = dict(view.sizes)
    for extent, multiple in pad_multiples(task, mapping).items():
        sizes[extent] = -(-sizes[extent] // multiple) * multiple
    program = replace(view.program, scalars=task.program.scalars)
    grown = make_problem(program, {n: v for n, v in sizes.items() if not n.isdigit()})
    return Task(grown, tuple(range(len(task.positions))))


def padding_problems(task: Task, mapping: Mapping) -> list[str]:
    """Why ``pad`` cannot be used here (empty: it can)."""
    problem = task.problem
    multiples = pad_multiples(task, mapping)
    problems = [
        f"literal extent {e} cannot be padded"
        for e, m in multiples.items()
        if e.isdigit() and problem.size(e) % m
    ]
    statement = task.statement
    if problems:
        return problems
    grown = padded_task(task, mapping).problem
    for tensor in dict.fromkeys(a.tensor for a in (statement.output, *statement.reads())):
        before, after = problem.numel(tensor), grown.numel(tensor)
        if after > MAX_GROWTH * before:
            problems.append(
                f"padding grows {tensor} from {before} to {after} elements (over {MAX_GROWTH}x)"
            )
    for group in reduction_of(statement).groups:
        padded = [
            i
            for i in group.indices
            if problem.size(statement.extent_of(i)) % multiples[statement.extent_of(i)]
        ]
        for _, term in signed_terms(group.body):
            factors = [f for f in product_factors(term) if isinstance(f, Access)]
            for index in padded:
                if not any(index in f.indices for f in factors):
                    problems.append(f"padding {index} would add terms of {term} that are not zero")
    return problems
