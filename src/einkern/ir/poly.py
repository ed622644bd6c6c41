"""Polyhedral view of a program, built with islpy.

Each statement ``S<n>`` has an iteration domain over its parallel and reduction
indices, parametric in the extents *that statement uses*; each access is an
affine map from that domain to the tensor's index space.  From these we compute
dependences between statements and the loops that carry a dependence inside a
statement (the reduction loops: Rivera's dependence test, done exactly).

:class:`Polyhedra` builds the isl objects of a program once per statement, and
dependences are looked for only between statements that share a tensor, so a
program of ``n`` statements costs time near-linear in ``n`` unless many
statements touch one tensor.

Names reach isl with a prefix per kind (``x_`` indices, ``n_`` extents,
``T_`` tensors), so no program name can collide with another kind's or with an
isl keyword (``and``, ``mod``, ``floor``, ...).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import islpy as isl

from .nodes import Access, Program, Statement, accesses


def _index(name: str) -> str:
    return f"x_{name}"


def _bound(extent: str) -> str:
    return str(int(extent)) if extent.isdigit() else f"n_{extent}"


def _tensor(name: str) -> str:
    return f"T_{name}"


def statement_name(position: int) -> str:
    return f"S{position}"


class _StatementPolyhedra:
    """The domain and access maps of one statement."""

    def __init__(self, statement: Statement, position: int):
        extents = dict.fromkeys(statement.extent_of(i) for i in statement.indices)
        params = [_bound(e) for e in extents if not e.isdigit()]
        self.params = "[" + ", ".join(params) + "]"
        self.space = (
            f"{statement_name(position)}[{', '.join(_index(i) for i in statement.indices)}]"
        )
        constraints = [f"{p} >= 1" for p in params]
        constraints += [
            f"0 <= {_index(i)} < {_bound(statement.extent_of(i))}" for i in statement.indices
        ]
        self.domain = isl.Set(
            f"{self.params} -> {{ {self.space} : {' and '.join(constraints) or 'true'} }}"
        )
        self._maps: dict[Access, isl.Map] = {}
        self.write = self.access_map(statement.output)
        self.reads: dict[str, list[Access]] = {}
        for access in statement.reads():
            self.reads.setdefault(access.tensor, []).append(access)
            self.access_map(access)
        self.signature = tuple((i, statement.extent_of(i)) for i in statement.indices)

    def access_map(self, access: Access) -> isl.Map:
        found = self._maps.get(access)
        if found is None:
            target = f"{_tensor(access.tensor)}[{', '.join(map(_index, access.indices))}]"
            found = isl.Map(f"{self.params} -> {{ {self.space} -> {target} }}")
            found = found.intersect_domain(self.domain)
            self._maps[access] = found
        return found


class Polyhedra:
    """The isl objects of a program, each statement's built on first use and kept."""

    def __init__(self, program: Program):
        self.program = program
        self._statements: dict[int, _StatementPolyhedra] = {}
        self._relations: dict[tuple, tuple[str | None, int, int]] = {}

    def of(self, position: int) -> _StatementPolyhedra:
        found = self._statements.get(position)
        if found is None:
            found = _StatementPolyhedra(self.program.statements[position], position)
            self._statements[position] = found
        return found

    def _neighbours(self) -> list[list[int]]:
        """For each statement, the later statements that share a tensor with it."""
        touching: dict[str, list[int]] = {}
        for position, statement in enumerate(self.program.statements):
            names = {statement.output.tensor} | {a.tensor for a in statement.reads()}
            for name in names:
                touching.setdefault(name, []).append(position)
        result: list[set[int]] = [set() for _ in self.program.statements]
        for positions in touching.values():
            for number, a in enumerate(positions):
                result[a].update(positions[number + 1 :])
        return [sorted(found) for found in result]

    def dependences(self) -> tuple[Dependence, ...]:
        """All dependences between distinct statements (statements run in order)."""
        found: list[Dependence] = []
        statements = self.program.statements
        for a, later in enumerate(self._neighbours()):
            first = self.of(a)
            tensor_a = statements[a].output.tensor
            for b in later:
                found.extend(self._pair(first, a, tensor_a, b))
        return tuple(found)

    def _pair(self, first: _StatementPolyhedra, a: int, tensor_a: str, b: int) -> list[Dependence]:
        second = self.of(b)
        statements = self.program.statements
        write_a, write_b = statements[a].output, statements[b].output
        found: list[Dependence] = []
        for read in second.reads.get(tensor_a, ()):
            text = self._relation(a, write_a, b, read)
            if text is not None:
                found.append(Dependence("flow", a, b, tensor_a, text))
                break
        if write_b.tensor == tensor_a:
            text = self._relation(a, write_a, b, write_b)
            if text is not None:
                found.append(Dependence("output", a, b, tensor_a, text))
            return found
        for read in first.reads.get(write_b.tensor, ()):
            text = self._relation(a, read, b, write_b)
            if text is not None:
                found.append(Dependence("anti", a, b, write_b.tensor, text))
                break
        return found

    def _relation(self, a: int, left: Access, b: int, right: Access) -> str | None:
        """The instances of S``a`` (through ``left``) and S``b`` (through ``right``)
        that touch one element, as isl text, or None when there are none.

        Pairs of statements with the same indices, extents and accesses have the
        same relation but for the statements' names: it is computed once."""
        first, second = self.of(a), self.of(b)
        key = (first.signature, left, second.signature, right)
        hit = self._relations.get(key)
        if hit is None:
            relation = first.access_map(left).apply_range(second.access_map(right).reverse())
            hit = (None if relation.is_empty() else str(relation), a, b)
            self._relations[key] = hit
        text, a0, b0 = hit
        if text is None or (a0, b0) == (a, b):
            return text
        text = text.replace(f"{statement_name(a0)}[", "\0").replace(f"{statement_name(b0)}[", "\1")
        return text.replace("\0", f"{statement_name(a)}[").replace("\1", f"{statement_name(b)}[")

    def carried_indices(self, position: int) -> tuple[str, ...]:
        """Indices along which two instances of the statement write the same element."""
        statement = self.program.statements[position]
        own = self.of(position)
        deltas = own.write.apply_range(own.write.reverse()).deltas()
        carried = []
        for index in statement.indices:
            nonzero = isl.Set(f"{own.params} -> {{ {own.space} : {_index(index)} != 0 }}")
            if not deltas.intersect(nonzero).is_empty():
                carried.append(index)
        return tuple(carried)


@lru_cache(maxsize=16)
def polyhedra(program: Program) -> Polyhedra:
    """The (cached) :class:`Polyhedra` of ``program``."""
    return Polyhedra(program)


def domain(program: Program, position: int) -> isl.Set:
    """Iteration domain of statement ``position``, parametric in the extents it uses."""
    return polyhedra(program).of(position).domain


def access_map(program: Program, position: int, access: Access) -> isl.Map:
    """Affine access relation from the statement's domain to the tensor's elements."""
    return polyhedra(program).of(position).access_map(access)


@dataclass(frozen=True)
class Dependence:
    """``sink`` must run after ``source`` because both touch ``tensor``.

    ``kind`` is ``flow`` (read after write), ``anti`` (write after read) or
    ``output`` (write after write); ``relation`` is the isl map between instances
    (names prefixed as the module docstring says)."""

    kind: str
    source: int
    sink: int
    tensor: str
    relation: str

    def __str__(self) -> str:
        return f"{self.kind:6} S{self.source} -> S{self.sink} on {self.tensor}"


def dependences(program: Program) -> tuple[Dependence, ...]:
    """All dependences between distinct statements (statements run in order)."""
    return _dependences(program)


@lru_cache(maxsize=64)
def _dependences(program: Program) -> tuple[Dependence, ...]:
    return polyhedra(program).dependences()


def carried_indices(program: Program, position: int) -> tuple[str, ...]:
    """Indices of statement ``position`` along which two instances write the same
    element: the loops that carry a dependence (reductions).  The others are
    parallel."""
    return polyhedra(program).carried_indices(position)


def parallel_indices(program: Program, position: int) -> tuple[str, ...]:
    carried = set(carried_indices(program, position))
    return tuple(i for i in program.statements[position].indices if i not in carried)


def describe_statement(program: Program, statement: Statement) -> str:
    """The statement's domain and accesses as isl text (for ``einkern check -v``)."""
    position = program.statements.index(statement)
    lines = [f"domain  {domain(program, position)}"]
    for access in (statement.output, *accesses(statement.rhs)):
        lines.append(f"access  {access_map(program, position, access)}")
    return "\n".join(lines)
