"""Give every extent of a program a size: a :class:`~einkern.ir.nodes.Problem`."""

from __future__ import annotations

import difflib
from collections.abc import Mapping

from ..errors import ExtentError, IndexBindingError
from .nodes import Problem, Program, accesses


def make_problem(program: Program, sizes: Mapping[str, object] | None = None) -> Problem:
    """Bind extents: declared defaults, overridden by ``sizes``.

    Raises :class:`ExtentError` for an unknown extent, a missing size or one that
    is not a positive integer, and :class:`IndexBindingError` when an index ranges
    over extents whose sizes differ."""
    sizes = dict(sizes or {})
    names = [e.name for e in program.extents]
    for name in sizes:
        if name not in names:
            close = difflib.get_close_matches(name, names, n=1)
            raise ExtentError(
                f"program {program.name!r} has no extent {name!r}",
                hint=(f"did you mean {close[0]!r}? " if close else "")
                + f"its extents are: {', '.join(n for n in names if not n.isdigit())}",
            )
        if name.isdigit():
            raise ExtentError(f"extent {name} is a literal and cannot be changed")
    bound: list[tuple[str, int]] = []
    for extent in program.extents:
        value = sizes.get(extent.name, extent.default)
        if value is None:
            raise ExtentError(
                f"extent {extent.name!r} has no size",
                extent.span,
                hint=f"give it one: `--extent {extent.name}=N` on the command line, "
                f"`{extent.name}=N` in einkern.compile, or `dims {extent.name} = N` in the program",
            )
        bound.append((extent.name, _positive_int(extent.name, value)))
    problem = Problem(program, tuple(bound))
    _check_index_ranges(problem)
    return problem


def _positive_int(name: str, value: object) -> int:
    if isinstance(value, bool):
        raise ExtentError(f"extent {name!r} must be a positive integer, got {value!r}")
    try:
        number = int(str(value)) if isinstance(value, str) else value
    except ValueError:
        raise ExtentError(
            f"extent {name!r} must be a positive integer, got {value!r}"
        ) from None
    if not isinstance(number, int) and hasattr(number, "__index__"):
        number = number.__index__()
    if not isinstance(number, int) or number <= 0:
        raise ExtentError(
            f"extent {name!r} must be a positive integer, got {value!r}",
            hint="sizes are counts of elements: 1, 2, 3, ...",
        )
    return number


def _check_index_ranges(problem: Problem) -> None:
    program = problem.program
    for statement in program.statements:
        for access in (statement.output, *accesses(statement.rhs)):
            shape = program.tensor(access.tensor).shape
            for index, extent in zip(access.indices, shape, strict=True):
                want = problem.index_size(statement, index)
                got = problem.size(extent)
                if got != want:
                    raise IndexBindingError(
                        f"index {index!r} ranges over {statement.extent_of(index)!r} = {want} "
                        f"but {access.tensor}'s extent {extent!r} = {got}",
                        statement.span,
                        hint="give the two extents the same size, or use different indices",
                    )
