"""Which barriers a block-local chain needs (:mod:`einkern.gpu.chain`).

A chain runs its members one after the other in every block.  A barrier
between two members is needed only when a later member touches, in global
memory, an element that another *thread* of the block touched in an earlier
member, one of the two accesses a write: a read after write, a write after read
or a write after write across threads.  When the thread that reads an element
is the thread that wrote it, program order within the thread suffices (and the
compiler may keep the value in a register: store-to-load forwarding).

Two accesses of one tensor are *thread-local* when each element is touched by
the same thread in both members.  :func:`same_thread` proves it for the mappings
this project lowers (``direct`` and ``register``): the accesses name their
statements' parallel indices, each once; renaming the later statement's indices
to the earlier's by position in the access, both mappings spread the same
indices over the same threads in the same order (the same
:class:`~einkern.gpu.mapping.ParallelTile` in the same position) and the same
grid order.  Anything else (a reduction index or a broadcast in the access, a
view of another tensor's memory, a staged access, other tiles) is treated as
crossing threads.

:func:`schedule` puts every member on the lowest *barrier level* its
dependences allow: a member that conflicts with an earlier one (one tensor, one
of them writing) goes on that member's level when their accesses are
thread-local, one level higher when they cross threads.  The chain runs level
by level, each level's members in program order, a barrier between levels: the
fewest barriers any order of the members needs, and independent members run
early (Fousek's function I: ``M2 = D·E`` loads beside ``M1 = A·B`` instead of
after the norm).  Pure functions.
"""

from __future__ import annotations

import itertools
from dataclasses import replace

from ..ir.nodes import Access, Problem, Statement
from .mapping import Mapping

#: Strategies whose thread-to-output assignment is exactly their parallel tiles.
_PLAIN = ("direct", "register")


def _covers(statement: Statement, access: Access) -> bool:
    """The access names each of the statement's parallel indices once, nothing else."""
    names = access.indices
    return len(set(names)) == len(names) and set(names) == set(statement.parallel_indices)


def same_thread(
    first: tuple[Statement, Mapping, Access], later: tuple[Statement, Mapping, Access]
) -> bool:
    """Whether every element that ``later``'s access touches is touched by the same
    thread in ``first``'s access (see the module docstring)."""
    (s1, m1, a1), (s2, m2, a2) = first, later
    if a1.tensor != a2.tensor or len(a1.indices) != len(a2.indices):
        return False
    if m1.strategy not in _PLAIN or m2.strategy not in _PLAIN or m1.reduction_threads:
        return False
    if m2.reduction_threads or not (_covers(s1, a1) and _covers(s2, a2)):
        return False
    if m1.staging_of(str(a1)) is not None or m2.staging_of(str(a2)) is not None:
        return False  # a staged copy is spread over the block's threads its own way
    rename = dict(zip(a2.indices, a1.indices, strict=True))
    renamed = tuple(replace(t, index=rename.get(t.index, t.index)) for t in m2.parallel)
    grid = tuple(rename.get(i, i) for i in m2.grid_order)
    return renamed == m1.parallel and grid == m1.grid_order and m1.threads == m2.threads


def _touches(statement: Statement) -> list[tuple[Access, bool]]:
    """Every access of the statement with whether it writes."""
    return [(statement.output, True)] + [(a, False) for a in statement.reads()]


def _conflicts(problem: Problem, first: int, later: int) -> list[tuple[Access, Access]]:
    """The pairs of the two statements' accesses of one tensor's memory (views
    resolved to their storage), one of them writing."""
    program = problem.program
    s1, s2 = program.statements[first], program.statements[later]
    return [
        (a1, a2)
        for a1, w1 in _touches(s1)
        for a2, w2 in _touches(s2)
        if (w1 or w2) and program.storage(a1.tensor) == program.storage(a2.tensor)
    ]


def levels(
    problem: Problem, positions: tuple[int, ...], mappings: dict[int, Mapping]
) -> tuple[int, ...]:
    """Each member's barrier level: the fewest barriers that must run before it
    (a member on a level above every member it conflicts with that crosses
    threads, on the level of one that does not)."""
    statements = problem.program.statements
    found: list[int] = []
    for n, p in enumerate(positions):
        level = 0
        for q, q_level in zip(positions[:n], found, strict=True):
            pairs = _conflicts(problem, q, p)
            if pairs:
                crossing = any(
                    not same_thread(
                        (statements[q], mappings[q], a1), (statements[p], mappings[p], a2)
                    )
                    for a1, a2 in pairs
                )
                level = max(level, q_level + crossing)
        found.append(level)
    return tuple(found)


def schedule(
    problem: Problem, positions: tuple[int, ...], mappings: dict[int, Mapping]
) -> tuple[tuple[int, ...], tuple[bool, ...]]:
    """The members in the order the chain runs them (by level, then program
    order: every dependence keeps its direction) and, for each after the first,
    whether a barrier precedes it (where the level rises)."""
    found = levels(problem, positions, mappings)
    order = sorted(range(len(positions)), key=lambda n: (found[n], n))
    barriers = tuple(found[b] != found[a] for a, b in itertools.pairwise(order))
    return tuple(positions[n] for n in order), barriers
