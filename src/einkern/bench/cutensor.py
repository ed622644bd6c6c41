"""The cuTENSOR peer, through ``cupyx.cutensor`` (CuPy views the torch tensors by DLPack).

A statement whose right-hand side is a signed sum of two-tensor products is
run as cuTENSOR is meant to be used: one ``contraction`` per product,
``D = α·A·B + β·C`` straight into the output (β = 1 accumulates ``+=``/``-=``,
α = −1 subtracts; ``=`` writes into an output allocated once, β = 0).  Other
statements go through the generic lowering, with cuTENSOR contracting each
two-operand product and CuPy doing the elementwise rest.
"""

from __future__ import annotations

import string
from collections.abc import Iterable, Mapping
from typing import Any

from ..ir.nodes import Access, Binary, Expr, Problem, Statement, Sum, signed_terms
from .case import Case
from .lowering import ArrayOps, lower, module_ops
from .peers import Run


def _modules():
    import cupy
    from cupyx import cutensor

    return cupy, cutensor


def mode_characters(names: Iterable[str]) -> dict[str, str]:
    """A distinct single character for each index name: ``cupyx.cutensor`` modes are
    characters, and einkern's index names (``h1``, ``p4``) are not.  A one-character
    name keeps its own character; the others take, in order of first appearance,
    the first ASCII letters no name uses, then characters from U+0100 on."""
    names = list(dict.fromkeys(names))
    taken = {name for name in names if len(name) == 1}
    spare = (c for c in [*string.ascii_letters, *map(chr, range(0x100, 0x10000))] if c not in taken)
    return {name: name if len(name) == 1 else next(spare) for name in names}


def _product(expr: Expr) -> tuple[Access, Access] | None:
    """The two accesses of ``A * B`` or ``sum(A * B)``, else None."""
    body = expr.body if isinstance(expr, Sum) else expr
    if (
        isinstance(body, Binary)
        and body.op == "*"
        and isinstance(body.left, Access)
        and isinstance(body.right, Access)
    ):
        pair = (body.left, body.right)
        if all(len(set(a.indices)) == len(a.indices) for a in pair):
            return pair
    return None


class CutensorPeer:
    """cuTENSOR contractions through ``cupyx.cutensor``."""

    name = "cuTENSOR"
    backend = "cuda"

    def available(self) -> str | None:
        try:
            cupy, cutensor = _modules()
            a = cupy.ones((2, 3))
            b = cupy.ones((3, 2))
            c = cupy.zeros((2, 2))
            cutensor.contraction(1.0, a, ("i", "k"), b, ("k", "j"), 0.0, c, ("i", "j"))
            if float(c[0, 0]) != 3.0:
                return f"a 2x3x2 test contraction gave {float(c[0, 0])}, expected 3"
        except Exception as error:  # noqa: BLE001 - the reason is the report
            return f"{type(error).__name__}: {error}".strip()
        return None

    def prepare(
        self,
        case: Case,
        problem: Problem,
        arrays: Mapping[str, Any],
        scalars: Mapping[str, float],
    ) -> Run:
        cupy, cutensor = _modules()
        values = {name: cupy.from_dlpack(array) for name, array in arrays.items()}
        steps = [
            self._direct(problem, statement, values) for statement in problem.program.statements
        ]
        if any(step is None for step in steps):
            run_generic = lower(problem, self._ops())

            def generic() -> Mapping[str, Any]:
                run_generic(values, scalars)
                return {name: values[name] for name in problem.program.outputs}

            return generic
        calls = [call for step in steps for call in step]

        def direct() -> Mapping[str, Any]:
            for alpha, a, mode_a, b, mode_b, beta, name, mode_c in calls:
                cutensor.contraction(
                    alpha, values[a], mode_a, values[b], mode_b, beta, values[name], mode_c
                )
            return {name: values[name] for name in problem.program.outputs}

        return direct

    def _direct(self, problem: Problem, statement: Statement, values: dict[str, Any]):
        """Contraction calls for a sum of signed two-tensor products, else None."""
        cupy, cutensor = _modules()
        output = statement.output
        if len(set(output.indices)) != len(output.indices):
            return None
        terms = signed_terms(statement.rhs)
        if statement.op == "=" and len(terms) != 1:
            return None
        found = [(sign, _product(term)) for sign, term in terms]
        products = [(sign, pair) for sign, pair in found if pair is not None]
        if len(products) != len(found):
            return None
        if statement.op == "=":
            tensor = problem.program.tensor(output.tensor)
            values[output.tensor] = cupy.empty(
                problem.shape(output.tensor),
                dtype=tensor.dtype,
                order="F" if tensor.layout == "column" else "C",
            )
        sign = -1.0 if statement.op == "-=" else 1.0
        beta = 0.0 if statement.op == "=" else 1.0
        characters = mode_characters(statement.indices)

        def mode(access: Access) -> Any:
            return cutensor.create_mode(*(characters[i] for i in access.indices))

        mode_c = mode(output)
        calls = []
        for term_sign, (a, b) in products:
            calls.append(
                (
                    float(sign * term_sign),
                    a.tensor,
                    mode(a),
                    b.tensor,
                    mode(b),
                    beta,
                    output.tensor,
                    mode_c,
                )
            )
        return calls

    def _ops(self) -> ArrayOps:
        cupy, cutensor = _modules()

        def einsum(equation: str, *operands: Any) -> Any:
            inputs, result = equation.split("->")
            if len(operands) != 2:
                raise NotImplementedError(
                    f"cuTENSOR peer: {len(operands)}-operand product {equation}"
                )
            mode_a, mode_b = inputs.split(",")
            sizes = dict(zip(mode_a, operands[0].shape, strict=True))
            sizes.update(zip(mode_b, operands[1].shape, strict=True))
            out = cupy.empty(tuple(sizes[m] for m in result), dtype=operands[0].dtype)
            return cutensor.contraction(
                1.0, operands[0], tuple(mode_a), operands[1], tuple(mode_b), 0.0, out, tuple(result)
            )

        return module_ops("cuTENSOR", cupy, einsum)
