"""Give every extent of a program a size: a :class:`~einkern.ir.nodes.Problem`."""

from __future__ import annotations

import difflib
from collections.abc import Mapping

from ..errors import ExtentError, IndexBindingError, SemanticError
from ..lang.limits import MAX_ELEMENTS, MAX_IR_DEPTH, check_size, check_tensor_size
from .nodes import Problem, Program, accesses, children


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
    _check_depth(program)
    problem = Problem(program, tuple(bound))
    by_name = dict(bound)
    for tensor in program.tensors:
        check_tensor_size(
            tensor.name, (by_name[e] for e in tensor.shape), tensor.itemsize, tensor.span
        )
    _check_index_ranges(problem)
    return problem


def _positive_int(name: str, value: object) -> int:
    if isinstance(value, bool):
        raise ExtentError(f"extent {name!r} must be a positive integer, got {value!r}")
    if isinstance(value, str) and len(value.strip().lstrip("+0")) > 19:
        raise ExtentError(
            f"extent {name!r} must be at most 2**63 - 1 = {MAX_ELEMENTS}, "
            f"got a number of {len(value.strip())} characters",
            hint="generated kernels index elements with 64-bit signed offsets",
        )
    try:
        number = int(str(value)) if isinstance(value, str) else value
    except ValueError:
        raise ExtentError(f"extent {name!r} must be a positive integer, got {value!r}") from None
    if not isinstance(number, int) and hasattr(number, "__index__"):
        number = number.__index__()
    if not isinstance(number, int) or number <= 0:
        raise ExtentError(
            f"extent {name!r} must be a positive integer, got {value!r}",
            hint="sizes are counts of elements: 1, 2, 3, ...",
        )
    return check_size(number, None, f"extent {name!r}")


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


def _check_depth(program: Program) -> None:
    """Programs built in Python (not parsed) obey the parsers' expression-depth limit
    too: the compiler's passes walk expressions recursively."""
    for number, statement in enumerate(program.statements):
        stack = [(statement.rhs, 1)]
        while stack:
            node, depth = stack.pop()
            if depth > MAX_IR_DEPTH:
                raise SemanticError(
                    f"statement {number} is more than {MAX_IR_DEPTH} levels deep once its "
                    "sums are made explicit",
                    statement.span,
                    hint="split it into several statements",
                )
            stack.extend((child, depth + 1) for child in children(node))
