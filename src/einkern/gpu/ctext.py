"""C text: the one printer base of every C the project generates.

Policies every printer follows, defined once here: literals (:func:`float_literal`,
:func:`int_literal`; NaN and infinities as the ``EKX_NAN_F``… macros of
:data:`C_LITERAL_MACROS` / the CUDA prelude), reserved words and the printers'
own prefix (:func:`check_identifier`), mangling of IR names into C identifiers
(:func:`mangle`), the C spelling of the language's functions
(:func:`function_name`, from :data:`einkern.semantics.FUNCTIONS`) and the
NaN-propagating ``max``/``min`` helpers (:func:`helper_functions`), and the entry
point of a C library (:data:`ENTRY_POINT`).  The CPU backend
(:mod:`einkern.backends.cpu.codegen`) prints its expressions with these.

:class:`CText` prints kernel-IR expressions and statements for the CUDA printer
(:mod:`.cuda_printer`) and the CPU emulation (:mod:`.emulator_c`): everything
both targets spell alike; its subclasses say how thread variables, array
elements, vector lanes and the block/thread indices are spelled, so both
targets run the same index arithmetic.

Typing of literals.  Every expression has a C type inferred bottom-up (array
element types, declared variable types, ``int`` for :class:`~kir.Int`, C's usual
arithmetic conversions, ``float``/``double`` for the C math functions by name:
``sqrtf`` is float, ``sqrt`` double).  A :class:`~kir.Float` has no type of its
own: it takes the type of the computation around it — the other operand of
its operator, else the assignment target / store element / function argument
type — and prints as a literal of that type: ``0.1f`` in float context (the
shortest text that reads back as exactly ``float32(value)``: the rounding to
float happens here, visibly, and identically for both targets), ``0.1`` in
double context (``repr``: exact).  Integer contexts print a Float as a double
literal.  NaN and infinities print as the macros ``EKX_NAN_F``, ``EKX_INF_D``…
that each target's prelude defines.  :class:`~kir.Int` prints in decimal, with
``LL`` when it does not fit in 32 bits.  ``Op("min"/"max")`` prints for the
operation's type as the table's NaN-propagating helper for floating types
(``ek_max_f``…: NumPy's ``maximum``/``minimum``), ``ekx_min_T``/``ekx_max_T``
(plain comparisons) for integers.

16-bit storage.  Arrays of a 16-bit dtype have the element types ``ek_bf16`` and
``ek_f16`` (:data:`einkern.semantics.STORAGE_C_TYPES`, ``unsigned short``): a
:class:`~kir.Load` of one is its value widened to float by the table's helper
(``ek_bf16_to_float(A[i])``, typed ``float``; ``double`` in a kernel computing in
double), and a :class:`~kir.Store` rounds a float value to nearest even
(``A[i] = ek_float_to_bf16(v)``; ``+=`` reads, adds in float, rounds).  No
scalar, vector load or asynchronous copy has a storage type.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from ..semantics import (
    DTYPE_OF_C_TYPE,
    FROM_FLOAT,
    FUNCTIONS,
    STORAGE_C_TYPES,
    TO_FLOAT,
    c_helpers,
)
from . import kir
from .kir import ATOMIC_ADD, ELEMENT_BYTES
from .mma import SHAPES

FLOATING = frozenset({"float", "double"})
_RANK = ("int", "long long", "float", "double")
SUFFIX = {"int": "i", "long long": "ll", "float": "f", "double": "d"}
SHARED_ALIGNMENT = 16  # bytes; every shared array starts at such an offset (vector loads)
PREFIX = "ekx_"  # identifiers the printers reserve for themselves
COMPARISONS = frozenset({"<", "<=", ">", ">=", "==", "!="})
LOGICAL = frozenset({"&&", "||"})
ARITHMETIC = frozenset({"+", "-", "*", "/", "%", "^", "min", "max"})
VECTOR_TYPES = frozenset({"float2", "float4", "double2", "int2", "int4", "longlong2"})
_MATH = frozenset(
    """sqrt cbrt exp exp2 expm1 log log2 log10 log1p fabs sin cos tan asin acos atan atan2
    sinh cosh tanh asinh acosh atanh fmax fmin pow floor ceil trunc round rint fma fmod
    erf erfc hypot copysign""".split()
)
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_KEYWORDS = frozenset(
    """alignas alignof asm auto bool break case catch char char16_t char32_t class const
    constexpr const_cast continue decltype default delete do double dynamic_cast else enum
    explicit export extern false float for friend goto if inline int long main mutable
    namespace new noexcept nullptr operator private protected public register
    reinterpret_cast restrict return short signed sizeof static static_assert static_cast
    struct switch template this thread_local throw true try typedef typeid typename union
    unsigned using virtual void volatile wchar_t while threadIdx blockIdx blockDim gridDim
    warpSize malloc free NULL NAN INFINITY""".split()
)

#: Name of the function a generated C library exports (the CPU backend's and the
#: emulation's): ``void einkern_run(void **buffers, const double *scalars)``.
ENTRY_POINT = "einkern_run"

#: NaN and infinity literals in plain C (the CUDA prelude spells them by bits).
C_LITERAL_MACROS = """\
#define EKX_NAN_F NAN
#define EKX_INF_F INFINITY
#define EKX_NAN_D ((double)NAN)
#define EKX_INF_D ((double)INFINITY)
"""

_HELPER_NAMES = frozenset(c for f in FUNCTIONS.values() for c in f.c.values() if "_" in c)
_INTEGER_HELPERS = """\
{q} int ekx_min_i(int a, int b) {{ return a < b ? a : b; }}
{q} int ekx_max_i(int a, int b) {{ return a > b ? a : b; }}
{q} long long ekx_min_ll(long long a, long long b) {{ return a < b ? a : b; }}
{q} long long ekx_max_ll(long long a, long long b) {{ return a > b ? a : b; }}
"""


def helper_functions(qualifier: str, integers: bool = True) -> str:
    """Definitions of the helpers printed code calls, each declared with
    ``qualifier``: the table's NaN-propagating floating ``max``/``min``
    (:func:`einkern.semantics.c_helpers`) and, with ``integers``, integer ones."""
    text = _INTEGER_HELPERS.format(q=qualifier) if integers else ""
    return text + c_helpers(qualifier)


def function_name(func: str, ctype: str) -> str:
    """C spelling of the language's function ``func`` computed in ``ctype``."""
    return FUNCTIONS[func].c_name(DTYPE_OF_C_TYPE[ctype])


def mangle(prefix: str, name: str) -> str:
    """A C identifier for an IR name: ``prefix_name``, distinct for distinct names
    and prefixes (a name that is not an ASCII identifier is spelled in hex:
    ``prefixq_<hex>``).  Never a keyword, since the prefix comes first."""
    if _IDENTIFIER.fullmatch(name) and name.isascii():
        return f"{prefix}_{name}"
    return f"{prefix}q_{name.encode().hex()}"


# ---- literals and types ------------------------------------------------------


def float_literal(value: float, ctype: str) -> str:
    """``value`` as an exact C literal of ``ctype`` (``float`` gets ``f`` and is
    rounded to float32 here; other types print as ``double``)."""
    single = ctype == "float"
    if single:
        with np.errstate(over="ignore"):
            value = float(np.float32(value))
    tag = "F" if single else "D"
    if math.isnan(value):
        return f"EKX_NAN_{tag}"
    if math.isinf(value):
        return f"EKX_INF_{tag}" if value > 0 else f"(-EKX_INF_{tag})"
    text = str(np.float32(value)) if single else repr(float(value))
    if not any(c in text for c in ".eE"):
        text += ".0"
    text += "f" if single else ""
    return f"({text})" if text.startswith("-") else text


def int_literal(value: int) -> str:
    """Decimal, with ``LL`` outside the 32-bit range; negative values parenthesised."""
    text = str(value) + ("" if -(2**31) < value < 2**31 else "LL")
    return f"({text})" if value < 0 else text


def join(a: str | None, b: str | None) -> str | None:
    """The type of ``a op b`` (usual arithmetic conversions); None is the type of a
    bare :class:`~kir.Float`: it adopts a floating partner and stays open otherwise."""
    if a is None or b is None:
        known = a if b is None else b
        return known if known in FLOATING else None
    return max(a, b, key=_RANK.index)


def call_type(func: str) -> str | None:
    """``double`` for a C math function, ``float`` for its ``f`` variant, else None."""
    if func in ("ek_tf32", "ek_tf32_rest"):
        return "float"
    if func in _MATH:
        return "double"
    if func.endswith("f") and func[:-1] in _MATH:
        return "float"
    return None


def vector_type(stmt: kir.VectorLoad) -> tuple[str, str]:
    """(vector type, element type) of a vector load: ``ctype`` may name either."""
    element = stmt.ctype.rstrip("0123456789")
    vector = stmt.ctype if element != stmt.ctype else f"{element}{stmt.width}"
    if vector == "long long2":
        vector = "longlong2"
    if vector not in VECTOR_TYPES or not vector.endswith(str(stmt.width)):
        raise ValueError(f"unsupported vector load {vector} (width {stmt.width})")
    return vector, element


def check_shuffle(kernel: kir.Kernel, section: kir.ShuffleSum) -> int:
    """The lane mask of a :class:`~kir.ShuffleSum` in ``kernel`` (every lane of a
    block of fewer than 32 threads, else all 32); ValueError when the block is
    not whole warps, an offset is not a power of two under 32 or the variable is
    not a thread-variable array of ``count`` elements or more."""
    threads = kernel.threads
    if threads > 32 and threads % 32:
        raise ValueError(f"warp shuffles in a block of {threads} threads (not whole warps)")
    if any(o < 1 or o >= min(32, threads) or o & (o - 1) for o in section.offsets):
        raise ValueError(f"shuffle offsets {section.offsets} in a block of {threads} threads")
    counts = {v.name: v.count for v in kernel.thread_vars}
    if counts.get(section.var, 0) < section.count:
        raise ValueError(f"shuffle of {section.var!r}: not a thread array of {section.count}")
    return 0xFFFFFFFF if threads >= 32 else (1 << threads) - 1


def mma_words(kernel: kir.Kernel, section: kir.Mma) -> frozenset[str]:
    """The thread arrays of ``kernel`` that hold 32-bit words of two 16-bit values
    (``unsigned``, filled by :class:`~kir.LoadMatrix`); ValueError when ``section``
    is a bf16/f16 MMA whose A or B fragment is not one of them."""
    words = frozenset(v.name for v in kernel.thread_vars if v.ctype == "unsigned")
    if SHAPES[section.shape].packed > 1:
        for fragment in (section.a, section.b):
            if fragment.var not in words:
                raise ValueError(
                    f"{section.shape} operand {fragment.var!r}: not an unsigned thread array "
                    "of packed 16-bit words (ldmatrix)"
                )
    return words


def check_load_matrix(kernel: kir.Kernel, section: kir.LoadMatrix) -> None:
    """ValueError unless ``section`` loads 1, 2 or 4 matrices from a 16-bit shared
    array into an ``unsigned`` thread array with room for them, in whole warps."""
    if kernel.threads % 32:
        raise ValueError(f"ldmatrix in a block of {kernel.threads} threads (not whole warps)")
    if section.count not in (1, 2, 4):
        raise ValueError(f"ldmatrix of {section.count} matrices (1, 2 or 4)")
    shared = {a.name: a.ctype for a in kernel.shared}
    if shared.get(section.shared) not in STORAGE_C_TYPES:
        raise ValueError(f"ldmatrix from {section.shared!r}: not a 16-bit shared array")
    variables = {v.name: v for v in kernel.thread_vars}
    d = variables.get(section.d.var)
    if d is None or d.ctype != "unsigned" or d.count < section.d.first + section.count:
        raise ValueError(f"ldmatrix into {section.d.var!r}: not an unsigned thread array")


def check_mbarrier(kernel: kir.Kernel, array: str) -> None:
    """ValueError unless ``array`` is a shared array of mbarriers."""
    shared = {a.name: a.ctype for a in kernel.shared}
    if shared.get(array) != kir.MBARRIER:
        raise ValueError(f"{array!r} is not a shared array of mbarriers ({kir.MBARRIER})")


#: Most dimensions of a TMA tensor map, and most elements of a box along one.
MAP_RANK, MAP_BOX = 5, 256


def check_tensor_map(kernel: kir.Kernel, tmap: kir.TensorMap) -> None:
    """ValueError unless ``tmap`` describes a TMA map the hardware accepts over a
    global array of ``kernel``: 1 to 5 dimensions, the first contiguous, the other
    strides multiples of 16 bytes, boxes of 1 to 256 elements, a 128-byte swizzle
    with boxes 128 bytes wide (or none)."""
    params = {p.name: p for p in kernel.params if p.is_array}
    array = params.get(tmap.array)
    if array is None or array.ctype != tmap.ctype:
        raise ValueError(f"tensor map {tmap.name!r}: no global {tmap.ctype} array {tmap.array!r}")
    size = ELEMENT_BYTES[tmap.ctype]
    if not 1 <= len(tmap.dims) <= MAP_RANK or tmap.dims[0].stride != 1:
        raise ValueError(
            f"tensor map {tmap.name!r}: 1 to {MAP_RANK} dimensions, the first contiguous"
        )
    for d in tmap.dims:
        if not 1 <= d.box <= MAP_BOX or d.extent < 1:
            raise ValueError(f"tensor map {tmap.name!r}: box {d.box} along {d.index}")
        if d is not tmap.dims[0] and (d.stride * size) % 16:
            raise ValueError(f"tensor map {tmap.name!r}: stride of {d.index} not 16-byte aligned")
    if tmap.swizzle not in (0, kir.SWIZZLE_LINE):
        raise ValueError(f"tensor map {tmap.name!r}: swizzle {tmap.swizzle} (0 or 128)")
    if tmap.swizzle and tmap.dims[0].box * size != tmap.swizzle:
        raise ValueError(
            f"tensor map {tmap.name!r}: swizzled boxes must be {tmap.swizzle} bytes wide"
        )


def check_tensor_copy(kernel: kir.Kernel, s: kir.TensorCopy) -> kir.TensorMap:
    """The map of ``s`` in ``kernel``, checked with its shared target and mbarrier."""
    maps = {m.name: m for m in kernel.maps}
    tmap = maps.get(s.map)
    if tmap is None:
        raise ValueError(f"bulk tensor copy of unknown map {s.map!r}")
    check_tensor_map(kernel, tmap)
    if len(s.coords) != len(tmap.dims):
        raise ValueError(f"bulk tensor copy of {s.map!r}: {len(s.coords)} coordinates")
    shared = {a.name: a for a in kernel.shared}
    target = shared.get(s.shared)
    if target is None or target.ctype != tmap.ctype:
        raise ValueError(f"bulk tensor copy into {s.shared!r}: not a shared {tmap.ctype} array")
    if tmap.swizzle and target.align % 1024:
        raise ValueError(f"swizzled bulk tensor copy into {s.shared!r}: align it to 1024 bytes")
    check_mbarrier(kernel, s.barrier)
    return tmap


def check_identifier(name: str) -> str:
    """``name`` if it is a C identifier no printer or prelude uses; else ValueError."""
    bad = name in _KEYWORDS or call_type(name) is not None or name in _HELPER_NAMES
    if bad or not _IDENTIFIER.fullmatch(name) or name.lower().startswith(PREFIX):
        raise ValueError(f"{name!r} is not a C identifier the printers accept")
    return name


# ---- symbols -----------------------------------------------------------------


@dataclass(frozen=True)
class ArrayInfo:
    """An indexable name: a global array, a shared array or a thread-variable array."""

    name: str
    ctype: str
    size: int
    space: str  # "global" | "shared" | "thread"
    readonly: bool = False


def arrays_of(kernel: kir.Kernel) -> dict[str, ArrayInfo]:
    """Every name a Load/Store/VectorLoad may index, with its size and memory space."""
    found: dict[str, ArrayInfo] = {}
    for p in kernel.params:
        if p.is_array:
            found[p.name] = ArrayInfo(p.name, p.ctype, p.size, "global", p.readonly)
    for s in kernel.shared:
        found[s.name] = ArrayInfo(s.name, s.ctype, s.size, "shared")
    for v in kernel.thread_vars:
        if v.count:
            found[v.name] = ArrayInfo(v.name, v.ctype, v.count, "thread")
    return found


def uses_storage(kernel: kir.Kernel) -> bool:
    """Whether ``kernel`` has an array of a 16-bit storage type (its source then
    needs :func:`einkern.semantics.storage_helpers`)."""
    ctypes = [p.ctype for p in kernel.params] + [a.ctype for a in kernel.shared]
    ctypes += [v.ctype for v in kernel.thread_vars]
    return not STORAGE_C_TYPES.isdisjoint(ctypes)


def kernel_types(kernel: kir.Kernel) -> dict[str, str]:
    """Types of the names every statement may see (scalars and thread variables)."""
    names = [p.name for p in kernel.params] + [s.name for s in kernel.shared]
    names += [v.name for v in kernel.thread_vars] + [m.name for m in kernel.maps]
    for name in names:
        check_identifier(name)
    ctypes = [p.ctype for p in kernel.params] + [s.ctype for s in kernel.shared]
    ctypes += [v.ctype for v in kernel.thread_vars]
    unknown = sorted(set(ctypes) - set(ELEMENT_BYTES))
    if unknown or kernel.index_type not in ("int", "long long"):
        raise ValueError(f"kernel {kernel.name}: unsupported type {unknown or kernel.index_type}")
    if len(set(names)) != len(names):
        raise ValueError(f"kernel {kernel.name}: a name is declared twice")
    types = {p.name: p.ctype for p in kernel.params if not p.is_array}
    types.update({v.name: v.ctype for v in kernel.thread_vars if not v.count})
    if not STORAGE_C_TYPES.isdisjoint(types.values()):
        raise ValueError(f"kernel {kernel.name}: a scalar of a 16-bit storage type")
    return types


def indent(lines: Sequence[str], levels: int = 1) -> list[str]:
    """Lines indented by four spaces per level (preprocessor lines stay in column 0)."""
    pad = "    " * levels
    return [pad + line if line and not line.startswith("#") else line for line in lines]


def _atomic(e: kir.Expr) -> bool:
    return not isinstance(e, kir.Op | kir.Select | kir.Neg)


# ---- the shared expression / statement printer -------------------------------


class CText:
    """Prints kir expressions and statements as C.

    ``env`` arguments map the visible scalar and vector names to their C types.
    Subclasses implement the spelling hooks (the methods that raise here)."""

    def __init__(self, kernel: kir.Kernel):
        self.kernel = kernel
        self.index_type = kernel.index_type
        self.arrays = arrays_of(kernel)
        self.types = kernel_types(kernel)
        # 16-bit elements widen to float, or to double in a kernel computing in double.
        self.widened = "double" if dict(kernel.meta).get("compute_type") == "double" else "float"

    # -- spelling hooks --------------------------------------------------------

    def var(self, name: str, env: Mapping[str, str]) -> str:
        """A scalar variable (thread variables included)."""
        if name not in env:
            raise ValueError(f"kernel {self.kernel.name}: unknown variable {name!r}")
        return name

    def block_index(self, axis: str) -> str:
        raise NotImplementedError

    def thread_index(self) -> str:
        raise NotImplementedError

    def element(self, info: ArrayInfo, index: str, access: str) -> str:
        """An lvalue for element ``index`` of an array (``access``: load or store)."""
        raise NotImplementedError

    def lane(self, vector: str, lane: int) -> str:
        raise NotImplementedError

    def atomic_add(self, element: str, value: str, ctype: str) -> list[str]:
        """Lines adding ``value`` to the lvalue ``element`` atomically."""
        raise NotImplementedError

    def vector_load(self, stmt: kir.VectorLoad, info: ArrayInfo, index: str) -> list[str]:
        raise NotImplementedError

    def uninitialised(self, stmt: kir.Declare) -> str:
        """A Declare without an initial value."""
        raise NotImplementedError

    def unroll(self, unroll: int) -> list[str]:
        """Lines before a For loop with this ``unroll`` setting."""
        return []

    def copy_async(self, s: kir.CopyAsync, env: Mapping[str, str]) -> list[str]:
        raise NotImplementedError

    def copy_commit(self) -> list[str]:
        raise NotImplementedError

    def copy_wait(self, pending: int) -> list[str]:
        raise NotImplementedError

    def proxy_fence(self) -> list[str]:
        """Lines of a :class:`~kir.ProxyFence`."""
        raise NotImplementedError

    def barrier_init(self, s: kir.BarrierInit, env: Mapping[str, str]) -> list[str]:
        raise NotImplementedError

    def barrier_arm(self, s: kir.BarrierArm, env: Mapping[str, str]) -> list[str]:
        raise NotImplementedError

    def barrier_wait(self, s: kir.BarrierWait, env: Mapping[str, str]) -> list[str]:
        raise NotImplementedError

    def tensor_copy(
        self, s: kir.TensorCopy, tmap: kir.TensorMap, env: Mapping[str, str]
    ) -> list[str]:
        """Lines of a :class:`~kir.TensorCopy` of map ``tmap`` (checked)."""
        raise NotImplementedError

    def loaded(self, info: ArrayInfo, text: str) -> str:
        """The value of an element whose lvalue is ``text``: a 16-bit element widened
        (to :attr:`widened`), any other as it is."""
        if info.ctype not in STORAGE_C_TYPES:
            return text
        value = f"{TO_FLOAT[info.ctype]}({text})"
        return value if self.widened == "float" else f"(({self.widened}){value})"

    def local(self, name: str) -> str:
        """Check a new local name (Declare, loop variable, vector)."""
        check_identifier(name)
        if name in self.types or name in self.arrays:
            raise ValueError(f"kernel {self.kernel.name}: local {name!r} shadows a kernel name")
        return name

    # -- types -----------------------------------------------------------------

    def array(self, name: str) -> ArrayInfo:
        if name not in self.arrays:
            raise ValueError(f"kernel {self.kernel.name}: {name!r} is not an array")
        return self.arrays[name]

    def infer(self, e: kir.Expr, env: Mapping[str, str]) -> str | None:
        """The C type of ``e``; None when it is open (made of Float literals)."""
        if isinstance(e, kir.Var):
            return env.get(e.name)
        if isinstance(e, kir.Int):
            return "int" if -(2**31) < e.value < 2**31 else "long long"
        if isinstance(e, kir.Float):
            return None
        if isinstance(e, kir.BlockIdx | kir.ThreadIdx):
            return self.index_type
        if isinstance(e, kir.Op):
            if e.op in COMPARISONS or e.op in LOGICAL:
                return "int"
            return join(self.infer(e.left, env), self.infer(e.right, env))
        if isinstance(e, kir.Neg):
            return self.infer(e.operand, env)
        if isinstance(e, kir.Call):
            found = call_type(e.func)
            if found is not None:
                return found
            kinds = [self.infer(a, env) for a in e.args]
            return kinds[0] if len(kinds) == 1 else join(*kinds[:2]) if kinds else None
        if isinstance(e, kir.Select):
            return join(self.infer(e.if_true, env), self.infer(e.if_false, env))
        if isinstance(e, kir.Load):
            ctype = self.array(e.array).ctype
            return self.widened if ctype in STORAGE_C_TYPES else ctype
        if isinstance(e, kir.Lane):
            return env.get(e.vector, "").rstrip("0123456789").replace("longlong", "long long")
        raise TypeError(f"unknown kernel expression {e!r}")

    # -- expressions -----------------------------------------------------------

    def expr(self, e: kir.Expr, env: Mapping[str, str], want: str | None = None) -> str:
        """C text of ``e``; ``want`` is the type of the enclosing computation."""
        if isinstance(e, kir.Var):
            return self.var(e.name, env)
        if isinstance(e, kir.Int):
            return int_literal(e.value)
        if isinstance(e, kir.Float):
            return float_literal(e.value, want if want in FLOATING else "double")
        if isinstance(e, kir.BlockIdx):
            return self.block_index(e.axis)
        if isinstance(e, kir.ThreadIdx):
            return self.thread_index()
        if isinstance(e, kir.Op):
            return self._op(e, env, want)
        if isinstance(e, kir.Neg):
            inner = self.expr(e.operand, env, want)
            return f"-{inner}" if _atomic(e.operand) else f"-({inner})"
        if isinstance(e, kir.Call):
            arg_type = call_type(e.func) or self.infer(e, env) or want
            return f"{e.func}({', '.join(self.expr(a, env, arg_type) for a in e.args)})"
        if isinstance(e, kir.Select):
            branch = self.infer(e, env) or want
            return (
                f"{self._sub(e.cond, env, None)} ? {self._sub(e.if_true, env, branch)}"
                f" : {self._sub(e.if_false, env, branch)}"
            )
        if isinstance(e, kir.Load):
            info = self.array(e.array)
            element = self.element(info, self.expr(e.index, env, self.index_type), "load")
            return self.loaded(info, element)
        if isinstance(e, kir.Lane):
            if e.vector not in env:
                raise ValueError(f"kernel {self.kernel.name}: unknown vector {e.vector!r}")
            return self.lane(e.vector, e.lane)
        raise TypeError(f"unknown kernel expression {e!r}")

    def _sub(self, e: kir.Expr, env: Mapping[str, str], want: str | None) -> str:
        text = self.expr(e, env, want)
        return text if _atomic(e) else f"({text})"

    def _op(self, e: kir.Op, env: Mapping[str, str], want: str | None) -> str:
        if e.op in LOGICAL:
            return f"{self._sub(e.left, env, None)} {e.op} {self._sub(e.right, env, None)}"
        kind = join(self.infer(e.left, env), self.infer(e.right, env))
        if e.op in COMPARISONS:
            kind = kind or "double"
        elif e.op in ARITHMETIC:
            kind = kind or (want if want in FLOATING else "double")
        else:
            raise ValueError(f"unknown operator {e.op!r}")
        if e.op == "^" and kind in FLOATING:
            raise ValueError(f"operator ^ on {kind}")
        if e.op in ("min", "max"):
            left, right = self.expr(e.left, env, kind), self.expr(e.right, env, kind)
            if kind in FLOATING:
                return f"{function_name(e.op, kind)}({left}, {right})"
            return f"ekx_{e.op}_{SUFFIX[kind]}({left}, {right})"
        return f"{self._sub(e.left, env, kind)} {e.op} {self._sub(e.right, env, kind)}"

    # -- statements ------------------------------------------------------------

    def stmts(self, body: Sequence[kir.Stmt], env: Mapping[str, str]) -> list[str]:
        """Lines of a statement list (a Declare is visible to the statements after it)."""
        scope = dict(env)
        lines: list[str] = []
        for s in body:
            lines += self.stmt(s, scope)
        return lines

    def block(self, body: Sequence[kir.Stmt], env: Mapping[str, str]) -> list[str]:
        return ["{", *indent(self.stmts(body, env)), "}"]

    def stmt(self, s: kir.Stmt, env: dict[str, str]) -> list[str]:
        """Lines of one statement; Declare and VectorLoad add their name to ``env``."""
        if isinstance(s, kir.Declare):
            if s.ctype in STORAGE_C_TYPES:
                raise ValueError(f"kernel {self.kernel.name}: {s.name} has a storage type")
            self.local(s.name)
            env[s.name] = s.ctype
            if s.init is None:
                return [self.uninitialised(s)]
            return [f"{s.ctype} {s.name} = {self.expr(s.init, env, s.ctype)};"]
        if isinstance(s, kir.Assign):
            target = self.var(s.name, env)
            return [f"{target} {s.op} {self.expr(s.value, env, env[s.name])};"]
        if isinstance(s, kir.Store):
            info = self.array(s.array)
            if info.readonly:
                raise ValueError(f"kernel {self.kernel.name}: store to read-only {info.name!r}")
            index = self.expr(s.index, env, self.index_type)
            if info.ctype in STORAGE_C_TYPES:
                return [self._narrowing_store(s, info, index, env)]
            value = self.expr(s.value, env, info.ctype)
            if s.op == ATOMIC_ADD:
                if info.space == "thread" or info.ctype not in ("float", "double"):
                    raise ValueError(f"atomic add into {info.space} {info.ctype} {info.name!r}")
                return self.atomic_add(self.element(info, index, "store"), value, info.ctype)
            return [f"{self.element(info, index, 'store')} {s.op} {value};"]
        if isinstance(s, kir.For):
            self.local(s.var)
            if s.step <= 0:
                raise ValueError(f"loop {s.var}: step must be positive")
            it, inner = self.index_type, {**env, s.var: self.index_type}
            head = (
                f"for ({it} {s.var} = {self.expr(s.start, env, it)}; "
                f"{s.var} < {self.expr(s.stop, inner, it)}; {s.var} += {s.step}) {{"
            )
            return [*self.unroll(s.unroll), head, *indent(self.stmts(s.body, inner)), "}"]
        if isinstance(s, kir.If):
            lines = [f"if ({self.expr(s.cond, env)}) {{", *indent(self.stmts(s.body, env)), "}"]
            if s.orelse:
                lines[-1] = "} else {"
                lines += [*indent(self.stmts(s.orelse, env)), "}"]
            return lines
        if isinstance(s, kir.Comment):
            return [f"// {line}" for line in s.text.splitlines() or [""]]
        if isinstance(s, kir.CopyAsync):
            shared, source = self.array(s.shared), self.array(s.array)
            if shared.space != "shared" or source.space != "global":
                raise ValueError(f"cp.async from {source.space} {source.name!r} to {shared.space}")
            if shared.ctype != source.ctype:
                raise ValueError(f"cp.async between {source.ctype} and {shared.ctype}")
            if ELEMENT_BYTES[shared.ctype] * s.width not in (4, 8, 16):
                raise ValueError(f"cp.async of {s.width} {shared.ctype} elements")
            return self.copy_async(s, env)
        if isinstance(s, kir.CopyCommit):
            return self.copy_commit()
        if isinstance(s, kir.ProxyFence):
            return self.proxy_fence()
        if isinstance(s, kir.BarrierInit | kir.BarrierArm | kir.BarrierWait):
            check_mbarrier(self.kernel, s.array)
            if isinstance(s, kir.BarrierInit):
                if s.count < 1:
                    raise ValueError(f"mbarrier.init with {s.count} arrivals")
                return self.barrier_init(s, env)
            if isinstance(s, kir.BarrierArm):
                if s.bytes < 0 or s.bytes >= 2**20:
                    raise ValueError(f"mbarrier.expect_tx of {s.bytes} bytes")
                return self.barrier_arm(s, env)
            return self.barrier_wait(s, env)
        if isinstance(s, kir.TensorCopy):
            return self.tensor_copy(s, check_tensor_copy(self.kernel, s), env)
        if isinstance(s, kir.CopyWait):
            if s.pending < 0:
                raise ValueError(f"cp.async.wait_group {s.pending}")
            return self.copy_wait(s.pending)
        if isinstance(s, kir.VectorLoad):
            self.local(s.name)
            info = self.array(s.array)
            if info.ctype in STORAGE_C_TYPES:
                raise ValueError(f"vector load of 16-bit elements from {info.name!r}")
            vector, element = vector_type(s)
            if element != info.ctype or info.space == "thread":
                raise ValueError(f"vector load of {vector} from {info.space} {info.name!r}")
            lines = self.vector_load(s, info, self.expr(s.index, env, self.index_type))
            env[s.name] = vector
            return lines
        raise TypeError(f"unknown kernel statement {s!r}")

    def _narrowing_store(
        self, s: kir.Store, info: ArrayInfo, index: str, env: Mapping[str, str]
    ) -> str:
        """A store into a 16-bit array: the value computed in float (double in a
        double kernel), rounded to nearest even by the table's helper."""
        value = self.expr(s.value, env, self.widened)
        if s.op != "=":
            old = self.loaded(info, self.element(info, index, "load"))
            value = f"{old} {s.op[0]} ({value})"
        if self.infer(s.value, env) == "double" or self.widened == "double":
            value = f"(float)({value})"
        return f"{self.element(info, index, 'store')} = {FROM_FLOAT[info.ctype]}({value});"
