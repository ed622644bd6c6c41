"""Run a program with an array library's einsum: how every peer computes a case.

:func:`lower` turns a :class:`~einkern.ir.nodes.Problem` into a function of the
arrays, once, ahead of timing: each product of tensors (under a sum or not) is
one ``einsum`` call whose output is already in the order the consumer wants,
other arithmetic and the elementwise functions go to the library's own
operators.  A statement ``t[...] += a + b - c`` is done term by term in place
(``t += a; t += b; t -= c``), which is how these libraries are used for
accumulating kernels; ``=`` stores a new array.  Peers thus run one einsum
per product (one per statement for plain contractions).

A construct the lowering does not cover (an output with a repeated index, a
right-hand side with fewer indices than its ``=`` output) raises
:class:`NotImplementedError` when lowering, so the peer is recorded as failed.
"""

from __future__ import annotations

import string
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..ir.nodes import (
    Access,
    Binary,
    Call,
    Const,
    Expr,
    Neg,
    Problem,
    ScalarRef,
    Statement,
    Sum,
    product_factors,
    signed_terms,
)
from ..semantics import ARITY

_LETTERS = string.ascii_letters

Values = dict[str, Any]
Scalars = Mapping[str, float]
Thunk = Callable[[Values, Scalars], Any]


@dataclass(frozen=True)
class ArrayOps:
    """What the lowering needs from an array library.

    ``einsum(equation, *operands)`` contracts; ``permute(x, axes)`` transposes;
    ``functions`` maps einkern's elementwise function names (sqrt, max, ...) to
    the library's."""

    name: str
    einsum: Callable[..., Any]
    permute: Callable[[Any, tuple[int, ...]], Any]
    functions: Mapping[str, Callable[..., Any]]


def module_ops(name: str, module: Any, einsum: Callable[..., Any] | None = None) -> ArrayOps:
    """:class:`ArrayOps` of a NumPy-like module (numpy, cupy, torch)."""
    names = {"max": ("maximum",), "min": ("minimum",), "pow": ("pow", "power")}
    functions = {}
    for ours in ARITY:
        for theirs in names.get(ours, (ours,)):
            if hasattr(module, theirs):
                functions[ours] = getattr(module, theirs)
                break
    for ours in ("max", "min"):  # torch.maximum takes tensors only
        functions[ours] = _with_scalars(functions[ours], module.full_like)
    permute = getattr(module, "permute", None) or module.transpose
    return ArrayOps(name, einsum or module.einsum, permute, functions)


def _with_scalars(function: Callable[[Any, Any], Any], full_like: Callable[[Any, float], Any]):
    """``function(a, b)`` where either argument may be a plain number."""

    def apply(a: Any, b: Any) -> Any:
        if isinstance(a, (int, float)) and not isinstance(b, (int, float)):
            a = full_like(b, a)
        elif isinstance(b, (int, float)) and not isinstance(a, (int, float)):
            b = full_like(a, b)
        return function(a, b)

    return apply


@dataclass(frozen=True)
class _Node:
    """A lowered sub-expression: its index labels and how to compute it."""

    labels: tuple[str, ...]
    compute: Thunk


def lower(problem: Problem, ops: ArrayOps) -> Callable[[Values, Scalars], Values]:
    """A function ``run(values, scalars)`` that executes every statement of
    ``problem`` on ``values`` (tensor name → array), updating ``+=``/``-=``
    outputs in place and storing ``=`` outputs as new arrays; returns ``values``."""
    steps = [_lower_statement(problem, statement, ops) for statement in problem.program.statements]

    def run(values: Values, scalars: Scalars) -> Values:
        for step in steps:
            step(values, scalars)
        return values

    return run


def _lower_statement(problem: Problem, statement: Statement, ops: ArrayOps):
    output = statement.output
    if len(set(output.indices)) != len(output.indices):
        raise NotImplementedError(f"{ops.name}: output {output} has a repeated index")
    lowering = _Lowering(problem, statement, ops)
    name = output.tensor
    if statement.op == "=":
        node = lowering.expr(statement.rhs, want=output.indices)
        if set(node.labels) != set(output.indices):
            raise NotImplementedError(
                f"{ops.name}: {statement} broadcasts its right-hand side into the output"
            )
        compute = lowering.arrange(node, output.indices)

        def assign(values: Values, scalars: Scalars) -> None:
            values[name] = compute(values, scalars)

        return assign
    sign = 1 if statement.op == "+=" else -1
    updates = []
    for term_sign, term in signed_terms(statement.rhs):
        node = lowering.expr(term, want=output.indices)
        updates.append((sign * term_sign, lowering.arrange(node, output.indices, broadcast=True)))

    def update(values: Values, scalars: Scalars) -> None:
        target = values[name]
        for term_sign, compute in updates:
            if term_sign > 0:
                target += compute(values, scalars)
            else:
                target -= compute(values, scalars)

    return update


class _Lowering:
    """Lowers the expressions of one statement."""

    def __init__(self, problem: Problem, statement: Statement, ops: ArrayOps):
        self.problem = problem
        self.statement = statement
        self.ops = ops

    def size(self, index: str) -> int:
        return self.problem.index_size(self.statement, index)

    # -- arrangement ----------------------------------------------------------

    def arrange(self, node: _Node, labels: tuple[str, ...], broadcast: bool = False) -> Thunk:
        """``node`` with its axes in the order of ``labels``; with ``broadcast``, a
        label it lacks becomes a size-1 axis (NumPy broadcasting does the rest)."""
        if node.labels == labels or not node.labels:  # already arranged, or a number
            return node.compute
        present = [label for label in labels if label in node.labels]
        order = tuple(node.labels.index(label) for label in present)
        expand = tuple(slice(None) if label in node.labels else None for label in labels)
        permute, compute = self.ops.permute, node.compute
        if not broadcast and len(present) != len(labels):
            raise NotImplementedError(f"{self.ops.name}: cannot broadcast to {labels}")
        identity = order == tuple(range(len(order)))
        needs_expand = len(present) != len(labels)

        def arranged(values: Values, scalars: Scalars) -> Any:
            data = compute(values, scalars)
            if not identity:
                data = permute(data, order)
            return data[expand] if needs_expand else data

        return arranged

    # -- expressions ----------------------------------------------------------

    def expr(self, expr: Expr, want: tuple[str, ...] = ()) -> _Node:
        if isinstance(expr, Const):
            value = float(expr.value)
            return _Node((), lambda values, scalars: value)
        if isinstance(expr, ScalarRef):
            name = expr.name
            return _Node((), lambda values, scalars: scalars[name])
        if isinstance(expr, Access):
            return self.access(expr)
        if isinstance(expr, Sum):
            return self.product(product_factors(expr.body), expr.indices, want)
        if isinstance(expr, Binary) and expr.op == "*":
            return self.product(product_factors(expr), (), want)
        if isinstance(expr, Neg):
            inner = self.expr(expr.operand, want)
            compute = inner.compute
            return _Node(inner.labels, lambda values, scalars: -compute(values, scalars))
        if isinstance(expr, Binary):
            return self.elementwise(_BINARY[expr.op], (expr.left, expr.right), want)
        if isinstance(expr, Call):
            return self.elementwise(
                self.ops.functions[expr.func], expr.args, want, _NUMPY.functions[expr.func]
            )
        raise TypeError(f"unknown expression node {expr!r}")

    def access(self, expr: Access) -> _Node:
        name = expr.tensor
        unique = tuple(dict.fromkeys(expr.indices))
        if len(unique) == len(expr.indices):
            return _Node(unique, lambda values, scalars: values[name])
        equation = _letters(expr.indices, unique) + "->" + _letters(unique, unique)
        einsum = self.ops.einsum
        return _Node(unique, lambda values, scalars: einsum(equation, values[name]))

    def elementwise(
        self,
        function: Callable[..., Any],
        operands,
        want,
        on_numbers: Callable[..., Any] | None = None,
    ) -> _Node:
        """``function`` of the operands, aligned; ``on_numbers`` instead when every
        operand is a plain number (torch.sqrt takes tensors only)."""
        nodes = [self.expr(operand, want) for operand in operands]
        labels = tuple(dict.fromkeys(label for node in nodes for label in node.labels))
        if not labels and on_numbers is not None:
            function = on_numbers
        if set(labels) == set(want):
            labels = tuple(want)
        computes = [self.arrange(node, labels, broadcast=True) for node in nodes]

        def apply(values: Values, scalars: Scalars) -> Any:
            return function(*(compute(values, scalars) for compute in computes))

        return _Node(labels, apply)

    def product(self, factors: list[Expr], summed: tuple[str, ...], want) -> _Node:
        """``sum over summed`` of a product: tensor factors in one einsum, scalar
        factors multiplied afterwards."""
        nodes = [self.expr(factor) for factor in factors]
        tensors = [node for node in nodes if node.labels]
        numbers = [node.compute for node in nodes if not node.labels]
        labels = tuple(dict.fromkeys(label for node in tensors for label in node.labels))
        keep = tuple(label for label in labels if label not in summed)
        if set(keep) == set(want):
            keep = tuple(want)
        absent = 1
        for index in summed:
            if index not in labels:  # summed but used by no factor: a factor of its extent
                absent *= self.size(index)

        def factor(values: Values, scalars: Scalars) -> Any:
            result = float(absent)
            for compute in numbers:
                result = result * compute(values, scalars)
            return result

        if not tensors:
            return _Node((), factor)
        if len(tensors) == 1 and tensors[0].labels == keep:
            contract = tensors[0].compute
        else:
            every = tuple(dict.fromkeys(keep + labels))
            equation = (
                ",".join(_letters(node.labels, every) for node in tensors)
                + "->"
                + _letters(keep, every)
            )
            einsum, operands = self.ops.einsum, [node.compute for node in tensors]

            def contract(values: Values, scalars: Scalars) -> Any:
                return einsum(equation, *(compute(values, scalars) for compute in operands))

        if not numbers and absent == 1:
            return _Node(keep, contract)
        return _Node(
            keep, lambda values, scalars: contract(values, scalars) * factor(values, scalars)
        )


_NUMPY = module_ops("numpy", np)

_BINARY = {
    "+": lambda a, b: a + b,
    "-": lambda a, b: a - b,
    "*": lambda a, b: a * b,
    "/": lambda a, b: a / b,
}


def _letters(labels: tuple[str, ...], alphabet: tuple[str, ...]) -> str:
    if len(alphabet) > len(_LETTERS):
        raise NotImplementedError(f"more than {len(_LETTERS)} indices in one einsum")
    return "".join(_LETTERS[alphabet.index(label)] for label in labels)
