"""Peers: the libraries einkern is compared with, and their protocol.

GPU: cuBLAS through ``torch.matmul`` (TF32 off; plain matrix products only),
``torch.einsum``, CuPy's ``einsum``, ``opt_einsum`` with the torch backend and
cuTENSOR through ``cupyx.cutensor``.  CPU: ``numpy.einsum(optimize=True)`` and
``opt_einsum``.  Every peer runs on the very arrays einkern gets (CuPy views
them through DLPack, no copy); a multi-statement program is one einsum per
product (see :mod:`einkern.bench.lowering`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Protocol, runtime_checkable

from ..ir.nodes import Access, Binary, Problem, Sum
from .case import Case
from .lowering import ArrayOps, lower, module_ops

Run = Callable[[], Mapping[str, Any]]


class NotApplicable(Exception):
    """The peer does not compute this kind of program (recorded as ``n/a``)."""


@runtime_checkable
class Peer(Protocol):
    """A library to compare with.  ``available`` returns None when the peer can run
    with this backend, else the reason it cannot; ``prepare`` returns a function
    that runs the case on ``arrays`` (updated in place for ``+=``/``-=``) and
    returns the program's outputs by name."""

    name: str
    backend: str

    def available(self) -> str | None: ...

    def prepare(
        self,
        case: Case,
        problem: Problem,
        arrays: Mapping[str, Any],
        scalars: Mapping[str, float],
    ) -> Run: ...


class EinsumPeer:
    """A peer that runs every product through one library's einsum."""

    def __init__(
        self,
        name: str,
        backend: str,
        make_ops: Callable[[], ArrayOps],
        convert: Callable[[Any], Any] | None = None,
    ):
        self.name = name
        self.backend = backend
        self.make_ops = make_ops
        self.convert = convert or (lambda array: array)
        self._ops: ArrayOps | None = None

    def available(self) -> str | None:
        try:
            self._ops = self._ops or self.make_ops()
        except Exception as error:  # noqa: BLE001 - the reason is the report
            return f"{type(error).__name__}: {error}"
        return None

    def prepare(self, case, problem, arrays, scalars) -> Run:
        ops = self._ops or self.make_ops()
        run = lower(problem, ops)
        values = {name: self.convert(array) for name, array in arrays.items()}
        outputs = problem.program.outputs

        def call() -> Mapping[str, Any]:
            run(values, scalars)
            return {name: values[name] for name in outputs}

        return call


def _cached_contract(backend: str) -> Callable[..., Any]:
    """opt_einsum with its path found once per equation and shapes
    (``contract_expression``, opt_einsum's way for repeated calls)."""
    import opt_einsum

    expressions: dict[tuple, Any] = {}

    def contract(equation: str, *operands: Any) -> Any:
        key = (equation, tuple(tuple(operand.shape) for operand in operands))
        expression = expressions.get(key)
        if expression is None:
            expression = expressions[key] = opt_einsum.contract_expression(equation, *key[1])
        return expression(*operands, backend=backend)

    return contract


def _numpy_ops() -> ArrayOps:
    import numpy as np

    return module_ops("numpy.einsum", np, lambda eq, *ops: np.einsum(eq, *ops, optimize=True))


def _opt_einsum_numpy_ops() -> ArrayOps:
    import numpy as np

    return module_ops("opt_einsum", np, _cached_contract("numpy"))


def _torch():
    import torch

    if not torch.cuda.is_available():
        raise RuntimeError("PyTorch sees no CUDA device")
    return torch


def _torch_ops() -> ArrayOps:
    torch = _torch()
    return module_ops("torch.einsum", torch)


def _opt_einsum_torch_ops() -> ArrayOps:
    return module_ops("opt_einsum (torch)", _torch(), _cached_contract("torch"))


def _cupy():
    import cupy

    cupy.cuda.runtime.getDeviceCount()
    return cupy


def _cupy_ops() -> ArrayOps:
    return module_ops("cupy.einsum", _cupy())


def _to_cupy(array: Any) -> Any:
    return _cupy().from_dlpack(array)


class MatmulPeer:
    """cuBLAS through ``torch.matmul`` for programs of plain matrix products
    ``C[i,j] = A[., .] * B[., .]`` (either operand may be stored transposed)."""

    name = "cuBLAS (torch.matmul)"
    backend = "cuda"

    def available(self) -> str | None:
        try:
            torch = _torch()
        except Exception as error:  # noqa: BLE001
            return f"{type(error).__name__}: {error}"
        torch.backends.cuda.matmul.allow_tf32 = False
        return None

    def prepare(self, case, problem, arrays, scalars) -> Run:
        torch = _torch()
        steps = []
        for statement in problem.program.statements:
            steps.append((statement.output.tensor, _matmul_operands(statement)))
        values = dict(arrays)

        def operand(access: Access, rows: str) -> Any:
            array = values[access.tensor]
            return array if access.indices[0] == rows else array.t()

        def call() -> Mapping[str, Any]:
            for name, (a, b, i, k) in steps:
                values[name] = torch.matmul(operand(a, i), operand(b, k))
            return {name: values[name] for name in problem.program.outputs}

        return call


def _matmul_operands(statement) -> tuple[Access, Access, str, str]:
    """(A, B, i, k) of ``C[i,j] = sum_k A[i|k] * B[k|j]``, else NotApplicable."""
    rhs, output = statement.rhs, statement.output
    plain = (
        statement.op == "="
        and isinstance(rhs, Sum)
        and len(rhs.indices) == 1
        and isinstance(rhs.body, Binary)
        and rhs.body.op == "*"
        and isinstance(rhs.body.left, Access)
        and isinstance(rhs.body.right, Access)
        and len(output.indices) == 2
    )
    if not plain:
        raise NotApplicable("not a plain matrix product C[i,j] = A[i,k] * B[k,j]")
    (i, j), k = output.indices, rhs.indices[0]
    a, b = rhs.body.left, rhs.body.right
    if i not in a.indices:
        a, b = b, a
    if set(a.indices) != {i, k} or set(b.indices) != {k, j} or i == j:
        raise NotApplicable("not a plain matrix product C[i,j] = A[i,k] * B[k,j]")
    return a, b, i, k


def builtin_peers() -> list[tuple[str, Callable[[], Peer]]]:
    """The peers defined here, as ``(name, factory)`` in the order they run (the
    registry, :mod:`einkern.bench.registry`, adds cuTENSOR's after them)."""
    return [
        ("numpy.einsum", lambda: EinsumPeer("numpy.einsum", "cpu", _numpy_ops)),
        ("opt_einsum", lambda: EinsumPeer("opt_einsum", "cpu", _opt_einsum_numpy_ops)),
        (MatmulPeer.name, MatmulPeer),
        ("torch.einsum", lambda: EinsumPeer("torch.einsum", "cuda", _torch_ops)),
        ("cupy.einsum", lambda: EinsumPeer("cupy.einsum", "cuda", _cupy_ops, _to_cupy)),
        (
            "opt_einsum (torch)",
            lambda: EinsumPeer("opt_einsum (torch)", "cuda", _opt_einsum_torch_ops),
        ),
    ]
