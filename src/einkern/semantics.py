"""The one table of meaning: dtypes, layouts, elementwise functions, mixed dtypes.

Every layer that gives a program meaning — the reference (NumPy), the CPU
backend, the GPU lowering and its printers, the benchmarks — reads this module
and nothing else for these facts.  It sits at the bottom of the layers: it
imports no other einkern module.

**Functions** have NumPy's meaning, NaN semantics included: ``max``/``min`` are
``numpy.maximum``/``numpy.minimum``, which *propagate* a NaN in either argument
(C's ``fmax``/``fmin`` drop it).  Each function names its C spelling per dtype;
functions whose C library meaning differs from NumPy's name a helper that
:func:`c_helpers` defines.

**Mixed dtypes** (the rule every backend applies, see :func:`compute_dtype`): a
statement computes in the widest dtype among the tensors it touches — the
tensors it reads *and* its output.  Narrower inputs are widened exactly before
use; the result is rounded once, to the output's dtype, when it is stored.
Scalars and literal constants take the statement's compute dtype (as Python
floats do in NumPy).  The tolerance against the float64 reference of a
statement is that of its output's dtype (:func:`tolerance`), since every value
computed before the final rounding is at least as precise as the output.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Literal, get_args

import numpy as np

DType = Literal["float32", "float64"]
Layout = Literal["row", "column"]

DTYPES: tuple[DType, ...] = get_args(DType)

#: What float32 products may be computed in (``precision=`` of compile, einsum and
#: the CLI; docs/tensor_cores.md): ``fp32`` (the SIMT units, fp32 rounding),
#: ``tf32`` (tensor cores, inputs rounded to 10 mantissa bits, fp32 accumulation)
#: or ``3xtf32`` (tensor cores, each input split into two tf32 parts, three
#: products: fp32-level error).  A permission: backends without tensor cores
#: compute in fp32, and float64 statements are unaffected.
Precision = Literal["fp32", "tf32", "3xtf32"]
PRECISIONS: tuple[Precision, ...] = get_args(Precision)
LAYOUTS: tuple[Layout, ...] = get_args(Layout)

#: Bytes per element.
ITEMSIZE: Mapping[str, int] = MappingProxyType({"float32": 4, "float64": 8})
#: The C (and CUDA C) type of each dtype.
C_TYPE: Mapping[str, str] = MappingProxyType({"float32": "float", "float64": "double"})
#: The dtype of each C floating type.
DTYPE_OF_C_TYPE: Mapping[str, DType] = MappingProxyType({"float": "float32", "double": "float64"})
#: NumPy dtype of each dtype.
NUMPY_DTYPE: Mapping[str, np.dtype] = MappingProxyType(
    {"float32": np.dtype(np.float32), "float64": np.dtype(np.float64)}
)
#: Largest relative error (max |result - reference| / max |reference|) accepted
#: for a result of each dtype against the float64 reference.
TOLERANCE: Mapping[str, float] = MappingProxyType({"float64": 1e-12, "float32": 1e-5})

_WIDTH = {"float32": 0, "float64": 1}


def widest(dtypes: Iterable[str]) -> DType:
    """The widest of ``dtypes`` (float32 for an empty set)."""
    best: DType = "float32"
    for dtype in dtypes:
        if dtype not in _WIDTH:
            raise ValueError(f"unknown dtype {dtype!r}")
        if _WIDTH[dtype] > _WIDTH[best]:
            best = dtype  # type: ignore[assignment]
    return best


def narrowest(dtypes: Iterable[str]) -> DType:
    """The narrowest of ``dtypes`` (float64 for an empty set)."""
    best: DType = "float64"
    for dtype in dtypes:
        if dtype not in _WIDTH:
            raise ValueError(f"unknown dtype {dtype!r}")
        if _WIDTH[dtype] < _WIDTH[best]:
            best = dtype  # type: ignore[assignment]
    return best


def compute_dtype(output: str, reads: Iterable[str]) -> DType:
    """The dtype a statement computes in: the widest of its output's dtype and the
    dtypes of the tensors it reads (the module docstring states the rule)."""
    return widest([output, *reads])


#: The float32 tolerance under ``precision="tf32"``: each input keeps 10 of its 23
#: mantissa bits (unit roundoff 2**-11), so a product errs by up to about 1e-3
#: relative; sums of such products stay within 5e-3 of the largest output
#: (docs/tensor_cores.md has the measured errors).  3xTF32 keeps fp32's 1e-5.
TF32_TOLERANCE = 5e-3


def tolerance(output: str, precision: str = "fp32") -> float:
    """Accepted relative error of a statement's result against the reference: that
    of the output's dtype, or :data:`TF32_TOLERANCE` for float32 under tf32."""
    if output == "float32" and precision == "tf32":
        return TF32_TOLERANCE
    return TOLERANCE[output]


@dataclass(frozen=True)
class Function:
    """An elementwise function of the language.

    ``numpy`` is its meaning; ``c`` its C spelling for each dtype (a C math
    library function, or an ``ek_`` helper from :func:`c_helpers` where the C
    library's meaning differs from NumPy's); ``nan`` says how a NaN argument
    behaves (``"propagate"``: the result is NaN, as in NumPy)."""

    name: str
    arity: int
    numpy: Callable[..., np.ndarray]
    c: Mapping[str, str]
    nan: str = "propagate"

    def c_name(self, dtype: str) -> str:
        return self.c[dtype]


def _fn(name: str, arity: int, numpy: Callable[..., np.ndarray], c64: str, c32: str) -> Function:
    return Function(name, arity, numpy, MappingProxyType({"float64": c64, "float32": c32}))


#: Every elementwise function, by its name in the language.
FUNCTIONS: Mapping[str, Function] = MappingProxyType(
    {
        f.name: f
        for f in (
            _fn("sqrt", 1, np.sqrt, "sqrt", "sqrtf"),
            _fn("exp", 1, np.exp, "exp", "expf"),
            _fn("log", 1, np.log, "log", "logf"),
            _fn("abs", 1, np.abs, "fabs", "fabsf"),
            _fn("sin", 1, np.sin, "sin", "sinf"),
            _fn("cos", 1, np.cos, "cos", "cosf"),
            _fn("tanh", 1, np.tanh, "tanh", "tanhf"),
            _fn("max", 2, np.maximum, "ek_max_d", "ek_max_f"),
            _fn("min", 2, np.minimum, "ek_min_d", "ek_min_f"),
            _fn("pow", 2, np.power, "pow", "powf"),
        )
    }
)

#: Number of arguments of each function.
ARITY: Mapping[str, int] = MappingProxyType({name: f.arity for name, f in FUNCTIONS.items()})


def c_helpers(qualifier: str = "static inline") -> str:
    """C definitions of the ``ek_`` helpers that :data:`FUNCTIONS` names, each
    declared with ``qualifier`` (``"static inline"`` for C, ``"__device__
    __forceinline__"`` for CUDA).  NaN-propagating max/min: NumPy's
    ``maximum``/``minimum`` (a NaN in either argument gives NaN)."""
    lines = []
    for c_type, suffix, c_fun in (("double", "d", ""), ("float", "f", "f")):
        for op in ("max", "min"):
            lines.append(
                f"{qualifier} {c_type} ek_{op}_{suffix}({c_type} a, {c_type} b) "
                f"{{ return (a != a || b != b) ? a + b : f{op}{c_fun}(a, b); }}"
            )
    return "\n".join(lines) + "\n"
