"""Fused loop nests on the CPU: a group of consecutive statements (a ``nest`` of
the fusion planner, :mod:`einkern.ir.fusion_plan`) compiled as one OpenMP loop nest.

The group's loop alignment (:func:`einkern.ir.fusion.legality`) names its fused
loops: the ``depth`` outermost output dimensions of the first statement, which
every member shares.  One OpenMP ``parallel for`` runs them; inside, each member
(indices renamed onto the fused loops by :func:`einkern.ir.fusion.aligned_statement`)
runs its own remaining output loops and sums in program order, in its own block
with its own compute type.  The planner has checked that no dependence between
members crosses fused iterations, so each iteration only reads what it produced.

:func:`emit_program` is the translation unit with nests (``emit_c`` when the
schedule has none); :func:`group_seconds` is the CPU cost the planner minimises.
"""

from __future__ import annotations

import dataclasses
import math
import os

from ...gpu.ctext import ENTRY_POINT, mangle
from ...ir.analysis import fused_floor_bytes, program_flops
from ...ir.fusion import MERGE, aligned_statement, alignment, legality, merge_statements
from ...ir.nodes import Problem, Program, Statement
from ...ir.task import Task
from ...semantics import C_TYPE
from .codegen import (
    _INDENT,
    _comment_text,
    _Context,
    _header,
    _loop_header,
    _nest,
    _statement_function,
    _statement_scalars,
    _statement_tensors,
    _store,
    compute_dtype,
    emit_c,
    uses_blas,
)
from .decide import default_schedule
from .printer import CpuText
from .schedule import (
    PARALLEL_MIN_WORK,
    CpuSchedule,
    check_schedule,
    default_loop_order,
    is_buffered,
    statement_work,
)

#: The CPU cost model of the fusion planner: a roofline with these nominal rates
#: (it ranks groupings; it does not predict times closely).
BANDWIDTH = 20e9  # bytes/s
PEAK = 100e9  # flop/s with cache tiles
UNTILED_PEAK = 25e9  # flop/s of a plain loop nest (a fused nest is not tiled)
OVERHEAD = 5e-6  # seconds per kernel (a parallel region and a call)


def group_seconds(problem: Problem, positions: tuple[int, ...], kind: str, depth: int) -> float:
    """Predicted seconds of one kernel computing statements ``positions``: fused
    floor bytes over :data:`BANDWIDTH` or flops over the peak, whichever is larger,
    slowed when its parallel loops have fewer iterations than threads."""
    view = Task(problem, positions).view
    program = problem.program
    seconds = fused_floor_bytes(view) / BANDWIDTH
    flops = program_flops(view)
    threads = os.cpu_count() or 1
    if len(positions) == 1:
        statement = program.statements[positions[0]]
        loops = default_schedule(view).statements[0]
        peak = PEAK if is_buffered(view, statement, loops) else UNTILED_PEAK
        iterations = math.prod(problem.index_size(statement, i) for i in statement.parallel_indices)
    else:
        peak = UNTILED_PEAK
        leader = program.statements[positions[0]]
        if kind == MERGE:
            leader = merge_statements(program, positions, checked=True)
            depth = len(leader.parallel_indices)
        iterations = math.prod(
            problem.size(e) for e in _fused_extents(program, positions[0], depth)
        )
    seconds = max(seconds, flops / peak) * max(1.0, threads / max(iterations, 1))
    return seconds + OVERHEAD


def _fused_extents(program: Program, leader: int, depth: int) -> list[str]:
    aligned = alignment(program, leader)
    return [extent for _, extent in (aligned or ())[:depth]]


def nest_schedule(schedule: CpuSchedule, nests: tuple[tuple[int, ...], ...]) -> CpuSchedule:
    """``schedule`` with the planner's nests (groups of more than one statement)."""
    return dataclasses.replace(schedule, nests=tuple(n for n in nests if len(n) > 1))


def emit_program(problem: Problem, schedule: CpuSchedule | None = None) -> str:
    """The C translation unit: :func:`~.codegen.emit_c`, with each nest of the
    schedule as one function and one call."""
    if schedule is None or not schedule.nests:
        return emit_c(problem, schedule)
    check_schedule(problem, schedule)
    program = problem.program
    first = {nest[0]: nest for nest in schedule.nests}
    inside = {p for nest in schedule.nests for p in nest}
    lines = _header(problem, uses_blas(schedule))
    for number, (statement, loops) in enumerate(
        zip(program.statements, schedule.statements, strict=True)
    ):
        if number in first:
            lines += _nest_function(problem, first[number])
        elif number not in inside:
            lines += _statement_function(problem, number, statement, loops)
        else:
            continue
        lines.append("")
    lines += _entry_point(program, schedule.nests)
    return "\n".join(lines) + "\n"


def _group_tensors(program: Program, positions: tuple[int, ...]) -> tuple[tuple[str, bool], ...]:
    """Tensors of the group in declaration order, each with whether it is written."""
    written = {program.statements[p].output.tensor for p in positions}
    used = {t for p in positions for t in _statement_tensors(program, program.statements[p])}
    return tuple((t.name, t.name in written) for t in program.tensors if t.name in used)


def _entry_point(program: Program, nests: tuple[tuple[int, ...], ...]) -> list[str]:
    position = {tensor.name: number for number, tensor in enumerate(program.tensors)}
    first = {nest[0]: nest for nest in nests}
    inside = {p for nest in nests for p in nest}
    lines = [f"void {ENTRY_POINT}(void **buffers, const double *scalars)", "{"]
    if not any(_statement_scalars(program, s) for s in program.statements):
        lines.append(f"{_INDENT}(void)scalars;")
    for number, statement in enumerate(program.statements):
        if number in first:
            group = first[number]
            tensors = _group_tensors(program, group)
            name = f"nest_{group[0]}_{group[-1]}"
        elif number in inside:
            continue
        else:
            output = statement.output.tensor
            tensors = tuple((t, t == output) for t in _statement_tensors(program, statement))
            name = f"statement_{number}"
        arguments = [
            f"({'' if written else 'const '}{C_TYPE[program.tensor(t).dtype]} *)"
            f"buffers[{position[t]}]"
            for t, written in tensors
        ]
        members = first.get(number, (number,))
        if any(_statement_scalars(program, program.statements[p]) for p in members):
            arguments.append("scalars")
        lines.append(f"{_INDENT}{name}({', '.join(arguments)});")
    lines.append("}")
    return lines


def _nest_function(problem: Problem, positions: tuple[int, ...]) -> list[str]:
    """One function: the fused parallel loops around each member's own loops."""
    program = problem.program
    depth = legality(program, positions).depth
    assert depth >= 1, f"statements {positions} cannot share a loop nest"
    members = [aligned_statement(program, positions[0], p, depth) for p in positions]
    leader_order = _fused_order(program, positions[0], depth)
    uses_scalars = any(_statement_scalars(program, program.statements[p]) for p in positions)
    parameters = [
        f"{'' if written else 'const '}{C_TYPE[program.tensor(t).dtype]} *restrict {mangle('t', t)}"
        for t, written in _group_tensors(program, positions)
    ]
    if uses_scalars:
        parameters.append("const double *restrict scalars")
    lines = [
        f"/* statements {', '.join(map(str, positions))} in one loop nest over "
        f"{', '.join(leader_order)}:"
    ]
    lines += [f" *   {_comment_text(str(program.statements[p]))}" for p in positions]
    lines += [
        " */",
        f"static void nest_{positions[0]}_{positions[-1]}({', '.join(parameters)})",
        "{",
    ]
    body: list[str] = []
    for position, member in zip(positions, members, strict=True):
        body += _member(problem, position, member, set(leader_order))
    work = sum(statement_work(problem, program.statements[p]) for p in positions)
    pragma = None
    if work >= PARALLEL_MIN_WORK:
        clause = f" collapse({len(leader_order)})" if len(leader_order) > 1 else ""
        pragma = f"#pragma omp parallel for{clause} schedule(static)"
    headers = [_loop_header(i, problem.index_size(members[0], i)) for i in leader_order]
    lines += [_INDENT + line for line in _nest(headers, body, pragma)]
    lines.append("}")
    return lines


def _fused_order(program: Program, leader: int, depth: int) -> tuple[str, ...]:
    aligned = alignment(program, leader)
    return tuple(index for index, _ in (aligned or ())[:depth])


def _member(problem: Problem, position: int, statement: Statement, fused: set[str]) -> list[str]:
    """One member inside the fused loops: its scalars, its own loops and its store."""
    program = problem.program
    ctype = C_TYPE[compute_dtype(program, statement)]
    scalars = _statement_scalars(program, statement)
    printer = CpuText(problem, statement, ctype, scalars)
    context = _Context(problem, statement, ctype, printer)
    lines = [f"{{ /* S{position}: {_comment_text(str(statement))} */"]
    indexes = {s.name: i for i, s in enumerate(program.scalars)}
    for name in scalars:
        cast = "" if ctype == "double" else f"({ctype})"
        value = f"{cast}scalars[{indexes[name]}]"
        lines.append(f"{_INDENT}const {ctype} {mangle('s', name)} = {value};")
    own = [i for i in default_loop_order(problem, statement) if i not in fused]
    headers = [_loop_header(i, problem.index_size(statement, i)) for i in own]
    lines += [_INDENT + line for line in _nest(headers, _store(context))]
    lines.append("}")
    return lines
