"""Analytic cost of a mapping, for ranking candidates before measuring them
(Fousek's model-pruned search; R-Stream's cost of data movement), and the
default mapping's choice among candidates (:mod:`einkern.gpu.decision`).

:func:`cost_terms` gives five throughput or latency bounds, each in seconds:

* ``dram``: every tensor read once and the output written (read too for ``+=``),
  times the sector waste of uncoalesced accesses to tensors larger than L2, times
  the cost of short contiguous runs (a block's tile of the output, or of a staged
  input, that covers a few elements of its contiguous index and then jumps),
  plus the re-reads that block tiles cause beyond what L2 holds, plus the copies
  of the ``pad`` boundary policy;
* ``l2``: what the blocks read from L2 (every block's tiles, the same waste);
* ``lsu``: load instructions per thread (after register-tile reuse), one
  wavefront per 128-byte line a warp touches, output loads and stores included,
  plus the staged tiles' copies and their stores to shared memory;
* ``arithmetic``: flops over the peak of the dtype;
* ``latency``: one reduction chain per thread cannot run faster than the chain,
  and a staged block not faster than its barrier-separated chunks
  (:data:`STEP_CYCLES` each), once per wave of blocks.

Throughput terms are divided by an efficiency from occupancy (threads,
registers, shared memory per SM) and wave quantisation (the last partial wave of
blocks).  A :class:`Calibration` scales each term and combines them: the largest
plus ``overlap`` times the others (bottlenecks overlap imperfectly).  Its
factors can be fitted from measurements (:func:`fit_calibration`, JSON lines of
terms or task and configuration, predicted and measured seconds).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field

from ..ir.analysis import statement_flops
from ..ir.nodes import Access, Problem, signed_terms, walk
from ..ir.task import Task
from .device import H100, DeviceLimits
from .lower import compute_dtype
from .mapping import Mapping, ParallelTile, first_coordinates
from .mma_family_model import family_terms
from .mma_model import mma_terms
from .normalize import reduction_of
from .pair import pair_terms
from .reduction_lanes import run_vector_width
from .space import products_per_output
from .staging import natural_order
from .terms import L2_OVER_DRAM, TERMS, Terms

#: Bytes a discontiguous run of DRAM traffic costs beyond its own (partial
#: 128-byte lines at both ends, row switches): a run of r bytes moves at
#: r / (r + RUN_OVERHEAD) of the bandwidth.
RUN_OVERHEAD = 64

#: Reduction steps whose loads a thread keeps in flight without separate
#: accumulators (nvcc unrolls short loop bodies and hoists their loads).
COMPILER_STEPS = 2

#: Cycles a staged block spends per chunk of its reduction whatever its tile:
#: the two barriers, the shared-memory store and the first reads after it, and
#: the prefetched loads' hand-over.  Fitted on 567 points of 36 cases measured
#: on an H100 (SGEMM and DGEMM n = 256 … 2048 and 28 contractions of seed 2;
#: docs/gpu.md#the-cost-of-a-chunk): SGEMM n = 256 with one output per thread
#: ran 10.1 / 12.5 / 23.0 / 30.1 µs at k-steps of 32 / 16 / 8 / 4 where the
#: model without the term predicted 6.6–6.9 µs for all four.
STEP_CYCLES = 400


def occupancy(
    mapping: Mapping, registers: int, shared_bytes: int, limits: DeviceLimits = H100
) -> int:
    """Resident blocks per SM."""
    threads = mapping.threads
    by_threads = limits.max_threads_per_sm // max(threads, 1)
    by_registers = limits.registers_per_sm // max(1, registers * threads)
    by_shared = limits.shared_per_sm // shared_bytes if shared_bytes else 32
    return max(0, min(by_threads, by_registers, by_shared, 32))


def _staged_elements(task: Task, mapping: Mapping) -> list[tuple[Access, int]]:
    """Each staged access of the main groups and the elements of its shared tile."""
    problem = task.problem
    statement = task.statement
    found = []
    for group in reduction_of(statement).groups:
        for access in group.accesses():
            if mapping.staging_of(str(access)) is None:
                continue
            elements = 1
            for index in set(access.indices):
                size = problem.index_size(statement, index)
                if index in statement.parallel_indices:
                    elements *= min(mapping.tile_of(index).tile, 2 * size)
                else:
                    elements *= mapping.step_of(index, size)
            found.append((access, elements))
    return found


#: Products whose per-thread operand values the compiler keeps live at once in a
#: statement summing three or more products (fitted to NVRTC's register counts
#: for sm_90 of the CCSD(T) d1/d2 kernels, T = 12 ... 24, merged and in fusion
#: groups: docs/rules.md#product-family).
PRODUCTS_IN_FLIGHT = 3
#: 32-bit registers per operand value and k-step element (of at most 32) of a
#: GETT kernel's unrolled k-step, whatever the type: the compiler hoists later
#: steps' shared-memory loads.  Fitted to NVRTC's register counts for sm_90 of
#: 952 GETT points of the contractions suite's seed 41 (docs/gpu.md, "Choice by
#: the cost model"): without it the estimate fell short by 20 (fp32) and 9 (fp64)
#: registers on mean, and by more than 30 for 24 % of the points; with it by 5
#: and -2, and 17 % and 8 %.
HOISTED_OPERANDS = 0.1


def _operand_values(task: Task, mapping: Mapping) -> int:
    """Per-thread operand values of one step of the reduction: one per register
    tile index (rx + ry + ...), or for three or more products the values of the
    largest product (its accesses' per-thread tiles) times
    :data:`PRODUCTS_IN_FLIGHT`."""
    statement = task.statement
    if products_per_output(statement) < 3:
        return sum(t.per_thread for t in mapping.parallel)
    parallel = set(statement.parallel_indices)
    largest = 0
    for group in reduction_of(statement).groups:
        for term in signed_terms(group.body):
            values = sum(
                math.prod(mapping.tile_of(i).per_thread for i in set(a.indices) & parallel)
                for a in walk(term[1])
                if isinstance(a, Access)
            )
            largest = max(largest, values)
    return PRODUCTS_IN_FLIGHT * largest


def staged_per_thread(task: Task, mapping: Mapping) -> int:
    """Elements each thread copies into shared memory per step of the main
    reduction (and, with prefetch, holds in registers for the next), summed over
    the staged accesses."""
    threads = max(1, mapping.threads)
    return sum(math.ceil(e / threads) for _, e in _staged_elements(task, mapping))


def estimated_registers(task: Task, mapping: Mapping) -> int:
    words = 2 if compute_dtype(task) == "float64" else 1
    groups = max(1, len(reduction_of(task.statement).groups))
    tile = mapping.register_tile
    operands = _operand_values(task, mapping)
    prefetch = 0
    if mapping.prefetch:
        prefetch = max(8, min(staged_per_thread(task, mapping), 64))
    # a reduction thread's independent accumulators, and the runs it has in flight
    count = mapping.accumulators if mapping.reduction_threads else 1
    runs = 0
    if count > 1 or mapping.reduction_chunk > 1:
        per_step = sum(
            math.prod(
                mapping.tile_of(i).per_thread
                for i in set(a.indices)
                if i in task.statement.parallel_indices
            )
            for g in reduction_of(task.statement).groups
            for a in g.accesses()
        )
        runs = count * mapping.reduction_chunk * per_step
    hoisted = 0
    if mapping.strategy == "gett" and mapping.unroll > 1 and mapping.k_step:
        steps = math.prod(step for _, step in mapping.k_step)
        hoisted = round(HOISTED_OPERANDS * operands * min(steps, 32))
    return min(255, words * (groups * tile * count + operands + prefetch + runs) + hoisted + 24)


def shared_bytes(task: Task, mapping: Mapping) -> int:
    """Shared memory of the mapping's staged tiles (padding left out) and of the
    reduction threads' partial sums."""
    itemsize = 8 if compute_dtype(task) == "float64" else 4
    partials = mapping.register_tile * mapping.threads if mapping.reduction_threads else 0
    return itemsize * (sum(e for _, e in _staged_elements(task, mapping)) + partials)


def run_bytes(problem: Problem, statement, mapping: Mapping, access, staged: bool) -> int:
    """Contiguous bytes of one block's tile of ``access`` in memory: along the
    access's memory order, each index's tile (the k-step of a staged reduction
    index, the whole extent of an unstaged one) while the previous tiles cover
    their whole extents."""
    itemsize = problem.program.tensor(access.tensor).itemsize
    run = 1
    for index in natural_order(problem, access):
        size = problem.index_size(statement, index)
        if index in statement.parallel_indices:
            extent = min(mapping.tile_of(index).tile, size)
        elif staged:
            extent = mapping.step_of(index, size)
        else:
            extent = size
        run *= extent
        if extent < size:
            break
    return run * itemsize


def run_efficiency(run: int) -> float:
    """Share of the DRAM bandwidth that runs of ``run`` contiguous bytes reach."""
    return run / (run + RUN_OVERHEAD)


@dataclass(frozen=True)
class Calibration:
    """Per-term scale factors and the overlap of the non-dominant terms."""

    scale: tuple[float, ...] = field(default=(1.0,) * len(TERMS))
    overlap: float = 0.25

    def combine(self, terms: Terms) -> float:
        scaled = [s * v for s, v in zip(self.scale, terms.values(), strict=True)]
        if any(math.isinf(v) for v in scaled):
            return math.inf
        top = max(scaled)
        return (top + self.overlap * (sum(scaled) - top)) * terms.factor

    def to_json(self) -> dict[str, object]:
        return {"scale": dict(zip(TERMS, self.scale, strict=True)), "overlap": self.overlap}

    @staticmethod
    def from_json(data: dict) -> Calibration:
        scale = data.get("scale", {})
        return Calibration(
            tuple(float(scale.get(name, 1.0)) for name in TERMS), float(data.get("overlap", 0.25))
        )


#: The model as written (not yet fitted to measurements).
DEFAULT_CALIBRATION = Calibration()


def predicted_time(
    task: Task,
    mapping: Mapping,
    limits: DeviceLimits = H100,
    calibration: Calibration = DEFAULT_CALIBRATION,
    registers: int | None = None,
) -> float:
    """Predicted seconds for ``task`` under ``mapping`` (``registers``: the
    compiled kernel's registers per thread, when known; else the estimate)."""
    return calibration.combine(cost_terms(task, mapping, limits, registers))


def cost_terms(
    task: Task, mapping: Mapping, limits: DeviceLimits = H100, registers: int | None = None
) -> Terms:
    """The model's bounds for ``task`` under ``mapping`` (see the module docstring;
    tensor-core mappings: :mod:`einkern.gpu.mma_model`; paired terms:
    :func:`einkern.gpu.pair.pair_terms`).  ``registers`` replaces
    :func:`estimated_registers` when the kernel was compiled (SIMT mappings)."""
    if mapping.pair:
        return pair_terms(task, mapping, limits, cost_terms)
    if mapping.mma is not None and mapping.mma.box:  # a product family
        return family_terms(task, mapping.mma, limits)
    if mapping.mma is not None:
        return mma_terms(task, mapping.mma, limits)
    problem = task.problem
    statement = task.statement
    dtype = compute_dtype(task)
    sizes = {i: problem.index_size(statement, i) for i in statement.indices}
    blocks = mapping.blocks(problem, statement)
    outputs = math.prod(sizes[d] for d in statement.parallel_indices)
    padded = blocks * math.prod(mapping.tile_of(d).tile for d in statement.parallel_indices)
    memory = _memory_traffic(task, mapping, blocks, limits)
    dram = memory.dram / limits.dram_bandwidth
    l2 = memory.l2 / (L2_OVER_DRAM * limits.dram_bandwidth)
    lsu = _load_instructions(task, mapping, padded, memory) / (limits.sm_count * limits.clock_hz)

    peak = limits.fp64_flops if dtype == "float64" else limits.fp32_flops
    arithmetic = statement_flops(problem, statement) * (padded / max(outputs, 1)) / peak
    points = sum(math.prod(sizes[i] for i in g.indices) for g in reduction_of(statement).groups)
    # reduction threads: each sums 1/R of the terms, then log2(R) combining steps
    combine = mapping.combine_threads
    chain = points / combine + 8 * math.log2(combine)

    if registers is None:
        registers = estimated_registers(task, mapping)
    resident = occupancy(mapping, registers, shared_bytes(task, mapping), limits)
    if resident == 0:
        return Terms(math.inf, math.inf, math.inf, math.inf, math.inf, 0.0)
    efficiency, waves = _efficiency(mapping, blocks, resident, limits)
    busiest = min(resident, math.ceil(blocks / limits.sm_count))
    dram /= _streaming(task, mapping, busiest * mapping.threads, limits)
    # a dependent FMA chain, 4 cycles per step, and the staged chunks' fixed
    # cost, once per wave of blocks
    cycles = chain * 4 + staged_chunks(task, mapping) * STEP_CYCLES
    latency = waves * cycles / limits.clock_hz
    factor = 1.0
    if mapping.preload_output:
        factor = PRELOAD_FACTOR[products_per_output(statement) >= 3]
    return Terms(
        dram / _dram_efficiency(mapping, blocks, resident, limits),
        l2 / efficiency,
        lsu / efficiency,
        arithmetic / efficiency,
        latency,
        efficiency,
        factor,
    )


def staged_chunks(task: Task, mapping: Mapping) -> int:
    """The barrier-separated chunks a block of a staged mapping walks through
    (every reduction group's k-steps; an index without one steps by 1); 0
    when nothing is staged."""
    if not mapping.staged:
        return 0
    statement = task.statement
    size = {i: task.problem.index_size(statement, i) for i in statement.indices}
    return sum(
        math.prod(-(-size[i] // mapping.step_of(i, size[i])) for i in group.indices)
        for group in reduction_of(statement).groups
    )


def _efficiency(
    mapping: Mapping, blocks: int, resident: int, limits: DeviceLimits
) -> tuple[float, int]:
    """The share of the machine's throughput the blocks reach, and the waves.

    The busiest SM runs ``ceil(blocks / SMs)`` blocks, at most ``resident`` at a
    time; the machine does ``blocks / SMs`` blocks' work per SM on average, so
    balance is their ratio (a problem of 4 blocks uses 4 SMs of 132).  Latency
    is hidden with 16 or more warps resident on an SM."""
    busiest = math.ceil(blocks / limits.sm_count)
    waves = math.ceil(busiest / resident)
    quantisation = busiest / (waves * resident)  # the last wave's empty slots
    spread = _balance_and_hiding(mapping, blocks, resident, limits)
    return max(1e-3, spread * (0.75 + 0.25 * quantisation)), waves


def _balance_and_hiding(
    mapping: Mapping, blocks: int, resident: int, limits: DeviceLimits
) -> float:
    """The busiest SM's share of the average work per SM, times the share of
    latency hidden (16 or more resident warps hide it)."""
    busiest = math.ceil(blocks / limits.sm_count)
    balance = (blocks / limits.sm_count) / busiest
    warps = min(resident, busiest) * mapping.threads / 32
    return balance * min(1.0, warps / 16)


def _dram_efficiency(mapping: Mapping, blocks: int, resident: int, limits: DeviceLimits) -> float:
    """The share of the DRAM bandwidth the blocks' spread over the SMs reaches:
    the SMs share one bandwidth, so a last partial wave of blocks (fewer resident
    blocks, each then drawing more of it) costs nothing as long as the bytes in
    flight suffice (:func:`_streaming`); what costs is the busiest SM's extra
    blocks and too few warps to hide latency."""
    return max(1e-3, _balance_and_hiding(mapping, blocks, resident, limits))


def _streaming(task: Task, mapping: Mapping, resident_threads: int, limits: DeviceLimits) -> float:
    """The share of the DRAM bandwidth the bytes in flight reach (Little's law):
    an SM's resident threads times the bytes each keeps in flight from tensors
    larger than half of L2 (the loads of :data:`COMPILER_STEPS` reduction steps,
    or of one step per independent accumulator, each as wide as its vector; a
    staged copy's share of a chunk), over the bandwidth times the DRAM latency
    per SM."""
    problem = task.problem
    statement = task.statement
    large = limits.l2_bytes / 2
    steps = max(COMPILER_STEPS, mapping.accumulators)
    per_thread = 0.0
    for access, elements in _staged_elements(task, mapping):
        if problem.nbytes(access.tensor) > large:
            itemsize = problem.program.tensor(access.tensor).itemsize
            per_thread += elements * itemsize / max(1, mapping.threads)
    staged = {s.access for s in mapping.staged}
    for group in reduction_of(statement).groups:
        for access in group.accesses():
            if str(access) in staged or problem.nbytes(access.tensor) <= large:
                continue
            itemsize = problem.program.tensor(access.tensor).itemsize
            loads = math.prod(
                mapping.tile_of(i).per_thread
                for i in set(access.indices)
                if i in statement.parallel_indices
            )
            per_thread += steps * loads * _vector_width(task, mapping, access) * itemsize
    if per_thread == 0:
        return 1.0
    needed = limits.dram_bandwidth * limits.dram_latency / limits.sm_count
    return max(1e-3, min(1.0, per_thread * resident_threads / needed))


def _vector_width(task: Task, mapping: Mapping, access: Access) -> int:
    """Elements one load of an unstaged ``access`` takes (reduction threads' runs)."""
    if not mapping.reduction_threads:
        return 1
    return run_vector_width(task, mapping, access, mapping.reduction_threads[0][0])


@dataclass(frozen=True)
class _Traffic:
    """Bytes from DRAM and from L2, and the output's warp footprint."""

    dram: float
    l2: float
    output_lines: int
    wavefronts: float  # L1 wavefronts of the direct (unstaged) loads beyond one, per point
    staged_vectors: float  # vector loads of the staged tiles' copies, per block


def _memory_traffic(task: Task, mapping: Mapping, blocks: int, limits: DeviceLimits) -> _Traffic:
    """Compulsory DRAM bytes (times the sector waste of uncoalesced accesses to
    tensors larger than L2, except an output's whose sectors the neighbouring
    blocks complete, :func:`completed_by_neighbours`; and the cost of short
    runs), block-tile re-reads
    beyond L2, the pad copies; and what the blocks read from L2."""
    problem = task.problem
    statement = task.statement
    sizes = {i: problem.index_size(statement, i) for i in statement.indices}
    itemsize = 8 if compute_dtype(task) == "float64" else 4
    large = limits.l2_bytes / 2
    staged = {s.access for s in mapping.staged}
    output_bytes = problem.nbytes(statement.output.tensor)
    shape = warp_footprint(problem, statement, mapping, statement.output)
    output_lines, waste = shape.lines, shape.waste
    runs = run_efficiency(run_bytes(problem, statement, mapping, statement.output, False))
    if output_bytes <= large:
        waste = 1.0
    elif completed_by_neighbours(task, mapping, statement.output):
        waste = 1.0 / runs
    else:
        waste = waste / runs
    output_passes = 2 if statement.op != "=" else 1  # read and written for += and -=
    compulsory = output_bytes * output_passes * waste
    l2 = float(output_bytes * output_passes)
    reread = 0.0
    wavefronts = 0.0
    vectors = 0.0
    groups = reduction_of(statement).groups
    for group in groups:
        k = math.prod(sizes[i] for i in group.indices)
        for access in group.accesses():
            tensor_bytes = problem.nbytes(access.tensor)
            is_staged = str(access) in staged
            width, requests = 1, 1.0
            if is_staged:
                run = run_bytes(problem, statement, mapping, access, True)
                lines, waste = 1, 1 / run_efficiency(run)
                vectors += _tile_bytes(task, mapping, access) / min(16, max(run, itemsize))
            else:
                width = _vector_width(task, mapping, access)
                shape = warp_footprint(problem, statement, mapping, access, width)
                lines, waste, requests = shape.lines, shape.waste, shape.requests
            compulsory += tensor_bytes * (waste if tensor_bytes > large else 1.0)
            wavefronts += (
                k
                * (lines - 1)
                * math.prod(
                    mapping.tile_of(i).per_thread
                    for i in set(access.indices)
                    if i in statement.parallel_indices
                )
                / width
            )
            footprint = itemsize * math.prod(
                mapping.tile_of(i).tile if i in statement.parallel_indices else sizes[i]
                for i in set(access.indices)
            )
            traffic = footprint * blocks
            l2 += traffic * (waste if is_staged else requests)
            if tensor_bytes > large:
                reread += max(0.0, traffic - tensor_bytes) * 0.25
    if mapping.boundary == "pad" and any(
        sizes[d] % mapping.tile_of(d).tile for d in statement.parallel_indices
    ):
        # pad and crop copies: every tensor read once more and written padded
        compulsory += 2 * (
            output_bytes * output_passes
            + sum(problem.nbytes(a.tensor) for g in groups for a in g.accesses())
        )
    return _Traffic(compulsory + reread, l2, output_lines, wavefronts, vectors)


def completed_by_neighbours(task: Task, mapping: Mapping, access: Access) -> bool:
    """Whether the blocks numbered next to a block use the rest of the 32-byte
    sectors it touches of ``access``: the first index along the access's memory
    order that the block's tile does not cover whole is the fastest grid index of
    several blocks.  Those sectors are then fetched from DRAM (or written back)
    once, whole, while L2 holds them between the neighbours, so one block's
    sector waste costs L2 bandwidth but not DRAM bandwidth (seed 47's
    ``awdfbq,dqia->fqwbi``, column-major: each block writes 8 bytes per sector of
    ``C``, and its neighbour along ``q`` the next 8).  Used for the output only:
    applied to inputs and to short runs as well, it changed 95 plans and lost up
    to 3.7x on some (docs/gpu.md "Grid order")."""
    problem = task.problem
    statement = task.statement

    def partial(index: str) -> bool:  # several blocks along the index
        return mapping.tile_of(index).tile < problem.index_size(statement, index)

    for index in natural_order(problem, access):
        if index in statement.parallel_indices and partial(index):
            grid = (*mapping.grid_order, *statement.parallel_indices)
            return index == next(i for i in grid if partial(i))
    return True  # the block's tile spans the whole tensor


def _tile_bytes(task: Task, mapping: Mapping, access: Access) -> int:
    """Bytes of ``access``'s tile over its whole reduction (all chunks)."""
    problem = task.problem
    statement = task.statement
    itemsize = problem.program.tensor(access.tensor).itemsize
    total = itemsize
    for index in set(access.indices):
        if index in statement.parallel_indices:
            total *= mapping.tile_of(index).tile
        else:
            total *= problem.index_size(statement, index)
    return total


def _load_instructions(task: Task, mapping: Mapping, padded: int, memory: _Traffic) -> float:
    """Warp-wide load and store instructions (after register-tile reuse): shared
    or L1 reads of every point, the output's loads (+=) and stores, and the
    staged tiles' copies (a global load and a shared store per vector)."""
    problem = task.problem
    statement = task.statement
    sizes = {i: problem.index_size(statement, i) for i in statement.indices}
    staged = {s.access for s in mapping.staged}
    loads_per_point = 0.0
    for group in reduction_of(statement).groups:
        k = math.prod(sizes[i] for i in group.indices)
        for access in group.accesses():
            # a staged operand's runs of adjacent elements are single vector loads,
            # and so are a reduction thread's runs of an unstaged one
            staged_runs = str(access) in staged
            width = 1 if staged_runs else _vector_width(task, mapping, access)
            loads_per_point += (
                k
                * math.prod(
                    mapping.tile_of(i).per_thread
                    // (mapping.tile_of(i).chunk if staged_runs else 1)
                    for i in set(access.indices)
                    if i in statement.parallel_indices
                )
                / width
            )
    threads_total = padded / max(1, mapping.register_tile)
    lanes = min(32, max(1, mapping.threads))  # a block of fewer threads issues part-empty warps
    instructions = threads_total * (loads_per_point + memory.wavefronts) / lanes
    # the output's loads (+=) and stores, one wavefront per 128-byte line each
    output_passes = 2 if statement.op != "=" else 1
    instructions += padded * output_passes * memory.output_lines / 32
    blocks = padded / max(1, math.prod(mapping.tile_of(d).tile for d in statement.parallel_indices))
    return instructions + 2 * blocks * memory.staged_vectors / 32


#: Measured effect of reading an update's output before the reduction (H100):
#: several products per output 0.503 -> 0.374 ms (the d1 family); one product,
#: already memory-bound, 0.108 -> 0.112 ms (sd_t_d1_1).
PRELOAD_FACTOR = {False: 1.03, True: 0.75}


@dataclass(frozen=True)
class Footprint:
    """How a block's load of one access touches memory (see :func:`warp_footprint`)."""

    lines: int  # 128-byte lines of one warp's load instruction (L1 wavefronts)
    waste: float  # sector bytes fetched over bytes used, the block's loads together
    requests: float  # L2 request slots (a line each) per 128 bytes used, at least 1


def warp_footprint(
    problem: Problem, statement, mapping: Mapping, access, width: int = 1
) -> Footprint:
    """How the block's threads, in threadIdx order, touch memory with one load of
    ``access`` each (``width`` elements per load: a reduction thread's run), counting
    the elements the same threads take along the access's contiguous index in their
    register tiles, or walk along it in their reduction loop:

    * ``lines``: the 128-byte lines of the first warp's load instruction;
    * ``waste``: the 32-byte sectors the block touches, in bytes, over the bytes
      it uses (1.0: fully coalesced);
    * ``requests``: L2 requests per 128 bytes used, each warp sending one request
      per line holding sectors no earlier warp of the block fetched (a later
      warp's read of a fetched sector hits L1): 1.0 when every request carries a
      whole line, 4.0 when each carries one sector of a line."""
    itemsize = problem.program.tensor(access.tensor).itemsize
    strides = tuple(dict(zip(access.indices, problem.strides(access.tensor), strict=True)).items())
    split = mapping.reduction_threads  # lanes beyond the output threads, or before them
    contiguous = next((i for i, s in strides if s == 1), None)
    along = None  # the tile along the contiguous index: the thread's own elements there
    walked = 1  # elements a thread's reduction loop walks along the contiguous index
    run = mapping.reduction_chunk  # a reduction thread's run along its index
    if contiguous is not None and contiguous in statement.parallel_indices:
        along = mapping.tile_of(contiguous)
    elif contiguous is not None and contiguous in dict(split):
        walked = width  # the rest of the run: loads of other steps
    elif contiguous is not None:
        walked = min(32, problem.index_size(statement, contiguous))
    threaded = tuple(t for t in mapping.parallel if t.threads > 1)
    layout = _Layout(threaded, tuple(split), mapping.reduction_fastest, run)
    return _footprint(strides, itemsize, layout, mapping.threads, along, walked)


@dataclass(frozen=True)
class _Layout:
    """The block's thread digits: output tiles, reduction threads (runs of ``run``
    terms), which of the two varies fastest."""

    threaded: tuple[ParallelTile, ...]
    split: tuple[tuple[str, int], ...]
    fastest: bool
    run: int

    def coordinates(self, thread: int) -> dict[str, int]:
        coordinate: dict[str, int] = {}
        rest = thread
        for split in self.split if self.fastest else ():
            rest = self._split_digit(split, rest, coordinate)
        rest = first_coordinates(self.threaded, rest, coordinate)
        for split in () if self.fastest else self.split:
            rest = self._split_digit(split, rest, coordinate)
        return coordinate

    def _split_digit(self, split: tuple[str, int], rest: int, coordinate: dict[str, int]) -> int:
        index, threads = split
        digit, rest = rest % threads, rest // threads
        coordinate[index] = digit * self.run  # consecutive reduction threads: runs apart
        return rest


@functools.lru_cache(maxsize=4096)
def _footprint(
    strides: tuple[tuple[str, int], ...],
    itemsize: int,
    layout: _Layout,
    threads: int,
    along: ParallelTile | None,
    walked: int,
) -> Footprint:
    """:func:`warp_footprint` of one block layout (memoised: many mappings of a
    search share their thread layout)."""
    first_lines: set[int] = set()
    elements: set[int] = set()
    fetched: set[int] = set()  # sectors an earlier warp (or this one) fetched
    requests = 0
    for warp in range(math.ceil(threads / 32)):
        sent: set[int] = set()
        for thread in range(warp * 32, min(threads, warp * 32 + 32)):
            coordinate = layout.coordinates(thread)
            offset = sum(stride * coordinate.get(i, 0) for i, stride in strides)
            if warp == 0:
                first_lines.add(offset * itemsize // 128)
            if along is None:  # the run, or the loop's next iterations, use the sector
                mine = [offset + step for step in range(walked)]
            else:  # the thread's elements relative to its first (the same for every thread)
                mine = [
                    offset + along.local(0, step) - along.local(0, 0)
                    for step in range(along.per_thread)
                ]
            elements.update(mine)
            for element in mine:
                sector = element * itemsize // 32
                if sector not in fetched:
                    sent.add(sector // 4)
                    fetched.add(sector)
        requests += len(sent)
    used = len(elements) * itemsize
    return Footprint(
        max(1, len(first_lines)),
        max(1.0, len(fetched) * 32 / used),
        max(1.0, requests * 128 / used),
    )
