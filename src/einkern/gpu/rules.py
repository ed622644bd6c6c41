"""The decision's rules: small named functions, each reading a task's :class:`Facts`
and the configuration built so far and returning its :class:`Change` (new values
of some fields and a one-line reason), or None when it does not apply.  The
table that orders them is :data:`einkern.gpu.decision.RULES`; ``docs/rules.md``
has a section per rule (what it does, why, the measurements behind it).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields, replace
from functools import cached_property
from typing import Any

from ..errors import BackendError
from ..ir.analysis import coalescing_weights, statement_flops
from ..ir.task import Task
from .config import NO_STAGING, CudaConfig, StagingConfig
from .device import DeviceLimits
from .lower import compute_dtype
from .space import (
    K_STEPS,
    Roles,
    _pow2,
    chunk_fits,
    config_to_mapping,
    products_per_output,
    roles,
    spreads,
    violation,
    z_index,
)
from .staging import natural_order, staged_bytes

#: Padded copies are chosen when they cost less than this share of the kernel.
PAD_SHARE = 0.10
#: Blocks per SM the ``fill-machine`` rule aims for (two waves).
WAVES = 2


@dataclass(frozen=True)
class Facts:
    """What the rules read about a task (computed once per decision)."""

    task: Task
    limits: DeviceLimits

    @cached_property
    def size(self) -> dict[str, int]:
        statement = self.task.statement
        return {i: self.task.problem.index_size(statement, i) for i in statement.indices}

    @cached_property
    def roles(self) -> Roles:
        return roles(self.task)

    @property
    def parallel(self) -> tuple[str, ...]:
        return tuple(self.task.statement.parallel_indices)

    @cached_property
    def reduction(self) -> int:
        """Terms of the main reduction (0: none)."""
        k = self.roles.k
        return math.prod(self.size[i] for i in k) if k else 0

    @cached_property
    def double(self) -> bool:
        return compute_dtype(self.task) == "float64"

    @cached_property
    def products(self) -> int:
        return products_per_output(self.task.statement)

    @cached_property
    def spreads(self) -> bool:
        return spreads(self.task.statement)

    def largest(self, indices, exclude=()) -> str:
        """The largest of ``indices`` (first on ties) of more than one element, or ""."""
        indices = list(indices)
        pool = [i for i in indices if i not in exclude and self.size[i] > 1]
        if not pool:
            return ""
        return max(pool, key=lambda i: (self.size[i], -indices.index(i)))

    def following(self, x: str) -> str:
        """The output index after ``x`` in the output's memory order ("" if none)."""
        out = self.task.statement.output
        column = self.task.problem.program.tensor(out.tensor).layout == "column"
        memory = list(out.indices if column else reversed(out.indices))
        return memory[memory.index(x) + 1] if x in memory[:-1] else ""

    def blocks(self, config: CudaConfig) -> int:
        """Thread blocks of the mapping ``config`` describes."""
        mapping = config_to_mapping(self.task, config)
        return math.prod(math.ceil(self.size[d] / mapping.tile_of(d).tile) for d in self.parallel)


@dataclass(frozen=True)
class Change:
    """What a rule does: new values of configuration fields, and why.  ``final``:
    no later rule applies."""

    values: dict[str, Any]
    reason: str
    final: bool = False


# ---- where the threads go ----------------------------------------------------


def rank0_output(facts: Facts, config: CudaConfig) -> Change | None:
    """rank0-output: no output index, one thread (final)."""
    if facts.parallel:
        return None
    return Change({}, "rank-0 output: a single thread", final=True)


def coalesced_x(facts: Facts, config: CudaConfig) -> Change:
    """coalesced-x: the output's contiguous index on threadIdx.x."""
    contiguous = facts.roles.output_contiguous
    x = (
        contiguous
        if contiguous and facts.size[contiguous] > 1
        else (facts.largest(facts.parallel) or facts.parallel[0])
    )
    out = facts.task.statement.output.tensor
    return Change(
        {"x": x}, f"{x} → threadIdx.x: contiguous index of the output {out} (coalesced stores)"
    )


def coalescing_weights_note(facts: Facts, config: CudaConfig) -> Change | None:
    """coalescing-weights: records R-Stream's coalescing tuples (no change)."""
    weights = coalescing_weights(facts.task.problem, facts.task.statement)
    if not weights:
        return None
    ranked = sorted(weights.items(), key=lambda item: -item[1])
    return Change(
        {},
        "accesses whose stride-1 dimension each index walks × their executions "
        "(R-Stream tuples): " + ", ".join(f"{i} {w:.3g}" for i, w in ranked),
    )


def second_index(facts: Facts, config: CudaConfig) -> Change | None:
    """second-index: y from the output's next index, the other operand, or the largest."""
    x, r, size = config.x, facts.roles, facts.size
    following = facts.following(x)
    itemsize = 8 if facts.double else 4
    if size[x] * itemsize < 128 and following and 1 < size[following] <= 64:
        y, why = following, "next index in the output's memory order: a warp covers contiguous rows"
    elif x in r.m or x in r.n:
        other = r.n if x in r.m else r.m
        y = facts.largest(other) or facts.largest(facts.parallel, (x,))
        why = "free index of the other operand (register reuse of A and B)"
    else:
        y, why = facts.largest(facts.parallel, (x,)), "largest remaining output index"
    return Change({"y": y}, f"{y} → second thread index: {why}") if y else None


def block_shape(facts: Facts, config: CudaConfig) -> Change:
    """block-shape: up to a warp along x, 256 threads in all."""
    x, y, size = config.x, config.y, facts.size
    tx = min(32, _pow2(size[x])) if y else min(256, _pow2(size[x]))
    ty = max(1, min(256 // tx, _pow2(size[y]))) if y else 1
    shape = (
        "up to a warp along x, 256 threads in all"
        if y
        else "up to 256 threads along x (no second index)"
    )
    return Change({"block": (tx, ty)}, f"{tx} × {ty} threads: {shape}")


def whole_small_extents(facts: Facts, config: CudaConfig) -> Change | None:
    """whole-small-extents: small x and y covered whole by the block."""
    x, y, size = config.x, config.y, facts.size
    if not (size[x] < 32 and size[x] != config.block[0] and y and size[y] <= 64):
        return None
    return Change(
        {"block": (0, 0)},
        f"{x} = {size[x]} and {y} = {size[y]} are small: the block covers them whole",
    )


def unrolled_reduction(facts: Facts, config: CudaConfig) -> Change | None:
    """unrolled-reduction: the k-step loop fully unrolled."""
    if not facts.reduction:
        return None
    return Change({"unroll": -1}, "the k-step loop fully unrolled")


# ---- reuse: one of these applies (group "reuse") ----------------------------


def gemm_register_tile(facts: Facts, config: CudaConfig) -> Change | None:
    """gemm-register-tile: a long reduction with operands on both sides."""
    r, y = facts.roles, config.y
    if not (facts.reduction >= 32 and r.m and r.n):
        return None
    regs = ((4, 4, 1) if facts.double else (8, 8, 1)) if y else (4, 1, 1)
    across = _both_along_k(facts)
    step, padding = (16, 4) if across else (8, 0)
    values: dict[str, Any] = {
        "regs": regs,
        "staging": StagingConfig("all", step, True, padding, "compute"),
        "assign": "chunked" if y else "cyclic",
    }
    if y:
        values["block"] = (16, 16)
    return Change(
        values,
        f"reduction of {facts.reduction} terms with operands on both sides: "
        f"register tile {regs[0]}×{regs[1]} (x cyclic in runs of one vector: "
        "coalesced stores and vector loads from shared memory; y adjacent), "
        f"inputs staged in shared memory per k-step of {step} with the threaded "
        "index innermost, prefetching"
        + (
            f"; both operands are contiguous along the sum ({across}): k-step 16 (runs "
            "of 64 bytes per row, not 32) and tiles padded by 4 elements (their "
            "transposing stores would meet in one bank)"
            if across
            else ""
        ),
    )


def _both_along_k(facts: Facts) -> str:
    """The summed index when it is the stride-1 index of both operands of the main
    product (A·Bᵀ on row-major matrices), else ""."""
    r = facts.roles
    if r.a is None or r.b is None or len(r.k) != 1:
        return ""
    problem = facts.task.problem
    if any(natural_order(problem, access)[:1] != r.k for access in (r.a, r.b)):
        return ""
    return r.k[0]


def _short(facts: Facts, config: CudaConfig) -> bool:
    """A short reduction and a second thread index of at least 8 threads."""
    return facts.reduction >= 2 and bool(config.y) and config.block[1] >= 8


#: Blocks per SM that the product-family rule keeps room for in shared memory when
#: the block covers small extents whole (measured: docs/rules.md#product-family).
FAMILY_RESIDENT_BLOCKS = 3


def product_family(facts: Facts, config: CudaConfig) -> Change | None:
    """product-family: a short reduction summed over three or more products."""
    whole = config.block == (0, 0)
    if not ((_short(facts, config) or (whole and facts.reduction >= 2)) and facts.spreads):
        return None
    size, y = facts.size, config.y
    following = facts.following(config.x)
    if following and size[following] >= 16:
        y = following
    values: dict[str, Any] = {
        "y": y,
        "regs": (1, 2, 2),
        "spread": 2,
        "unroll": 1,
        "staging": StagingConfig("all", 4, False, 1, "natural"),
    }
    resident = ""
    if whole:
        ty = _family_rows(facts, replace(config, **values), y)
        if ty is None:
            return None
        resident = (
            f"; {config.x} whole, {y} in tiles of {2 * ty}: the largest whose staged "
            f"slices leave shared memory for {FAMILY_RESIDENT_BLOCKS} blocks per SM"
        )
    else:
        ty = max(1, min(config.block[1], _pow2(size[y])) // 2)
    values["block"] = (0 if whole else config.block[0], ty)
    return Change(
        values,
        f"short reduction ({facts.reduction} terms) in {facts.products} products: {y} → second "
        "thread index, two outputs per thread along every output index but x, every input's "
        "block slice staged in shared memory per k-step" + resident,
    )


def _family_rows(facts: Facts, config: CudaConfig, y: str) -> int | None:
    """Threads along ``y`` (two outputs each) for a block covering ``config.x`` whole:
    the most whose tile divides ``y``'s extent and whose staged tiles fit
    :data:`FAMILY_RESIDENT_BLOCKS` times in an SM's shared memory."""
    task, size = facts.task, facts.size[y]
    budget = facts.limits.shared_per_sm // FAMILY_RESIDENT_BLOCKS - 1024  # 1 KiB per block
    for rows in range(size // 2, 0, -1):
        if size % (2 * rows):
            continue
        candidate = replace(config, block=(0, rows))
        if all(  # the boundary rule, later, picks the policy the tiles need
            violation(task, replace(candidate, boundary=policy), facts.limits) is not None
            for policy in ("exact", "guard")
        ):
            continue
        if staged_bytes(task, config_to_mapping(task, candidate)) <= budget:
            return rows
    return None


def broadcast_operand(facts: Facts, config: CudaConfig) -> Change | None:
    """broadcast-operand: an operand read by neither x nor y staged whole."""
    if not _short(facts, config):
        return None
    shape = _broadcast_shape(facts.roles, config.x, facts.following(config.x))
    if shape is None:
        return None
    y, stage = shape
    ty = max(1, min(config.block[1], _pow2(facts.size[y])) // 2)
    whole = min([k for k in K_STEPS if k >= facts.reduction] or [K_STEPS[-1]])
    return Change(
        {
            "y": y,
            "block": (config.block[0], ty),
            "unroll": 1,
            "regs": (1, 2, 4),
            "assign": "adjacent",
            "staging": StagingConfig(stage, whole, True, 0, "compute"),
        },
        f"short reduction ({facts.reduction} terms), one product: {y} → second thread index "
        f"(next in the output's memory order), the operand read by neither {config.x} nor "
        f"{y} staged whole in shared memory (broadcast), 2 × 4 outputs per thread",
    )


def _broadcast_shape(r: Roles, x: str, following: str) -> tuple[str, str] | None:
    """(y, "A" or "B") when the main product's operand holding x also holds the
    output's next index in memory order and the other operand holds neither."""
    if not (r.a and r.b and following) or len(r.k) != 1:
        return None
    for name, same, other in (("B", r.a, r.b), ("A", r.b, r.a)):
        if (
            x in same.indices
            and following in same.indices
            and x not in other.indices
            and following not in other.indices
        ):
            return following, name
    return None


def short_reduction_registers(facts: Facts, config: CudaConfig) -> Change | None:
    """short-reduction-registers: reuse through a 4 × z register tile."""
    if not _short(facts, config):
        return None
    products = facts.products
    regs = (1, 4, 4 if products >= 3 else 2)
    return Change(
        {"regs": regs, "block": (config.block[0], config.block[1] // 4)},
        f"short reduction ({facts.reduction} terms"
        + (f", {products} products" if products > 1 else "")
        + f"): 4 × {regs[2]} outputs per thread along y and a register-only index that gives "
        "the other operand reuse; reads through the cache",
    )


def staged_faces(facts: Facts, config: CudaConfig) -> Change | None:
    """staged-faces: whole small faces, every input slice staged once."""
    if not (facts.reduction >= 2 and config.y and config.block == (0, 0) and facts.products == 1):
        return None
    z = z_index(facts.task, config.x, config.y)
    whole = bool(z) and facts.size[z] <= 16
    return Change(
        {
            "regs": (1, 1, facts.size[z] if whole else 4),
            "staging": StagingConfig("all", 16, False, 1, "natural"),
        },
        f"short reduction ({facts.reduction} terms) over whole small faces: "
        + (
            f"all {facts.size[z]} outputs along {z} per thread"
            if whole
            else "4 outputs per thread along a register-only index"
        )
        + ", every input's slice staged in shared memory once (each is read by a whole row "
        "of threads)",
    )


def short_reduction_cache(facts: Facts, config: CudaConfig) -> Change | None:
    """short-reduction-cache: a register-only tile of 4, reads through the cache."""
    if not (facts.reduction >= 2 and config.y):
        return None
    return Change(
        {"regs": (1, 1, 4)},
        f"short reduction ({facts.reduction} terms): 4 outputs per thread along a "
        "register-only index that gives the other operand reuse; reads through the "
        "cache (no staging)",
    )


#: Bytes of each operand a thread of an elementwise statement has in flight:
#: several cyclic outputs per thread, each load still coalesced (docs/rules.md,
#: no-reuse).
BYTES_IN_FLIGHT = 8


def no_reuse(facts: Facts, config: CudaConfig) -> Change:
    """no-reuse: one output element per thread, or for an elementwise statement
    (no sum) :data:`BYTES_IN_FLIGHT` bytes of each operand per thread."""
    per_thread = max(1, BYTES_IN_FLIGHT // (8 if facts.double else 4))
    if facts.reduction or not facts.parallel or per_thread == 1:
        return Change({}, "no reuse to exploit: one output element per thread")
    return Change(
        {"regs": (per_thread, 1, 1), "assign": "cyclic"},
        f"no reuse to exploit: {per_thread} outputs per thread along {config.x}, "
        f"{per_thread * config.block[0]} apart by {config.block[0]} (each load coalesced, "
        f"{BYTES_IN_FLIGHT} bytes of each operand in flight per thread)",
    )


# ---- fitting the tile to the extents and the machine ---------------------------


def clip_register_tile(facts: Facts, config: CudaConfig) -> Change | None:
    """clip-register-tile: no register tile larger than its extent."""
    x, y, size = config.x, config.y, facts.size
    rx, ry, rz = config.regs
    tx, ty = config.block
    if not y:
        ry = 1
    while rx > 1 and (tx or size[x]) * rx > _pow2(size[x]):
        rx //= 2
    while y and ry > 1 and (ty or size[y]) * ry > _pow2(size[y]):
        ry //= 2
    if (rx, ry, rz) == config.regs:
        return None
    return Change(
        {"regs": (rx, ry, rz)},
        f"register tile {rx}×{ry}: no larger than the extents of {x}" + (f" and {y}" if y else ""),
    )


def preload_output(facts: Facts, config: CudaConfig) -> Change | None:
    """preload-output: several products update the output: read it first."""
    if not (config.preload is not None and facts.spreads):
        return None
    return Change(
        {"preload": True},
        "an update of one sum of several products: the output is "
        "read into the accumulators before the reduction (its "
        "latency overlaps the arithmetic)",
    )


def fill_machine(facts: Facts, config: CudaConfig) -> Change | None:
    """fill-machine: shrink the register tile until two waves of blocks."""
    target = WAVES * facts.limits.sm_count
    start = config
    while facts.blocks(config) < target:
        rx, ry, rz = config.regs
        if rx * ry == 1:
            break
        smaller = (max(1, rx // 2), ry, rz) if rx >= ry else (rx, max(1, ry // 2), rz)
        config = replace(config, regs=smaller)
    blocks = facts.blocks(config)
    if blocks >= target and config == start:
        return None
    reasons = []
    if config != start:
        reasons.append(f"register tile shrunk to {config.regs[0]}×{config.regs[1]} for more blocks")
    if blocks < target:
        reasons.append(
            f"only {blocks} blocks for {facts.limits.sm_count} SMs: the problem is small"
        )
    return Change({"regs": config.regs}, "; ".join(reasons))


def vector_runs_fit(facts: Facts, config: CudaConfig) -> Change | None:
    """vector-runs: no chunked assignment without whole vector runs."""
    rx, ry, _ = config.regs
    if config.assign != "chunked" or chunk_fits(facts.task, rx):
        return None
    assign = "mixed" if ry > 1 else "cyclic"
    elements = f"{rx} element{'s' if rx > 1 else ''}"
    return Change(
        {"assign": assign},
        f"{elements} per thread along x make no runs of one vector: {assign} assignment",
    )


def boundary(facts: Facts, config: CudaConfig) -> Change | None:
    """boundary: exact, else padded copies when cheap, else guarded edges (final)."""
    share = _pad_share(facts.task, facts.limits)
    boundaries = ("exact", "pad", "guard") if share < PAD_SHARE else ("exact", "guard")
    for choice in boundaries:
        if violation(facts.task, replace(config, boundary=choice), facts.limits) is None:
            if choice == "exact":
                return Change({}, "the tiles divide every extent: no edges", final=True)
            if choice == "guard":
                return Change(
                    {"boundary": "guard"},
                    "tiles do not divide every extent: guarded edges",
                    final=True,
                )
            return Change(
                {"boundary": "pad"},
                f"tiles do not divide every extent, and padded copies cost about "
                f"{share:.0%} of the kernel: run on padded copies (aligned, "
                "unguarded loads)",
                final=True,
            )
    return None


def _pad_share(task: Task, limits: DeviceLimits) -> float:
    """Estimated time of the pad and crop copies over that of the kernel: every
    tensor read and written once more (plus a few µs of launches) against the
    statement's flops at 60 % of the dtype's peak."""
    problem = task.problem
    statement = task.statement
    tensors = {statement.output.tensor} | {a.tensor for a in statement.reads()}
    copies = 2 * sum(problem.nbytes(t) for t in tensors) / limits.dram_bandwidth + 10e-6
    peak = limits.fp64_flops if compute_dtype(task) == "float64" else limits.fp32_flops
    kernel = statement_flops(problem, statement) / (0.6 * peak)
    return copies / kernel if kernel > 0 else math.inf


def simplify(facts: Facts, config: CudaConfig) -> Change | None:
    """simplify: drop staging, then the register tile, then unrolling (final)."""
    simpler: tuple[dict[str, Any], ...] = (
        {"staging": NO_STAGING},
        {"staging": NO_STAGING, "regs": (1, 1, 1), "assign": "cyclic"},
        {"staging": NO_STAGING, "regs": (1, 1, 1), "assign": "cyclic", "unroll": 1},
    )
    for values in simpler:
        for choice in ("exact", "guard"):
            candidate = {**values, "boundary": choice}
            if violation(facts.task, replace(config, **candidate), facts.limits) is None:
                return Change(
                    candidate, "the preferred mapping does not fit: simplified", final=True
                )
    return None


def direct_fallback(facts: Facts, config: CudaConfig) -> Change:
    """direct-fallback: the direct mapping, one output per thread (final); like the
    configurations recorded before the rule table, it leaves out the ``spread`` and
    ``preload`` knobs."""
    x, y = config.x, config.y
    why: list[str] = []
    for block, y_index in (
        ((0, 0), y),
        ((32, 1), ""),
        ((64, 1), ""),
        ((128, 1), ""),
        ((256, 1), ""),
        ((0, 1), ""),
    ):
        if block == (0, 0) and not y:
            continue
        for choice in ("exact", "guard"):
            candidate = CudaConfig(x=x, y=y_index, block=block, boundary=choice)
            problem = violation(facts.task, candidate, facts.limits)
            if problem is None:
                values = {f.name: getattr(candidate, f.name) for f in fields(CudaConfig)}
                return Change(values, "fallback: direct mapping", final=True)
            why.append(problem)
    statement = facts.task.statement
    raise BackendError(
        f"no CUDA mapping fits statement {facts.task.position} ({statement}) on "
        f"{facts.limits.name}: even one output per thread fails "
        f"({'; '.join(dict.fromkeys(why))})",
        statement.span,
        hint="use smaller extents, or --backend cpu",
    )
