"""The one argument check: call-time arrays and scalars bound to a problem's names.

:class:`Binder` turns what a caller passes (arrays by position or name, scalars
by name, a stream) into a :class:`Call`: every tensor of the program with its
:class:`~einkern.arrays.ArrayInfo`, every scalar as a float, and the stream to
launch on.  It checks shape, dtype, layout (strides), read-only outputs,
overlapping memory, devices and scalars, and raises a typed error naming the
declaration for each problem.  Executables take a :class:`Call` and do not
check again.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..arrays import NO_NUMPY_BFLOAT16, ArrayInfo, contiguous_strides, strides_match
from ..errors import ArgumentDtypeError, ArgumentError, ArgumentLayoutError
from ..ir.nodes import Problem, Scalar
from ..semantics import ITEMSIZE

_LARGEST = {"float32": float(np.finfo(np.float32).max), "float64": float(np.finfo(np.float64).max)}


@dataclass(frozen=True)
class Call:
    """The checked arguments of one call: ``arrays`` and ``infos`` hold every tensor
    of the program (outputs the caller did not pass are new arrays), ``scalars``
    every scalar (defaults filled in); ``stream`` is the backend's stream to launch
    on (None: the CPU backend, or the CUDA backend's choice for host arrays)."""

    arrays: Mapping[str, Any]
    infos: Mapping[str, ArrayInfo]
    scalars: Mapping[str, float]
    stream: Any = field(default=None)


def article(noun: str) -> str:
    """``noun`` with its indefinite article: "an int", "a list"."""
    return f"{'an' if noun[:1].lower() in 'aeiou' else 'a'} {noun}"


def type_name(value: Any) -> str:
    """A readable name of ``value``'s type: ``int``, ``torch.Tensor``."""
    kind = type(value)
    module = kind.__module__.partition(".")[0]
    return kind.__name__ if module == "builtins" else f"{module}.{kind.__name__}"


def _describe_number(value: Any) -> str:
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 64:
        return f"an integer of about {int(value.bit_length() * math.log10(2)) + 1} digits"
    return repr(value)


def scalar_value(scalar: Scalar, value: Any) -> float:
    """``value`` as the float a kernel receives for ``scalar``: a real number (Python
    int or float, a NumPy number, or a 0-d array) that fits the scalar's dtype."""
    kind = type(value)
    if kind is float or kind is int:  # the common case, checked cheaply
        number = float(value) if kind is float or -(2**53) <= value <= 2**53 else None
        if number is not None and (
            scalar.dtype == "float64"
            or not math.isfinite(number)
            or abs(number) <= _LARGEST["float32"]
        ):
            return number
    accepted = "a real number (int, float or a NumPy number)"
    if (
        isinstance(value, str | bytes | bool | np.bool_)
        or not (isinstance(value, numbers.Real) or hasattr(value, "__float__"))
        or isinstance(value, complex | np.complexfloating)
    ):
        raise ArgumentError(
            f"scalar {scalar.name!r} must be {accepted}, got {article(type_name(value))}",
            scalar.span,
            hint=f"pass {scalar.name}=<number>",
        )
    try:
        number = float(value)
    except OverflowError:
        number = math.inf if value > 0 else -math.inf
        finite_input = True
    except (TypeError, ValueError) as error:
        raise ArgumentError(
            f"scalar {scalar.name!r} must be {accepted}: {error}", scalar.span
        ) from None
    else:
        finite_input = math.isfinite(number)
    largest = _LARGEST.get(scalar.dtype, _LARGEST["float64"])
    if finite_input and not abs(number) <= largest:
        raise ArgumentError(
            f"scalar {scalar.name!r} = {_describe_number(value)} does not fit its dtype "
            f"{scalar.dtype} (largest magnitude {largest:.4g})",
            scalar.span,
            hint="pass a smaller number"
            + (", or declare the scalar float64" if scalar.dtype != "float64" else ""),
        )
    return number


class Binder:
    """Binds and checks call arguments for ``problem`` on ``backend`` (anything with
    ``name``, ``describe``, ``allocate`` and, for streams, ``resolve_stream``)."""

    def __init__(self, problem: Problem, backend: Any):
        self.problem = problem
        self.program = problem.program
        self.backend = backend
        self._inputs = self.program.inputs
        # Temporaries (a rewrite's) are the backend's: a call neither passes nor gets them.
        self._tensors = tuple(t for t in self.program.tensors if not t.temporary)
        self._tensor_names = frozenset(t.name for t in self._tensors)
        self._scalar_names = frozenset(s.name for s in self.program.scalars)
        #: Every name a call may use for an array or scalar.
        self.names = self._tensor_names | self._scalar_names
        self._written = frozenset(self.program.outputs)
        # What a correct array of each tensor looks like, computed once: a call whose
        # arrays match exactly skips the detailed checks (and their messages).
        self._accepted = {
            t.name: (
                problem.shape(t.name),
                t.dtype,
                contiguous_strides(problem.shape(t.name), t.layout),
            )
            for t in self._tensors
        }
        self._nbytes = {t.name: problem.nbytes(t.name) for t in self._tensors}

    # -- entry points -------------------------------------------------------------

    def bind(self, args: Sequence[Any], kwargs: Mapping[str, Any], stream: Any = None) -> Call:
        """A :class:`Call` from positional arrays (the program's inputs in declaration
        order) and arrays and scalars by name."""
        arrays, given_scalars = self._split(args, kwargs)
        return self.check(arrays, given_scalars, stream)

    def check(
        self,
        arrays: Mapping[str, Any],
        scalars: Mapping[str, Any],
        stream: Any = None,
        *,
        ignore_unknown: bool = False,
        described: Mapping[str, ArrayInfo | None] | None = None,
    ) -> Call:
        """A :class:`Call` from arrays and scalars by name; outputs and untouched
        tensors that are missing are allocated like the given arrays.  Names the
        program does not have are refused, or dropped with ``ignore_unknown``.
        ``described``: what ``backend.describe`` said of some of the arrays (None:
        not asked), when the caller has already asked (einsum does, for its cache
        key); used instead of describing them again when the call launches on no
        stream."""
        if ignore_unknown:
            arrays = {n: a for n, a in arrays.items() if n in self._tensor_names}
            scalars = {n: v for n, v in scalars.items() if n in self._scalar_names}
        for name in arrays:
            if name not in self._tensor_names:
                raise ArgumentError(f"{self.program.name} has no tensor {name!r}")
        for name in self._inputs:
            if name not in arrays:
                raise ArgumentError(
                    f"missing array for {name!r} ({self._expected(name)})",
                    self.program.tensor(name).span,
                    hint=f"pass it by position or as {name}=...",
                )
        values = self._scalars(scalars)
        arrays = dict(arrays)
        launch = self._stream(arrays, stream)
        known = described if described is not None and launch is None else {}
        infos = {
            name: self._check_array(name, array, launch, known.get(name))
            for name, array in arrays.items()
        }
        self._check_devices(infos)
        if len(infos) > 1:
            self._check_overlap(infos)
        like = list(arrays.values())
        for tensor in self._tensors:
            if tensor.name not in arrays:  # an output not passed, or a tensor never used
                array = self.backend.allocate(self.problem, tensor.name, like)
                arrays[tensor.name] = array
                infos[tensor.name] = self.backend.describe(array)
        return Call(arrays, infos, values, launch)

    # -- names ---------------------------------------------------------------------

    def _split(self, args, kwargs) -> tuple[dict[str, Any], dict[str, Any]]:
        inputs = self._inputs
        if len(args) > len(inputs):
            raise ArgumentError(
                f"{self.program.name} takes {len(inputs)} positional array"
                f"{'s' if len(inputs) != 1 else ''} ({', '.join(inputs)}), got {len(args)}",
                hint="pass further arrays and scalars by name",
            )
        arrays: dict[str, Any] = dict(zip(inputs, args, strict=False))
        scalars: dict[str, Any] = {}
        for name, value in kwargs.items():
            if name in self._tensor_names:
                if name in arrays:
                    raise ArgumentError(f"array {name!r} given twice (by position and by name)")
                arrays[name] = value
            elif name in self._scalar_names:
                scalars[name] = value
            else:
                raise ArgumentError(
                    f"{self.program.name} has no tensor or scalar {name!r}",
                    hint=f"tensors: {', '.join(sorted(self._tensor_names))}; "
                    f"scalars: {', '.join(sorted(self._scalar_names)) or 'none'}",
                )
        return arrays, scalars

    def _scalars(self, given: Mapping[str, Any]) -> dict[str, float]:
        values = {}
        for name in given:
            if name not in self._scalar_names:
                raise ArgumentError(f"{self.program.name} has no scalar {name!r}")
        for scalar in self.program.scalars:
            if scalar.name in given:
                values[scalar.name] = scalar_value(scalar, given[scalar.name])
            elif scalar.default is not None:
                values[scalar.name] = float(scalar.default)
            else:
                raise ArgumentError(
                    f"missing value for scalar {scalar.name!r}",
                    scalar.span,
                    hint=f"pass {scalar.name}=<number>, or give it a default in the program",
                )
        return values

    def _stream(self, arrays: Mapping[str, Any], stream: Any) -> Any:
        resolve = getattr(self.backend, "resolve_stream", None)
        if resolve is None:
            if stream is not None:
                raise ArgumentError(
                    f"stream= applies to GPU backends, not the {self.backend.name} backend",
                    hint="drop stream=",
                )
            return None
        return resolve(stream, list(arrays.values()))

    # -- arrays --------------------------------------------------------------------

    def _expected(self, name: str) -> str:
        tensor = self.program.tensor(name)
        return f"shape {self.problem.shape(name)}, {tensor.dtype}, {tensor.layout}-major"

    def _check_array(
        self, name: str, array: Any, stream: Any, info: ArrayInfo | None = None
    ) -> ArrayInfo:
        if info is None:
            info = (
                self.backend.describe(array, stream)
                if stream is not None
                else self.backend.describe(array)
            )
        if (
            info is not None
            and (info.shape, info.dtype, info.strides) == self._accepted[name]
            and not (info.readonly and name in self._written)
        ):
            return info  # the common case: exactly as declared
        tensor = self.program.tensor(name)
        if info is None:
            accepted = "NumPy arrays" + (
                " and GPU arrays (torch, CuPy, JAX)"
                if self.backend.name == "cuda"
                else " and host arrays (torch CPU tensors, DLPack)"
            )
            raise ArgumentError(
                f"{name!r}: the {self.backend.name} backend cannot use "
                f"{article(type_name(array))}; it accepts {accepted}",
                tensor.span,
                hint=f"pass a NumPy array of {self._expected(name)}",
            )
        shape = self.problem.shape(name)
        if info.shape != shape:
            raise ArgumentError(
                f"{name!r} has shape {info.shape}, expected {shape}",
                tensor.span,
                hint=f"pass an array of {self._expected(name)}, or compile with the extents "
                "that give this shape",
            )
        if info.dtype != tensor.dtype:
            hint = f"convert it, e.g. array.astype('{tensor.dtype}'), or change the declaration"
            if tensor.dtype == "bfloat16":
                hint = NO_NUMPY_BFLOAT16
            raise ArgumentDtypeError(
                f"{name!r} has dtype {info.dtype}, expected {tensor.dtype}", tensor.span, hint=hint
            )
        if not strides_match(info, tensor.layout):
            other = "column" if tensor.layout == "row" else "row"
            fix = "np.ascontiguousarray(a)" if tensor.layout == "row" else "np.asfortranarray(a)"
            raise ArgumentLayoutError(
                f"{name!r} is not a dense {tensor.layout}-major array: its strides are "
                f"{info.strides} in elements, a dense one has {self._accepted[name][2]}",
                tensor.span,
                hint=f"pass {fix}, or declare the tensor `{other}` if that is its layout",
            )
        if info.readonly and name in self._written:
            raise ArgumentError(
                f"{name!r} is written by the program but is read-only",
                tensor.span,
                hint="pass a writable array (a copy)",
            )
        return info

    def _check_devices(self, infos: Mapping[str, ArrayInfo]) -> None:
        gpu = None
        for name, info in infos.items():
            device = info.device
            if device == "cpu" or device == gpu:
                continue
            if not device.startswith("cuda:"):
                raise ArgumentError(
                    f"{name!r} is on device {device}, neither a CUDA GPU nor the host",
                    self.program.tensor(name).span,
                )
            if gpu is not None:
                raise ArgumentError(
                    f"arrays on several GPUs ({gpu}, {device})", hint="move them to one device"
                )
            gpu = device

    def _check_overlap(self, infos: Mapping[str, ArrayInfo]) -> None:
        """Kernels assume a written tensor shares memory with no other (``restrict``)."""
        spans = {name: self._span(name, info) for name, info in infos.items()}
        for name in self._written:
            if name not in infos:
                continue
            start, end = spans[name]
            device = infos[name].device
            for other, (other_start, other_end) in spans.items():
                if other == name or infos[other].device != device:
                    continue
                if start < other_end and other_start < end:
                    how = (
                        "are the same memory"
                        if (start, end) == (other_start, other_end)
                        else "overlap in memory"
                    )
                    raise ArgumentError(
                        f"{name!r} and {other!r} {how}, and {name!r} is written",
                        hint="pass a copy",
                    )

    def _span(self, name: str, info: ArrayInfo) -> tuple[int, int]:
        """First and one-past-last byte address of an array's elements."""
        if info.strides == self._accepted[name][2]:
            return info.pointer, info.pointer + self._nbytes[name]
        return _extent(info)


def _extent(info: ArrayInfo) -> tuple[int, int]:
    """First and one-past-last byte address that an array's elements occupy."""
    itemsize = ITEMSIZE.get(info.dtype, 1)
    if any(size == 0 for size in info.shape):
        return info.pointer, info.pointer
    low = sum((n - 1) * s for n, s in zip(info.shape, info.strides, strict=True) if s < 0)
    high = sum((n - 1) * s for n, s in zip(info.shape, info.strides, strict=True) if s > 0)
    return info.pointer + low * itemsize, info.pointer + (high + 1) * itemsize


def bind_arguments(
    problem: Problem,
    backend: Any,
    arrays: Mapping[str, Any],
    scalars: Mapping[str, Any],
    stream: Any = None,
    *,
    ignore_unknown: bool = False,
) -> Call:
    """:meth:`Binder.check` once, for callers that hold arrays and scalars by name."""
    return Binder(problem, backend).check(arrays, scalars, stream, ignore_unknown=ignore_unknown)
