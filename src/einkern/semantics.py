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

**16-bit dtypes** (``bfloat16``, ``float16``: :data:`HALF_DTYPES`) are storage
types: a tensor of one holds 16-bit values, every arithmetic on them is done in
float32 at least (:func:`compute_dtype` never answers a 16-bit dtype: "accumulate
in fp32"), loads widen exactly and the store rounds to nearest even.  A value is
rounded to a 16-bit dtype through float32 (:func:`round_to`): first to float32,
then to the 16-bit type, as the kernels do; in C the conversions are the helpers
of :func:`storage_helpers` (bit operations; ``_Float16`` for float16 where the C
compiler has it; ``cvt`` instructions in CUDA).  NumPy has float16 but no
bfloat16: einkern holds bfloat16 values on the NumPy side as float32 arrays
(:data:`VALUE_DTYPE`) and takes and returns bfloat16 arrays as torch tensors.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Literal, get_args

import numpy as np

DType = Literal["float32", "float64", "bfloat16", "float16"]
Layout = Literal["row", "column"]

DTYPES: tuple[DType, ...] = get_args(DType)
#: The 16-bit storage dtypes (computed in float32).
HALF_DTYPES: tuple[DType, ...] = ("bfloat16", "float16")

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
ITEMSIZE: Mapping[str, int] = MappingProxyType(
    {"float32": 4, "float64": 8, "bfloat16": 2, "float16": 2}
)
#: The C (and CUDA C) type of each dtype's elements in memory: the 16-bit ones are
#: ``unsigned short`` under the names :func:`storage_helpers` defines.
C_TYPE: Mapping[str, str] = MappingProxyType(
    {"float32": "float", "float64": "double", "bfloat16": "ek_bf16", "float16": "ek_f16"}
)
#: The C storage types of the 16-bit dtypes (elements converted on load and store).
STORAGE_C_TYPES: frozenset[str] = frozenset(C_TYPE[d] for d in HALF_DTYPES)
#: The dtype of each C floating type.
DTYPE_OF_C_TYPE: Mapping[str, DType] = MappingProxyType({"float": "float32", "double": "float64"})
#: NumPy dtype of each dtype NumPy has (no bfloat16: see :data:`VALUE_DTYPE`).
NUMPY_DTYPE: Mapping[str, np.dtype] = MappingProxyType(
    {
        "float32": np.dtype(np.float32),
        "float64": np.dtype(np.float64),
        "float16": np.dtype(np.float16),
    }
)
#: The NumPy dtype of each dtype's elements in memory, for raw buffers (kernel
#: temporaries, the emulator's arrays): bfloat16 elements are their uint16 encodings.
STORAGE_NUMPY_DTYPE: Mapping[str, np.dtype] = MappingProxyType(
    {**NUMPY_DTYPE, "bfloat16": np.dtype(np.uint16)}
)
#: The encoding of a NaN in each storage dtype that has no NumPy NaN (bfloat16).
STORAGE_NAN: Mapping[str, int] = MappingProxyType({"bfloat16": 0x7FC0})
#: The NumPy dtype einkern's NumPy code (reference, random inputs) holds the values
#: of each dtype in: its own, or float32 for bfloat16 (every bfloat16 is a float32).
VALUE_DTYPE: Mapping[str, np.dtype] = MappingProxyType(
    {**NUMPY_DTYPE, "bfloat16": np.dtype(np.float32)}
)
#: Unit roundoff of each dtype (half the distance from 1 to the next value).
UNIT_ROUNDOFF: Mapping[str, float] = MappingProxyType(
    {"float64": 2.0**-53, "float32": 2.0**-24, "bfloat16": 2.0**-8, "float16": 2.0**-11}
)
#: Largest relative error (max |result - reference| / max |reference|) accepted
#: for a result of each dtype against the float64 reference.  The 16-bit dtypes
#: accumulate in float32 and round once, at the store: four units of their
#: roundoff (two units in the last place of the largest output): one ulp for a
#: sum that lands on the other side of a rounding boundary than the reference's,
#: one for float32 sums (under 2**-8 of the output for sums of up to 2**13 terms
#: even in the worst case, n·2**-24) and 16-bit tensors stored and read back by
#: later statements (docs/accuracy.md).
TOLERANCE: Mapping[str, float] = MappingProxyType(
    {
        "float64": 1e-12,
        "float32": 1e-5,
        "bfloat16": 4 * UNIT_ROUNDOFF["bfloat16"],
        "float16": 4 * UNIT_ROUNDOFF["float16"],
    }
)
#: Largest finite value of each dtype.
LARGEST: Mapping[str, float] = MappingProxyType(
    {
        "float64": float(np.finfo(np.float64).max),
        "float32": float(np.finfo(np.float32).max),
        "bfloat16": float.fromhex("0x1.fep127"),
        "float16": 65504.0,
    }
)

# Precision order; the 16-bit dtypes are below float32 and neither holds the other.
_WIDTH = {"bfloat16": -1, "float16": -1, "float32": 0, "float64": 1}


def widest(dtypes: Iterable[str]) -> DType:
    """The widest of ``dtypes``: the one every other converts to exactly (float32
    for an empty set, and for bfloat16 with float16, neither of which holds the
    other)."""
    found = set(dtypes)
    unknown = found - set(_WIDTH)
    if unknown:
        raise ValueError(f"unknown dtype {sorted(unknown)[0]!r}")
    if len(found) == 1:
        return found.pop()  # type: ignore[return-value]
    if not found or found <= set(HALF_DTYPES):
        return "float32"
    return max(found, key=_WIDTH.__getitem__)  # type: ignore[arg-type,return-value]


def narrowest(dtypes: Iterable[str]) -> DType:
    """The narrowest of ``dtypes`` (float64 for an empty set; the first 16-bit one
    met when several are)."""
    best: DType = "float64"
    for dtype in dtypes:
        if dtype not in _WIDTH:
            raise ValueError(f"unknown dtype {dtype!r}")
        if _WIDTH[dtype] < _WIDTH[best]:
            best = dtype  # type: ignore[assignment]
    return best


def arithmetic_dtype(dtype: str) -> DType:
    """The dtype values of ``dtype`` are computed in: float32 for a 16-bit dtype."""
    return "float32" if dtype in HALF_DTYPES else dtype  # type: ignore[return-value]


def compute_dtype(output: str, reads: Iterable[str]) -> DType:
    """The dtype a statement computes in: the widest of its output's dtype and the
    dtypes of the tensors it reads, and at least float32 (the module docstring
    states the rule)."""
    return arithmetic_dtype(widest([output, *reads]))


def round_to(values: np.ndarray, dtype: str) -> np.ndarray:
    """``values`` rounded to ``dtype`` as the kernels store them, held in
    :data:`VALUE_DTYPE` (float32 for bfloat16): to nearest even, through float32
    for the 16-bit dtypes (the kernels compute in float32 at least).  NaN stays
    NaN and values past the largest finite one become infinities."""
    if dtype not in HALF_DTYPES:
        return np.asarray(values, dtype=NUMPY_DTYPE[dtype])
    with np.errstate(over="ignore", invalid="ignore"):
        single = np.asarray(values, dtype=np.float32)
        return round_bfloat16(single) if dtype == "bfloat16" else single.astype(np.float16)


def round_bfloat16(x: np.ndarray) -> np.ndarray:
    """float32 values rounded to bfloat16 (8 significant bits) to nearest even,
    as float32 (PTX ``cvt.rn.bf16.f32``, torch's conversion)."""
    x = np.asarray(x, dtype=np.float32)
    bits = x.view(np.uint32).astype(np.uint64)
    rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000).astype(np.uint32)
    return np.where(np.isnan(x), x, rounded.view(np.float32))


def bfloat16_bits(x: np.ndarray) -> np.ndarray:
    """The bfloat16 encodings (uint16) of float32 values that are bfloat16 values."""
    return (np.asarray(x, dtype=np.float32).view(np.uint32) >> 16).astype(np.uint16)


def bfloat16_values(bits: np.ndarray) -> np.ndarray:
    """The float32 values of bfloat16 encodings (uint16)."""
    return (np.asarray(bits, dtype=np.uint16).astype(np.uint32) << 16).view(np.float32)


_STORAGE_C = """\
typedef unsigned short ek_bf16;
typedef unsigned short ek_f16;
{q} float ek_bf16_to_float(ek_bf16 h)
{{
    union {{ unsigned u; float f; }} v;
    v.u = (unsigned)h << 16;
    return v.f;
}}
{q} ek_bf16 ek_float_to_bf16(float x)
{{
    /* to nearest even; a NaN stays a (quiet) NaN */
    union {{ float f; unsigned u; }} v;
    v.f = x;
    if ((v.u & 0x7fffffffu) > 0x7f800000u)
        return (ek_bf16)((v.u >> 16) | 0x40u);
    return (ek_bf16)((v.u + 0x7fffu + ((v.u >> 16) & 1u)) >> 16);
}}
#if defined(__FLT16_MAX__) && !defined(EK_NO_FLOAT16)
{q} float ek_f16_to_float(ek_f16 h)
{{
    union {{ ek_f16 u; _Float16 f; }} v;
    v.u = h;
    return (float)v.f;
}}
{q} ek_f16 ek_float_to_f16(float x)
{{
    union {{ _Float16 f; ek_f16 u; }} v;
    v.f = (_Float16)x;
    return v.u;
}}
#else
{q} float ek_f16_to_float(ek_f16 h)
{{
    union {{ unsigned u; float f; }} v;
    const unsigned sign = (unsigned)(h & 0x8000u) << 16;
    const unsigned exponent = (h >> 10) & 0x1fu, mantissa = h & 0x3ffu;
    if (exponent == 0x1fu) {{
        v.u = sign | 0x7f800000u | (mantissa << 13);
    }} else if (exponent != 0) {{
        v.u = sign | ((exponent + 112u) << 23) | (mantissa << 13);
    }} else {{
        v.f = (float)mantissa * 5.9604644775390625e-8f; /* exact: mantissa * 2^-24 */
        v.u |= sign;
    }}
    return v.f;
}}
{q} ek_f16 ek_float_to_f16(float x)
{{
    /* to nearest even; a NaN stays a (quiet) NaN, 65520 and beyond become infinity */
    union {{ float f; unsigned u; }} v;
    v.f = x;
    const unsigned sign = (v.u >> 16) & 0x8000u, a = v.u & 0x7fffffffu;
    if (a > 0x7f800000u)
        return (ek_f16)(sign | 0x7e00u | ((a >> 13) & 0x3ffu));
    if (a >= 0x477ff000u)
        return (ek_f16)(sign | 0x7c00u);
    if (a >= 0x38800000u) {{
        unsigned r = a - 0x38000000u;
        r += 0xfffu + ((r >> 13) & 1u);
        return (ek_f16)(sign | (r >> 13));
    }}
    const unsigned e = a >> 23, m = e ? (a & 0x7fffffu) | 0x800000u : a;
    const unsigned shift = 126u - (e ? e : 1u);
    if (shift > 24u)
        return (ek_f16)sign;
    unsigned q = m >> shift;
    const unsigned rest = m & ((1u << shift) - 1u), half = 1u << (shift - 1u);
    q += rest > half || (rest == half && (q & 1u));
    return (ek_f16)(sign | q);
}}
#endif
"""

_STORAGE_CUDA = """\
typedef unsigned short ek_bf16;
typedef unsigned short ek_f16;
{q} float ek_bf16_to_float(ek_bf16 h)
{{
    return __uint_as_float((unsigned)h << 16);
}}
{q} ek_bf16 ek_float_to_bf16(float x)
{{
    ek_bf16 h;
    asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(h) : "f"(x));
    return h;
}}
{q} float ek_f16_to_float(ek_f16 h)
{{
    float x;
    asm("cvt.f32.f16 %0, %1;" : "=f"(x) : "h"(h));
    return x;
}}
{q} ek_f16 ek_float_to_f16(float x)
{{
    ek_f16 h;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(x));
    return h;
}}
"""

#: The C helper that widens a stored element of each storage C type to float, and
#: the one that rounds a float to it (:func:`storage_helpers` defines them).
TO_FLOAT: Mapping[str, str] = MappingProxyType(
    {"ek_bf16": "ek_bf16_to_float", "ek_f16": "ek_f16_to_float"}
)
FROM_FLOAT: Mapping[str, str] = MappingProxyType(
    {"ek_bf16": "ek_float_to_bf16", "ek_f16": "ek_float_to_f16"}
)


def storage_helpers(qualifier: str = "static inline", cuda: bool = False) -> str:
    """C definitions of the 16-bit storage types (``ek_bf16``, ``ek_f16``: ``unsigned
    short``) and their conversions to and from float (:data:`TO_FLOAT`,
    :data:`FROM_FLOAT`), each declared with ``qualifier``.  Both round to nearest
    even.  Plain C: bit operations, or ``_Float16`` for float16 where the compiler
    has it (define ``EK_NO_FLOAT16`` to use the bit operations); CUDA: PTX ``cvt``
    (``cvt.rn.bf16.f32`` needs sm_80), no header needed."""
    return (_STORAGE_CUDA if cuda else _STORAGE_C).format(q=qualifier)


#: The float32 tolerance under ``precision="tf32"``: each input keeps 10 of its 23
#: mantissa bits (unit roundoff 2**-11), so a product errs by up to about 1e-3
#: relative; sums of such products stay within 5e-3 of the largest output
#: (docs/tensor_cores.md has the measured errors).  3xTF32 keeps fp32's 1e-5.
TF32_TOLERANCE = 5e-3


#: The float32 tolerance of a program with 16-bit tensors: its float32 results
#: may come from tensor cores (bf16/f16 products, float32 accumulators in the
#: instruction's order, no blocked sums): n·2**-24 of the largest output for sums
#: of n terms, 1e-4 for sums of up to about 1600 terms in the worst case (the
#: H100 measured 1.0e-5 at 1600 terms and 2.6e-5 at 8192, docs/accuracy.md).
HALF_INPUT_FP32_TOLERANCE = 1e-4


def tolerance(output: str, precision: str = "fp32", dtypes: Iterable[str] = ()) -> float:
    """Accepted relative error of a statement's result against the reference: that
    of the output's dtype, :data:`TF32_TOLERANCE` for float32 under tf32, or
    :data:`HALF_INPUT_FP32_TOLERANCE` for float32 in a program whose tensors'
    ``dtypes`` include a 16-bit one."""
    if output == "float32" and precision == "tf32":
        return TF32_TOLERANCE
    if output == "float32" and any(d in HALF_DTYPES for d in dtypes):
        return HALF_INPUT_FP32_TOLERANCE
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
        """The C spelling computing in ``dtype`` (float's for a 16-bit dtype)."""
        return self.c[arithmetic_dtype(dtype)]


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
