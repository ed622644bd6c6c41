"""Analytic cost of a mapping, for ranking candidates before measuring them
(Fousek's model-pruned search; R-Stream's cost of data movement).

The predicted time is the largest of four terms, each a throughput bound, plus
a quarter of the other three (bottlenecks overlap imperfectly):

* DRAM: every tensor read once and the output written (read too for ``+=``),
  times the sector waste of uncoalesced accesses to tensors larger than L2, plus
  the re-reads that block tiles cause beyond what L2 holds, plus the copies of
  the ``pad`` boundary policy;
* L1/shared: load instructions per thread (after register-tile reuse), one
  wavefront per 128-byte line a warp touches, output loads and stores included,
  over the SMs' load throughput;
* arithmetic: flops over the peak of the dtype;
* latency: one reduction chain per thread cannot run faster than the chain.

Each is divided by an efficiency from occupancy (threads, registers, shared
memory per SM) and wave quantisation (the last partial wave of blocks).
"""

from __future__ import annotations

import math

from ..ir.analysis import statement_flops
from ..ir.nodes import Problem
from ..ir.task import Task
from .device import H100, DeviceLimits
from .lower import compute_dtype
from .mapping import Mapping
from .normalize import reduction_of
from .space import products_per_output


def occupancy(
    mapping: Mapping, registers: int, shared_bytes: int, limits: DeviceLimits = H100
) -> int:
    """Resident blocks per SM."""
    threads = mapping.threads
    by_threads = limits.max_threads_per_sm // max(threads, 1)
    by_registers = limits.registers_per_sm // max(1, registers * threads)
    by_shared = limits.shared_per_sm // shared_bytes if shared_bytes else 32
    return max(0, min(by_threads, by_registers, by_shared, 32))


def estimated_registers(task: Task, mapping: Mapping) -> int:
    words = 2 if compute_dtype(task) == "float64" else 1
    groups = max(1, len(reduction_of(task.statement).groups))
    tile = mapping.register_tile
    operands = sum(t.per_thread for t in mapping.parallel)
    prefetch = 8 if mapping.prefetch else 0
    return min(255, words * (groups * tile + operands + prefetch) + 24)


def predicted_time(task: Task, mapping: Mapping, limits: DeviceLimits = H100) -> float:
    """Predicted seconds for ``task`` under ``mapping``."""
    problem = task.problem
    statement = task.statement
    dtype = compute_dtype(task)
    itemsize = 8 if dtype == "float64" else 4
    sizes = {i: problem.index_size(statement, i) for i in statement.indices}
    blocks = math.prod(
        math.ceil(sizes[d] / mapping.tile_of(d).tile) for d in statement.parallel_indices
    )
    outputs = math.prod(sizes[d] for d in statement.parallel_indices)
    padded = blocks * math.prod(mapping.tile_of(d).tile for d in statement.parallel_indices)

    # DRAM and L2 traffic: compulsory bytes (times the sector waste of uncoalesced
    # accesses to tensors larger than L2) plus block-tile re-reads beyond L2.
    staged = {s.access for s in mapping.staged}
    output_bytes = problem.nbytes(statement.output.tensor)
    output_lines, waste = warp_footprint(problem, statement, mapping, statement.output)
    waste = waste if output_bytes > limits.l2_bytes / 2 else 1.0
    output_passes = 2 if statement.op != "=" else 1  # read and written for += and -=
    compulsory = output_bytes * output_passes * waste
    reread = 0.0
    wavefronts = 0.0  # L1 wavefronts of the direct (unstaged) loads, per point
    groups = reduction_of(statement).groups
    for group in groups:
        k = math.prod(sizes[i] for i in group.indices)
        for access in group.accesses():
            tensor_bytes = problem.nbytes(access.tensor)
            lines, waste = (
                (1, 1.0)
                if str(access) in staged
                else warp_footprint(problem, statement, mapping, access)
            )
            compulsory += tensor_bytes * (waste if tensor_bytes > limits.l2_bytes / 2 else 1.0)
            wavefronts += (
                k
                * (lines - 1)
                * math.prod(
                    mapping.tile_of(i).per_thread
                    for i in set(access.indices)
                    if i in statement.parallel_indices
                )
            )
            footprint = itemsize * math.prod(
                mapping.tile_of(i).tile if i in statement.parallel_indices else sizes[i]
                for i in set(access.indices)
            )
            traffic = footprint * blocks
            if tensor_bytes > limits.l2_bytes / 2:
                reread += max(0.0, traffic - tensor_bytes) * 0.25
    if mapping.boundary == "pad" and any(
        sizes[d] % mapping.tile_of(d).tile for d in statement.parallel_indices
    ):
        # pad and crop copies: every tensor read once more and written padded
        compulsory += 2 * (
            output_bytes * output_passes
            + sum(problem.nbytes(a.tensor) for g in groups for a in g.accesses())
        )
    dram = (compulsory + reread) / limits.dram_bandwidth

    # Load instructions after register reuse (shared/L1 throughput: 32 lanes per clock).
    loads_per_point = 0
    points = 0
    for group in groups:
        k = math.prod(sizes[i] for i in group.indices)
        points += k
        for access in group.accesses():
            # a staged operand's runs of adjacent elements are single vector loads
            staged_runs = str(access) in staged
            loads_per_point += k * math.prod(
                mapping.tile_of(i).per_thread // (mapping.tile_of(i).chunk if staged_runs else 1)
                for i in set(access.indices)
                if i in statement.parallel_indices
            )
    threads_total = padded / max(1, mapping.register_tile)
    load_instructions = threads_total * (loads_per_point + wavefronts) / 32
    # the output's loads (+=) and stores, one wavefront per 128-byte line each
    load_instructions += padded * output_passes * output_lines / 32
    lsu = load_instructions / (limits.sm_count * limits.clock_hz)

    peak = limits.fp64_flops if dtype == "float64" else limits.fp32_flops
    arithmetic = statement_flops(problem, statement) * (padded / max(outputs, 1)) / peak
    latency = points * 4 / limits.clock_hz  # a dependent FMA chain, 4 cycles per step

    registers = estimated_registers(task, mapping)
    shared = 4096 * len(mapping.staged)  # rough: staged tiles are a few KB
    resident = occupancy(mapping, registers, shared, limits)
    if resident == 0:
        return math.inf
    slots = resident * limits.sm_count
    waves = math.ceil(blocks / slots)
    wave_efficiency = blocks / (waves * slots)
    warps_per_sm = min(resident * mapping.threads, limits.max_threads_per_sm) / 32
    latency_hiding = min(1.0, warps_per_sm / 16)
    efficiency = max(0.05, wave_efficiency * latency_hiding)
    terms = (dram, lsu, arithmetic, latency)
    # The bound that dominates, plus a quarter of the others: bottlenecks do not
    # overlap perfectly, and it ranks mappings that tie on DRAM by their other costs.
    time = (max(terms) + 0.25 * (sum(terms) - max(terms))) / efficiency
    if mapping.preload_output:
        time *= PRELOAD_FACTOR[products_per_output(statement) >= 3]
    return time


#: Measured effect of reading an update's output before the reduction (H100):
#: several products per output 0.503 -> 0.374 ms (the d1 family); one product,
#: already memory-bound, 0.108 -> 0.112 ms (sd_t_d1_1).
PRELOAD_FACTOR = {False: 1.03, True: 0.75}


def warp_footprint(problem: Problem, statement, mapping: Mapping, access) -> tuple[int, float]:
    """How one warp's access to ``access`` touches memory: the 128-byte lines of one
    load instruction (L1 wavefronts), and the waste of its 32-byte sectors, bytes
    fetched over bytes used, counting the elements the same threads take along the
    access's contiguous index in their register tiles (1.0: fully coalesced)."""
    itemsize = problem.program.tensor(access.tensor).itemsize
    strides = dict(zip(access.indices, problem.strides(access.tensor), strict=True))
    threaded = [t for t in mapping.parallel if t.threads > 1]
    lanes = min(32, mapping.threads)
    contiguous = next((i for i, s in strides.items() if s == 1), None)
    along = None  # the tile along the contiguous index: the thread's own elements there
    if contiguous is not None and contiguous in statement.parallel_indices:
        along = mapping.tile_of(contiguous)
    offsets, elements = set(), set()
    for lane in range(lanes):
        coordinate, rest = {}, lane
        for tile in threaded:
            digit, rest = rest % tile.threads, rest // tile.threads
            coordinate[tile.index] = tile.local(digit, 0)
        offset = sum(strides[i] * coordinate.get(i, 0) for i in strides)
        offsets.add(offset)
        if along is None:
            elements.add(offset)
            continue
        # the thread's elements relative to its first (the same for every thread)
        elements.update(
            offset + along.local(0, step) - along.local(0, 0) for step in range(along.per_thread)
        )
    lines = len({o * itemsize // 128 for o in offsets})
    sectors = len({e * itemsize // 32 for e in elements})
    return max(1, lines), max(1.0, sectors * 32 / (len(elements) * itemsize))
