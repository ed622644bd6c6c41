"""``einkern.torch``: a compiled kernel as a PyTorch custom operator.

:func:`op` registers a :class:`~einkern.Kernel` with ``torch.library.custom_op``
so that it works under ``torch.compile`` (a fake implementation gives the
outputs' shapes, strides and dtypes from the program, without running anything)
and inside CUDA-graph capture (the kernels launch on torch's current stream, the
capture stream, with no host wait)::

    kernel = einkern.compile("gemm.ein", n=1024, backend="cuda")
    gemm = einkern.torch.op(kernel)          # or kernel.as_torch_op()
    c = torch.compile(lambda a, b: gemm(a, b) * 2)(a, b)

The operator takes the program's inputs (tensors, positionally in declaration
order or by name) and its scalars by name.  Tensors the program reads and
writes (``+=``, ``-=``, or ``=`` on a tensor it also reads) are updated in place
and declared as mutated; tensors it only writes are new tensors the operator
returns.  The call returns the program's outputs in order of first write, like
calling the kernel: one tensor, or a tuple.  Read-only inputs in another layout
than the declared one are copied into it; a mutated tensor must already be dense
in its declared layout.  No autograd formula is registered.
"""

from __future__ import annotations

import hashlib
import inspect
import re
import threading
import typing
from typing import Any

import torch

from .api import Kernel
from .arrays import contiguous_strides, strides_match
from .backends.binding import scalar_value
from .errors import ArgumentError

__all__ = ["EinkernOp", "op"]

NAMESPACE = "einkern"
_OPS: dict[str, EinkernOp] = {}
_LOCK = threading.Lock()
_DTYPES = {
    "float32": torch.float32,
    "float64": torch.float64,
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
}


class EinkernOp:
    """A kernel registered as the custom operator ``einkern::<name>``.

    Call it like the kernel (tensors by position or name, scalars by name);
    :attr:`op` is the registered ``torch.library`` operator, which takes every
    input tensor positionally, then every scalar as a float."""

    def __init__(self, kernel: Kernel, name: str):
        program = kernel.program
        self.kernel = kernel
        self.name = f"{NAMESPACE}::{name}"
        self.inputs: tuple[str, ...] = program.inputs
        self.mutated = tuple(t for t in self.inputs if t in set(program.outputs))
        self.created = tuple(t for t in program.outputs if t not in set(self.inputs))
        self._scalars = program.scalars
        self._parameters = {t: f"t_{t}" for t in self.inputs} | {
            s.name: f"s_{s.name}" for s in self._scalars
        }
        self.op = torch.library.custom_op(
            self.name,
            self._implementation(),
            mutates_args=tuple(self._parameters[t] for t in self.mutated),
        )
        self.op.register_fake(self._fake())

    # -- calling -------------------------------------------------------------------

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        tensors, scalars = self._arguments(args, kwargs)
        created = self.op(*tensors, *scalars)
        if len(self.created) == 1:
            created = (created,)
        by_name = dict(zip(self.inputs, tensors, strict=True))
        by_name.update(zip(self.created, created or (), strict=True))
        results = tuple(by_name[name] for name in self.kernel.outputs)
        return results[0] if len(results) == 1 else results

    def _arguments(self, args, kwargs) -> tuple[list[Any], list[float]]:
        program = self.kernel.program
        if len(args) > len(self.inputs):
            raise ArgumentError(
                f"{self.name} takes {len(self.inputs)} positional tensors "
                f"({', '.join(self.inputs)}), got {len(args)}"
            )
        given = dict(zip(self.inputs, args, strict=False))
        scalars: dict[str, float] = {}
        known = {s.name: s for s in self._scalars}
        for key, value in kwargs.items():
            if key in known:
                scalars[key] = scalar_value(known[key], value)
            elif key in self.inputs and key not in given:
                given[key] = value
            else:
                raise ArgumentError(
                    f"{self.name} takes no argument {key!r} (or it was given twice)",
                    hint=f"tensors: {', '.join(self.inputs)}; scalars: "
                    f"{', '.join(known) or 'none'}; outputs it only writes are returned",
                )
        missing = [t for t in self.inputs if t not in given]
        if missing:
            raise ArgumentError(
                f"{self.name}: missing tensor {missing[0]!r}", program.tensor(missing[0]).span
            )
        values = []
        for scalar in self._scalars:
            if scalar.name in scalars:
                values.append(scalars[scalar.name])
            elif scalar.default is not None:
                values.append(float(scalar.default))
            else:
                raise ArgumentError(f"missing value for scalar {scalar.name!r}", scalar.span)
        return [given[t] for t in self.inputs], values

    # -- the operator's implementations ------------------------------------------------

    def _signature(self) -> inspect.Signature:
        kind = inspect.Parameter.POSITIONAL_OR_KEYWORD
        parameters = [
            inspect.Parameter(self._parameters[t], kind, annotation=torch.Tensor)
            for t in self.inputs
        ]
        parameters += [
            inspect.Parameter(self._parameters[s.name], kind, annotation=float)
            for s in self._scalars
        ]
        count = len(self.created)
        returns: Any = None if count == 0 else torch.Tensor
        if count > 1:  # torch's schema reader takes typing.Tuple, not tuple[...]
            returns = typing.Tuple[(torch.Tensor,) * count]  # noqa: UP006
        return inspect.Signature(parameters, return_annotation=returns)

    def _implementation(self) -> Any:
        kernel = self.kernel
        program = kernel.program

        def implementation(*args: Any) -> Any:
            tensors = dict(zip(self.inputs, args, strict=False))
            values = args[len(self.inputs) :]
            for name in self.inputs:
                if name not in self.mutated:
                    tensors[name] = _in_layout(tensors[name], program.tensor(name).layout)
            like = args[0] if args else None
            for name in self.created:
                tensors[name] = self._empty(name, like)
            scalars = {s.name: v for s, v in zip(self._scalars, values, strict=True)}
            kernel(**tensors, **scalars)
            created = tuple(tensors[name] for name in self.created)
            return None if not created else created[0] if len(created) == 1 else created

        implementation.__signature__ = self._signature()  # type: ignore[attr-defined]
        implementation.__name__ = self.name.split("::")[1]
        return implementation

    def _fake(self) -> Any:
        def fake(*args: Any) -> Any:
            like = args[0] if args else None
            created = tuple(self._empty(name, like) for name in self.created)
            return None if not created else created[0] if len(created) == 1 else created

        fake.__signature__ = self._signature()  # type: ignore[attr-defined]
        return fake

    def _empty(self, name: str, like: Any) -> Any:
        """A new tensor for ``name`` in its declared shape, dtype and layout, on the
        device of ``like`` (the CPU for a program without inputs)."""
        problem = self.kernel.problem
        declared = problem.program.tensor(name)
        shape = problem.shape(name)
        device = (
            like.device
            if like is not None
            else ("cuda" if self.kernel.backend.name == "cuda" else "cpu")
        )
        return torch.empty_strided(
            shape,
            contiguous_strides(shape, declared.layout),
            dtype=_DTYPES[declared.dtype],
            device=device,
        )


def _in_layout(tensor: Any, layout: str) -> Any:
    """``tensor`` itself when dense in ``layout``, else a dense copy in it."""
    if not isinstance(tensor, torch.Tensor):
        return tensor  # the kernel's check reports what it is
    from .arrays import ArrayInfo

    shape = tuple(tensor.shape)
    info = ArrayInfo(shape, "", tuple(tensor.stride()), "", 0, "torch")
    if strides_match(info, layout):
        return tensor
    copy = torch.empty_strided(
        shape, contiguous_strides(shape, layout), dtype=tensor.dtype, device=tensor.device
    )
    return copy.copy_(tensor)


def _op_name(kernel: Kernel) -> str:
    """``<program>_<digest>``: the same for kernels of the same problem, backend and
    mappings, so that registering one twice gives the same operator."""
    digest = hashlib.sha256(
        repr((kernel.problem, kernel.backend.name, repr(kernel.mappings))).encode()
    ).hexdigest()[:16]
    stem = re.sub(r"[^A-Za-z0-9_]", "_", kernel.program.name) or "kernel"
    return f"{stem}_{digest}"


def op(kernel: Kernel, name: str | None = None) -> EinkernOp:
    """Register ``kernel`` as the custom operator ``einkern::<name>`` (default: the
    program's name and a digest of its problem, backend and mappings) and return
    it; registering the same kernel again returns the same operator."""
    if not isinstance(kernel, Kernel):
        raise ArgumentError(
            f"einkern.torch.op takes an einkern.Kernel, got {type(kernel).__name__}",
            hint="einkern.compile(...) makes one",
        )
    chosen = name if name is not None else _op_name(kernel)
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", chosen):
        raise ArgumentError(f"operator name {chosen!r} is not an identifier")
    with _LOCK:
        found = _OPS.get(chosen)
        if found is not None:
            if (
                found.kernel.problem != kernel.problem
                or found.kernel.backend.name != kernel.backend.name
            ):
                raise ArgumentError(
                    f"operator {NAMESPACE}::{chosen} is already registered for another kernel",
                    hint="choose another name",
                )
            return found
        _OPS[chosen] = EinkernOp(kernel, chosen)
        return _OPS[chosen]
