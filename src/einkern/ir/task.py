"""The kernel-group unit: :class:`Task`, the statements one kernel computes.

Planning, lowering, padding, the cost models, the tuning targets and the tuning
database key all take a :class:`Task` rather than a ``(problem, position)`` pair.
Today every task holds one statement (:func:`tasks_of` gives one per statement,
in program order); the fusion planner will build tasks of several statements.

A task knows its own extents, tensors and scalars, and gives a *view*: a
:class:`~einkern.ir.nodes.Problem` of a program holding only the task's
statements, tensors, scalars and extents, at the same sizes — the one way to cut
statements out of a program.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import cached_property

from .nodes import Access, Problem, Program, ScalarRef, Statement, Tensor, walk


@dataclass(frozen=True)
class Task:
    """Statements ``positions`` (program order, at least one) of ``problem``,
    computed by one kernel."""

    problem: Problem
    positions: tuple[int, ...]

    def __post_init__(self) -> None:
        count = len(self.problem.program.statements)
        if not self.positions:
            raise ValueError("a task holds at least one statement")
        if list(self.positions) != sorted(set(self.positions)):
            raise ValueError(f"task positions must be distinct and ascending: {self.positions}")
        if self.positions[0] < 0 or self.positions[-1] >= count:
            raise ValueError(f"task positions {self.positions} outside 0..{count - 1}")

    # -- what it holds ----------------------------------------------------------

    @property
    def program(self) -> Program:
        return self.problem.program

    @property
    def statements(self) -> tuple[Statement, ...]:
        return tuple(self.problem.program.statements[p] for p in self.positions)

    @property
    def single(self) -> bool:
        """True when the task holds one statement."""
        return len(self.positions) == 1

    @property
    def statement(self) -> Statement:
        """The task's statement (only for a task of one statement)."""
        if not self.single:
            raise ValueError(f"task {self.name} holds {len(self.positions)} statements")
        return self.problem.program.statements[self.positions[0]]

    @property
    def position(self) -> int:
        """Position of the task's statement in the program (one-statement tasks)."""
        if not self.single:
            raise ValueError(f"task {self.name} holds {len(self.positions)} statements")
        return self.positions[0]

    @property
    def name(self) -> str:
        """``<program>_s<first>[_<last>]``: unique within the program's tasks."""
        tail = "" if self.single else f"_{self.positions[-1]}"
        return f"{self.program.name}_s{self.positions[0]}{tail}"

    @cached_property
    def tensor_names(self) -> tuple[str, ...]:
        """Tensors the task reads or writes, in declaration order."""
        used: set[str] = set()
        for statement in self.statements:
            used.add(statement.output.tensor)
            used.update(a.tensor for a in statement.reads())
        return tuple(t.name for t in self.program.tensors if t.name in used)

    @property
    def tensors(self) -> tuple[Tensor, ...]:
        return tuple(self.program.tensor(name) for name in self.tensor_names)

    @cached_property
    def scalar_names(self) -> tuple[str, ...]:
        used = {
            node.name
            for statement in self.statements
            for node in walk(statement.rhs)
            if isinstance(node, ScalarRef)
        }
        return tuple(s.name for s in self.program.scalars if s.name in used)

    @cached_property
    def extent_names(self) -> tuple[str, ...]:
        """Extents the task's indices and tensors range over, in declaration order."""
        used: set[str] = set()
        for statement in self.statements:
            used.update(extent for _, extent in statement.index_extents)
        for tensor in self.tensors:
            used.update(tensor.shape)
        return tuple(e.name for e in self.program.extents if e.name in used)

    @property
    def sizes(self) -> tuple[tuple[str, int], ...]:
        """Size of each extent the task uses."""
        return tuple((name, self.problem.size(name)) for name in self.extent_names)

    def outputs(self) -> tuple[str, ...]:
        """Tensors the task writes, in order of first write."""
        return tuple(dict.fromkeys(s.output.tensor for s in self.statements))

    def reads(self) -> tuple[Access, ...]:
        return tuple(a for s in self.statements for a in s.reads())

    # -- the view ---------------------------------------------------------------

    @cached_property
    def view(self) -> Problem:
        """A problem of the task alone: its statements, tensors, scalars and extents
        at the same sizes; the program is named :attr:`name`."""
        program = self.program
        extents = set(self.extent_names)
        scalars = set(self.scalar_names)
        view = replace(
            program,
            name=self.name,
            extents=tuple(e for e in program.extents if e.name in extents),
            tensors=self.tensors,
            scalars=tuple(s for s in program.scalars if s.name in scalars),
            statements=self.statements,
        )
        return Problem(view, self.sizes)

    def __str__(self) -> str:
        return f"task {self.name}: " + "; ".join(str(s) for s in self.statements)


def tasks_of(problem: Problem) -> tuple[Task, ...]:
    """The tasks of a problem: today one per statement, in program order."""
    return tuple(Task(problem, (p,)) for p in range(len(problem.program.statements)))


def statement_task(problem: Problem, position: int) -> Task:
    """The one-statement task of statement ``position``."""
    return Task(problem, (position,))
