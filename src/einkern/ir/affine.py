"""The polyhedral form of an affine program (a function of static-control loop nests).

An affine program is the front end's :class:`~einkern.lang.cfront_nodes.AFunction`:
statements with their loops, guards and positions.  This module gives each
statement, through islpy,

* its **iteration domain** (:func:`domain_text`: an isl set over the iterators,
  parametric in the size parameters — triangles and trapezoids included);
* its **accesses** (:func:`access_text`: isl maps from instances to elements);
* its **schedule** (:func:`schedule_text`: the 2d+1 source order
  ``[p0, ±i1, p1, ±i2, …]``, padded to a common length; ``-i`` for a loop that
  counts down);

and the program its **dependences** (:func:`dependences`: flow, anti and output,
each an isl relation between instances) and the **parallel loops**
(:func:`loop_parallel`: a loop is parallel when no dependence is carried by it —
found from the dependences, never assumed).  Reductions are recognised from a
``+=``/``-=`` whose loop does not appear in the target's subscripts
(:func:`reduction_iterators`).  :class:`AffineProblem` binds the sizes and
checks every access stays inside its array.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping
from dataclasses import dataclass

import islpy as isl

from ..errors import ExtentError, SemanticError
from ..lang.cfront_nodes import AExpr, AFunction, AStatement, Bin, Ref, refs

# ---- isl text ----------------------------------------------------------------------


def _params(function: AFunction) -> str:
    return "[" + ", ".join(function.sizes) + "]"


def constraints(statement: AStatement) -> list[str]:
    """The domain's constraints as isl text: loop bounds, then guards."""
    found = []
    for loop in statement.loops:
        found += [f"{loop.iterator} >= {low}" for low in loop.lower]
        found += [f"{loop.iterator} <= {high}" for high in loop.upper]
    found += [str(guard) for guard in statement.guards]
    return found


def domain_text(function: AFunction, statement: AStatement) -> str:
    """``[sizes] -> { S[i, j] : … }``."""
    rule = " and ".join(constraints(statement))
    tuple_ = f"{statement.name}[{', '.join(statement.iterators)}]"
    return f"{_params(function)} -> {{ {tuple_}{' : ' + rule if rule else ''} }}"


def access_text(function: AFunction, statement: AStatement, ref: Ref) -> str:
    """``[sizes] -> { S[i, j] -> A[subscripts] }`` (an element of a rank-0 array is ``A[]``)."""
    subscripts = ", ".join(str(s) for s in ref.subscripts)
    return (
        f"{_params(function)} -> {{ {statement.name}[{', '.join(statement.iterators)}] -> "
        f"{ref.array}[{subscripts}] }}"
    )


def schedule_depth(function: AFunction) -> int:
    """Number of schedule dimensions: 2·(deepest nest) + 1."""
    return 2 * max((len(s.loops) for s in function.statements), default=0) + 1


def schedule_values(statement: AStatement, width: int) -> list[str]:
    """The schedule's expressions, ``width`` of them."""
    values = [str(statement.position[0])]
    for loop, position in zip(statement.loops, statement.position[1:], strict=True):
        values += [loop.iterator if loop.step == 1 else f"-{loop.iterator}", str(position)]
    return values + ["0"] * (width - len(values))


def schedule_text(function: AFunction, statement: AStatement) -> str:
    """``[sizes] -> { S[i, j] -> [p0, i, p1, j, p2] }``."""
    values = schedule_values(statement, schedule_depth(function))
    return (
        f"{_params(function)} -> {{ {statement.name}[{', '.join(statement.iterators)}] -> "
        f"[{', '.join(values)}] }}"
    )


def _time_tuple(prefix: str, width: int) -> str:
    return "[" + ", ".join(f"{prefix}{k}" for k in range(width)) + "]"


def _lex_less(function: AFunction, width: int) -> isl.Map:
    pieces = []
    for k in range(width):
        equal = [f"c{p} = d{p}" for p in range(k)]
        pieces.append(" and ".join([*equal, f"c{k} < d{k}"]))
    return isl.Map(
        f"{_params(function)} -> {{ {_time_tuple('c', width)} -> {_time_tuple('d', width)} : "
        + " or ".join(f"({p})" for p in pieces)
        + " }"
    )


# ---- dependences ----------------------------------------------------------------------


@dataclass(frozen=True)
class Dependence:
    """``target`` instances that must follow ``source`` instances (``kind``: flow =
    write then read, anti = read then write, output = write then write) through
    ``array``; ``relation`` is the isl map between the instances."""

    kind: str
    source: str
    target: str
    array: str
    relation: str

    def __str__(self) -> str:
        return f"{self.kind:6} {self.source} -> {self.target} on {self.array}: {self.relation}"


@dataclass(frozen=True)
class _Access:
    statement: AStatement
    ref: Ref
    write: bool


def _accesses(function: AFunction) -> list[_Access]:
    found = []
    for statement in function.statements:
        found += [_Access(statement, ref, False) for ref in statement.reads()]
        found.append(_Access(statement, statement.target, True))
    return found


@functools.lru_cache(maxsize=64)
def _dependences(function: AFunction) -> tuple[tuple[Dependence, isl.Map], ...]:
    width = schedule_depth(function)
    later = _lex_less(function, width)
    found: dict[tuple[str, str, str, str], tuple[isl.Map, isl.Map]] = {}
    every = _accesses(function)
    for first in every:
        for second in every:
            if first.ref.array != second.ref.array or not (first.write or second.write):
                continue
            kind = "output" if first.write and second.write else "flow" if first.write else "anti"
            same = _instance_map(function, first).apply_range(
                _instance_map(function, second).reverse()
            )
            time = (
                isl.Map(schedule_text(function, first.statement))
                .reverse()
                .apply_range(same)
                .apply_range(isl.Map(schedule_text(function, second.statement)))
                .intersect(later)
            )
            if time.is_empty():
                continue
            relation = (
                isl.Map(schedule_text(function, first.statement))
                .apply_range(time)
                .apply_range(isl.Map(schedule_text(function, second.statement)).reverse())
            )
            key = (kind, first.statement.name, second.statement.name, first.ref.array)
            if key in found:
                time, relation = time.union(found[key][0]), relation.union(found[key][1])
            found[key] = (time.coalesce(), relation.coalesce())
    return tuple(
        (Dependence(kind, source, target, array, str(relation)), time)
        for (kind, source, target, array), (time, relation) in found.items()
    )


def _instance_map(function: AFunction, access: _Access) -> isl.Map:
    domain = isl.Set(domain_text(function, access.statement))
    return isl.Map(access_text(function, access.statement, access.ref)).intersect_domain(domain)


def dependences(function: AFunction) -> tuple[Dependence, ...]:
    """Every dependence between statement instances, in source order of the accesses."""
    return tuple(dependence for dependence, _ in _dependences(function))


def loop_key(statement: AStatement, depth: int) -> tuple[int, ...]:
    """The loop at ``depth`` (1 = outermost) around ``statement``: statements with
    the same key share it."""
    return statement.position[:depth]


def loop_parallel(function: AFunction, key: tuple[int, ...], reductions: bool = False) -> bool:
    """True when no dependence is carried by the loop ``key`` (see :func:`loop_key`):
    its iterations may run in any order, at the same time.  With ``reductions``,
    dependences between accumulations into one array (:func:`reduction_dependence`)
    do not count: the iterations may run at the same time if those updates are
    combined atomically or privately."""
    depth = len(key)
    width = schedule_depth(function)
    fixed = []
    for k, position in enumerate(key):
        fixed += [f"c{2 * k} = {position}", f"d{2 * k} = {position}"]
        if k < depth - 1:
            fixed.append(f"c{2 * k + 1} = d{2 * k + 1}")
    dim = 2 * depth - 1
    carried = isl.Map(
        f"{_params(function)} -> {{ {_time_tuple('c', width)} -> {_time_tuple('d', width)} : "
        + " and ".join([*fixed, f"c{dim} < d{dim}"])
        + " }"
    )
    return all(
        time.intersect(carried).is_empty()
        for dependence, time in _dependences(function)
        if not (reductions and reduction_dependence(function, dependence))
    )


def reduction_dependence(function: AFunction, dependence: Dependence) -> bool:
    """Whether ``dependence`` only orders two accumulations (``+=``/``-=``) into its
    array, neither of which reads that array on its right-hand side: the
    updates commute (up to rounding), so the order of the instances is free."""
    ends = [function.statement(dependence.source), function.statement(dependence.target)]
    return all(
        s.op in ("+=", "-=")
        and s.target.array == dependence.array
        and all(r.array != dependence.array for r in refs(s.rhs))
        for s in ends
    )


def parallel_iterators(function: AFunction, statement: AStatement) -> tuple[str, ...]:
    """The iterators of ``statement`` whose loops carry no dependence."""
    return tuple(
        loop.iterator
        for depth, loop in enumerate(statement.loops, 1)
        if loop_parallel(function, loop_key(statement, depth))
    )


def accumulation(statement: AStatement) -> tuple[str, AExpr]:
    """The statement's operator and right-hand side, with ``T = T + e``,
    ``T = e + T`` and ``T = T - e`` read as ``T += e`` and ``T -= e``."""
    rhs = statement.rhs
    if statement.op == "=" and isinstance(rhs, Bin) and rhs.op in "+-":
        if rhs.left == statement.target:
            return rhs.op + "=", rhs.right
        if rhs.op == "+" and rhs.right == statement.target:
            return "+=", rhs.left
    return statement.op, rhs


def reduction_iterators(statement: AStatement) -> tuple[str, ...]:
    """Iterators a ``+=``/``-=`` statement (or ``T = T + e``, see
    :func:`accumulation`) sums over: its loops that do not appear in the target's
    subscripts."""
    if accumulation(statement)[0] not in ("+=", "-="):
        return ()
    used = {name for aff in statement.target.subscripts for name in aff.names()}
    return tuple(i for i in statement.iterators if i not in used)


@functools.lru_cache(maxsize=256)
def innermost_sum(function: AFunction, statement: AStatement) -> bool:
    """True when ``statement``'s innermost loop is a sum into one element: the
    statement alone in that loop, ``+=``/``-=`` (or ``T = T ± e``, see
    :func:`accumulation`), the loop's iterator not in the target's subscripts,
    and no term reading an element that another iteration of the loop writes
    (checked with isl: ``x[i] -= L[i][j] * x[j]`` for ``j < i`` is such a sum).
    Its terms may then all be computed first and added in loop order."""
    depth = len(statement.loops)
    op, body = accumulation(statement)
    inner = statement.loops[-1].iterator if depth else ""
    if not depth or op not in ("+=", "-=") or inner in _target_names(statement):
        return False
    key = loop_key(statement, depth)
    if any(o is not statement and loop_key(o, depth) == key for o in function.statements):
        return False
    access = _Access(statement, statement.target, True)
    outer = [f"{i} = {i}'" for i in statement.iterators[:-1]]
    pairs = isl.Map(
        f"{_params(function)} -> {{ {statement.name}[{', '.join(statement.iterators)}] -> "
        f"{statement.name}[{', '.join(i + chr(39) for i in statement.iterators)}] : "
        + " and ".join([*outer, f"{inner} != {inner}'"])
        + " }"
    )
    for ref in refs(body):
        if ref.array != statement.target.array:
            continue
        read = _instance_map(function, _Access(statement, ref, False))
        if (
            not _instance_map(function, access)
            .apply_range(read.reverse())
            .intersect(pairs)
            .is_empty()
        ):
            return False
    return True


def _target_names(statement: AStatement) -> set[str]:
    return {name for aff in statement.target.subscripts for name in aff.names()}


@functools.lru_cache(maxsize=64)
def read_on_entry(function: AFunction) -> tuple[str, ...]:
    """Arrays some element of which is read before any statement writes it (for
    some size): the program's inputs, in parameter order."""
    width = schedule_depth(function)
    later = _lex_less(function, width)
    every = _accesses(function)
    found = set()
    for read in every:
        if read.write or read.ref.array in found:
            continue
        instances = isl.Set(domain_text(function, read.statement))
        covered = instances.subtract(instances)  # empty, in the right space
        for write in every:
            if not write.write or write.ref.array != read.ref.array:
                continue
            same = _instance_map(function, read).apply_range(
                _instance_map(function, write).reverse()
            )
            earlier = (
                isl.Map(schedule_text(function, read.statement))
                .reverse()
                .apply_range(same)
                .apply_range(isl.Map(schedule_text(function, write.statement)))
                .intersect(later.reverse())
            )
            back = isl.Map(schedule_text(function, read.statement)).apply_range(earlier)
            covered = covered.union(back.domain())
        if not instances.is_subset(covered):
            found.add(read.ref.array)
    return tuple(a.name for a in function.arrays if a.name in found)


# ---- problems ------------------------------------------------------------------------------


@dataclass(frozen=True)
class AffineProblem:
    """An affine program with a positive integer for every size parameter."""

    function: AFunction
    sizes: tuple[tuple[str, int], ...]

    def size(self, name: str) -> int:
        return dict(self.sizes)[name]

    def shape(self, array: str) -> tuple[int, ...]:
        extents = self.function.array(array).shape
        return tuple(int(e) if e.isdigit() else self.size(e) for e in extents)

    def numel(self, array: str) -> int:
        return math.prod(self.shape(array))

    @property
    def inputs(self) -> tuple[str, ...]:
        """Arrays whose values on entry are read (:func:`read_on_entry`)."""
        return read_on_entry(self.function)

    @property
    def outputs(self) -> tuple[str, ...]:
        written = {s.target.array for s in self.function.statements}
        return tuple(a.name for a in self.function.arrays if a.name in written)


def make_affine_problem(
    function: AFunction, sizes: Mapping[str, object] | None = None
) -> AffineProblem:
    """Bind ``sizes`` (a positive integer for every size parameter, else the
    function's default from ``#pragma einkern sizes``) and check that every access
    stays inside its array (:class:`~einkern.errors.SemanticError` with the
    statement's location otherwise)."""
    given = dict(sizes or {})
    for name in given:
        if name not in function.sizes:
            raise ExtentError(
                f"{function.name} has no size parameter {name!r}",
                function.span,
                hint=f"size parameters: {', '.join(function.sizes) or 'none'}",
            )
    given = {**function.default_sizes(), **given}
    values = []
    for name in function.sizes:
        if name not in given:
            raise ExtentError(
                f"size parameter {name!r} needs a value",
                function.span,
                hint=f"give it, e.g. -e {name}=64, or a default in the file: "
                f"#pragma einkern sizes {name}=64",
            )
        value = given[name]
        try:
            number = int(str(value))
        except ValueError:
            number = 0
        if number < 1 or str(number) != str(value).strip():
            raise ExtentError(f"size {name} must be a positive integer, got {value!r}")
        values.append((name, number))
    problem = AffineProblem(function, tuple(values))
    for array in function.arrays:
        if problem.numel(array.name) >= 2**62:
            raise ExtentError(
                f"array {array.name} would have {problem.numel(array.name)} elements",
                array.span,
                hint="use smaller sizes",
            )
    _check_bounds(problem)
    return problem


def statement_instances(problem: AffineProblem, statement: AStatement) -> isl.Set:
    """The instances of ``statement`` for the problem's sizes."""
    return isl.Set(domain_text(problem.function, statement)).intersect_params(_context(problem))


def _context(problem: AffineProblem) -> isl.Set:
    rule = " and ".join(f"{n} = {v}" for n, v in problem.sizes)
    return isl.Set(f"{_params(problem.function)} -> {{ : {rule or '0 = 0'} }}")


def _check_bounds(problem: AffineProblem) -> None:
    function = problem.function
    context = _context(problem)
    for access in _accesses(function):
        shape = problem.shape(access.ref.array)
        names = [f"e{k}" for k in range(len(shape))]
        box = " and ".join(f"0 <= e{k} < {extent}" for k, extent in enumerate(shape))
        allowed = isl.Set(
            f"{_params(function)} -> {{ {access.ref.array}[{', '.join(names)}]"
            + (f" : {box}" if box else "")
            + " }"
        )
        touched = _instance_map(function, access).intersect_params(context).range()
        if not touched.is_subset(allowed.intersect_params(context)):
            outside = touched.subtract(allowed).sample_point()
            raise SemanticError(
                f"{access.statement.name} accesses {access.ref} outside "
                f"{access.ref.array}{list(shape)} (e.g. at {outside})",
                access.statement.span,
                hint="check the loop bounds and subscripts against the array extents",
            )


# ---- isl's AST ---------------------------------------------------------------------------


def schedule_map(problem: AffineProblem) -> isl.UnionMap:
    """Every statement's schedule restricted to its domain, as one union map."""
    function = problem.function
    union = isl.UnionMap(f"{_params(function)} -> {{ }}")
    for statement in function.statements:
        one = isl.Map(schedule_text(function, statement)).intersect_domain(
            isl.Set(domain_text(function, statement))
        )
        union = union.union(isl.UnionMap.from_map(one))
    return union


def ast_of(problem: AffineProblem) -> isl.AstNode:
    """isl's AST of the program for its sizes (the build's context fixes them, so
    bounds are numbers); loop iterators are named ``c<k>`` after their schedule
    dimension ``k`` (the loop at depth ``d`` is ``c<2d-1>``)."""
    build = isl.AstBuild.from_context(_context(problem))
    return build.node_from_schedule_map(schedule_map(problem))
