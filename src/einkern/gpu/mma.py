"""Warp-level MMA instructions (``mma.sync``) as data: shapes, operand types and
fragment layouts, with a NumPy model of what one instruction computes.

A warp executing ``mma.sync.aligned.mMnNkK`` computes ``D = A·B + C`` for an
M×K matrix A, a K×N matrix B and M×N matrices C and D; each of the 32 lanes
holds a *fragment* of every operand: a few registers, each one element (f64,
tf32, f32) or two packed 16-bit elements (bf16, f16).  Which element of the
matrix a lane's register ``i`` holds is the fragment layout, given by the PTX
ISA ("Matrix Fragments for mma.mMnNkK") as formulas in

* ``group = lane >> 2`` (the lane's group of four) and
* ``quad = lane % 4`` (its place in the group, the ISA's ``threadID_in_group``).

Every layout here is written as such a formula (:class:`Layout`), checked in
tests to cover its matrix exactly once, and checked on the GPU
(``tests/test_gpu_mma.py``) by a probe kernel that loads fragments by the
formula, executes the instruction and stores D by the formula: a wrong formula
gives a wrong product there.  The kernel generator (issue 12) indexes operands
through these layouts; the CPU emulator executes :func:`execute`'s semantics.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from ..semantics import round_bfloat16
from . import kir

WARP = 32

#: (row, column) of element ``i`` of a lane's fragment, from (group, quad, i).
Coordinates = Callable[[int, int, int], tuple[int, int]]


@dataclass(frozen=True)
class Layout:
    """The fragment layout of one operand: ``count`` elements per lane of a
    ``rows``×``cols`` matrix, element ``i`` of lane ``lane`` at ``at(lane, i)``."""

    rows: int
    cols: int
    count: int
    formula: Coordinates

    def at(self, lane: int, i: int) -> tuple[int, int]:
        if not (0 <= lane < WARP and 0 <= i < self.count):
            raise IndexError(f"lane {lane}, element {i} (count {self.count})")
        return self.formula(lane >> 2, lane % 4, i)

    def table(self) -> np.ndarray:
        """``[lane, i] -> (row, col)`` as an int array of shape (32, count, 2)."""
        return np.array(
            [[self.at(lane, i) for i in range(self.count)] for lane in range(WARP)],
            dtype=np.int64,
        )

    def gather(self, matrix: np.ndarray) -> np.ndarray:
        """Every lane's fragment of ``matrix``: shape (32, count)."""
        t = self.table()
        return matrix[t[..., 0], t[..., 1]]

    def c_array(self, name: str, qualifier: str = "static") -> str:
        """The table as a C definition ``qualifier const short name[32][count][2]``
        (row, column of each lane's registers), for the emulator and probe kernels."""
        rows = ", ".join(
            "{" + ", ".join(f"{{{r}, {c}}}" for r, c in lane) + "}"
            for lane in self.table().tolist()
        )
        return f"{qualifier} const short {name}[32][{self.count}][2] = {{{rows}}};"

    def scatter(self, fragments: np.ndarray, dtype=np.float64) -> np.ndarray:
        """The matrix whose fragments are ``fragments`` (shape (32, count))."""
        t = self.table()
        matrix = np.zeros((self.rows, self.cols), dtype=dtype)
        matrix[t[..., 0], t[..., 1]] = fragments
        return matrix


@dataclass(frozen=True)
class MmaShape:
    """One ``mma.sync`` instruction: shape, input/accumulator types, layouts."""

    name: str  # e.g. "m16n8k4_f64"
    m: int
    n: int
    k: int
    input_type: str  # PTX type of A and B: f64, tf32, bf16, f16
    accumulator: str  # PTX type of C and D: f64 or f32
    a: Layout
    b: Layout
    c: Layout
    min_arch: int  # the first sm_XY that has it
    #: warps that issue one instruction together: 1 (``mma.sync``) or 4 (Hopper's
    #: ``wgmma``, a warpgroup; m, n are then one warp's share of the accumulator
    #: tile, laid out by ``c``, and a, b are unused: the operands come from shared
    #: memory, :class:`~einkern.gpu.kir.WarpGroupMma`)
    group: int = 1

    @property
    def ptx(self) -> str:
        if self.group > 1:
            inp = self.input_type
            return f"wgmma.mma_async.sync.aligned.m64nNk{self.k}.f32.{inp}.{inp}"
        shape = f"m{self.m}n{self.n}k{self.k}"
        acc, inp = self.accumulator, self.input_type
        return f"mma.sync.aligned.{shape}.row.col.{acc}.{inp}.{inp}.{acc}"

    @property
    def packed(self) -> int:
        """Input elements per 32-bit register (2 for bf16/f16, else 1)."""
        return 2 if self.input_type in ("bf16", "f16") else 1

    @property
    def flops(self) -> int:
        return 2 * self.m * self.n * self.k


def _accumulator_16x8(group: int, quad: int, i: int) -> tuple[int, int]:
    return group + 8 * (i >> 1), 2 * quad + (i & 1)


def _accumulator_8x8(group: int, quad: int, i: int) -> tuple[int, int]:
    return group, 2 * quad + i


C16x8 = Layout(16, 8, 4, _accumulator_16x8)

SHAPES: dict[str, MmaShape] = {}


def _add(shape: MmaShape) -> None:
    if shape.name in SHAPES:
        raise ValueError(f"duplicate MMA shape {shape.name}")
    SHAPES[shape.name] = shape


# fp64 (DMMA).  m8n8k4 since sm_80; the m16n8k* shapes are new in sm_90.
_add(
    MmaShape(
        "m8n8k4_f64", 8, 8, 4, "f64", "f64",
        a=Layout(8, 4, 1, lambda g, q, i: (g, q)),
        b=Layout(4, 8, 1, lambda g, q, i: (q, g)),
        c=Layout(8, 8, 2, _accumulator_8x8),
        min_arch=80,
    )
)  # fmt: skip
_add(
    MmaShape(
        "m16n8k4_f64", 16, 8, 4, "f64", "f64",
        a=Layout(16, 4, 2, lambda g, q, i: (g + 8 * i, q)),
        b=Layout(4, 8, 1, lambda g, q, i: (q, g)),
        c=C16x8,
        min_arch=90,
    )
)  # fmt: skip
_add(
    MmaShape(
        "m16n8k8_f64", 16, 8, 8, "f64", "f64",
        a=Layout(16, 8, 4, lambda g, q, i: (g + 8 * (i & 1), q + 4 * (i >> 1))),
        b=Layout(8, 8, 2, lambda g, q, i: (q + 4 * i, g)),
        c=C16x8,
        min_arch=90,
    )
)  # fmt: skip
_add(
    MmaShape(
        "m16n8k16_f64", 16, 8, 16, "f64", "f64",
        a=Layout(16, 16, 8, lambda g, q, i: (g + 8 * (i & 1), q + 4 * (i >> 1))),
        b=Layout(16, 8, 4, lambda g, q, i: (q + 4 * i, g)),
        c=C16x8,
        min_arch=90,
    )
)  # fmt: skip
# tf32 inputs, fp32 accumulation (sm_80).
_add(
    MmaShape(
        "m16n8k4_tf32", 16, 8, 4, "tf32", "f32",
        a=Layout(16, 4, 2, lambda g, q, i: (g + 8 * i, q)),
        b=Layout(4, 8, 1, lambda g, q, i: (q, g)),
        c=C16x8,
        min_arch=80,
    )
)  # fmt: skip
_add(
    MmaShape(
        "m16n8k8_tf32", 16, 8, 8, "tf32", "f32",
        a=Layout(16, 8, 4, lambda g, q, i: (g + 8 * (i & 1), q + 4 * (i >> 1))),
        b=Layout(8, 8, 2, lambda g, q, i: (q + 4 * i, g)),
        c=C16x8,
        min_arch=80,
    )
)  # fmt: skip
# bf16 / f16 inputs, two per register, fp32 accumulation (sm_80).
for _type in ("bf16", "f16"):
    _add(
        MmaShape(
            f"m16n8k8_{_type}", 16, 8, 8, _type, "f32",
            a=Layout(16, 8, 4, lambda g, q, i: (g + 8 * (i >> 1), 2 * q + (i & 1))),
            b=Layout(8, 8, 2, lambda g, q, i: (2 * q + i, g)),
            c=C16x8,
            min_arch=80,
        )
    )  # fmt: skip
    _add(
        MmaShape(
            f"m16n8k16_{_type}", 16, 8, 16, _type, "f32",
            a=Layout(
                16, 16, 8,
                lambda g, q, i: (g + 8 * ((i >> 1) & 1), 2 * q + (i & 1) + 8 * (i >> 2)),
            ),
            b=Layout(16, 8, 4, lambda g, q, i: (2 * q + (i & 1) + 8 * (i >> 1), g)),
            c=C16x8,
            min_arch=80,
        )
    )  # fmt: skip
    # Hopper's warpgroup MMA (sm_90a): each warp's share of the 64 × N accumulator
    # tile is 16 rows of m16n8 tiles; A and B come from shared memory.
    _add(
        MmaShape(
            f"wgmma_k16_{_type}", 16, 8, 16, _type, "f32",
            a=SHAPES[f"m16n8k16_{_type}"].a,
            b=SHAPES[f"m16n8k16_{_type}"].b,
            c=C16x8,
            min_arch=90,
            group=4,
        )
    )  # fmt: skip


# tf32 on the warpgroup MMA (sm_90a): A from shared memory or (the m16n8k8 tf32
# layout of each warp's 16 rows) from registers; B from shared memory, both K-major
# (the instruction cannot transpose 32-bit operands).
_add(
    MmaShape(
        "wgmma_k8_tf32", 16, 8, 8, "tf32", "f32",
        a=SHAPES["m16n8k8_tf32"].a,
        b=SHAPES["m16n8k8_tf32"].b,
        c=C16x8,
        min_arch=90,
        group=4,
    )
)  # fmt: skip


def warp_shapes() -> list[str]:
    """Names of the ``mma.sync`` shapes (one warp per instruction), sorted."""
    return sorted(name for name, shape in SHAPES.items() if shape.group == 1)


# ---- what one instruction computes ----------------------------------------------


def round_tf32(x: np.ndarray) -> np.ndarray:
    """fp32 values rounded to tf32 (10 mantissa bits) to nearest, ties away from
    zero: PTX's ``cvt.rna.tf32.f32``, the conversion einkern's kernels use."""
    bits = np.asarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    finite = np.isfinite(np.asarray(x, dtype=np.float32))
    rounded = ((bits + 0x1000) & 0xFFFFE000).astype(np.uint32)
    return np.where(finite, rounded.view(np.float32), np.asarray(x, dtype=np.float32))


def round_bf16(x: np.ndarray) -> np.ndarray:
    """fp32 values rounded to bf16 (8 mantissa bits) to nearest even: the table of
    meaning's :func:`einkern.semantics.round_bfloat16`."""
    return round_bfloat16(x)


def input_values(shape: MmaShape, x: np.ndarray) -> np.ndarray:
    """The values the instruction multiplies when given ``x`` (converted as
    einkern's kernels convert them), as float64."""
    if shape.input_type == "f64":
        return np.asarray(x, dtype=np.float64)
    if shape.input_type == "tf32":
        return round_tf32(x).astype(np.float64)
    if shape.input_type == "bf16":
        return round_bf16(x).astype(np.float64)
    return np.asarray(x, dtype=np.float32).astype(np.float16).astype(np.float64)


def execute(shape: MmaShape, a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
    """One warp's ``mma.sync``: fragments in (shape (32, count) each: A, B as the
    values in the registers, C), D's fragments out.  Products are exact and the
    sum is rounded once to the accumulator type (the hardware's order of
    additions is not specified, so agreement is to a few units in the last place)."""
    matrix_a = shape.a.scatter(input_values(shape, a))
    matrix_b = shape.b.scatter(input_values(shape, b))
    matrix_c = shape.c.scatter(np.asarray(c, dtype=np.float64))
    d = matrix_a @ matrix_b + matrix_c
    if shape.accumulator == "f32":
        d = d.astype(np.float32).astype(np.float64)
    return shape.c.gather(d)


# ---- the instruction as CUDA text ---------------------------------------------------

#: Inline-assembly constraint of a register holding each PTX type.
CONSTRAINT = {"f64": "d", "f32": "f", "tf32": "r", "bf16": "r", "f16": "r"}


def registers(shape: MmaShape) -> tuple[int, int, int]:
    """Registers per lane for A, B and C/D."""
    return shape.a.count // shape.packed, shape.b.count // shape.packed, shape.c.count


def asm_statement(
    shape: MmaShape,
    d: list[str],
    a: list[str],
    b: list[str],
    c: list[str],
) -> str:
    """The ``asm volatile`` statement of one instruction: ``d`` (outputs), ``a``,
    ``b`` (registers as the instruction takes them: doubles, floats, or 32-bit
    words holding tf32 or two packed 16-bit values) and ``c`` are C lvalues."""
    na, nb, nc = registers(shape)
    if (len(a), len(b), len(c), len(d)) != (na, nb, nc, nc):
        raise ValueError(f"{shape.name} takes {na}, {nb}, {nc} and {nc} registers")
    number = iter(range(len(d) + len(a) + len(b) + len(c)))

    def group(names: list[str]) -> str:
        return "{" + ", ".join(f"%{next(number)}" for _ in names) + "}"

    acc = CONSTRAINT[shape.accumulator]
    inp = CONSTRAINT[shape.input_type]
    if d == c:  # accumulate in place: read-write operands, C names D's registers
        d_text = group(d)
        operands = f"{d_text}, {group(a)}, {group(b)}, {d_text}"
        outs = ", ".join(f'"+{acc}"({x})' for x in d)
        ins = ", ".join(f'"{inp}"({x})' for x in a + b)
    else:
        operands = f"{group(d)}, {group(a)}, {group(b)}, {group(c)}"
        outs = ", ".join(f'"={acc}"({x})' for x in d)
        ins = ", ".join([f'"{inp}"({x})' for x in a + b] + [f'"{acc}"({x})' for x in c])
    return f'asm volatile("{shape.ptx} {operands};" : {outs} : {ins});'


# ---- fragment coordinates as kernel-IR expressions ---------------------------------


@dataclass(frozen=True)
class _Symbolic:
    """A kernel-IR expression the layout formulas can add to and scale by ints
    (they combine the lane's group and quad only with +, and * by constants)."""

    expr: kir.Expr

    def __add__(self, other: int | _Symbolic) -> _Symbolic:
        right = other.expr if isinstance(other, _Symbolic) else kir.Int(other)
        if isinstance(right, kir.Int) and right.value == 0:
            return self
        return _Symbolic(kir.Op("+", self.expr, right))

    __radd__ = __add__

    def __mul__(self, other: int) -> _Symbolic:
        if other == 1:
            return self
        return _Symbolic(kir.Op("*", kir.Int(other), self.expr))

    __rmul__ = __mul__


def coordinates(
    layout: Layout, group: kir.Expr, quad: kir.Expr, i: int
) -> tuple[kir.Expr, kir.Expr]:
    """(row, column) of register ``i`` of a lane whose group and quad are the
    kernel-IR expressions ``group`` and ``quad``: the layout's formula, as code."""
    row, col = layout.formula(_Symbolic(group), _Symbolic(quad), i)  # type: ignore[arg-type]

    def expr(x: int | _Symbolic) -> kir.Expr:
        return x.expr if isinstance(x, _Symbolic) else kir.Int(x)

    return expr(row), expr(col)
