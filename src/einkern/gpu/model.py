"""Analytic cost of a mapping, for ranking candidates before measuring them
(Fousek's model-pruned search; R-Stream's cost of data movement).

The predicted time is the largest of four terms, each a throughput bound:

* DRAM: every tensor read once and the output written (read too for ``+=``),
  plus the re-reads that block tiles cause beyond what L2 holds;
* L1/shared: load instructions per thread (after register-tile reuse) over the
  SMs' load throughput;
* arithmetic: flops over the peak of the dtype;
* latency: one reduction chain per thread cannot run faster than the chain.

Each is divided by an efficiency from occupancy (threads, registers, shared
memory per SM) and wave quantisation (the last partial wave of blocks).
"""

from __future__ import annotations

import math

from ..ir.analysis import statement_flops
from ..ir.nodes import Problem
from .device import H100, DeviceLimits
from .lower import compute_dtype
from .mapping import Mapping
from .normalize import reduction_of


def occupancy(mapping: Mapping, registers: int, shared_bytes: int,
              limits: DeviceLimits = H100) -> int:
    """Resident blocks per SM."""
    threads = mapping.threads
    by_threads = limits.max_threads_per_sm // max(threads, 1)
    by_registers = limits.registers_per_sm // max(1, registers * threads)
    by_shared = limits.shared_per_sm // shared_bytes if shared_bytes else 32
    return max(0, min(by_threads, by_registers, by_shared, 32))


def estimated_registers(problem: Problem, position: int, mapping: Mapping) -> int:
    words = 2 if compute_dtype(problem, position) == "float64" else 1
    groups = max(1, len(reduction_of(problem.program.statements[position]).groups))
    tile = mapping.register_tile
    operands = sum(t.per_thread for t in mapping.parallel)
    prefetch = 8 if mapping.prefetch else 0
    return min(255, words * (groups * tile + operands + prefetch) + 24)


def predicted_time(problem: Problem, position: int, mapping: Mapping,
                   limits: DeviceLimits = H100) -> float:
    """Predicted seconds for statement ``position`` under ``mapping``."""
    statement = problem.program.statements[position]
    dtype = compute_dtype(problem, position)
    itemsize = 8 if dtype == "float64" else 4
    sizes = {i: problem.index_size(statement, i) for i in statement.indices}
    blocks = math.prod(math.ceil(sizes[d] / mapping.tile_of(d).tile)
                       for d in statement.parallel_indices)
    outputs = math.prod(sizes[d] for d in statement.parallel_indices)
    padded = blocks * math.prod(mapping.tile_of(d).tile for d in statement.parallel_indices)

    # DRAM and L2 traffic: compulsory bytes plus block-tile re-reads beyond L2.
    compulsory = problem.nbytes(statement.output.tensor) * (2 if statement.op != "=" else 1)
    reread = 0.0
    groups = reduction_of(statement).groups
    for group in groups:
        for access in group.accesses():
            tensor_bytes = problem.nbytes(access.tensor)
            compulsory += tensor_bytes
            footprint = itemsize * math.prod(
                mapping.tile_of(i).tile if i in statement.parallel_indices else sizes[i]
                for i in set(access.indices)
            )
            traffic = footprint * blocks
            if tensor_bytes > limits.l2_bytes / 2:
                reread += max(0.0, traffic - tensor_bytes) * 0.25
    dram = (compulsory + reread) / limits.dram_bandwidth

    # Load instructions after register reuse (shared/L1 throughput: 32 lanes per clock).
    loads_per_point = 0
    points = 0
    for group in groups:
        k = math.prod(sizes[i] for i in group.indices)
        points += k
        for access in group.accesses():
            loads_per_point += k * math.prod(
                mapping.tile_of(i).per_thread for i in set(access.indices)
                if i in statement.parallel_indices
            )
    threads_total = padded / max(1, mapping.register_tile)
    load_instructions = threads_total * loads_per_point / 32
    lsu = load_instructions / (limits.sm_count * limits.clock_hz)

    peak = limits.fp64_flops if dtype == "float64" else limits.fp32_flops
    arithmetic = statement_flops(problem, statement) * (padded / max(outputs, 1)) / peak
    latency = points * 4 / limits.clock_hz  # a dependent FMA chain, 4 cycles per step

    registers = estimated_registers(problem, position, mapping)
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
    return max(dram, lsu, arithmetic, latency) / efficiency
