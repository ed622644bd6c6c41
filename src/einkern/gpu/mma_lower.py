"""Tensor-core kernels: a binary contraction in GEMM form (:mod:`.contraction`)
lowered onto warp-level MMA instructions (:mod:`.mma`).

Kernel shape, for an :class:`MmaConfig`:

* a block computes a ``BM × BN`` tile of the (batch, M, N) output, BM =
  ``warps_m · tiles_m · m`` and BN = ``warps_n · tiles_n · n`` for the
  instruction's m × n; each warp a ``tiles_m × tiles_n`` grid of instruction
  tiles, its accumulators in registers;
* the K dimension is stepped ``k_step`` elements at a time through two shared
  buffers: all threads load the next A (BM × k_step) and B (k_step × BN) tiles
  into registers, coalesced along each operand's contiguous index (through the
  group decomposition, so any index order works), zero-filled past the extents;
  meanwhile each warp loads its fragments of the current tiles from shared
  memory by the instruction's layout formulas and issues the MMAs; then the
  registers go to the other buffer, and one barrier ends the step;
* the epilogue (:mod:`.mma_epilogue`) stores each accumulator element by the
  accumulator layout, or through a shared tile along the output's contiguous
  index (``=``, ``+=``, ``-=``, times the statement's scalars), predicated at the
  edges.

bf16/f16 instructions (``m16n8k16_bf16``...): the tiles are staged as 16-bit
values (:mod:`.mma_staging`: along each operand's own contiguous index, copied 16
bytes per ``cp.async`` where the operand allows, else element by element through
registers), and each warp loads its fragments with ``ldmatrix`` (``.trans`` for a
tile stored with M or N contiguous) into 32-bit words of two packed values; the
accumulators are float32, and the epilogue's store rounds to the output's dtype.

Parameters follow the other kernels' convention (``p_<tensor>`` arrays in
declaration order, ``s_<scalar>`` doubles), so the runtime launches them alike.
"""

from __future__ import annotations

from dataclasses import replace

from ..ir.task import Task
from . import kir
from .contraction import Contraction, NotAContraction, gemm_form
from .device import H100, DeviceLimits
from .mma import SHAPES
from .mma_builder import INPUT_DTYPE, TileBuilder, statement_params
from .mma_config import MmaConfig
from .mma_epilogue import EPILOGUES, shared_epilogue_elements
from .mma_staging import chunk_elements, staging, tile_groups, vector_problems
from .mma_tma import TmaBuilder, tma_problems
from .mma_warpgroup import WarpGroupBuilder, oriented, warpgroup_problems

__all__ = [
    "INPUT_DTYPE",
    "MmaConfig",
    "lower_mma",
    "mma_form",
    "problems",
    "shared_bytes",
    "statement_params",
]


def mma_form(task: Task, config: MmaConfig) -> tuple[Contraction, tuple]:
    """``task``'s GEMM form as the kernel of ``config`` computes it (A and B
    exchanged where a tf32 warpgroup tile needs it: :func:`.mma_warpgroup.oriented`)
    and its pointwise terms; NotAContraction when it has none."""
    c, pointwise = gemm_form(task)
    return oriented(c, config), pointwise


def problems(task: Task, config: MmaConfig) -> list[str]:
    """Why ``config`` cannot compute ``task`` (empty: it can)."""
    found: list[str] = []
    if config.shape not in SHAPES:
        return [f"unknown MMA shape {config.shape!r}"]
    shape = SHAPES[config.shape]
    program = task.program
    statement = task.statement
    dtypes = {program.tensor(t).dtype for t in statement.tensors()}
    wanted = INPUT_DTYPE[shape.input_type]
    if shape.packed == 1 and dtypes != {wanted}:
        found.append(f"{shape.name} needs {wanted} tensors, not {', '.join(sorted(dtypes))}")
    if shape.packed > 1:
        found += _sixteen_bit_problems(task, shape.name, wanted, config)
    if config.split and shape.input_type != "tf32":
        found.append("split (3xTF32) applies to tf32 shapes only")
    if config.k_step % shape.k or config.k_step < shape.k:
        found.append(f"k_step {config.k_step} is not a multiple of the instruction's k={shape.k}")
    if min(config.warps_m, config.warps_n, config.tiles_m, config.tiles_n) < 1:
        found.append("warps and tiles must be positive")
    if config.threads > 1024:
        found.append(f"{config.threads} threads per block")
    if config.copy not in ("registers", "async", "tma"):
        found.append(f"copy {config.copy!r} (registers, async or tma)")
    elif config.copy == "tma" and shape.group == 1:
        found.append("copy 'tma' stages warpgroup MMA tiles only")
    elif config.copy == "registers" and config.stages not in (1, 2):
        found.append(f"stages {config.stages} (1 or 2 when copying through registers)")
    elif config.copy in ("async", "tma") and config.stages not in (2, 3, 4):
        found.append(f"stages {config.stages} (2 to 4 with asynchronous copies)")
    if config.padding < -1:
        found.append("padding must be >= 0, or -1 (automatic)")
    elif shape.packed > 1 and config.padding % 8 and config.padding != -1:
        found.append("16-bit tiles: padding must be a multiple of 8 (ldmatrix rows are 16 bytes)")
    if config.epilogue not in EPILOGUES:
        found.append(f"epilogue {config.epilogue!r} ({' or '.join(EPILOGUES)})")
    try:
        c, pointwise = mma_form(task, config)
    except NotAContraction as error:
        return [*found, f"no GEMM form for tensor cores: {error}"]
    if (shape.packed > 1 or shape.group > 1) and config.copy == "async":
        found += async_problems(c, config)
    if shape.group > 1:
        found += warpgroup_problems(c, config)
    if shape.group > 1 and config.copy == "tma":
        found += tma_problems(c, config)
    return found + pointwise_problems(c, pointwise, shape.packed > 1)


def async_problems(c: Contraction, config: MmaConfig) -> list[str]:
    """Why the 16-bit (or warpgroup tf32) tiles of ``config`` cannot be copied 16
    bytes per ``cp.async`` (empty: they can): each operand along the dimension it
    is staged along."""
    found, width = [], chunk_elements(config)
    for which in ("a", "b"):
        operand, rows, cols = tile_groups(c, which)
        along = cols if staging(c, config, which).along_cols else rows
        found += [
            f"16-byte cp.async of the tiles: {p}" for p in vector_problems(c, operand, along, width)
        ]
    return found


def pointwise_problems(c: Contraction, pointwise: tuple, sixteen_bit: bool) -> list[str]:
    """Why the epilogue cannot add ``pointwise`` terms (a bias) to contraction ``c``:
    it reads them at output coordinates without batch indices, in the
    accumulators' type (not beside 16-bit products)."""
    if not pointwise:
        return []
    found = ["pointwise terms (a bias) beside 16-bit products"] if sixteen_bit else []
    if c.batch:
        found.append(f"pointwise terms (a bias) beside batch indices {', '.join(c.batch)}")
    return found


def _sixteen_bit_problems(task: Task, shape: str, wanted: str, config: MmaConfig) -> list[str]:
    """A bf16/f16 instruction multiplies tensors of its type and accumulates in
    float32, so the output is of that type or float32 (a float64 statement
    computes in float64); the 2-byte elements are staged through registers."""
    found = []
    program, statement = task.program, task.statement
    output_name = statement.output.tensor  # read too by += and -=
    reads = {program.tensor(a.tensor).dtype for a in statement.reads() if a.tensor != output_name}
    output = program.tensor(output_name).dtype
    if reads != {wanted}:
        found.append(f"{shape} needs {wanted} inputs, not {', '.join(sorted(reads))}")
    if output not in (wanted, "float32"):
        found.append(f"{shape} accumulates in float32: its output is {wanted} or float32")
    return found


def lower_mma(
    task: Task,
    config: MmaConfig,
    name: str | None = None,
    late_copies: bool | None = None,
    carried: bool | None = None,
) -> kir.Kernel:
    """The kernel IR of ``task`` on tensor cores (ValueError when it cannot);
    ``late_copies`` overrides where an fp64 tile issues its copies (default: late
    at one block per SM, see :func:`f64_resident`); ``carried`` whether an fp64
    tile carries fragments across the k-step's barrier (default: where the
    registers allow, :func:`f64_carries`)."""
    trouble = problems(task, config)
    if trouble:
        raise ValueError("; ".join(trouble))
    c, pointwise = mma_form(task, config)
    builder: type[TileBuilder] = TileBuilder
    if SHAPES[config.shape].group > 1:
        builder = TmaBuilder if config.copy == "tma" else WarpGroupBuilder
    name = name or f"einkern_s{task.position}"
    if SHAPES[config.shape].input_type != "f64" or config.copy != "async":
        return builder(task, c, config, name, pointwise).kernel()
    resident, late, carry = f64_loop(task, config)
    late = late if late_copies is None else late_copies
    carry = carry if carried is None else carried
    kernel = builder(task, c, config, name, pointwise, late_copies=late, carried=carry).kernel()
    return replace(kernel, min_blocks=resident) if resident > 1 else kernel


def f64_loop(task: Task, config: MmaConfig) -> tuple[int, bool, bool]:
    """How :func:`lower_mma` builds an fp64 cp.async tile's k loop by default:
    (blocks per SM it asks ptxas for, copies late, fragments carried).  The
    residency is :func:`f64_resident` within what :data:`BOUND_REGISTERS` allows;
    one block per SM issues its copies late; fragments are carried where the
    registers allow (:func:`f64_carries`)."""
    most = H100.registers_per_sm // (BOUND_REGISTERS * config.threads)
    resident = min(f64_resident(task, config), most)
    return resident, resident == 1, f64_carries(config, resident)


def f64_pipeline(task: Task, config: MmaConfig) -> str | None:
    """How :func:`lower_mma` builds the k loop of an fp64 cp.async tile, for
    ``--explain`` (None for other tiles): whether fragments are carried across
    the barrier, where the copies go, and each operand's copy width, the
    dimension it is staged along and whether its copies share their k decodes
    (:meth:`~.mma_builder.TileBuilder.shares_k`)."""
    if SHAPES[config.shape].input_type != "f64" or config.copy != "async" or problems(task, config):
        return None
    resident, late, carry = f64_loop(task, config)
    c, _ = mma_form(task, config)
    builder = TileBuilder(task, c, config, "k", carried=carry)
    parts = [
        f"{resident} block(s) per SM",
        "fragments carried across the k-step's barrier"
        if builder.carried
        else "fragments loaded after the barrier (no registers or instruction steps to carry)",
        "copies after a quarter of the MMAs" if late else "copies before the MMAs",
    ]
    for which in ("a", "b"):
        layout = builder.staging[which]
        rows, cols = (c.m, c.k) if which == "a" else (c.k, c.n)
        along = cols if layout.along_cols else rows
        width = layout.width * config.itemsize
        shared = ", each k position decoded once per k-step" if builder.shares_k(which) else ""
        parts.append(f"{which.upper()} staged along {','.join(along)}, {width}-byte copies{shared}")
    return "; ".join(parts)


#: The fewest registers per thread that the launch bounds of :func:`lower_mma`
#: leave an fp64 kernel (ptxas refused a small tile's fp64 MMA under a bound of 56).
BOUND_REGISTERS = 128


#: Registers per thread of the fp64 tiles: ``1.6 ·`` the accumulators' ``+ 24``
#: (ptxas, 96 kernels per tile without launch bounds: the 4×4-instruction tiles
#: 182-254, median 208-232; the 2×4 ones 96-184, median 128).
F64_REGISTER_SLOPE, F64_REGISTER_BASE = 1.6, 24


def f64_registers(config: MmaConfig) -> int:
    """Estimated registers per thread of an fp64 tile (:data:`F64_REGISTER_SLOPE`)."""
    accumulators = 2 * config.tiles_m * config.tiles_n * SHAPES[config.shape].c.count
    return min(255, int(F64_REGISTER_SLOPE * accumulators + F64_REGISTER_BASE))


def f64_carries(config: MmaConfig, resident: int) -> bool:
    """Whether an fp64 tile carries its fragments across the k-step's barrier
    (``TileBuilder.carried``): where the second slot of fragments (two registers
    per fp64 element) fits beside the estimated registers under the launch
    bound of ``resident`` blocks.  The 2×4-instruction tiles at two blocks of 256
    threads (128 registers) spilled with it; the 4×4 ones did not."""
    shape = SHAPES[config.shape]
    fragments = config.tiles_m * shape.a.count + config.tiles_n * shape.b.count
    bound = min(255, H100.registers_per_sm // (resident * config.threads))
    return f64_registers(config) + 2 * fragments <= bound


def f64_resident(task: Task, config: MmaConfig, limits: DeviceLimits = H100) -> int:
    """Blocks of an fp64 tile resident per SM, as the cost model assumes: by
    threads, by the estimated registers (:data:`F64_REGISTER_SLOPE`) and by shared
    memory (1 KiB of it reserved per block).  :func:`lower_mma` asks ptxas for
    that many (``__launch_bounds__``), which caps the registers: a 2×4-tile kernel
    of 256 threads past 128 registers ran one block per SM and up to 1.55× slower
    (H100, LU updates; scripts/gpu_f64_tiles.py ``--unbounded``).  A kernel of
    one block per SM issues its copies late (``TileBuilder.late_copies``)."""
    registers = -(-f64_registers(config) // 8) * 8  # allocated per warp in units of 256
    threads = config.threads
    by_shared = limits.shared_per_sm // (shared_bytes(config, task) + 1024)
    by_registers = limits.registers_per_sm // (registers * threads)
    return max(1, min(limits.max_threads_per_sm // threads, by_registers, by_shared, 32))


def shared_bytes(config: MmaConfig, task: Task | None = None) -> int:
    """Shared memory per block of the kernel of ``config`` for ``task`` (the A and
    B buffers and the epilogue's tile); without ``task``, a bound over the ways
    fp64 and 16-bit tiles may be laid out."""
    bm, bn = config.block_tile()
    c = mma_form(task, config)[0] if task is not None else None
    a, b = staging(c, config, "a"), staging(c, config, "b")
    staged = (
        config.itemsize
        * config.stages
        * (a.elements(bm, config.k_step) + b.elements(config.k_step, bn))
    )
    if config.split and SHAPES[config.shape].group > 1:  # 3xTF32: B's low parts, twice
        staged += 2 * config.itemsize * b.elements(config.k_step, bn)
    if config.epilogue == "shared":  # accumulators: 8 or 4 bytes
        staged += shared_epilogue_elements(config) * config.accumulator_size
    if config.copy == "tma":  # an mbarrier per stage
        staged += 8 * config.stages
    return staged
