"""Statements that are a GEMM in memory, run by the system BLAS.

A binary contraction (:func:`einkern.ir.rewrite_ttgt.binary_parts`) whose index
groups (batch, M, N, K) each fuse into one strided dimension of every tensor
that holds them is a matrix product, or a loop of them over the batch indices,
in BLAS's column-major terms: each of A (M × K), B (K × N) and C (M × N) has
one group at unit stride and the other at a leading dimension at least its
rows (or is transposed), and C is stored with M at unit stride (otherwise the
product is computed as ``Cᵀ = Bᵀ Aᵀ``).  Index-free factors (constants,
scalars, a sign) become ``alpha``; ``=`` is ``beta = 0`` (BLAS does not read C
then, so whatever it held, NaN included, is overwritten), ``+=`` and ``-=``
are ``beta = 1``.

The routines are SciPy's (``scipy.linalg.cython_blas``: the OpenBLAS that SciPy
ships, LP64 integers), whose addresses the loaded library receives through
``einkern_set_blas``: the generated C needs no BLAS headers or link flags.
float32 statements summing more than :data:`FLOAT32_TERMS` terms keep the
generated loops, whose blocked sums bound the error.  :func:`gemm_of` says why a
statement is not a GEMM.
"""

from __future__ import annotations

import ctypes
import functools
import math
from dataclasses import dataclass

from ...errors import BackendError
from ...gpu.ctext import mangle
from ...ir.nodes import Const, Expr, Problem, ScalarRef, Statement
from ...ir.rewrite import RewriteError
from ...ir.rewrite_ttgt import binary_parts, groups_of

#: Whether the CPU backend's default schedules call BLAS (the ``blas`` rule); a
#: schedule or a tuning record that says ``blas`` calls it whatever this says.
BLAS_ON_CPU = True
#: The routines by dtype.
ROUTINES = {"float64": "dgemm", "float32": "sgemm"}
#: float32 sums of more terms than this stay on the generated loops (blocked sums).
#: OpenBLAS sums a K panel plainly and adds the panels into C (two-level summation):
#: SciPy's sgemm against a float64 product, 8 x K x 8, K = 2^14 ... 2^20, normal and
#: uniform(0.5, 1.5) data: 2e-7 ... 1.7e-6 relative error (float32's tolerance: 1e-5).
FLOAT32_TERMS = 1 << 20
#: BLAS's LP64 integers.
INT_LIMIT = (1 << 31) - 1
#: Seconds to keep calling a function before timing it: OpenBLAS's idle threads
#: (NumPy's and SciPy's alike) spin for about 0.12 s after its last call, and an
#: OpenMP kernel timed in that window shares its cores with them (measured on the
#: 2-core development machine: up to 8 ms a call instead of 0.15).  The CPU bench
#: (:mod:`einkern.bench.device`) and the CPU tuner (where BLAS variants alternate
#: with loops) wait this long.
SETTLE_S = 0.15
#: The entry point a library with BLAS calls exports to receive the routines.
SETTER = "einkern_set_blas"


@dataclass(frozen=True)
class Gemm:
    """One BLAS ``?gemm`` call per batch point: ``C = alpha·op(A)·op(B) + beta·C``
    in column-major terms; ``a``, ``b``, ``c`` are tensor names (``a`` may be the
    statement's second operand when the product is computed transposed)."""

    routine: str
    transa: str
    transb: str
    m: int
    n: int
    k: int
    a: str
    b: str
    c: str
    lda: int
    ldb: int
    ldc: int
    #: per batch index: (name, extent, stride in a, in b, in c)
    batch: tuple[tuple[str, int, int, int, int], ...]
    #: index-free factors of alpha, as C text (constants and scalars)
    alpha: tuple[str, ...]
    beta: int

    @property
    def calls(self) -> int:
        """BLAS calls per run (one per batch point)."""
        return math.prod(extent for _, extent, *_ in self.batch)

    @property
    def flops(self) -> int:
        """Floating-point operations of all the calls."""
        return 2 * self.calls * self.m * self.n * self.k

    def describe(self) -> str:
        """One line for ``--explain``."""
        batch = ""
        if self.batch:
            batch = f", {self.calls} calls over {', '.join(name for name, *_ in self.batch)}"
        return (
            f"{self.routine}({self.transa}{self.transb}, m={self.m}, n={self.n}, k={self.k},"
            f" A={self.a}, B={self.b}, C={self.c}, beta={self.beta}{batch})"
        )


def _fused(
    problem: Problem, statement: Statement, tensor: str, indices: list[str], group: list[str]
) -> tuple[tuple[str, ...], int] | None:
    """(order, stride) of ``group`` in a tensor whose access has ``indices``: the
    group's indices of extent above 1 by increasing stride, and the smallest
    stride; None when they do not fuse into one strided dimension."""
    strides = dict(zip(indices, problem.strides(tensor), strict=True))
    sized = [(strides[i], problem.index_size(statement, i), i) for i in group]
    sized = sorted(s for s in sized if s[1] > 1)
    for (stride, extent, _), (next_stride, _, _) in zip(sized, sized[1:], strict=False):
        if next_stride != stride * extent:
            return None
    return tuple(i for _, _, i in sized), (sized[0][0] if sized else 1)


def _matrix(rows: int, cols: int, row_stride: int, col_stride: int) -> tuple[str, int] | None:
    """BLAS's (trans, ld) for a rows × cols operand at these strides, or None."""
    if rows == 1 or row_stride == 1:
        ld = col_stride if cols > 1 else max(rows, 1)
        if ld >= max(rows, 1):
            return "N", ld
    if cols == 1 or col_stride == 1:
        ld = row_stride if rows > 1 else max(cols, 1)
        if ld >= max(cols, 1):
            return "T", ld
    return None


def _alpha(factors: list[Expr], sign: int) -> tuple[str, ...] | str:
    """C text of the index-free factors (a reason when one is not a constant or
    a scalar)."""
    texts = ["-1.0"] if sign < 0 else []
    for factor in factors:
        if isinstance(factor, Const):
            texts.append(repr(float(factor.value)))
        elif isinstance(factor, ScalarRef):
            texts.append(mangle("s", factor.name))
        else:
            return f"the factor {factor} is not a constant or a scalar"
    return tuple(texts)


def gemm_of(problem: Problem, statement: Statement) -> Gemm | str:
    """The BLAS call computing ``statement``, or the reason there is none."""
    program = problem.program
    try:
        sign, factors, node, first, second = binary_parts(statement)
        groups = groups_of(program, statement)
    except RewriteError as error:
        return error.message
    out = statement.output
    if statement.op not in ("=", "+=", "-="):
        return f"the operator {statement.op} has no BLAS form"
    dtypes = {program.tensor(t).dtype for t in (out.tensor, first.tensor, second.tensor)}
    if len(dtypes) != 1 or next(iter(dtypes)) not in ROUTINES:
        return "BLAS needs one dtype, float32 or float64, for the three tensors"
    dtype = next(iter(dtypes))
    if program.storage(out.tensor) in {
        program.storage(first.tensor),
        program.storage(second.tensor),
    }:
        return "the output is also an operand"
    size = {g: math.prod(problem.index_size(statement, i) for i in groups[g]) for g in groups}
    if dtype == "float32" and size["K"] > FLOAT32_TERMS:
        return f"a float32 sum of {size['K']} terms (more than {FLOAT32_TERMS}) keeps blocked sums"
    alpha = _alpha(factors, -sign if statement.op == "-=" else sign)
    if isinstance(alpha, str):
        return alpha
    fused = {}
    for access, held in ((first, ("M", "K")), (second, ("K", "N")), (out, ("M", "N"))):
        for group in held:
            found = _fused(problem, statement, access.tensor, list(access.indices), groups[group])
            if found is None:
                return f"the {group} indices of {access.tensor} are not one strided dimension"
            fused[access.tensor, group] = found
    for group, (x, y) in (("M", (first, out)), ("N", (second, out)), ("K", (first, second))):
        if fused[x.tensor, group][0] != fused[y.tensor, group][0]:
            return f"{x.tensor} and {y.tensor} hold the {group} indices in different orders"
    stride = {key: value[1] for key, value in fused.items()}
    a, b, m, n = first, second, "M", "N"
    if not (size["M"] == 1 or stride[out.tensor, "M"] == 1):  # compute Cᵀ = Bᵀ Aᵀ
        a, b, m, n = second, first, "N", "M"
    c = _matrix(size[m], size[n], stride[out.tensor, m], stride[out.tensor, n])
    op_a = _matrix(size[m], size["K"], stride[a.tensor, m], stride[a.tensor, "K"])
    op_b = _matrix(size["K"], size[n], stride[b.tensor, "K"], stride[b.tensor, n])
    if c is None or c[0] != "N":
        return f"{out.tensor} has neither output group at unit stride"
    if op_a is None or op_b is None:
        tensor = a.tensor if op_a is None else b.tensor
        return f"{tensor} has neither of its groups at unit stride"
    if max(size[m], size[n], size["K"], c[1], op_a[1], op_b[1]) > INT_LIMIT:
        return "an extent or leading dimension beyond BLAS's 32-bit integers"
    batch: list[tuple[str, int, int, int, int]] = []
    for index in groups["batch"]:
        sa, sb, sc = (
            dict(zip(t.indices, problem.strides(t.tensor), strict=True))[index] for t in (a, b, out)
        )
        batch.append((index, problem.index_size(statement, index), sa, sb, sc))
    return Gemm(
        ROUTINES[dtype],
        op_a[0],
        op_b[0],
        size[m],
        size[n],
        size["K"],
        a.tensor,
        b.tensor,
        out.tensor,
        op_a[1],
        op_b[1],
        c[1],
        tuple(batch),
        alpha,
        0 if statement.op == "=" else 1,
    )


def header_lines() -> list[str]:
    """The routine pointers and their setter (a translation unit with BLAS calls)."""
    lines = []
    for routine, ctype in (("dgemm", "double"), ("sgemm", "float")):
        p = f"{ctype} *"
        lines.append(
            f"typedef void (*ek_{routine}_t)(char *, char *, int *, int *, int *, {p}, {p}, int *,"
            f" {p}, int *, {p}, {p}, int *);"
        )
        lines.append(f"static ek_{routine}_t ek_{routine};")
    lines += [
        f"void {SETTER}(void *dgemm, void *sgemm)",
        "{",
        "    ek_dgemm = (ek_dgemm_t)dgemm;",
        "    ek_sgemm = (ek_sgemm_t)sgemm;",
        "}",
    ]
    return lines


def call_lines(gemm: Gemm, ctype: str) -> list[str]:
    """The body of a statement function that makes ``gemm``'s calls (tensor
    pointers ``t_<name>``, scalars ``s_<name>`` declared before)."""
    alpha = " * ".join(gemm.alpha) or "1.0"
    lines = [
        f"char ta = '{gemm.transa}', tb = '{gemm.transb}';",
        f"int m = {gemm.m}, n = {gemm.n}, k = {gemm.k};",
        f"int lda = {gemm.lda}, ldb = {gemm.ldb}, ldc = {gemm.ldc};",
        f"{ctype} alpha = ({ctype})({alpha}), beta = {gemm.beta};",
    ]
    indent = ""
    for name, extent, *_ in gemm.batch:
        loop = mangle("i", name)
        lines.append(f"{indent}for (int64_t {loop} = 0; {loop} < {extent}; ++{loop}) {{")
        indent += "    "
    offsets = []
    for which in range(3):
        terms = [f"{mangle('i', name)} * {strides[which]}" for name, _, *strides in gemm.batch]
        offsets.append(" + ".join(terms) or "0")
    a, b, c = (mangle("t", t) for t in (gemm.a, gemm.b, gemm.c))
    lines.append(
        f"{indent}ek_{gemm.routine}(&ta, &tb, &m, &n, &k, &alpha, ({ctype} *)({a} + {offsets[0]}),"
        f" &lda, ({ctype} *)({b} + {offsets[1]}), &ldb, &beta, {c} + {offsets[2]}, &ldc);"
    )
    for depth in range(len(gemm.batch) - 1, -1, -1):
        lines.append("    " * depth + "}")
    return lines


def _capsule_address(name: str) -> int:
    """The address of SciPy's BLAS routine ``name``."""
    from scipy.linalg import cython_blas

    capsule = cython_blas.__pyx_capi__[name]
    get_name = ctypes.pythonapi.PyCapsule_GetName
    get_name.restype = ctypes.c_char_p
    get_name.argtypes = [ctypes.py_object]
    get_pointer = ctypes.pythonapi.PyCapsule_GetPointer
    get_pointer.restype = ctypes.c_void_p
    get_pointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
    address = get_pointer(capsule, get_name(capsule))
    if not address:
        raise ValueError(f"SciPy's {name} has no address")
    return int(address)


@functools.cache
def routine_addresses() -> tuple[int, int] | str:
    """(dgemm, sgemm) addresses of SciPy's BLAS, or why they cannot be had."""
    try:
        return _capsule_address("dgemm"), _capsule_address("sgemm")
    except (ImportError, KeyError, AttributeError, ValueError) as error:
        return f"SciPy's BLAS is not usable: {error}"


def blas_available() -> bool:
    """Whether the BLAS routines can be handed to a library."""
    return not isinstance(routine_addresses(), str)


def hand_routines(library: ctypes.CDLL) -> None:
    """Give a loaded library that calls BLAS its routines (nothing when it calls none)."""
    setter = getattr(library, SETTER, None)
    if setter is None:
        return
    addresses = routine_addresses()
    if isinstance(addresses, str):
        raise BackendError(
            f"the compiled program calls BLAS, but {addresses}",
            hint="reinstall SciPy, or compile with a schedule without BLAS",
        )
    setter.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
    setter.restype = None
    setter(*addresses)
