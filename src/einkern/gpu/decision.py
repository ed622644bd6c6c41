"""The decision algorithm: a good mapping without any timing.

Rules, in order (Rivera §3.1, R-Stream §4.3–4.6, MAGMA §4.3, Treduda §3):

1. *Coalescing first*: the output's contiguous index goes to threadIdx.x
   (fastest), cyclically assigned, so a warp stores consecutive addresses.
2. *Register reuse*: the second thread index is taken from the other operand's
   free indices (x in M ⇒ y in N, and vice versa), so that a register tile of
   rx × ry outputs reuses each loaded A value ry times and each B value rx times.
3. *Staging*: inputs of a long reduction (≥ 32 terms) are staged in shared
   memory chunk by chunk, with prefetching and one element of padding.
4. *Fill the machine*: shrink register and block tiles until there are at least
   two waves of blocks over the SMs.
5. *Fit*: the result must pass every hardware check; otherwise fall back to
   simpler mappings, ending with the direct mapping (one output per thread).
   When the tiles do not divide the extents, the edges are guarded, unless the
   statement does so much arithmetic per byte that padded copies of its
   tensors (MAGMA §4.3.2) cost under 10 % of the kernel: then it runs padded.
"""

from __future__ import annotations

import math

from ..ir.analysis import coalescing_weights
from ..ir.task import Task
from .device import H100, DeviceLimits
from .lower import compute_dtype, preload_applies
from .mapping import Mapping
from .space import (
    K_STEPS,
    SCALAR_CONFIG,
    Config,
    _pow2,
    chunk_fits,
    config_to_mapping,
    products_per_output,
    roles,
    spreads,
    violation,
    z_index,
)


def _largest(task: Task, indices, exclude=()) -> str:
    problem = task.problem
    statement = task.statement
    pool = [i for i in indices if i not in exclude and problem.index_size(statement, i) > 1]
    if not pool:
        return ""
    return max(pool, key=lambda i: (problem.index_size(statement, i), -indices.index(i)))


def decide(task: Task, limits: DeviceLimits = H100) -> Mapping:
    """The default mapping of ``task``, with the reasons for it."""
    config, reasons = default_config(task, limits)
    return config_to_mapping(task, config, tuple(reasons))


def default_config(task: Task,
                   limits: DeviceLimits = H100) -> tuple[Config, list[str]]:
    problem = task.problem
    statement = task.statement
    size = {i: problem.index_size(statement, i) for i in statement.indices}
    r = roles(task)
    reasons: list[str] = []
    parallel = list(statement.parallel_indices)
    if not parallel:  # a rank-0 output: one thread computes it
        reasons.append("rank-0 output: a single thread")
        return dict(SCALAR_CONFIG), reasons
    x = r.output_contiguous if r.output_contiguous and size[r.output_contiguous] > 1 else (
        _largest(task, parallel) or parallel[0])
    reasons.append(f"{x} → threadIdx.x: contiguous index of the output "
                   f"{statement.output.tensor} (coalesced stores)")
    weights = coalescing_weights(problem, statement)
    if weights:
        ranked = sorted(weights.items(), key=lambda item: -item[1])
        reasons.append("coalescing weights (R-Stream tuples, accesses whose stride-1 "
                       "dimension the index walks × their executions): "
                       + ", ".join(f"{i} {w:.3g}" for i, w in ranked))
    out = statement.output
    memory = list(out.indices if problem.program.tensor(out.tensor).layout == "column"
                  else reversed(out.indices))
    following = memory[memory.index(x) + 1] if x in memory[:-1] else ""
    itemsize = 8 if compute_dtype(task) == "float64" else 4
    if size[x] * itemsize < 128 and following and 1 < size[following] <= 64:
        y = following
        why = "next index in the output's memory order: a warp covers contiguous rows"
    elif x in r.m:
        y = _largest(task, list(r.n)) or _largest(task, parallel, (x,))
        why = "free index of the other operand (register reuse of A and B)"
    elif x in r.n:
        y = _largest(task, list(r.m)) or _largest(task, parallel, (x,))
        why = "free index of the other operand (register reuse of A and B)"
    else:
        y = _largest(task, parallel, (x,))
        why = "largest remaining output index"
    y_reason_at = len(reasons)  # the reason for y goes here, once the rules settled y
    reduction = math.prod(size[k] for k in r.k) if r.k else 0
    double = compute_dtype(task) == "float64"
    tx = min(32, _pow2(size[x])) if y else min(256, _pow2(size[x]))
    ty = max(1, min(256 // tx, _pow2(size[y]))) if y else 1
    if size[x] < 32 and size[x] != tx and y and size[y] <= 64:
        tx, ty = 0, 0  # whole extents: a warp covers contiguous rows without idle lanes
        reasons.append(f"{x} = {size[x]} and {y} = {size[y]} are small: the block covers them "
                       "whole")
    assign = "cyclic"
    spread = 0
    unroll = -1 if reduction else 1  # the k loop fully unrolled
    if reduction >= 32 and r.m and r.n:
        regs = [4, 4, 1] if double else [8, 8, 1]
        if not y:
            regs = [4, 1, 1]
        # k-step 8, x cyclic in runs of one vector (B's register loads are LDS.128):
        # SGEMM n = 4096 on an H100, 82 % -> 93 % of cuBLAS against k-step 16 with
        # x cyclic element by element.
        staging = ["all", 8, True, 0, "compute"]
        assign = "chunked" if y else "cyclic"
        tx, ty = (16, 16) if y else (tx, ty)
        reasons.append(f"reduction of {reduction} terms with operands on both sides: register "
                       f"tile {regs[0]}×{regs[1]} (x cyclic in runs of one vector: coalesced "
                       "stores and vector loads from shared memory; y adjacent), inputs "
                       "staged in shared memory per k-step of 8 with the threaded index "
                       "innermost, prefetching")
    elif reduction >= 2 and y and ty >= 8 and spreads(statement):
        # Several products update each output (a CCSD(T) family as one statement),
        # each pairing a different split of the output indices between its two
        # operands: only a register tile over every output index gives every
        # product reuse.  Two outputs per thread along each index but x (32 in
        # all), y the next index in the output's memory order, and every input's
        # block slice staged per k-step of 4 (the d1 family on an H200: 0.66 ->
        # 0.54 ms against the 4 × 4 tile).
        products = products_per_output(statement)
        if following and size[following] >= 16:
            y, why = following, "next index in the output's memory order"
        ty = max(1, min(ty, _pow2(size[y])) // 2)
        regs = [1, 2, 2]
        spread = 2
        unroll = 1
        staging = ["all", 4, False, 1, "natural"]
        reasons.append(f"short reduction ({reduction} terms) in {products} products: two "
                       "outputs per thread along every output index but x, every input's "
                       "block slice staged in shared memory per k-step")
    elif reduction >= 2 and y and ty >= 8 and (shape := _broadcast_shape(r, x, following)):
        # One product, a short reduction, and an operand that neither x nor the next
        # output index reads (sd_t_d1_1: t2 lacks h3 and h2): y takes that next
        # index (a warp covers whole lines of the output), every thread reads the
        # broadcast operand, so its block slice is staged whole in shared memory,
        # and four outputs per thread along one of its indices reuse each value of
        # the other (H100: sd_t_d1_1 0.112 -> 0.098 ms, 80 -> 91 % of the floor;
        # H200 89.9 -> 78.8 µs).
        (y, broadcast), why = shape, ""  # the rule's own reason names y
        ty = max(1, min(ty, _pow2(size[y])) // 2)
        unroll = 1
        regs = [1, 2, 4]
        assign = "adjacent"
        whole = min([k for k in K_STEPS if k >= reduction] or [K_STEPS[-1]])
        staging = [broadcast, whole, True, 0, "compute"]
        reasons.append(f"short reduction ({reduction} terms), one product: {y} → second "
                       f"thread index (next in the output's memory order), the operand "
                       f"read by neither {x} nor {y} staged whole in shared memory "
                       "(broadcast), 2 × 4 outputs per thread")
    elif reduction >= 2 and y and ty >= 8:
        # A short reduction: registers, not shared memory, give the reuse.  Four
        # outputs per thread along y and two (four when three or more products
        # update each output) along a register-only index: each loaded value
        # serves more outputs.
        products = products_per_output(statement)
        regs = [1, 4, 4 if products >= 3 else 2]
        ty //= 4
        staging = ["none", 1, False, 0, "natural"]
        reasons.append(f"short reduction ({reduction} terms"
                       + (f", {products} products" if products > 1 else "")
                       + f"): 4 × {regs[2]} outputs per thread along y and a register-only "
                       "index that gives the other operand reuse; reads through the cache")
    elif reduction >= 2 and y and tx == 0 and ty == 0 and products_per_output(statement) == 1:
        # The block covers two small extents whole (a p × p face of a spectral
        # element): every input row is read by a whole row of threads, so staging
        # the block's slices once beats re-reading them through L1/L2.
        # The register-only index is taken whole when it is small: one block per
        # element, each input slice staged once (local_grad3 on an H200: 62 % -> 96 %
        # of the DRAM floor for ut, whose input slice is the whole element).
        z = z_index(task, x, y)
        whole = bool(z) and size[z] <= 16
        regs = [1, 1, size[z] if whole else 4]
        staging = ["all", 16, False, 1, "natural"]
        reasons.append(f"short reduction ({reduction} terms) over whole small faces: "
                       + (f"all {size[z]} outputs along {z} per thread" if whole
                          else "4 outputs per thread along a register-only index")
                       + ", every input's slice staged in shared memory once (each is read "
                       "by a whole row of threads)")
    elif reduction >= 2 and y:
        regs = [1, 1, 4]
        staging = ["none", 1, False, 0, "natural"]
        reasons.append(f"short reduction ({reduction} terms): 4 outputs per thread along a "
                       "register-only index that gives the other operand reuse; reads through "
                       "the cache (no staging)")
    else:
        regs = [1, 1, 1]
        staging = ["none", 1, False, 0, "natural"]
        reasons.append("no reuse to exploit: one output element per thread")
    if y and why:
        reasons.insert(y_reason_at, f"{y} → second thread index: {why}")
    if not y:
        regs[1] = 1
    while regs[0] > 1 and (tx or size[x]) * regs[0] > _pow2(size[x]):
        regs[0] //= 2
    while y and regs[1] > 1 and (ty or size[y]) * regs[1] > _pow2(size[y]):
        regs[1] //= 2
    config: Config = {
        "x": x, "y": y, "block": [tx, ty], "regs": regs, "assign": assign,
        "staging": staging, "unroll": unroll,
        "boundary": "exact",
    }
    if spreads(statement):  # the space has this knob
        config["spread"] = spread
    if preload_applies(statement):  # so has this one
        # Several products per output (arithmetic-heavy): read the output first, so
        # its DRAM latency overlaps the arithmetic (the d1 family on an H100:
        # 0.503 -> 0.374 ms).  A single product is memory-bound already and loses
        # a little (sd_t_d1_1: 0.108 -> 0.112 ms), so it reads the output last.
        config["preload"] = spreads(statement)
        if config["preload"]:
            reasons.append("an update of one sum of several products: the output is read "
                           "into the accumulators before the reduction (its latency "
                           "overlaps the arithmetic)")
    config = _fill_machine(task, config, limits, reasons)
    rx, ry, _ = config["regs"]
    if config["assign"] == "chunked" and not chunk_fits(task, rx):
        # the register tile shrank to fill the SMs
        config = {**config, "assign": "mixed" if ry > 1 else "cyclic"}
    return _make_valid(task, config, limits, reasons), reasons


def _broadcast_shape(r, x: str, following: str) -> tuple[str, str] | None:
    """(y, "A" or "B") when the main product's operand holding x also holds the
    output's next index in memory order and the other operand holds neither."""
    if not (r.a and r.b and following) or len(r.k) != 1:
        return None
    for name, same, other in (("B", r.a, r.b), ("A", r.b, r.a)):
        if x in same.indices and following in same.indices and \
                x not in other.indices and following not in other.indices:
            return following, name
    return None


def _blocks(task: Task, config: Config) -> int:
    problem = task.problem
    mapping = config_to_mapping(task, config)
    statement = task.statement
    return math.prod(math.ceil(problem.index_size(statement, d) / mapping.tile_of(d).tile)
                     for d in statement.parallel_indices)


def _fill_machine(task, config, limits, reasons) -> Config:
    target = 2 * limits.sm_count
    while _blocks(task, config) < target:
        rx, ry, rz = config["regs"]
        if rx * ry == 1:
            break
        smaller = [max(1, rx // 2), ry, rz] if rx >= ry else [rx, max(1, ry // 2), rz]
        config = {**config, "regs": smaller}
    if _blocks(task, config) < target:
        reasons.append(f"only {_blocks(task, config)} blocks for "
                       f"{limits.sm_count} SMs: the problem is small")
    return config


#: Padded copies are chosen when they cost less than this share of the kernel.
PAD_SHARE = 0.10


def _pad_share(task: Task, limits: DeviceLimits) -> float:
    """Estimated time of the pad and crop copies over that of the kernel: every
    tensor read and written once more (plus a few µs of launches) against the
    statement's flops at 60 % of the dtype's peak."""
    from ..ir.analysis import statement_flops

    problem = task.problem
    statement = task.statement
    tensors = {statement.output.tensor} | {a.tensor for a in statement.reads()}
    copies = 2 * sum(problem.nbytes(t) for t in tensors) / limits.dram_bandwidth + 10e-6
    peak = limits.fp64_flops if compute_dtype(task) == "float64" \
        else limits.fp32_flops
    kernel = statement_flops(problem, statement) / (0.6 * peak)
    return copies / kernel if kernel > 0 else math.inf


def _make_valid(task, config, limits, reasons) -> Config:
    share = _pad_share(task, limits)
    boundaries = ("exact", "pad", "guard") if share < PAD_SHARE else ("exact", "guard")
    for boundary in boundaries:
        candidate = {**config, "boundary": boundary}
        if violation(task, candidate, limits) is None:
            if boundary == "guard":
                reasons.append("tiles do not divide every extent: guarded edges")
            if boundary == "pad":
                reasons.append(f"tiles do not divide every extent, and padded copies cost "
                               f"about {share:.0%} of the kernel: run on padded copies "
                               "(aligned, unguarded loads)")
            return candidate
    simpler = [
        {**config, "staging": ["none", 1, False, 0, "natural"]},
        {**config, "staging": ["none", 1, False, 0, "natural"], "regs": [1, 1, 1],
         "assign": "cyclic"},
        {**config, "staging": ["none", 1, False, 0, "natural"], "regs": [1, 1, 1],
         "assign": "cyclic", "unroll": 1},
    ]
    for candidate in simpler:
        for boundary in ("exact", "guard"):
            candidate = {**candidate, "boundary": boundary}
            if violation(task, candidate, limits) is None:
                reasons.append("the preferred mapping does not fit: simplified")
                return candidate
    statement = task.statement
    x = config["x"]
    y = config["y"]
    for block, y_index in (([0, 0], y), ([32, 1], ""), ([64, 1], ""), ([128, 1], ""),
                           ([256, 1], ""), ([0, 1], "")):
        if block == [0, 0] and not y:
            continue
        for boundary in ("exact", "guard"):
            candidate = {"x": x, "y": y_index, "block": block, "regs": [1, 1, 1],
                         "assign": "cyclic", "staging": ["none", 1, False, 0, "natural"],
                         "unroll": 1, "boundary": boundary}
            if violation(task, candidate, limits) is None:
                reasons.append("fallback: direct mapping")
                return candidate
    raise AssertionError(f"no valid mapping for {statement}")
