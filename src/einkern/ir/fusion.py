"""Fusion legality from the polyhedral dependences, and the merge transform.

Statements share a kernel under a *loop alignment*: each statement's ``depth``
outermost output dimensions (outermost in its output's memory order) are
identified with the dimensions ``F[0..depth-1]`` of one fused loop nest.  Each
fused iteration runs the statements' remaining loops (their inner parallel and
reduction loops) in program order.  That is legal exactly when every dependence
between two statements of the group (:func:`einkern.ir.poly.dependences`),
carried over to ``F`` through both alignments, has distance zero: the consumer
only reads (or overwrites) what its own fused iteration produced.  A dependence
of any other distance crosses iterations, that is threads or blocks, and
forbids the group.

Two kinds of group come out of that (:func:`group_kind`):

- ``merge``: updates of one output (``t = ...; t += ...; t -= ...`` or only
  updates) aligned over the whole output, whose right-hand sides do not read it.
  :func:`merge_statements` derives, as a pure transform, the one statement that
  sums the signed right-hand sides (renaming each statement's indices to the
  first one's by output position), the hand-merged ``sd_t_<family>_all``
  statement of the CCSD(T) benchmark; every backend lowers it as one kernel.
- ``nest``: any other legal group aligned over at least one dimension
  (siblings reading one input, producer–consumer chains): one loop nest on the
  CPU backend.
"""

from __future__ import annotations

from dataclasses import dataclass

import islpy as isl

from .nodes import Access, Binary, Call, Expr, Neg, Program, Statement, Sum, children
from .poly import Dependence, dependences, statement_name

MERGE = "merge"
NEST = "nest"


def alignment(program: Program, position: int) -> tuple[tuple[str, str], ...] | None:
    """``(index, extent)`` of the statement's output dimensions, outermost in memory
    first; None when the output repeats an index (a diagonal has no alignment)."""
    statement = program.statements[position]
    indices = statement.output.indices
    if len(set(indices)) != len(indices):
        return None
    order = list(zip(indices, program.tensor(statement.output.tensor).shape, strict=True))
    if program.tensor(statement.output.tensor).layout == "column":
        order.reverse()
    return tuple(order)


def common_depth(program: Program, positions: tuple[int, ...]) -> int:
    """The most outer output dimensions on which all the statements agree in extent
    (0 when some statement has no alignment)."""
    aligned = [alignment(program, p) for p in positions]
    if any(a is None for a in aligned):
        return 0
    depth = min(len(a) for a in aligned if a is not None)
    for d in range(depth):
        if len({a[d][1] for a in aligned if a is not None}) != 1:
            return d
    return depth


def _aligning_map(program: Program, position: int, depth: int) -> isl.Map:
    """``S<position>[indices] -> F[outer output indices]`` for ``depth`` dimensions."""
    statement = program.statements[position]
    aligned = alignment(program, position)
    assert aligned is not None
    domain = ", ".join(f"x_{i}" for i in statement.indices)
    target = ", ".join(f"x_{index}" for index, _ in aligned[:depth])
    return isl.Map(f"{{ {statement_name(position)}[{domain}] -> F[{target}] }}")


class Fusibility:
    """Legality questions about one program, answered from its dependences with the
    answers for each pair of statements and depth kept (the planner asks many)."""

    def __init__(self, program: Program):
        self.program = program
        self._crossing: dict[tuple[int, int, int], Dependence | None] = {}
        self._maps: dict[tuple[int, int], isl.Map] = {}
        self._pairs: dict[tuple[int, int], list[Dependence]] = {}
        for dependence in dependences(program):
            self._pairs.setdefault((dependence.source, dependence.sink), []).append(dependence)

    def _aligning(self, position: int, depth: int) -> isl.Map:
        found = self._maps.get((position, depth))
        if found is None:
            found = self._maps[(position, depth)] = _aligning_map(self.program, position, depth)
        return found

    def crossing(self, source: int, sink: int, depth: int) -> Dependence | None:
        """The first dependence from S``source`` to S``sink`` that crosses fused
        iterations when both are aligned over ``depth`` dimensions, or None."""
        key = (source, sink, depth)
        if key not in self._crossing:
            self._crossing[key] = None
            zero = isl.Set("{ F[" + ", ".join(["0"] * depth) + "] }")
            for dependence in self._pairs.get((source, sink), ()):
                relation = isl.Map(dependence.relation)
                relation = relation.apply_domain(self._aligning(source, depth))
                relation = relation.apply_range(self._aligning(sink, depth))
                if not relation.deltas().is_subset(zero):
                    self._crossing[key] = dependence
                    break
        return self._crossing[key]

    def legality(self, positions: tuple[int, ...]) -> Legality:
        """See :func:`legality`."""
        positions = tuple(sorted(positions))
        common = common_depth(self.program, positions)
        if common == 0:
            return Legality(
                positions, 0, 0, None, "no common loop alignment (outer output extents differ)"
            )
        first_block: Dependence | None = None
        for depth in range(common, 0, -1):
            blocking = self._first_crossing(positions, depth)
            if blocking is None:
                reason = f"legal with the {depth} outer output dimension(s) fused"
                if first_block is not None:
                    reason += f" ({first_block} crosses iterations at depth {common})"
                return Legality(positions, depth, common, first_block, reason)
            first_block = first_block or blocking
        assert first_block is not None
        return Legality(
            positions, 0, common, first_block, f"{first_block} crosses fused iterations"
        )

    def _first_crossing(self, positions: tuple[int, ...], depth: int) -> Dependence | None:
        for n, a in enumerate(positions):
            for b in positions[n + 1 :]:
                found = self.crossing(a, b, depth)
                if found is not None:
                    return found
        return None

    def joining(self, positions: tuple[int, ...]) -> Dependence | None:
        """The first dependence between two of the statements, or None."""
        for n, a in enumerate(positions):
            for b in positions[n + 1 :]:
                found = self._pairs.get((a, b))
                if found:
                    return found[0]
        return None

    def mergeable(self, positions: tuple[int, ...]) -> str | None:
        """See :func:`mergeable`."""
        program = self.program
        if len(positions) < 2:
            return "one statement"
        statements = [program.statements[p] for p in positions]
        target = statements[0].output.tensor
        for position, statement in zip(positions, statements, strict=True):
            if statement.output.tensor != target:
                return f"S{position} writes {statement.output.tensor}, not {target}"
            if position != positions[0] and statement.op not in ("+=", "-="):
                return f"S{position} assigns {target} with '=' after S{positions[0]}"
            if any(a.tensor == target for a in _rhs_accesses(statement)):
                return f"S{position} reads {target} on its right-hand side"
        found = self.legality(positions)
        if found.depth != len(statements[0].output.indices):
            return f"not aligned over the whole of {target}: {found.reason}"
        return None


@dataclass(frozen=True)
class Legality:
    """Whether statements ``positions`` may share a kernel: ``depth`` the loop
    alignment (outer output dimensions fused; 0 when none is legal), and when it
    is not legal at the full common depth, the dependence that forbids it."""

    positions: tuple[int, ...]
    depth: int
    common: int
    forbidding: Dependence | None
    reason: str

    @property
    def legal(self) -> bool:
        return self.depth >= 1


def crossing(program: Program, source: int, sink: int, depth: int) -> Dependence | None:
    """The first dependence from S``source`` to S``sink`` that crosses fused
    iterations when both are aligned over ``depth`` dimensions, or None."""
    return Fusibility(program).crossing(source, sink, depth)


def legality(program: Program, positions: tuple[int, ...]) -> Legality:
    """Legality of fusing ``positions``: the deepest alignment at which no dependence
    between them crosses fused iterations (a pure function of the program and its
    isl dependences)."""
    return Fusibility(program).legality(positions)


# ---- the merge transform -----------------------------------------------------------


def mergeable(program: Program, positions: tuple[int, ...]) -> str | None:
    """None when the statements are updates of one output that :func:`merge_statements`
    can turn into one statement, else why not."""
    return Fusibility(program).mergeable(positions)


def _rhs_accesses(statement: Statement) -> list[Access]:
    stack: list[Expr] = [statement.rhs]
    found: list[Access] = []
    while stack:
        node = stack.pop()
        if isinstance(node, Access):
            found.append(node)
        stack.extend(children(node))
    return found


def merge_statements(
    program: Program, positions: tuple[int, ...], checked: bool = False
) -> Statement:
    """The one statement computing updates ``positions`` of one output: the first
    statement's output and operator, and the right-hand sides added or subtracted
    (by their operators relative to the first's) with each statement's indices
    renamed to the first's by output position (a reduction index that would clash
    gets a fresh name).  Refuses (ValueError) what :func:`mergeable` refuses
    (``checked``: the caller has asked :func:`mergeable` already)."""
    why = None if checked else mergeable(program, positions)
    if why is not None:
        raise ValueError(f"cannot merge statements {positions}: {why}")
    first = program.statements[positions[0]]
    extents = dict(first.index_extents)
    rhs = first.rhs
    leader_sign = -1 if first.op == "-=" else 1
    for position in positions[1:]:
        statement = program.statements[position]
        rename = dict(zip(statement.output.indices, first.output.indices, strict=True))
        for index in statement.reduction_indices:
            name = index
            while name in first.parallel_indices or (
                name in extents and extents[name] != statement.extent_of(index)
            ):
                name = f"{name}_{position}"
            rename[index] = name
            extents.setdefault(name, statement.extent_of(index))
        sign = -1 if statement.op == "-=" else 1
        op = "+" if sign == leader_sign else "-"
        rhs = Binary(op, rhs, rename_indices(statement.rhs, rename))
    return Statement(first.output, first.op, rhs, tuple(extents.items()), first.span)


def rename_indices(expr: Expr, rename: dict[str, str]) -> Expr:
    """``expr`` with index names replaced as ``rename`` says (others kept)."""
    if isinstance(expr, Access):
        return Access(expr.tensor, tuple(rename.get(i, i) for i in expr.indices))
    if isinstance(expr, Sum):
        return Sum(
            tuple(rename.get(i, i) for i in expr.indices), rename_indices(expr.body, rename)
        )
    if isinstance(expr, Neg):
        return Neg(rename_indices(expr.operand, rename))
    if isinstance(expr, Binary):
        return Binary(
            expr.op, rename_indices(expr.left, rename), rename_indices(expr.right, rename)
        )
    if isinstance(expr, Call):
        return Call(expr.func, tuple(rename_indices(a, rename) for a in expr.args))
    return expr


def aligned_statement(program: Program, leader: int, position: int, depth: int) -> Statement:
    """Statement ``position`` with its ``depth`` outer output indices renamed to the
    leader's (the fused loops' names) and every other index renamed away from them."""
    lead = alignment(program, leader)
    own = alignment(program, position)
    assert lead is not None and own is not None
    statement = program.statements[position]
    rename = {own[d][0]: lead[d][0] for d in range(depth)}
    taken = set(rename.values())
    for index in statement.indices:
        if index in rename:
            continue
        name = index
        while name in taken:
            name = f"{name}_{position}"
        rename[index] = name
        taken.add(name)
    output = Access(
        statement.output.tensor, tuple(rename[i] for i in statement.output.indices)
    )
    extents = tuple((rename[i], e) for i, e in statement.index_extents)
    return Statement(
        output, statement.op, rename_indices(statement.rhs, rename), extents, statement.span
    )
