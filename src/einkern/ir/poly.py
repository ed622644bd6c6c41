"""Polyhedral view of a program, built with islpy.

Each statement ``S<n>`` has an iteration domain over its parallel and reduction
indices, parametric in the program's extents; each access is an affine map from
that domain to the tensor's index space.  From these we compute dependences
between statements and the loops that carry a dependence inside a statement
(the reduction loops: Rivera's dependence test, done exactly).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import islpy as isl

from .nodes import Access, Program, Statement, accesses


def _bound(program: Program, extent: str) -> str:
    return extent if not extent.isdigit() else str(int(extent))


def _params(program: Program) -> str:
    names = [e.name for e in program.extents if not e.name.isdigit()]
    return "[" + ", ".join(names) + "]"


def _context(program: Program) -> str:
    names = [e.name for e in program.extents if not e.name.isdigit()]
    return " and ".join(f"{n} >= 1" for n in names) or "true"


def statement_name(position: int) -> str:
    return f"S{position}"


def domain(program: Program, position: int) -> isl.Set:
    """Iteration domain of statement ``position``, parametric in the extents."""
    statement = program.statements[position]
    dims = ", ".join(statement.indices)
    constraints = [
        f"0 <= {i} < {_bound(program, statement.extent_of(i))}" for i in statement.indices
    ]
    constraints.append(_context(program))
    text = f"{_params(program)} -> {{ {statement_name(position)}[{dims}] : "
    text += " and ".join(constraints) + " }"
    return isl.Set(text)


def access_map(program: Program, position: int, access: Access) -> isl.Map:
    """Affine access relation from the statement's domain to the tensor's elements."""
    statement = program.statements[position]
    text = (
        f"{_params(program)} -> {{ {statement_name(position)}[{', '.join(statement.indices)}]"
        f" -> {access.tensor}[{', '.join(access.indices)}] }}"
    )
    return isl.Map(text).intersect_domain(domain(program, position))


def _writes(program: Program, position: int) -> isl.Map:
    return access_map(program, position, program.statements[position].output)


def _reads(program: Program, position: int, tensor: str) -> list[isl.Map]:
    statement = program.statements[position]
    return [access_map(program, position, a) for a in statement.reads() if a.tensor == tensor]


@dataclass(frozen=True)
class Dependence:
    """``sink`` must run after ``source`` because both touch ``tensor``.

    ``kind`` is ``flow`` (read after write), ``anti`` (write after read) or
    ``output`` (write after write); ``relation`` is the isl map between instances."""

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
    found: list[Dependence] = []
    count = len(program.statements)
    for a in range(count):
        write_a = _writes(program, a)
        tensor_a = program.statements[a].output.tensor
        for b in range(a + 1, count):
            stmt_b = program.statements[b]
            for read in _reads(program, b, tensor_a):
                relation = write_a.apply_range(read.reverse())
                if not relation.is_empty():
                    found.append(Dependence("flow", a, b, tensor_a, str(relation)))
                    break
            if stmt_b.output.tensor == tensor_a:
                relation = write_a.apply_range(_writes(program, b).reverse())
                if not relation.is_empty():
                    found.append(Dependence("output", a, b, tensor_a, str(relation)))
            for read in _reads(program, a, stmt_b.output.tensor):
                if stmt_b.output.tensor == tensor_a:
                    continue
                relation = read.apply_range(_writes(program, b).reverse())
                if not relation.is_empty():
                    found.append(Dependence("anti", a, b, stmt_b.output.tensor, str(relation)))
                    break
    return tuple(found)


def carried_indices(program: Program, position: int) -> tuple[str, ...]:
    """Indices of statement ``position`` along which two instances write the same
    element: the loops that carry a dependence (reductions).  The others are
    parallel."""
    statement = program.statements[position]
    write = _writes(program, position)
    same_element = write.apply_range(write.reverse())
    deltas = same_element.deltas()
    carried = []
    for index in statement.indices:
        nonzero = isl.Set(
            f"{_params(program)} -> {{ {statement_name(position)}"
            f"[{', '.join(statement.indices)}] : {index} != 0 }}"
        )
        if not deltas.intersect(nonzero).is_empty():
            carried.append(index)
    return tuple(carried)


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
