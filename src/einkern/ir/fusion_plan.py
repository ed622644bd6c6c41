"""The fusion planner: which statements share a kernel (Fousek §4, on the isl
dependences of :mod:`einkern.ir.fusion`).

1. The statements form a DAG (the dependences of :func:`einkern.ir.poly.dependences`).
2. Candidate groups are grown from single statements through shared tensors
   (read-read counts: siblings of one input), each closed to a *convex* subgraph
   (every statement on a path between two members joins), and kept when legal
   (:func:`einkern.ir.fusion.legality`) and of a kind the backend compiles
   (``merge`` everywhere, ``nest`` on the CPU).  An illegal group is not grown
   further: a larger group contains the same forbidding dependence.
3. A cost function of the backend predicts each candidate's time.
4. The cover of the program by candidates (each statement in exactly one group)
   of least predicted time is an integer program solved by SciPy's ``milp``
   (HiGHS); covers whose groups would depend on one another in a cycle are cut
   off and the program solved again, and so are the covers already found, which
   gives the next-best alternatives.

The output is a :class:`FusionPlan`: the chosen groups in an order that respects
every dependence, the alternatives, the pairs that dependences kept apart, and
the rewritten problem (:attr:`FusionPlan.fused`): merge groups replaced by their
merged statement, nest groups as consecutive statements, whose
:meth:`FusionPlan.tasks` are the kernels.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import cached_property

import numpy as np

from .fusion import MERGE, NEST, Fusibility, fusibility, merge_statements
from .nodes import Problem, Program, Statement
from .poly import dependences
from .task import Task

SINGLE = "single"

#: A backend's predicted seconds of a group: ``(problem, positions, kind, depth)``;
#: None when the backend cannot compile a group of that kind.
GroupCost = Callable[[Problem, tuple[int, ...], str, int], "float | None"]

MAX_GROUP = 32  # statements in one candidate group
MAX_CANDIDATES = 2000  # candidate groups enumerated (beyond: the plan says it stopped)
ALTERNATIVES = 3  # covers kept: the best and the next best
#: Covers predicted within this fraction of the fastest count as equally fast (the
#: cost models rank; they do not predict closely): the one of fewest kernels wins.
MODEL_TOLERANCE = 0.15


@dataclass(frozen=True)
class Group:
    """Statements ``positions`` (of the original program) computed by one kernel."""

    positions: tuple[int, ...]
    kind: str  # "single", "merge" or "nest"
    depth: int  # outer output dimensions fused (0 for a single statement)
    seconds: float  # predicted
    reason: str

    def __str__(self) -> str:
        members = "+".join(f"S{p}" for p in self.positions)
        return f"{members} [{self.kind}] {self.seconds * 1e3:.4g} ms predicted: {self.reason}"


@dataclass(frozen=True)
class Cover:
    """Groups covering every statement once, in an order that respects the
    dependences; ``seconds`` their predicted total."""

    groups: tuple[Group, ...]
    seconds: float

    def __str__(self) -> str:
        text = ", ".join("+".join(f"S{p}" for p in g.positions) for g in self.groups)
        return f"{len(self.groups)} kernel(s), {self.seconds * 1e3:.4g} ms predicted: {text}"


@dataclass(frozen=True)
class FusionPlan:
    """The planner's choice for ``problem`` on backend ``target``."""

    problem: Problem
    target: str
    chosen: Cover
    alternatives: tuple[Cover, ...]
    forbidden: tuple[str, ...]  # why pairs of statements sharing a tensor stay apart
    candidates: int
    capped: bool
    rule: str  # why the chosen cover won

    @property
    def groups(self) -> tuple[Group, ...]:
        return self.chosen.groups

    @cached_property
    def fused(self) -> Problem:
        """The problem as compiled: merge groups as one statement each, every group's
        statements consecutive, groups in the chosen order."""
        statements: list[Statement] = []
        program = self.problem.program
        for group in self.groups:
            if group.kind == MERGE:
                statements.append(merge_statements(program, group.positions, checked=True))
            else:
                statements.extend(program.statements[p] for p in group.positions)
        if tuple(statements) == program.statements:
            return self.problem
        rewritten = replace(program, statements=tuple(statements))
        return Problem(rewritten, self.problem.sizes)

    @cached_property
    def nests(self) -> tuple[tuple[int, ...], ...]:
        """Positions in :attr:`fused` of every kernel: one per group (a merge group is
        one statement there)."""
        found = []
        start = 0
        for group in self.groups:
            size = 1 if group.kind == MERGE else len(group.positions)
            found.append(tuple(range(start, start + size)))
            start += size
        return tuple(found)

    def tasks(self) -> tuple[Task, ...]:
        """The kernels: a :class:`Task` of :attr:`fused` per group."""
        return tuple(Task(self.fused, positions) for positions in self.nests)

    def explain(self) -> list[str]:
        """Lines saying what was fused, why, and what was not."""
        lines = [
            f"fusion ({self.target}): {self.chosen}",
            f"  chosen by {self.rule}",
            f"  {self.candidates} candidate group(s)"
            + (f" (enumeration stopped at {MAX_CANDIDATES})" if self.capped else ""),
        ]
        lines += [f"  group {group}" for group in self.groups]
        lines += [f"  alternative {cover}" for cover in self.alternatives]
        lines += [f"  kept apart: {why}" for why in self.forbidden]
        return lines


def unfused_plan(problem: Problem, target: str, why: str = "fusion turned off") -> FusionPlan:
    """One kernel per statement, in program order (``fuse=False``), nothing predicted."""
    groups = tuple(Group((p,), SINGLE, 0, 0.0, why) for p in range(len(problem.program.statements)))
    return FusionPlan(problem, target, Cover(groups, 0.0), (), (), len(groups), False, why)


def plan_fusion(problem: Problem, target: str, cost: GroupCost) -> FusionPlan:
    """The cover of ``problem`` by legal groups of least predicted ``cost``."""
    program = problem.program
    count = len(program.statements)
    singles = []
    for p in range(count):
        seconds = cost(problem, (p,), SINGLE, 0)
        assert seconds is not None, "every backend compiles a single statement"
        singles.append(Group((p,), SINGLE, 0, seconds, "one statement"))
    if count < 2:
        cover = Cover(tuple(singles), sum(g.seconds for g in singles))
        return FusionPlan(problem, target, cover, (), (), count, False, "one statement")
    found, forbidden, capped = _candidates(problem, cost)
    groups = singles + found
    covers, rule = _covers(program, groups)
    return FusionPlan(
        problem, target, covers[0], tuple(covers[1:]), forbidden, len(groups), capped, rule
    )


# ---- enumeration ---------------------------------------------------------------------


def _reach(program: Program) -> list[set[int]]:
    """For each statement, the statements that depend on it, directly or not."""
    count = len(program.statements)
    after: list[set[int]] = [set() for _ in range(count)]
    for dependence in dependences(program):
        after[dependence.source].add(dependence.sink)
    for p in range(count - 1, -1, -1):  # sinks come after sources: one backward pass
        for q in list(after[p]):
            after[p] |= after[q]
    return after


def _neighbours(program: Program) -> list[set[int]]:
    """Statements sharing a tensor (read or written) with each statement."""
    touching: dict[str, set[int]] = {}
    for p, statement in enumerate(program.statements):
        for name in statement.tensors():
            touching.setdefault(name, set()).add(p)
    return [
        set().union(*(touching[n] for n in s.tensors())) - {p}
        for p, s in enumerate(program.statements)
    ]


def _masks(sets: list[set[int]]) -> list[int]:
    return [sum(1 << v for v in found) for found in sets]


def _positions(mask: int) -> tuple[int, ...]:
    found = []
    while mask:  # one step per set bit, lowest first
        low = mask & -mask
        found.append(low.bit_length() - 1)
        mask ^= low
    return tuple(found)


def _candidates(problem: Problem, cost: GroupCost) -> tuple[list[Group], tuple[str, ...], bool]:
    """Legal groups grown through shared tensors, each closed to a convex subgraph
    (sets of statements are bit masks: the closure of S is S with every statement
    both reachable from S and reaching S)."""
    program = problem.program
    count = len(program.statements)
    answers = fusibility(program)
    after = _reach(program)
    before: list[set[int]] = [set() for _ in range(count)]
    for p, later in enumerate(after):
        for q in later:
            before[q].add(p)
    after_mask, before_mask = _masks(after), _masks(before)
    near_mask = _masks(_neighbours(program))
    seen: set[int] = set()
    frontier = [1 << p for p in range(count)]
    found: list[Group] = []
    forbidden: dict[tuple[int, int], str] = {}
    capped = False
    while frontier and not capped:
        grown: list[int] = []
        for members in frontier:
            positions_in = _positions(members)
            near = 0
            for m in positions_in:
                near |= near_mask[m]
            near &= ~members
            for v in _positions(near):
                group = members | 1 << v
                down = up = 0
                for m in _positions(group):
                    down |= after_mask[m]
                    up |= before_mask[m]
                group |= down & up
                if group in seen or group.bit_count() > MAX_GROUP:
                    continue
                seen.add(group)
                positions = _positions(group)
                candidate = _candidate(problem, answers, positions, cost)
                if isinstance(candidate, str):
                    if len(positions) == 2:
                        forbidden[(positions[0], positions[1])] = candidate
                    continue
                if candidate is not None:
                    found.append(candidate)
                elif len(positions) == 2:
                    joined = answers.joining(positions)
                    forbidden[(positions[0], positions[1])] = (
                        "legal as one loop nest, but not one kernel on this backend"
                        + (
                            f" ({joined} joins them and no block-local chain kernel fits)"
                            if joined is not None
                            else ""
                        )
                    )
                grown.append(group)
                if len(seen) >= MAX_CANDIDATES:
                    capped = True
                    break
            if capped:
                break
        frontier = grown
    reasons = tuple(f"S{a}+S{b}: {why}" for (a, b), why in sorted(forbidden.items()))
    return found, reasons, capped


def _candidate(
    problem: Problem, fusibility: Fusibility, positions: tuple[int, ...], cost: GroupCost
):
    """The group (when its kind is compiled by the backend), None (legal, but not
    compiled as one kernel here: grown further), or why it is illegal (a string)."""
    found = fusibility.legality(positions)
    if not found.legal:
        return found.reason
    if fusibility.mergeable(positions) is None:
        seconds = cost(problem, positions, MERGE, found.depth)
        if seconds is not None:
            return Group(
                positions,
                MERGE,
                found.depth,
                seconds,
                "updates of one output merged into one statement",
            )
    seconds = cost(problem, positions, NEST, found.depth)
    if seconds is None:
        return None
    return Group(
        positions,
        NEST,
        found.depth,
        seconds,
        f"one kernel (CPU: a loop nest; CUDA: one input staged once, sibling blocks, "
        f"or a block-local chain): "
        f"{found.reason}",
    )


# ---- the cover -------------------------------------------------------------------------


def _covers(program: Program, groups: list[Group]) -> tuple[list[Cover], str]:
    """The chosen cover, then the next fastest ones, and the rule that chose it.

    First the least predicted time ``t*`` (``milp``); then, among the covers
    predicted within :data:`MODEL_TOLERANCE` of ``t*``, the fewest kernels (ties:
    the faster), since the cost models rank but do not predict closely and fewer
    kernels move less data."""
    count = len(program.statements)
    incidence = np.zeros((count, len(groups)))
    for column, group in enumerate(groups):
        incidence[list(group.positions), column] = 1.0
    costs = np.array([g.seconds for g in groups])
    ranked = _solve(program, groups, incidence, costs, costs, None, ALTERNATIVES)
    fastest = ranked[0]
    bound = fastest.seconds * (1.0 + MODEL_TOLERANCE)
    objective = 1.0 + costs / (bound * (count + 1))  # kernels first, then time
    chosen = _solve(program, groups, incidence, objective, costs, bound, 1)[0]
    others = [c for c in ranked if _members(c) != _members(chosen)]
    if len(chosen.groups) < len(fastest.groups):
        rule = (
            f"fewest kernels within {MODEL_TOLERANCE:.0%} of the fastest predicted cover "
            f"({fastest}): the model cannot tell them apart, and fewer kernels move less data"
        )
    else:
        rule = "the least predicted time"
    return [chosen, *others[: ALTERNATIVES - 1]], rule


def _members(cover: Cover) -> set[tuple[int, ...]]:
    return {g.positions for g in cover.groups}


def _solve(
    program: Program,
    groups: list[Group],
    incidence: np.ndarray,
    objective: np.ndarray,
    costs: np.ndarray,
    bound: float | None,
    wanted: int,
) -> list[Cover]:
    """Up to ``wanted`` acyclic covers, best ``objective`` first (``milp`` with a
    no-good cut after each cover found), of predicted time at most ``bound``."""
    from scipy.optimize import Bounds, LinearConstraint, milp

    rows: list[np.ndarray] = []
    covers: list[Cover] = []
    for _ in range(4 * wanted + 4):
        constraints = [LinearConstraint(incidence, 1.0, 1.0)]
        if bound is not None:
            constraints.append(LinearConstraint(costs[None, :], -np.inf, bound))
        if rows:
            cuts = np.array(rows)
            constraints.append(LinearConstraint(cuts, -np.inf, cuts.sum(axis=1) - 1.0))
        result = milp(
            objective,
            constraints=constraints,
            integrality=np.ones(len(groups)),
            bounds=Bounds(0, 1),
        )
        if result.x is None:
            break
        picked = np.flatnonzero(result.x > 0.5)
        cut = np.zeros(len(groups))
        cut[picked] = 1.0
        rows.append(cut)
        ordered = _order(program, [groups[c] for c in picked])
        if ordered is None:
            continue  # the groups depend on one another in a cycle
        covers.append(Cover(tuple(ordered), float(costs[picked].sum())))
        if len(covers) == wanted:
            break
    assert covers, "one statement per group is always a cover"
    return covers


def _order(program: Program, groups: list[Group]) -> list[Group] | None:
    """The groups in an order respecting every dependence (ties: earliest statement
    first), or None when they depend on one another in a cycle."""
    owner = {p: n for n, g in enumerate(groups) for p in g.positions}
    after: list[set[int]] = [set() for _ in groups]
    for dependence in dependences(program):
        a, b = owner[dependence.source], owner[dependence.sink]
        if a != b:
            after[a].add(b)
    waiting = [0] * len(groups)  # groups each one still waits for
    for later in after:
        for n in later:
            waiting[n] += 1
    ready = [(g.positions[0], n) for n, g in enumerate(groups) if not waiting[n]]
    heapq.heapify(ready)
    done: list[int] = []
    while ready:  # Kahn's algorithm, the earliest statement first among the ready
        _, first = heapq.heappop(ready)
        done.append(first)
        for n in after[first]:
            waiting[n] -= 1
            if not waiting[n]:
                heapq.heappush(ready, (groups[n].positions[0], n))
    return [groups[n] for n in done] if len(done) == len(groups) else None
