"""The cost model of tensor-core kernels (strategy ``"mma"``), in the terms of
:mod:`einkern.gpu.model` so that the decision compares them with the SIMT
mappings on one scale.

* **arithmetic**: the busiest SM's blocks, each ``BM·BN·K`` multiply-adds over
  its padded tile, at the rate one SM reaches with this kernel.  That rate is
  measured, not the instruction's peak: the register-prefetched one-stage kernel
  with 128×128 tiles ran DGEMM 4096 at 38.1 TFLOP/s on an H100 (the fp64
  ``mma.sync`` m16n8k4 instruction itself: 65–66), i.e. ``KERNEL_RATE`` over the
  132 SMs.  Smaller tiles load more shared memory per multiply-add; their rate is
  scaled by ``ai / (ai + TILE_OVERHEAD)`` of the tile's intensity
  ``ai = BM·BN / (BM + BN)``, normalised to 1 at 128×128 (an estimate: the 64×128
  tile's 29.2 TFLOP/s on DGEMM 1024 ran one block per SM, where the tile count,
  not the rate, decides);
* **dram**: the tensors read once and the output written once (read too for an
  update), the output's stores at ``STORE_EFFICIENCY`` of the bandwidth: the
  accumulator layout stores two adjacent elements per lane, rows apart (a
  memory-bound 6-index contraction stored at about 1.2 TB/s of 3.0); the output's
  bytes count once per sector its block tiles touch
  (:func:`~.contraction.output_sector_efficiency`: 4× where the tile's M and N
  groups each step the output by more than a sector);
* **l2**: A read once per N tile and B once per M tile.

The SIMT model's predictions are off its kernels' times by a factor per type:
on DGEMM 2048 and 4096 it predicts 0.757× and 0.756× the measured times (0.847
ms against 1.12, 6.73 against 8.88; H100), on SGEMM 4096 1.09× (3.078 against
2.83).  The decision compares the two families on one scale, so the
tensor-core times, built from measured rates, are multiplied by that ratio
(``SIMT_MODEL_SCALE``).

docs/tensor_cores.md has the measurements.  :func:`einkern.gpu.model.cost_terms`
calls :func:`mma_terms` for tensor-core mappings.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np

from ..ir.task import Task
from .contraction import (
    Contraction,
    NotAContraction,
    gemm_form,
    output_offsets,
    output_sector_efficiency,
)
from .device import H100, DeviceLimits
from .mma import SHAPES, WARP
from .mma_config import MmaConfig
from .mma_lower import async_problems, f64_resident, mma_form, pointwise_problems
from .mma_staging import sector_efficiency
from .mma_tma import tma_problems
from .mma_warpgroup import oriented, warpgroup_problems
from .terms import L2_OVER_DRAM, Terms

#: Whole-device multiply-add rate (flop/s, FMA = 2) of the generated kernel with
#: 128×128 tiles, per input type, measured on an H100 (132 SMs): DGEMM 4096 at
#: 38.1 TFLOP/s (the instruction: 65–66), SGEMM 4096 under tf32 at 69.5 (the
#: instruction: 309; cuBLAS 413: the kernel is bound by its shared-memory loads).
KERNEL_RATE = {"f64": 38.1e12, "tf32": 69.5e12}
#: The rate of the cp.async pipelines over the register-prefetched kernel of the same
#: block tile: DGEMM 4096 on an H100, 128×128 with 8 warps and 3 stages 47.3 against
#: 38.1 TFLOP/s (1.24); the 128×64, 64×64 and 64×128 tiles measured 1.30, 1.29 and
#: 1.16 over the tile-scaled register rate (docs/tensor_cores.md).  Measured for f64
#: only: tf32 keeps the register kernels.
ASYNC_GAIN = 1.24
#: bf16/f16 kernels copying through registers (m16n8k16, 128×128 tiles, element
#: by element: the operands whose contiguous index cannot be copied 16 bytes at a
#: time): GEMM 4096 and 8192 at 22 TFLOP/s on an H100, slower than the fp32 SIMT
#: kernels (about 48), so the decision keeps such programs on the SIMT units.
HALF_RATE = 22.0e12
KERNEL_RATE.update({"bf16": HALF_RATE, "f16": HALF_RATE})
#: bf16/f16 kernels with 16-bit tiles copied 16 bytes per cp.async and fragments
#: by ldmatrix, 128×128 tiles, k-step 64, 3 stages: GEMM 8192 at 301 TFLOP/s on an
#: H100 (128×256: 354; torch 864; the instruction 620; docs/tensor_cores.md).
HALF_ASYNC_RATE = 301e12
#: The warpgroup-MMA kernels (``wgmma``, 4 stages) per block tile: GEMM 8192
#: bf16 on an H100 (scripts/gpu_half_tiles.py; torch 874 in the same run).
WARPGROUP_RATES = {(128, 256): 641e12, (256, 128): 613e12, (128, 128): 458e12, (64, 128): 422e12}
#: TMA staging (``copy == "tma"``, :mod:`einkern.gpu.mma_tma`) over cp.async, the
#: same warpgroup kernel otherwise: the median of 11 same-run pairs on an H100
#: (scripts/gpu_tma.py, twenty-first session: GEMM 8192 1.08, 2048 1.05, column
#: 4096 1.08, abkl,klcd 1.13, batched 1.07, five generated GEMMs 0.89-1.04;
#: docs/tensor_cores.md "TMA staging").  The hand-written probe reached 1.20.
TMA_GAIN = 1.04
#: tf32 warpgroup tiles (``wgmma_k8_tf32``, cp.async) over the bf16 rate of the
#: same block tile (the instruction's tf32 peak is half its bf16 one), and TMA
#: over cp.async for them (in place of :data:`TMA_GAIN`): medians of SGEMM 8192
#: row-major (A from registers) and with B transposed (both K-major), 128×256,
#: 256×128 and 128×128 tiles, on an H100 (scripts/gpu_tf32.py, twenty-second
#: session: cp.async 0.39-0.53 of the bf16 rate, TMA 0.86-1.36 over cp.async).
TF32_WARPGROUP_SCALE = 0.41
TF32_TMA_GAIN = 1.2
#: 3xTF32 warpgroup tiles over a third of the tf32 rate of the same tile: SGEMM
#: 8192 row-major on an H100, TMA (scripts/gpu_3xtf32.py, twenty-third session:
#: 128×128 76.6 TFLOP/s, 1.02 of a third; 64×128 41.0, 0.59: one warpgroup per
#: block stores B's low parts and waits for its MMAs alone).
SPLIT_WARPGROUP_EFFICIENCY = {(128, 128): 1.0, (64, 128): 0.59}
MEASURED_SMS = 132
TILE_OVERHEAD = 16.0
#: Share of the DRAM bandwidth the epilogue's stores reach, through registers
#: or through shared memory (``MmaConfig.epilogue``): the shared-memory epilogue
#: was estimated at 0.9 until measured, and ran no faster (H100, twenty-ninth
#: session: 165 pairs of fp64 tiles that differ in the epilogue alone, 54 drawn
#: contractions of seeds 43 and 2, direct over shared 0.997 on geometric mean,
#: 0.63-1.46 per pair).
STORE_EFFICIENCY = 0.4
#: The SIMT model's predicted over measured time, per tensor-core input type (the
#: SIMT kernels it is compared with: fp64 for f64, fp32 for tf32).
SIMT_MODEL_SCALE = {"f64": 0.76, "tf32": 1.09, "bf16": 1.09, "f16": 1.09}  # 16-bit: fp32 SIMT


def tile_rate(config: MmaConfig) -> float:
    """Share of the 128×128 tile's per-SM rate that this block tile reaches."""
    bm, bn = config.block_tile()
    ai = bm * bn / (bm + bn)
    return (ai / (ai + TILE_OVERHEAD)) / (64 / (64 + TILE_OVERHEAD))


#: The smallest tile of :data:`WARPGROUP_RATES` (other tiles scale from it).
WARPGROUP_BASE = MmaConfig("wgmma_k16_bf16", 4, 1, 1, 16, 64, stages=4, copy="async")


def fitted_efficiency(config: MmaConfig) -> float:
    """The fitted rate of ``config``'s tile (:data:`F64_TILE_EFFICIENCY`, whatever
    its block order and epilogue: see :data:`STORE_EFFICIENCY`), 0 for a tile
    without one."""
    neutral = replace(config, group_m=1, batch_inner=False, epilogue="direct")
    return F64_TILE_EFFICIENCY.get(neutral, 0.0)


def mma_bounds(task: Task, config: MmaConfig, limits: DeviceLimits) -> tuple[float, float, float]:
    """(dram, l2, arithmetic) seconds of the tensor-core kernel of ``config``."""
    c, pointwise = mma_form(task, config)
    shape = SHAPES[config.shape]
    bm, bn = config.block_tile()
    m, n, k, batch = c.size(c.m), c.size(c.n), c.size(c.k), c.size(c.batch)
    tiles_m, tiles_n = math.ceil(m / bm), math.ceil(n / bn)
    blocks = tiles_m * tiles_n * batch
    steps = math.ceil(k / config.k_step) * config.k_step
    per_sm = KERNEL_RATE[shape.input_type] / MEASURED_SMS * tile_rate(config)
    if shape.group > 1:
        rate = WARPGROUP_RATES.get((bm, bn))
        if rate is None:  # a tuning tile: scaled from the 64 x 128 one by intensity
            rate = WARPGROUP_RATES[64, 128] * tile_rate(config) / tile_rate(WARPGROUP_BASE)
        gain = TF32_TMA_GAIN if shape.input_type == "tf32" else TMA_GAIN
        per_sm = rate / MEASURED_SMS * (gain if config.copy == "tma" else 1.0)
        if shape.input_type == "tf32":
            per_sm *= TF32_WARPGROUP_SCALE
    elif config.copy == "async" and shape.packed > 1:
        per_sm = HALF_ASYNC_RATE / MEASURED_SMS * tile_rate(config)
    elif config.copy == "async":
        per_sm *= ASYNC_GAIN
    if config.split:
        per_sm /= 3
        if shape.group > 1:
            lowest = min(SPLIT_WARPGROUP_EFFICIENCY.values())  # a tile not measured
            per_sm *= SPLIT_WARPGROUP_EFFICIENCY.get((bm, bn), lowest)
    efficiency = fitted_efficiency(config)
    if efficiency:  # fitted per tile, with the rounds and the epilogue
        arithmetic = f64_arithmetic(f64_parts(task, c, config, limits), efficiency)
    else:
        arithmetic = _busiest(blocks, limits) * 2 * bm * bn * steps / per_sm
    problem = task.problem
    a_bytes, b_bytes, output_bytes = (
        problem.numel(t) * problem.program.tensor(t).itemsize
        for t in (c.a.tensor, c.b.tensor, c.output.tensor)
    )
    # the output's sectors a block tile touches but does not fill (read and written)
    c_bytes = output_bytes / output_sector_efficiency(c, bm, bn, config.itemsize)
    reads = a_bytes + b_bytes + (c_bytes if c.op != "=" else 0)
    reads += sum(  # a bias: each pointwise factor once
        problem.numel(t) * problem.program.tensor(t).itemsize
        for t in {o.tensor for p in pointwise for o in p.factors}
    )
    dram = (reads + c_bytes / STORE_EFFICIENCY) / limits.dram_bandwidth
    l2 = (a_bytes * tiles_n + b_bytes * tiles_m) / (L2_OVER_DRAM * limits.dram_bandwidth)
    return dram, l2, arithmetic


def _busiest(blocks: int, limits: DeviceLimits) -> int:
    """Blocks on the busiest SM."""
    return math.ceil(blocks / limits.sm_count)


def _blocks(c: Contraction, config: MmaConfig) -> int:
    """Blocks of ``config``'s kernel for contraction ``c``."""
    bm, bn = config.block_tile()
    return math.ceil(c.size(c.m) / bm) * math.ceil(c.size(c.n) / bn) * c.size(c.batch)


def mma_blocks(task: Task, config: MmaConfig) -> int:
    """Blocks of the tensor-core kernel of ``config`` for ``task`` (one per block
    tile of the GEMM form, per batch)."""
    return _blocks(mma_form(task, config)[0], config)


def mma_terms(task: Task, config: MmaConfig, limits: DeviceLimits) -> Terms:
    """:func:`mma_bounds` as the model's :class:`~einkern.gpu.model.Terms`, with
    the fp64 tiles' copies (:func:`copy_seconds`) as the ``lsu`` term."""
    scale = SIMT_MODEL_SCALE[SHAPES[config.shape].input_type]
    dram, l2, arithmetic = (t * scale for t in mma_bounds(task, config, limits))
    lsu = copy_seconds(task, config, limits) * scale if fitted_efficiency(config) else 0.0
    return Terms(dram, l2, lsu, arithmetic, 0.0)


#: What a tensor whose contiguous index is a batch index costs the direct
#: tensor-core kernel, per byte of the 32-byte sectors it fills (its bytes times
#: ``min(batch extent, 32 / itemsize)``; an output's twice: partial sectors
#: written and fetched again), over the copy bandwidth, on the SIMT model's scale.
#: A block tile never spans the batch, so each sector holds elements of several
#: batches, used by blocks launched a batch of tiles apart.  Fitted on 23
#: compute-bound fp64 contractions of seeds 2, 41 and 43 with such a tensor (H100,
#: thirty-first session): their direct kernels ran 1.2-4.4x their prediction, the
#: same contractions by TTGT (whose GEMM has the batch outermost) 1.03-1.47x.  The
#: rewrite plan adds it to the direct kernel's time, so it takes TTGT for 10
#: contractions of those seeds (same-run A/B: 1.42x faster on geometric mean, one
#: of them 0.52x).  The decision among tiles and families does not use it: added
#: there too, it changed the tile or family of 15 contractions of seeds 2, 41, 43
#: and 47, of which 7 ran 0.2-0.46x as fast and 7 1.4-3x faster (mostly small
#: batched products, where the model is poor either way).  docs/tensor_cores.md
#: "Batch indices in a contiguous index".
BATCH_SECTOR_COST = 2.0


def batch_sector_seconds(task: Task, config: MmaConfig, limits: DeviceLimits) -> float:
    """Seconds the direct kernel of ``config`` loses to the sectors of tensors whose
    contiguous index is a batch index (:data:`BATCH_SECTOR_COST`), on the SIMT
    model's scale; 0 without one, and where the blocks of neighbouring batches are
    launched one after the other (one tile per batch).  With ``batch_inner`` the
    output's partial sectors are merged in L2 (its sector partners run within a
    wave); an operand's are still counted.  Measured (H100, fortieth session, the
    direct kernel with the batch slowest and fastest across blocks, 40
    compute-bound fp64 contractions of seeds 2, 41, 43 and 47): where the output's
    contiguous index is a batch index the batch fastest ran faster in all 16
    (1.24x on geometric mean, 1.02-1.98x); where only an operand's is, 0.59-2.19x,
    and relayout or TTGT beat both orders in each of those 24
    (docs/tensor_cores.md, "The batch order across blocks")."""
    c, _ = mma_form(task, config)
    program = task.problem.program
    bm, bn = config.block_tile()
    tiles = math.ceil(c.size(c.m) / bm) * math.ceil(c.size(c.n) / bn)
    total = 0.0
    for operand in (c.a, c.b, c.output):
        index = operand.contiguous()
        if index is None or index not in c.batch:
            continue
        inner = math.prod(c.extent(i) for i in c.batch[c.batch.index(index) + 1 :])
        if inner * tiles <= 1:  # neighbours launched together
            continue
        if operand is c.output and config.batch_inner and inner < limits.sm_count:
            continue
        itemsize = program.tensor(operand.tensor).itemsize
        waste = min(c.extent(index), max(1, 32 // itemsize))
        passes = 2 if operand is c.output else 1
        total += task.problem.numel(operand.tensor) * itemsize * waste * passes
    scale = SIMT_MODEL_SCALE[SHAPES[config.shape].input_type]
    return BATCH_SECTOR_COST * total / limits.dram_bandwidth * scale


#: What the direct epilogue's output costs, per byte (twice for ``+=``/``-=``),
#: over the copy bandwidth, on the SIMT model's scale, where no two lanes of a
#: warp's store share a 128-byte line: each element is then a request of its own
#: (Nsight Compute, ``iuadjk,uaqk->jdiq``: 13.8 M L2 write requests for 13.8 M
#: output elements).  Measured (H100, thirty-ninth session, the direct kernel,
#: TTGT and relayout of 89 compute-bound fp64 contractions of seeds 2, 41 and 47
#: timed in one run): the direct kernels of the 17 such contractions without a
#: batch-contiguous output ran 1.0-2.5x their predicted time, a median excess
#: of about 5 times the output's bytes at the copy bandwidth; the others
#: 0.75-1.15x with five exceptions.  The rewrite plan adds it to the direct
#: kernel's time (like :data:`BATCH_SECTOR_COST`).  Chosen on seeds 2 and 41 by
#: simulating the plan on those times (8 added a loss); same-run A/B of the 13
#: plans it changes in four seeds: 1.29x on geometric mean, held-out seed 47's
#: three 1.36x (docs/tensor_cores.md "Scattered output stores").
SCATTERED_STORE_COST = 6.0
#: Bytes of the lines :func:`scattered_store_seconds` counts.
STORE_LINE = 128


def store_lines(c: Contraction, config: MmaConfig, itemsize: int) -> int:
    """Distinct 128-byte lines of the output that a warp's store of its first
    accumulator element touches in the direct epilogue (block tile at the
    origin): 32 where every lane writes a line of its own."""
    table = SHAPES[config.shape].c.table()[:, 0]
    offsets = output_offsets(c, c.m, table[:, 0]) + output_offsets(c, c.n, table[:, 1])
    return int(np.unique(offsets * itemsize // STORE_LINE).size)


def scattered_store_seconds(task: Task, config: MmaConfig, limits: DeviceLimits) -> float:
    """Seconds the direct epilogue of ``config`` loses where every lane of a
    warp's store writes a 128-byte line of its own (:func:`store_lines`): the
    output's bytes times :data:`SCATTERED_STORE_COST` over the copy bandwidth,
    on the SIMT model's scale; 0 otherwise and for the shared epilogue."""
    if config.epilogue != "direct":
        return 0.0
    c, _ = mma_form(task, config)
    if c.output.contiguous() in c.batch:  # batch_sector_seconds charges it
        return 0.0
    output = task.problem.program.tensor(c.output.tensor)
    if store_lines(c, config, output.itemsize) < WARP:
        return 0.0
    passes = 2 if c.op in ("+=", "-=") else 1
    total = task.problem.numel(output.name) * output.itemsize * passes
    scale = SIMT_MODEL_SCALE[SHAPES[config.shape].input_type]
    return SCATTERED_STORE_COST * total / limits.dram_bandwidth * scale


def copy_seconds(task: Task, config: MmaConfig, limits: DeviceLimits) -> float:
    """Seconds the busiest SM spends on its tile copies: the 32-byte sectors they
    touch (each operand's tile over its :func:`~.mma_staging.sector_efficiency`)
    at :data:`COPY_SECTORS_PER_CYCLE`."""
    c, _ = mma_form(task, config)
    bm, bn = config.block_tile()
    steps = math.ceil(c.size(c.k) / config.k_step)
    per_step = sum(
        elements * config.itemsize / 32 / sector_efficiency(c, config, which)
        for which, elements in (("a", bm * config.k_step), ("b", bn * config.k_step))
    )
    sectors = _busiest(_blocks(c, config), limits) * steps * per_step
    return sectors / (COPY_SECTORS_PER_CYCLE * limits.clock_hz)


#: How many times more the rewrite plan counts a tensor-core kernel's tile copies
#: (the ``lsu`` term of :func:`mma_terms`) besides the model's own combination,
#: where they overlap the MMAs but for a quarter.  Fitted on an H100 (thirty-second
#: session; docs/rewrites.md "``relayout``"): 31 compute-bound fp64 contractions of
#: seeds 2, 41 and 43, 23 of them with an operand gathered one element per sector,
#: each run as it is, with either operand relaid (``relayout``) and by TTGT.  The
#: model's log error over 249 such kernels fell from 0.209 to 0.192 with the copies
#: counted once more (0.5: 0.195, 2: 0.196); on 53 contractions, the plan with it
#: changed 18 (1.28x faster on geometric mean, two slower by TTGT: 0.52 and 0.77x),
#: without it 7 (1.5x, none slower).  The decision among tiles does not use it.
COPY_EXPOSURE = 1.0


def exposed_copy_seconds(task: Task, config: MmaConfig, limits: DeviceLimits) -> float:
    """Seconds the rewrite plan adds to the kernel of ``config`` for its tile copies
    (:data:`COPY_EXPOSURE` times the ``lsu`` term of :func:`mma_terms`: 0 for a
    tile without a fitted rate)."""
    return COPY_EXPOSURE * mma_terms(task, config, limits).lsu


#: The tile shapes the decision offers for fp64: cp.async pipelines of 8 and 4
#: warps, with their MMAs' rate over ``KERNEL_RATE · ASYNC_GAIN`` (the 128×128
#: 8-warp tile's DGEMM 4096 rate before the twenty-fifth session), fitted with
#: :data:`ROUND_LATENCY`, :data:`EPILOGUE_EXPOSURE` and then
#: :data:`COPY_SECTORS_PER_CYCLE` to 576 measurements (72 generated and
#: gemm-suite fp64 contractions × 8 tiles, H100, scripts/gpu_f64_tiles.py seed
#: 41; scripts/fit_f64_tiles.py; held out: seed 43; docs/tensor_cores.md
#: "Choosing the fp64 tile" and "Fragments across the barrier"), on kernels with
#: fragments carried across the k-step's barrier where the registers allow
#: (``TileBuilder.carried``) and 16-byte copies along the operands' own
#: contiguous runs (``mma_staging.f64_staging``).  The tiles above 48 KiB of
#: shared memory launch through the opt-in attribute.  Refitted in the
#: twenty-ninth session (H100): on 54 compute-bound contractions of seeds 43 and
#: 2, each tile's measured time over the case's best (the model's ten best
#: points per case, direct epilogue), divided by its predicted time over the
#: best predicted, was 1.01 for the 128×128 tile and 1.02-1.13 for the others;
#: each rate is divided by its ratio to the 128×128 tile's (docs/tensor_cores.md
#: "Tile rates refitted on generated contractions").
F64_TILE_EFFICIENCY = {
    MmaConfig("m16n8k4_f64", 2, 4, 4, 4, 16, stages=3, copy="async"): 1.213,  # 128x128, 8 warps
    MmaConfig("m16n8k4_f64", 2, 4, 2, 4, 16, stages=3, copy="async"): 1.039,  # 64x128
    MmaConfig("m16n8k4_f64", 4, 2, 2, 4, 16, stages=3, copy="async"): 1.053,  # 128x64
    MmaConfig("m16n8k4_f64", 2, 2, 2, 4, 16, stages=4, copy="async"): 1.057,  # 64x64, 4 warps
    MmaConfig("m16n8k4_f64", 2, 2, 4, 4, 16, stages=3, copy="async"): 1.117,  # 128x64
    MmaConfig("m16n8k4_f64", 2, 2, 2, 8, 16, stages=3, copy="async"): 1.049,  # 64x128
    MmaConfig("m16n8k4_f64", 2, 2, 2, 4, 16, stages=3, copy="async"): 1.006,  # 64x64
    MmaConfig("m16n8k4_f64", 2, 4, 4, 4, 16, stages=4, copy="async"): 1.196,  # 128x128
    # Small tiles for problems the tiles above leave most SMs idle in, fitted
    # (the rates alone, the other constants as above) to 47 small fp64 cases of
    # seed 41 (GEMMs of extents 64-1536 and four-index contractions of extents
    # 8-64, at least 2e6 multiply-adds; the chain's DGEMMs n = 96 ... 1024), H100,
    # forty-third session (scripts/gpu_f64_tiles.py --small; docs/tensor_cores.md
    # "Small tiles for small problems"); held out: seed 43, where the default
    # ran 1.39x faster in a same-run A/B of its 22 changed cases.
    MmaConfig("m16n8k4_f64", 2, 2, 1, 2, 16, stages=4, copy="async"): 0.456,  # 32x32
    MmaConfig("m16n8k4_f64", 2, 2, 1, 4, 16, stages=4, copy="async"): 0.708,  # 32x64
    MmaConfig("m16n8k4_f64", 2, 2, 2, 2, 16, stages=4, copy="async"): 0.719,  # 64x32
}
F64_TILES = tuple(F64_TILE_EFFICIENCY)
#: The small tiles among them (block tiles under 64 × 64): the decision offers
#: them only where the 64 × 64 tile (:data:`F64_SMALL_LIMIT`) makes fewer blocks
#: than the GPU has SMs.  Offered everywhere, the model took them for
#: contractions of thousands of blocks too, whose rewrite plans then charged
#: them more than the decision knew (batch sectors, copies): in a same-run A/B
#: ``oslhxk,ohkla->axhslo`` (seed 41) ran 0.60x and ``wkflv,bflvw->kwb`` (seed
#: 47) 0.74x (docs/tensor_cores.md "Small tiles for small problems").
F64_SMALL_LIMIT = MmaConfig("m16n8k4_f64", 2, 2, 2, 4, 16, stages=4, copy="async")


def small_f64(config: MmaConfig) -> bool:
    """Whether ``config`` is an fp64 tile under 64 × 64 (any block order)."""
    return SHAPES[config.shape].input_type == "f64" and math.prod(config.block_tile()) < 64 * 64


F64_SMALL_TILES = tuple(t for t in F64_TILES if small_f64(t))
#: Seconds a round of resident blocks pays besides its MMAs (filling the
#: pipeline, draining the accumulators), over the blocks resident together,
#: fitted with :data:`F64_TILE_EFFICIENCY`.
ROUND_LATENCY = 0.134e-6
#: Sectors per cycle at which an SM's fp64 tile copies (8- or 16-byte
#: ``cp.async``) proceed, fitted after :data:`F64_TILE_EFFICIENCY`: the copies of gathered
#: operands (a sector per element) made four-index contractions run 1.9× slower
#: than the model without this term predicted.
COPY_SECTORS_PER_CYCLE = 1.571
#: The epilogue's output traffic (read too for an update) that no other block's
#: MMAs hide: all of it at 8 resident warps, times ``(8 / warps) ** exposure``.
EPILOGUE_EXPOSURE = 1.386
#: How much slower a tile's MMAs run when the problem leaves an SM fewer blocks
#: than the tile's residency (``idle`` = resident / blocks, to this power): a
#: lone block's barriers and pipeline fill are not covered by another's MMAs
#: (DGEMM 1024: the 128×64 8-warp tile, one block per SM where two fit, ran
#: 1.27× the 64×64 4-warp tile's time at two blocks per SM; the model without
#: this term had them equal).
LONE_BLOCK_EXPONENT = 0.258


@dataclass(frozen=True)
class F64Parts:
    """What an fp64 tile's arithmetic term is made of, before the fitted
    constants weigh it (:func:`f64_arithmetic`; scripts/fit_f64_tiles.py fits
    them to these parts)."""

    mmas: float  # seconds of the busiest SM's MMAs at KERNEL_RATE · ASYNC_GAIN
    rounds: float  # rounds of resident blocks, over the blocks resident together
    epilogue: float  # seconds of its blocks' output traffic at its share of DRAM
    warps: int  # warps resident together
    idle: float = 1.0  # resident slots over the busiest SM's blocks (1: all filled)


def f64_parts(task: Task, c: Contraction, config: MmaConfig, limits: DeviceLimits) -> F64Parts:
    """The :class:`F64Parts` of ``config``'s kernel for ``task`` (in GEMM form ``c``)."""
    resident = f64_resident(task, config, limits)
    busiest = _busiest(_blocks(c, config), limits)
    bm, bn = config.block_tile()
    steps = math.ceil(c.size(c.k) / config.k_step) * config.k_step
    per_sm = KERNEL_RATE["f64"] * ASYNC_GAIN / MEASURED_SMS
    itemsize = task.program.tensor(c.output.tensor).itemsize
    tile_bytes = bm * bn * itemsize / output_sector_efficiency(c, bm, bn, config.itemsize)
    traffic = busiest * tile_bytes * (1 if c.op == "=" else 2)  # an update reads too
    return F64Parts(
        mmas=busiest * 2 * bm * bn * steps / per_sm,
        rounds=math.ceil(busiest / resident) / resident,
        epilogue=traffic * limits.sm_count / limits.dram_bandwidth,
        warps=min(resident, busiest) * config.threads // 32,
        idle=resident / max(1, min(resident, busiest)),
    )


def f64_arithmetic(
    parts: F64Parts,
    efficiency: float,
    latency: float = ROUND_LATENCY,
    exposure: float = EPILOGUE_EXPOSURE,
    lone: float = LONE_BLOCK_EXPONENT,
) -> float:
    """Seconds of an fp64 tile's arithmetic term: its MMAs at ``efficiency``
    (:data:`F64_TILE_EFFICIENCY`), slower by ``idle ** lone`` where the problem
    leaves the busiest SM fewer blocks than the tile's residency, ``latency`` per
    round of resident blocks shared by the blocks of a round (one fills its
    pipeline while the others compute), and the epilogue traffic that too few
    resident warps leave exposed (all of it at 8 warps, times ``(8 / warps) **
    exposure``)."""
    exposed = parts.epilogue * (8 / parts.warps) ** exposure
    mmas = parts.mmas / efficiency * parts.idle**lone
    return mmas + parts.rounds * latency + exposed


#: The register-prefetched one-stage tiles (within 48 KiB; DGEMM 4096 at 38.1
#: TFLOP/s for 128×128): the tuner's space has them beside :data:`F64_TILES`.
F64_REGISTER_TILES = (
    MmaConfig("m16n8k4_f64", 4, 4, 2, 4, 16),  # 128 x 128, 512 threads
    MmaConfig("m16n8k4_f64", 2, 4, 2, 4, 16),  # 64 x 128
    MmaConfig("m16n8k4_f64", 4, 2, 2, 4, 16),  # 128 x 64
    MmaConfig("m16n8k4_f64", 2, 2, 2, 4, 16),  # 64 x 64, 128 threads
)


#: Fewest flops for which tensor cores are offered: below, every mapping is
#: launch- and latency-bound and the model's throughput terms say nothing about
#: which is faster (H100: a 4096×64×64 product, 3.4e7 flops, ran 0.065 ms on
#: DMMA against 0.059 ms on the SIMT default; DGEMM 256 has 3.4e7 too).
MIN_FLOPS = 1 << 26
#: The same for fp64 tiles, lower: with the small tiles (32×32, 32×64, 64×32) a
#: DMMA kernel beat the SIMT default down to DGEMM n = 256 (H100, forty-third
#: session, docs/tensor_cores.md "Small tiles for small problems"); between this
#: and :data:`MIN_FLOPS` the model chooses.
F64_MIN_FLOPS = 1 << 22
#: Fewest M and N positions for which tensor cores are offered (an instruction
#: tile's N side): below, most of every MMA multiplies padding.  A GEMV
#: (8192², fp64: N = 1) was predicted within a few per cent of its lanes kernel
#: by one fit of the tile constants, through 64 to 128 times its arithmetic.
MIN_TILE_SIDE = 8


#: The tile shapes offered for float32 when the program's precision allows tf32
#: (k-steps of 32: four m16n8k8 steps per shared tile); ``split`` for 3xtf32.
TF32_TILES = (
    MmaConfig("m16n8k8_tf32", 4, 4, 2, 4, 32),  # 128 x 128
    MmaConfig("m16n8k8_tf32", 2, 4, 2, 4, 32),  # 64 x 128
    MmaConfig("m16n8k8_tf32", 2, 2, 2, 4, 32),  # 64 x 64
)


#: The tile shapes offered for bfloat16 and float16 inputs whose operands can be
#: copied 16 bytes at a time (:func:`einkern.gpu.mma_lower.async_problems`): the
#: fastest of each block tile measured on an H100 (GEMM 8192: 128×256 354,
#: 128×128 301, 64×128 208 TFLOP/s; 128×256 takes 157 KiB of shared memory).
HALF_TILES = {
    dtype: (
        MmaConfig(f"m16n8k16_{kind}", 2, 4, 4, 8, 64, stages=3, copy="async"),  # 128 x 256
        MmaConfig(f"m16n8k16_{kind}", 2, 4, 4, 4, 64, stages=3, copy="async"),  # 128 x 128
        MmaConfig(f"m16n8k16_{kind}", 2, 2, 2, 8, 32, stages=4, copy="async"),  # 64 x 128
    )
    for dtype, kind in (("bfloat16", "bf16"), ("float16", "f16"))
}
#: More 16-byte-copy tiles for the tuner (GEMM 8192 bf16 on an H100: 128×256 k32
#: 4 stages 336, 256×128 k32 3 stages 316 TFLOP/s; faster on column-major operands).
HALF_TUNING_TILES = {
    dtype: (
        MmaConfig(f"m16n8k16_{kind}", 2, 4, 4, 8, 32, stages=4, copy="async"),  # 128 x 256
        MmaConfig(f"m16n8k16_{kind}", 4, 2, 4, 8, 32, stages=3, copy="async"),  # 256 x 128
    )
    for dtype, kind in (("bfloat16", "bf16"), ("float16", "f16"))
}
#: Hopper's warpgroup MMA (``wgmma``, sm_90 only) for the same 16-byte-copy
#: operands: two or four warpgroups of 64 rows, k-step 64 in 128-byte swizzled
#: lines, 4 stages (:mod:`einkern.gpu.mma_warpgroup`).
WARPGROUP_TILES = {
    dtype: (
        MmaConfig(f"wgmma_k16_{kind}", 8, 1, 1, 32, 64, stages=4, copy="async"),  # 128 x 256
        MmaConfig(f"wgmma_k16_{kind}", 16, 1, 1, 16, 64, stages=4, copy="async"),  # 256 x 128
        MmaConfig(f"wgmma_k16_{kind}", 8, 1, 1, 16, 64, stages=4, copy="async"),  # 128 x 128
        MmaConfig(f"wgmma_k16_{kind}", 4, 1, 1, 16, 64, stages=4, copy="async"),  # 64 x 128
    )
    for dtype, kind in (("bfloat16", "bf16"), ("float16", "f16"))
}
#: tf32 on the warpgroup MMA (sm_90 only): the same block tiles, k-step 32 (one
#: 128-byte line of tf32), 4 stages; A from registers where it is not K-major
#: (:mod:`einkern.gpu.mma_warpgroup`).
TF32_WARPGROUP_TILES = (
    MmaConfig("wgmma_k8_tf32", 8, 1, 1, 32, 32, stages=4, copy="async"),  # 128 x 256
    MmaConfig("wgmma_k8_tf32", 16, 1, 1, 16, 32, stages=4, copy="async"),  # 256 x 128
    MmaConfig("wgmma_k8_tf32", 8, 1, 1, 16, 32, stages=4, copy="async"),  # 128 x 128
    MmaConfig("wgmma_k8_tf32", 4, 1, 1, 16, 32, stages=4, copy="async"),  # 64 x 128
)
#: 3xTF32 on the warpgroup MMA (sm_90 only): A split in registers, B's low parts
#: written to two more shared buffers per k-step, each step's products summed in a
#: second set of accumulators (:mod:`einkern.gpu.mma_warpgroup`).  That second set
#: leaves the tiles of N = 128: N = 256 needs 256 accumulator registers per thread,
#: and 256×128 (512 threads, at most 128 registers each) spills.
SPLIT_WARPGROUP_TILES = tuple(
    replace(t, split=True)
    for t in TF32_WARPGROUP_TILES
    if t.block_tile() in SPLIT_WARPGROUP_EFFICIENCY
)
#: ... and for the others (copied element by element through registers): the tf32
#: tiles with the m16n8k16 instruction.
HALF_REGISTER_TILES = {
    dtype: tuple(replace(t, shape=f"m16n8k16_{kind}") for t in TF32_TILES)
    for dtype, kind in (("bfloat16", "bf16"), ("float16", "f16"))
}


def mma_candidates(
    task: Task, tuning: bool = False, arch: str = "sm_90", sm_count: int = H100.sm_count
) -> list[MmaConfig]:
    """Tensor-core tile shapes for ``task``, a statement of GEMM form of at least
    :data:`MIN_FLOPS` (:data:`F64_MIN_FLOPS` for fp64): fp64 ones when every
    tensor is float64 (``tuning``: the register-prefetched ones and the
    shared-memory epilogue too; the small ones, :data:`F64_SMALL_TILES`, only for
    the tuner or where the 64 × 64 tile makes fewer than ``sm_count`` blocks);
    tf32 ones (3xTF32 when the precision says so) when every tensor is float32
    and the program's precision is not ``fp32``;
    bf16 (f16) ones when both inputs are bfloat16 (float16) and the output is of
    that dtype or float32 (the products are exact and accumulate in float32, as the
    statement computes: no precision needed) — the cp.async tiles when both
    operands can be copied 16 bytes at a time (on ``arch`` sm_90, the warpgroup
    tiles first, those whose layout allows them), else the register-copy ones;
    empty otherwise."""
    if not task.single:
        return []
    program = task.program
    dtypes = {program.tensor(t).dtype for t in task.statement.tensors()}
    output_name = task.statement.output.tensor  # read too by += and -=
    reads = {
        program.tensor(a.tensor).dtype for a in task.statement.reads() if a.tensor != output_name
    }
    output = program.tensor(output_name).dtype
    if dtypes == {"float64"}:
        tiles = list(F64_TILES)
        if tuning:
            tiles += [replace(t, epilogue="shared") for t in F64_TILES] + list(F64_REGISTER_TILES)
    elif dtypes == {"float32"} and program.precision in ("tf32", "3xtf32"):
        split = program.precision == "3xtf32"
        tiles = [replace(t, split=split) for t in TF32_TILES]
    elif len(reads) == 1 and min(reads) in HALF_TILES and output in (min(reads), "float32"):
        tiles = list(HALF_TILES[min(reads)])
        if tuning:
            tiles += HALF_TUNING_TILES[min(reads)]
    else:
        return []
    try:
        c, pointwise = gemm_form(task)
    except NotAContraction:
        return []
    hopper = arch.startswith("sm_90")
    if SHAPES[tiles[0].shape].packed > 1 and async_problems(c, tiles[0]):
        tiles = list(HALF_REGISTER_TILES[min(reads)])
    elif SHAPES[tiles[0].shape].packed > 1 and hopper:
        tiles = warpgroup_candidates(c, WARPGROUP_TILES[min(reads)]) + tiles
    elif SHAPES[tiles[0].shape].input_type == "tf32" and hopper:
        group = SPLIT_WARPGROUP_TILES if tiles[0].split else TF32_WARPGROUP_TILES
        tiles = warpgroup_candidates(c, group) + tiles
    if pointwise_problems(c, pointwise, SHAPES[tiles[0].shape].packed > 1):
        return []
    if min(c.size(c.m), c.size(c.n)) < MIN_TILE_SIDE:
        return []
    if not tuning and _blocks(c, F64_SMALL_LIMIT) >= sm_count:
        tiles = [t for t in tiles if t not in F64_SMALL_TILES]
    return tiles if c.flops >= (F64_MIN_FLOPS if dtypes == {"float64"} else MIN_FLOPS) else []


def warpgroup_candidates(c: Contraction, tiles: tuple[MmaConfig, ...]) -> list[MmaConfig]:
    """The warpgroup ``tiles`` that can compute ``c`` (each as
    :func:`~einkern.gpu.mma_warpgroup.oriented` turns it), staged by TMA where the
    maps allow, then by 16-byte cp.async where the operands allow."""
    forms = [(w, oriented(c, w)) for w in tiles]
    groups = [(w, f) for w, f in forms if not warpgroup_problems(f, w) and not async_problems(f, w)]
    staged = [
        replace(w, copy="tma") for w, f in groups if not tma_problems(f, replace(w, copy="tma"))
    ]
    return staged + [w for w, _ in groups]
