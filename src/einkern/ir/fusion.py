"""Fusion legality from the polyhedral dependences, and the merge transform.

Statements share a kernel under a *loop alignment*: each statement's ``depth``
outermost output dimensions (outermost in its output's memory order) are
identified with the dimensions ``F[0..depth-1]`` of one fused loop nest.  Each
fused iteration runs the statements' remaining loops (their inner parallel and
reduction loops) in program order.  That is legal exactly when every dependence
between two statements of the group -- the isl relation of each pair of their
accesses to one tensor with a write among them (built from the access maps of
:mod:`einkern.ir.poly`) -- carried over to ``F`` through both alignments, has
distance zero: the consumer only reads (or overwrites) what its own fused
iteration produced.  A dependence of any other distance crosses iterations,
that is threads or blocks, and forbids the group.

Two kinds of group come out of that:

- ``merge`` (:func:`mergeable`): updates of one output (``t = ...; t += ...;
  t -= ...`` or only updates) aligned over the whole output, whose right-hand
  sides do not read it.  :func:`merge_statements` derives, as a pure transform,
  the one statement that sums the signed right-hand sides (renaming each
  statement's indices to the first one's by output position), the hand-merged
  ``sd_t_<family>_all`` statement of the CCSD(T) benchmark; every backend
  lowers it as one kernel.
- ``nest``: any other legal group aligned over at least one dimension
  (siblings reading one input, producer–consumer chains): one loop nest on the
  CPU backend; on CUDA, siblings without dependences as one launch.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import islpy as isl

from .nodes import Access, Binary, Call, Expr, Neg, Program, Statement, Sum, children
from .poly import Dependence, dependences, polyhedra, statement_name

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
        self._depths: dict[tuple[int, int], tuple[int, Dependence | None]] = {}
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
        iterations when both are aligned over ``depth`` dimensions, or None.

        Every pair of accesses is examined (a flow dependence through each read,
        not only the first one :func:`einkern.ir.poly.dependences` reports): a pair
        whose index equalities already force equal fused coordinates is passed
        without isl, the others by the isl test of the module docstring."""
        key = (source, sink, depth)
        if key not in self._crossing:
            self._crossing[key] = None
            for kind, left, right in _access_pairs(self.program, source, sink):
                if _aligned_by_names(self.program, source, sink, left, right, depth):
                    continue
                found = self._crossing_relation(source, sink, left, right, depth)
                if found is not None:
                    self._crossing[key] = Dependence(kind, source, sink, left.tensor, found)
                    break
        return self._crossing[key]

    def _crossing_relation(
        self, source: int, sink: int, left: Access, right: Access, depth: int
    ) -> str | None:
        """The isl relation of ``left`` (in S``source``) and ``right`` (in S``sink``)
        when some pair of its instances lies in different fused iterations."""
        shapes = polyhedra(self.program)
        relation = (
            shapes.of(source)
            .access_map(left)
            .apply_range(shapes.of(sink).access_map(right).reverse())
        )
        if relation.is_empty():
            return None
        fused = relation.apply_domain(self._aligning(source, depth))
        fused = fused.apply_range(self._aligning(sink, depth))
        zero = isl.Set("{ F[" + ", ".join(["0"] * depth) + "] }")
        return None if fused.deltas().is_subset(zero) else str(relation)

    def pair_depth(self, a: int, b: int) -> tuple[int, Dependence | None]:
        """The deepest alignment at which S``a`` and S``b`` (``a < b``) may share a
        kernel, and the dependence that crosses iterations one level deeper (None
        when they agree on no deeper dimension).  Legal at a depth means legal at
        every smaller one (zero distance over ``F[0..d]`` is zero over a prefix)."""
        key = (a, b)
        found = self._depths.get(key)
        if found is None:
            common = common_depth(self.program, (a, b))
            found = (common, None)
            for depth in range(common, 0, -1):
                blocking = self.crossing(a, b, depth)
                if blocking is None:
                    break
                found = (depth - 1, blocking)
            self._depths[key] = found
        return found

    def legality(self, positions: tuple[int, ...]) -> Legality:
        """See :func:`legality`."""
        positions = tuple(sorted(positions))
        common = common_depth(self.program, positions)
        if common == 0:
            return Legality(
                positions, 0, 0, None, "no common loop alignment (outer output extents differ)"
            )
        depth, blocking = common, None
        for n, a in enumerate(positions):
            for b in positions[n + 1 :]:
                pair, crossing = self.pair_depth(a, b)
                if pair < depth:
                    depth, blocking = pair, crossing
        if depth == 0:
            assert blocking is not None
            return Legality(positions, 0, common, blocking, f"{blocking} crosses fused iterations")
        reason = f"legal with the {depth} outer output dimension(s) fused"
        if blocking is not None:
            reason += f" ({blocking} crosses iterations one dimension deeper)"
        return Legality(positions, depth, common, blocking, reason)

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


@lru_cache(maxsize=8)
def fusibility(program: Program) -> Fusibility:
    """The (kept) :class:`Fusibility` of ``program``."""
    return Fusibility(program)


def crossing(program: Program, source: int, sink: int, depth: int) -> Dependence | None:
    """The first dependence from S``source`` to S``sink`` that crosses fused
    iterations when both are aligned over ``depth`` dimensions, or None."""
    return fusibility(program).crossing(source, sink, depth)


def legality(program: Program, positions: tuple[int, ...]) -> Legality:
    """Legality of fusing ``positions``: the deepest alignment at which no dependence
    between them crosses fused iterations (a pure function of the program and its
    isl dependences)."""
    return fusibility(program).legality(positions)


# ---- the merge transform -----------------------------------------------------------


def mergeable(program: Program, positions: tuple[int, ...]) -> str | None:
    """None when the statements are updates of one output that :func:`merge_statements`
    can turn into one statement, else why not."""
    return fusibility(program).mergeable(positions)


def _access_pairs(program: Program, source: int, sink: int) -> list[tuple[str, Access, Access]]:
    """``(kind, access of S<source>, access of S<sink>)`` for every pair that touches
    one tensor with at least one write: flow, output, anti."""
    first, second = program.statements[source], program.statements[sink]
    pairs = [
        ("flow", first.output, read)
        for read in second.reads()
        if read.tensor == first.output.tensor
    ]
    if second.output.tensor == first.output.tensor:
        pairs.append(("output", first.output, second.output))
    pairs += [
        ("anti", read, second.output)
        for read in first.reads()
        if read.tensor == second.output.tensor
    ]
    return pairs


def _aligned_by_names(
    program: Program, source: int, sink: int, left: Access, right: Access, depth: int
) -> bool:
    """True when touching one element through ``left`` and ``right`` forces equal
    fused coordinates: each fused index of S``source`` is tied to the one of
    S``sink`` by the chain of index equalities the two accesses impose."""
    parent: dict[str, str] = {}

    def find(name: str) -> str:
        while parent.get(name, name) != name:
            name = parent[name]
        return name

    for a, b in zip(left.indices, right.indices, strict=True):
        parent[find("a:" + a)] = find("b:" + b)
    own, other = alignment(program, source), alignment(program, sink)
    assert own is not None and other is not None
    return all(find("a:" + own[d][0]) == find("b:" + other[d][0]) for d in range(depth))


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
        return Sum(tuple(rename.get(i, i) for i in expr.indices), rename_indices(expr.body, rename))
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
    output = Access(statement.output.tensor, tuple(rename[i] for i in statement.output.indices))
    extents = tuple((rename[i], e) for i, e in statement.index_extents)
    return Statement(
        output, statement.op, rename_indices(statement.rhs, rename), extents, statement.span
    )
