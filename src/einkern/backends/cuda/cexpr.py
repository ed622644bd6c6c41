"""C identifiers and expressions for the CUDA kernels.

:class:`Names` gives every tensor, scalar and index of a kernel a distinct C
identifier (the source name where it is a safe one); :func:`print_rhs` turns a
right-hand side into C statements (one register accumulator and loop nest per
``Sum``) and the final C expression.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

from ...ir.nodes import Access, Binary, Call, Const, Expr, Neg, ScalarRef, Sum
from .decision import ReductionLoop

_IDENTIFIER = re.compile(r"[A-Za-z][A-Za-z0-9_]*")
RESERVED = frozenset(
    """
    alignas alignof asm auto bool break case catch char char16_t char32_t class const
    constexpr const_cast continue decltype default delete do double dynamic_cast else enum
    explicit export extern false float for friend goto if inline int long mutable namespace
    new noexcept nullptr operator private protected public register reinterpret_cast return
    short signed sizeof static static_assert static_cast struct switch template this
    thread_local throw true try typedef typeid typename union unsigned using virtual void
    volatile wchar_t while restrict threadIdx blockIdx blockDim gridDim warpSize main
    sqrt sqrtf exp expf log logf fabs fabsf sin sinf cos cosf tanh tanhf fmax fmaxf fmin
    fminf pow powf abs max min NULL
    """.split()
)

_FUNCTIONS = {
    # name: (float64 C function, float32 C function)
    "sqrt": ("sqrt", "sqrtf"),
    "exp": ("exp", "expf"),
    "log": ("log", "logf"),
    "abs": ("fabs", "fabsf"),
    "sin": ("sin", "sinf"),
    "cos": ("cos", "cosf"),
    "tanh": ("tanh", "tanhf"),
    "max": ("ek_max", "ek_max"),
    "min": ("ek_min", "ek_min"),
    "pow": ("pow", "powf"),
}

# NaN-propagating max/min, as NumPy's maximum/minimum (fmax/fmin drop NaNs).
HELPERS = """\
__device__ __forceinline__ double ek_max(double a, double b) { return (a != a || b != b) ? a + b : fmax(a, b); }
__device__ __forceinline__ double ek_min(double a, double b) { return (a != a || b != b) ? a + b : fmin(a, b); }
__device__ __forceinline__ float ek_max(float a, float b) { return (a != a || b != b) ? a + b : fmaxf(a, b); }
__device__ __forceinline__ float ek_min(float a, float b) { return (a != a || b != b) ? a + b : fminf(a, b); }
"""  # noqa: E501

C_TYPES = {"float32": "float", "float64": "double"}


def c_identifier(name: str, taken: Iterable[str] = ()) -> str:
    """A safe C identifier for ``name``, distinct from ``taken``: the name itself
    when it is one (not reserved, not starting with ``ek_``), else a mangled form."""
    taken = set(taken)
    base = name if _IDENTIFIER.fullmatch(name) else re.sub(r"[^A-Za-z0-9_]", "_", name)
    if not base or not base[0].isalpha():
        base = "v" + base
    if base in RESERVED or base.startswith("ek_"):
        base = base + "_"
    candidate, n = base, 1
    while candidate in taken:
        candidate, n = f"{base}_{n}", n + 1
    return candidate


@dataclass(frozen=True)
class Names:
    """C identifiers of one kernel's tensors, scalars and indices."""

    tensors: dict[str, str]
    scalars: dict[str, str]
    indices: dict[str, str]

    @staticmethod
    def make(tensors: Iterable[str], scalars: Iterable[str], indices: Iterable[str]) -> Names:
        taken: set[str] = set()
        maps: list[dict[str, str]] = []
        for group in (tensors, scalars, indices):
            mapping: dict[str, str] = {}
            for name in dict.fromkeys(group):
                mapping[name] = c_identifier(name, taken)
                taken.add(mapping[name])
            maps.append(mapping)
        return Names(*maps)


def c_literal(value: float, ctype: str) -> str:
    """``value`` as a C literal of ``ctype`` (``float``/``double``), inf and NaN included."""
    if math.isnan(value):
        return "__int_as_float(0x7fc00000)" if ctype == "float" else (
            "__longlong_as_double(0x7ff8000000000000LL)"
        )
    if math.isinf(value):
        inf = "__int_as_float(0x7f800000)" if ctype == "float" else (
            "__longlong_as_double(0x7ff0000000000000LL)"
        )
        return inf if value > 0 else f"(-{inf})"
    text = repr(float(value))
    if ctype == "float":
        text += "f"
    return f"({text})" if value < 0 or text.startswith("-") else text


# precedence: higher binds tighter
_PREC = {"+": 1, "-": 1, "*": 2, "/": 2}
_ATOM = 4


@dataclass(frozen=True)
class Context:
    """What printing a right-hand side needs to know."""

    names: Names
    ctype: str  # compute type: "float" or "double"
    index_type: str
    tensor_ctype: dict[str, str]  # tensor -> its element C type
    sizes: dict[str, int]  # index -> extent
    address: Callable[[Access], str]  # C expression of an element, e.g. "A[i * 64 + k]"
    loops: tuple[ReductionLoop, ...]  # one per Sum node, in pre-order
    unroll_pragmas: bool = True


def print_rhs(expr: Expr, ctx: Context) -> tuple[list[str], str]:
    """C statements computing the sums of ``expr`` (at the kernel's top level) and
    the C expression of its value."""
    lines: list[str] = []
    text, _ = _print(expr, ctx, lines, iter(ctx.loops))
    return lines, text


def _print(expr: Expr, ctx: Context, lines: list[str], loops: Iterator) -> tuple[str, int]:
    if isinstance(expr, Const):
        literal = c_literal(expr.value, ctx.ctype)
        return literal, _ATOM
    if isinstance(expr, ScalarRef):
        name = ctx.names.scalars[expr.name]
        return (name, _ATOM) if ctx.ctype == "double" else (f"(float){name}", 3)
    if isinstance(expr, Access):
        element = ctx.address(expr)
        if ctx.tensor_ctype[expr.tensor] != ctx.ctype:
            return f"({ctx.ctype}){element}", 3
        return element, _ATOM
    if isinstance(expr, Neg):
        text, prec = _print(expr.operand, ctx, lines, loops)
        return (f"-{text}" if prec >= 3 and not text.startswith("-") else f"-({text})"), 3
    if isinstance(expr, Binary):
        prec = _PREC[expr.op]
        left, lp = _print(expr.left, ctx, lines, loops)
        right, rp = _print(expr.right, ctx, lines, loops)
        if lp < prec:
            left = f"({left})"
        if rp < prec or (rp == prec and expr.op in "-/"):
            right = f"({right})"
        return f"{left} {expr.op} {right}", prec
    if isinstance(expr, Call):
        func = _FUNCTIONS[expr.func][0 if ctx.ctype == "double" else 1]
        args = [_print(arg, ctx, lines, loops)[0] for arg in expr.args]
        return f"{func}({', '.join(args)})", _ATOM
    if isinstance(expr, Sum):
        return _print_sum(expr, ctx, lines, loops), _ATOM
    raise TypeError(f"unknown expression node {expr!r}")


def _print_sum(node: Sum, ctx: Context, lines: list[str], loops: Iterator) -> str:
    loop = next(loops)  # pre-order, as the decision numbered them
    acc = f"ek_acc{loop.sum_id}"
    lines.append(f"{ctx.ctype} {acc} = {c_literal(0.0, ctx.ctype)};")
    for depth, (index, extent) in enumerate(zip(loop.order, loop.extents, strict=True)):
        pad = "    " * depth
        name = ctx.names.indices[index]
        if depth == len(loop.order) - 1 and loop.unroll > 1 and ctx.unroll_pragmas:
            lines.append(f"{pad}#pragma unroll {loop.unroll}")
        it = ctx.index_type
        lines.append(f"{pad}for ({it} {name} = 0; {name} < {extent}; ++{name}) {{")
    inner: list[str] = []
    body, _ = _print(node.body, ctx, inner, loops)
    pad = "    " * len(loop.order)
    lines.extend(pad + line for line in inner)
    lines.append(f"{pad}{acc} += {body};")
    for depth in range(len(loop.order) - 1, -1, -1):
        lines.append("    " * depth + "}")
    return acc
