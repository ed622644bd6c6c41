"""The mapping space of a statement, and configurations turned into mappings.

A *configuration* (:class:`~einkern.gpu.config.CudaConfig`, what the decision
algorithm chooses and the tuner searches) names a handful of choices;
:func:`config_to_mapping` turns it into a :class:`Mapping`:

* ``x``/``y``: the output indices distributed over threads (``x`` varies
  fastest: threadIdx.x's fastest digit), ``y`` may be ``""``;
* ``block``: threads along x and y (0: the whole extent); ``regs``: register-tile
  elements per thread along x, y and z (Treduda's lX × lY, plus a register-only
  index z chosen to give the other operand reuse); ``assign``: cyclic / mixed
  (x cyclic, y adjacent) / adjacent (Treduda strategies 4–6) / chunked (x
  cyclic in runs of one 16-byte vector, y adjacent: vector loads of both
  operands from shared memory);
* ``staging`` (:class:`~einkern.gpu.config.StagingConfig`): stage
  ``none``, ``A``/``B`` (the first or second input of the main product) or
  ``all`` (every input of the main reduction), MAGMA's sh_AB, nb, prefetching,
  shared-memory offset and transposed layout (``compute``: the threaded indices
  innermost); ``unroll``: 1 or -1 (the k-step loop fully unrolled);
* ``boundary``: ``exact`` when every tile divides its extent, else ``guard``,
  ``redirect`` or ``pad`` (padded copies around an exact kernel);
* ``preload`` (updates of one sum only): the accumulators start from the
  output's values, loaded before the reduction.

The strategy name recorded in the mapping follows from the configuration:
``direct`` (one output per thread, no staging — the first backend's mapping),
``register`` (register tile), ``shared`` (staged inputs), ``gett`` (staged with
a register tile over more than one index and tiles over batch indices).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from ..ir.memo import by_identity
from ..ir.nodes import Access, Binary, Neg, Problem, signed_terms
from ..ir.task import Task
from .accumulation import with_accumulation
from .config import AUTO_PADDING, NO_STAGING, SCALAR_CONFIG, CudaConfig, StagingConfig
from .device import H100, DeviceLimits
from .lower import check_mapping, compute_dtype, preload_applies
from .mapping import Mapping, ParallelTile, Staging
from .mma_config import STRATEGY as MMA
from .normalize import reduction_of
from .padding import padded_task, padding_problems
from .shared_banks import padded_layouts
from .staging import natural_order

#: Threads along x and y; 0 stands for "the whole extent of the index" (e.g. 12
#: threads for p = 12: a warp then covers contiguous rows of a 12×12 face).
BLOCKS = (
    (32, 1),
    (64, 1),
    (128, 1),
    (256, 1),
    (0, 1),
    (8, 8),
    (16, 4),
    (32, 2),
    (16, 8),
    (32, 4),
    (64, 2),
    (8, 16),
    (16, 16),
    (32, 8),
    (64, 4),
    (128, 2),
    (16, 32),
    (32, 16),
    (64, 8),
    (32, 32),
    (0, 0),
    (0, 4),
    (0, 8),
    (0, 16),
    (16, 0),
    (32, 0),
)
#: Register tile along x, y and z (z: an output index on no thread, register-only).
REGS = tuple((a, b, c) for a in (1, 2, 4, 8) for b in (1, 2, 4, 8) for c in (1, 2, 4))
K_STEPS = (8, 16, 32)


@dataclass(frozen=True)
class Roles:
    """Index roles of the statement's main contraction (GETT: batch, M, N, K)."""

    a: Access | None
    b: Access | None
    batch: tuple[str, ...]
    m: tuple[str, ...]  # output indices read by A only
    n: tuple[str, ...]  # output indices read by B only
    k: tuple[str, ...]
    output_contiguous: str | None


def _product_accesses(body) -> list[Access]:
    if isinstance(body, Access):
        return [body]
    if isinstance(body, Neg):
        return _product_accesses(body.operand)
    if isinstance(body, Binary) and body.op in "*":
        return _product_accesses(body.left) + _product_accesses(body.right)
    if isinstance(body, Binary) and body.op in "+-":
        return _product_accesses(body.left)  # first term represents the family
    return []


@by_identity(maxsize=64)
def roles(task: Task) -> Roles:
    problem = task.problem
    statement = task.statement
    out = statement.output
    layout = problem.program.tensor(out.tensor).layout
    contiguous = (out.indices[-1] if layout == "row" else out.indices[0]) if out.indices else None
    groups = reduction_of(statement).groups
    if not groups:
        return Roles(None, None, (), (), (), (), contiguous)
    main = max(groups, key=lambda g: math.prod(problem.index_size(statement, i) for i in g.indices))
    factors = _product_accesses(main.body)
    a = factors[0] if factors else None
    b = factors[1] if len(factors) > 1 else None
    ia = set(a.indices) if a else set()
    ib = set(b.indices) if b else set()
    parallel = statement.parallel_indices
    return Roles(
        a,
        b,
        batch=tuple(i for i in parallel if i in ia and i in ib),
        m=tuple(i for i in parallel if i in ia and i not in ib),
        n=tuple(i for i in parallel if i in ib and i not in ia),
        k=tuple(main.indices),
        output_contiguous=contiguous,
    )


def _candidates(task: Task) -> list[str]:
    """Output indices worth putting on threads: contiguous ones first."""
    problem = task.problem
    statement = task.statement
    r = roles(task)
    order = []
    if r.output_contiguous:
        order.append(r.output_contiguous)
    for access in (r.a, r.b):
        if access is not None:
            inner = natural_order(problem, access)[0]
            if inner in statement.parallel_indices:
                order.append(inner)
    order.extend(r.m[-1:] + r.n[-1:] + r.m[:1] + r.n[:1])
    order.extend(statement.parallel_indices)
    sized = [i for i in dict.fromkeys(order) if problem.index_size(statement, i) > 1]
    return sized[:5] or list(statement.parallel_indices[:1])


#: ``spread`` stops adding register-only indices at this many outputs per thread.
SPREAD_OUTPUTS = 32


def parameters(task: Task) -> dict[str, tuple]:
    """Candidate values of every configuration parameter (before constraints), by
    the name of the :class:`CudaConfig` field they are values of."""
    statement = task.statement
    if not statement.parallel_indices:
        return {name: (value,) for name, value in SCALAR_CONFIG.values().items()}
    cands = _candidates(task)
    has_groups = bool(reduction_of(statement).groups)
    stagings = [NO_STAGING]
    if has_groups and statement.reduction_indices:
        for stage in ("A", "B", "all"):
            for k_step in K_STEPS:
                for prefetch in (False, True):
                    for padding, layout in ((1, "natural"), (0, "compute"), (1, "compute")):
                        stagings.append(StagingConfig(stage, k_step, prefetch, padding, layout))
    found: dict[str, tuple] = {
        "x": tuple(cands),
        "y": tuple(cands) + ("",),
        "block": BLOCKS,
        "regs": REGS,
        "assign": ("cyclic", "mixed", "adjacent", "chunked"),
        "staging": tuple(stagings),
        "unroll": (1, -1),
        "boundary": ("exact", "guard", "redirect", "pad"),
    }
    if spreads(statement):
        found["spread"] = (0, 2)
    if preload_applies(statement):
        found["preload"] = (False, True)
    return found


def spreads(statement) -> bool:
    """Whether the space has the ``spread`` knob: several products per output (each
    splits the output indices differently between its operands) and more than
    three output indices, so register tiles over further indices can pay."""
    return products_per_output(statement) >= 3 and len(statement.parallel_indices) > 3


def products_per_output(statement) -> int:
    """Products summed into each output (the terms of every reduction group)."""
    return sum(len(signed_terms(g.body)) for g in reduction_of(statement).groups)


def z_index(task: Task, x: str, y: str) -> str:
    """The register-only third index: one that gives the operand not yet reused a
    reuse dimension (x, y both in M ⇒ z in N, ...).  Among the candidates, one of
    at least 8 elements nearest the output's contiguous end (a thread's outputs,
    and the inputs they share, then lie close in memory: local_grad3 takes i, not
    the element index e), else the largest."""
    problem = task.problem
    statement = task.statement
    r = roles(task)
    used = {x, y}
    memory = natural_order(problem, statement.output)

    def largest(pool) -> str:
        pool = [i for i in pool if i not in used and problem.index_size(statement, i) > 1]
        wide = [i for i in pool if problem.index_size(statement, i) >= 8]
        if wide:
            return min(wide, key=memory.index)
        return max(pool, key=lambda i: problem.index_size(statement, i), default="")

    in_m = bool(used & set(r.m))
    in_n = bool(used & set(r.n))
    if in_m and not in_n:
        return largest(r.n) or largest(statement.parallel_indices)
    if in_n and not in_m:
        return largest(r.m) or largest(statement.parallel_indices)
    return largest(statement.parallel_indices)


def threads_of(task: Task, config: CudaConfig) -> tuple[int, int]:
    problem = task.problem
    statement = task.statement
    tx, ty = config.block
    if tx == 0:
        tx = problem.index_size(statement, config.x)
    if ty == 0:
        ty = problem.index_size(statement, config.y) if config.y else 1
    return tx, ty


def vector_runs(task: Task) -> int:
    """Run length of the ``chunked`` assignment: one 16-byte vector of the compute type."""
    return 4 if compute_dtype(task) == "float32" else 2


def chunk_fits(task: Task, rx: int) -> bool:
    """Whether ``rx`` elements per thread along x make more than one whole run of the
    ``chunked`` assignment (one run alone is the adjacent assignment)."""
    runs = vector_runs(task)
    return rx > runs and rx % runs == 0


def _tiles(task: Task, config: CudaConfig) -> tuple[ParallelTile, ...]:
    problem = task.problem
    tx, ty = threads_of(task, config)
    rx, ry, rz = config.regs
    x, y = config.x, config.y
    assign = config.assign
    chunk = vector_runs(task) if assign == "chunked" else 1
    tiles = [ParallelTile(x, tx * rx, tx, assign != "adjacent", chunk)] if x else []
    if y:
        tiles.append(ParallelTile(y, ty * ry, ty, assign == "cyclic"))
    if rz > 1:
        z = z_index(task, x, y)
        if z:
            tiles.append(ParallelTile(z, rz, 1, True))
    spread = config.spread or 0
    if spread > 1:  # `spread` elements per thread along further output indices
        statement = task.statement
        taken = {tile.index for tile in tiles}
        outputs = math.prod(tile.per_thread for tile in tiles)
        for index in natural_order(problem, statement.output):
            if index in taken or problem.index_size(statement, index) < 2 * spread:
                continue
            if outputs * spread > SPREAD_OUTPUTS:
                break
            tiles.append(ParallelTile(index, spread, 1, True))
            taken.add(index)
            outputs *= spread
    return tuple(tiles)


def gett_tiles(task: Task, config: CudaConfig) -> tuple[ParallelTile, ...]:
    """The tiles of a GETT configuration: one per ``(index, threads, regs)``, in
    thread order.  ``cyclic``: every tile cyclic; ``mixed``: the first cyclic, the
    rest adjacent; ``adjacent``: all adjacent; ``chunked``: the first cyclic in
    runs of one vector, the rest adjacent."""
    assert config.gett is not None
    assign = config.assign
    tiles = []
    for number, (index, threads, regs) in enumerate(config.gett.tiles):
        first = number == 0
        cyclic = assign == "cyclic" or (first and assign in ("mixed", "chunked"))
        chunk = vector_runs(task) if first and assign == "chunked" else 1
        tiles.append(ParallelTile(index, threads * regs, threads, cyclic or threads == 1, chunk))
    return tuple(tiles)


def _compute_layout(problem: Problem, access: Access, tiles) -> tuple[str, ...]:
    """Shared layout that makes a thread's register-tile reads contiguous: the access's
    threaded indices innermost (x first), then the rest in memory order."""
    threaded = [t.index for t in tiles if t.index in access.indices]
    rest = [i for i in natural_order(problem, access) if i not in threaded]
    return tuple(threaded + rest)


def config_to_mapping(task: Task, config: CudaConfig, reasons: tuple[str, ...] = ()) -> Mapping:
    """The mapping ``config`` describes for ``task`` (``reasons``: why it was chosen).
    Memoised per task object: the search asks for the same points several times
    (validity, ranking, the register check, the explanation)."""
    known = _mappings(task)
    key = (config, reasons)
    mapping = known.get(key)
    if mapping is None:
        mapping = known[key] = _config_to_mapping(task, config, reasons)
        if len(known) > MAPPINGS_PER_TASK:
            del known[next(iter(known))]
    return mapping


#: The mappings :func:`config_to_mapping` remembers per task (oldest dropped).
MAPPINGS_PER_TASK = 8192


@by_identity(maxsize=16)
def _mappings(task: Task) -> dict[tuple[CudaConfig, tuple[str, ...]], Mapping]:
    return {}


def _config_to_mapping(task: Task, config: CudaConfig, reasons: tuple[str, ...]) -> Mapping:
    if config.mma is not None:
        return Mapping(MMA, (), boundary="guard", mma=config.mma, reasons=reasons)
    problem = task.problem
    statement = task.statement
    r = roles(task)
    stage, k_step, prefetch, padding, layout = (
        config.staging.stage,
        config.staging.k_step,
        config.staging.prefetch,
        config.staging.padding,
        config.staging.layout,
    )
    tiles = _tiles(task, config) if config.gett is None else gett_tiles(task, config)
    staged: list[Staging] = []
    if stage != "none":
        groups = reduction_of(statement).groups
        main = [g for g in groups if set(g.indices) == set(r.k)]
        accesses = main[0].accesses() if main else ()
        chosen: list[Access | None] = (
            [r.a] if stage == "A" else [r.b] if stage == "B" else list(accesses)
        )
        for access in chosen:
            if access is None or not access.indices:  # a rank-0 read has no tile to stage
                continue
            order = _compute_layout(problem, access, tiles) if layout == "compute" else ()
            staged.append(Staging(str(access), order, padding))
    parallel = tuple(tiles)
    rx, ry, rz = config.regs
    rz *= max(1, config.spread or 0)  # spread tiles are register-only, like z
    k_steps = tuple((k, k_step) for k in r.k[-1:]) if stage != "none" else ()
    if config.gett is not None:
        strategy = "gett"
        k_steps = tuple(s for s in config.gett.k if s[1] > 1) if stage != "none" else ()
    elif stage != "none":
        strategy = "gett" if rz > 1 or (rx * ry > 1 and r.batch) else "shared"
    elif rx * ry * rz > 1:
        strategy = "register"
    else:
        strategy = "direct"
    dtype = compute_dtype(task)
    reduction_threads: tuple[tuple[str, int], ...] = ()
    if config.split is not None and r.k:
        longest = max(r.k, key=lambda k: problem.index_size(statement, k))
        index = (lane_index(task) or longest) if config.lanes else longest
        reduction_threads = ((index, config.split),)
    run, accumulators = config.lanes or (1, 1)
    grid_order, why = _grid_order(task, parallel)
    if why is not None:
        reasons = (*reasons, why)
    mapping = Mapping(
        strategy=strategy,
        parallel=parallel,
        grid_order=grid_order,
        reduction_order=r.k,
        k_step=k_steps,
        staged=tuple(staged),
        prefetch=bool(prefetch) and stage != "none",
        unroll=64 if config.unroll == -1 else 1,
        vector_width=4 if dtype == "float32" else 2,
        boundary=config.boundary,
        preload_output=bool(config.preload),
        reduction_threads=reduction_threads,
        reduction_fastest=config.lanes is not None and bool(reduction_threads),
        reduction_chunk=run if reduction_threads else 1,
        accumulators=accumulators if reduction_threads else 1,
        reasons=reasons,
    )
    mapping = with_accumulation(task, mapping)
    if padding == AUTO_PADDING:
        mapping = padded_layouts(task, mapping)
    return mapping


def lane_index(task: Task) -> str | None:
    """The reduction index a warp's lanes should walk (``lanes`` points): the
    stride-1 index of the main sum's largest input, when it is one of the sum's
    indices (its reads are then coalesced); None otherwise."""
    problem = task.problem
    groups = reduction_of(task.statement).groups
    r = roles(task)
    main = [g for g in groups if set(g.indices) == set(r.k)]
    accesses = [a for a in (main[0].accesses() if main else ()) if a.indices]
    if not accesses:
        return None
    largest = max(accesses, key=lambda a: problem.nbytes(a.tensor))
    inner = natural_order(problem, largest)[0]
    return inner if inner in r.k else None


#: The rule ``reuse-first-grid`` moves blocks only for an input of at least this
#: many bytes (half an H100's L2, what the cost model calls a large tensor): a
#: smaller one stays in L2 between the sweeps of the slower grid indices whatever
#: the order.  Measured on an H100 (thirty-fourth session, docs/gpu.md "Grid
#: order"): below it the rule moved 19 plans of 104, 0.994x on geometric
#: mean and down to 0.84x (above it 85 plans, 1.018x, 0.94-1.32x).
REUSE_FIRST_BYTES = 25 * 2**20


def _grid_order(
    task: Task, tiles: tuple[ParallelTile, ...] = ()
) -> tuple[tuple[str, ...], str | None]:
    """Blocks are numbered along the output's memory order (contiguous index
    first), so that blocks launched together write neighbouring memory; but the
    indices of several blocks that the largest input lacks go first (rule
    ``reuse-first-grid``): the blocks that read the same tile of that input then
    run side by side and find it in L2, and the input swept again for every step
    of the slower indices is a smaller one.  Nothing moves when two inputs of
    different indices are equally large, or the largest is below
    :data:`REUSE_FIRST_BYTES`.  Returns the order and, when the rule
    moved an index, its reason."""
    problem = task.problem
    statement = task.statement
    ordered = [
        i for i in natural_order(problem, statement.output) if i in statement.parallel_indices
    ]
    ordered = list(dict.fromkeys(ordered + list(statement.parallel_indices)))  # d[i,i]: once
    reads = [a for a in statement.reads() if a.indices and a.tensor != statement.output.tensor]
    if not reads:
        return tuple(ordered), None
    largest = max(problem.nbytes(a.tensor) for a in reads)
    biggest = [a for a in reads if problem.nbytes(a.tensor) == largest]
    if len({frozenset(a.indices) for a in biggest}) > 1 or largest < REUSE_FIRST_BYTES:
        return tuple(ordered), None
    held, name = set(biggest[0].indices), biggest[0].tensor
    tile = {t.index: t.tile for t in tiles}
    blocks = {i: -(-problem.index_size(statement, i) // tile.get(i, 1)) for i in ordered}
    first = [i for i in ordered if i not in held and blocks[i] > 1]
    order = tuple(first + [i for i in ordered if i not in first])
    if order[: len(first)] == tuple(ordered[: len(first)]):
        return order, None
    return order, (
        f"reuse-first-grid: blocks numbered along {', '.join(first)} first, the indices "
        f"that {name} (the largest input, {largest / 2**20:.3g} MiB) does not hold: blocks "
        f"reading the same tile of {name} run side by side and find it in L2"
    )


def violation(task: Task, config: CudaConfig, limits: DeviceLimits = H100) -> str | None:
    """Why a configuration is not in the space (None: valid).  Cheap checks first."""
    if config.mma is not None:
        problems = check_mapping(
            task, config_to_mapping(task, config), limits.shared_per_block_optin, limits
        )
        return problems[0] if problems else None
    problem = task.problem
    statement = task.statement
    size = {i: problem.index_size(statement, i) for i in statement.indices}
    if config.lanes is not None and config.split is None:
        return "lanes need split (reduction threads)"
    if config.split is not None:
        if config.staging.stage != "none" or not roles(task).k:
            return "split needs an unstaged reduction"
        if config.preload:
            return "split with a preloaded output"
        if config.lanes is not None and lane_index(task) is None:
            return "lanes need a sum along the stride-1 index of its largest input"
    if config.gett is not None:
        return gett_violation(task, config, size) or _mapping_violation(task, config, limits)
    x, y = config.x, config.y
    if not x:
        if statement.parallel_indices or config != SCALAR_CONFIG:
            return "no x index"
        return None
    if x == y:
        return "x and y are the same index"
    if x not in size or (y and y not in size):
        return f"x and y must be indices of the statement, got {x!r} and {y!r}"
    bx, by = config.block
    rx, ry, rz = config.regs
    if not y and (by != 1 or ry > 1):
        return "no y index: block and registers along y must be 1"
    if (bx == 0 and size[x] > 256) or (by == 0 and y and size[y] > 64):
        return "extent too large to be one block dimension"
    tx, ty = threads_of(task, config)
    if (bx == 0 and tx in (32, 64, 128, 256)) or (by == 0 and ty in (1, 2, 4, 8, 16, 32)):
        return "duplicate of a power-of-two block"
    threads = tx * ty
    if threads * (config.split or 1) > limits.max_threads_per_block:
        return "too many threads"
    whole = bx == 0 or by == 0
    outputs = math.prod(size[i] for i in statement.parallel_indices)
    if threads * (config.split or 1) < 16 and not whole and threads < outputs:
        return "fewer than half a warp of threads"
    if tx * rx > 2 * _pow2(size[x]) or (y and ty * ry > 2 * _pow2(size[y])):
        return "tile much larger than its extent"
    z = z_index(task, x, y) if rz > 1 else ""
    if rz > 1 and (not z or rz > _pow2(size[z])):
        return "no index for a register-only tile"
    if rx * ry * rz > 64:
        return "register tile over 64"
    if (config.spread or 0) > 1 and len(_tiles(task, config)) <= 3:
        return "no index left to spread the register tile over"
    if config.assign != "cyclic" and rx * ry == 1:
        return "assignment irrelevant"
    if config.assign == "mixed" and ry == 1:
        return "assignment irrelevant"
    if config.assign == "chunked" and not chunk_fits(task, rx):
        return "register tile along x not a multiple of the vector runs"
    stage, k_step = config.staging.stage, config.staging.k_step
    if stage == "none" and config.unroll != 1 and not statement.reduction_indices:
        return "nothing to unroll"
    tiles = _tiles(task, config)
    divisible = all(size[t.index] % t.tile == 0 for t in tiles)
    if stage != "none":
        r = roles(task)
        if r.k and k_step > 2 * _pow2(size[r.k[-1]]):
            return "k-step much larger than the reduction"
        if r.k:
            divisible = divisible and size[r.k[-1]] % min(k_step, size[r.k[-1]]) == 0
    boundary = config.boundary
    if divisible and boundary != "exact":
        return "tiles divide the extents: boundary is exact"
    if not divisible and boundary == "exact":
        return "tiles do not divide the extents"
    return _mapping_violation(task, config, limits)


def gett_violation(task: Task, config: CudaConfig, size: dict[str, int]) -> str | None:
    """Why a GETT configuration is not in the space (its own checks; the mapping's
    follow in :func:`violation`)."""
    assert config.gett is not None
    statement = task.statement
    gett = config.gett
    for index, threads, regs in gett.tiles:
        if index not in statement.parallel_indices:
            return f"gett tile {index!r} is not an output index"
        if threads * regs > 2 * _pow2(size[index]):
            return "tile much larger than its extent"
    r = roles(task)
    for index, step in gett.k:
        if index not in r.k:
            return f"gett k-step {index!r} is not an index of the main reduction"
        if step > 2 * _pow2(size[index]):
            return "k-step much larger than the reduction"
    threads = gett.threads
    if threads < 16 and threads < math.prod(size[i] for i in statement.parallel_indices):
        return "fewer than half a warp of threads"
    if gett.register_tile > 64:
        return "register tile over 64"
    per_index = [t[2] for t in gett.tiles]
    if config.assign != "cyclic" and math.prod(per_index) == 1:
        return "assignment irrelevant"
    if config.assign == "mixed" and math.prod(per_index[1:]) == 1:
        return "assignment irrelevant"
    if config.assign == "chunked" and not chunk_fits(task, per_index[0]):
        return "register tile along x not a multiple of the vector runs"
    staged = config.staging.stage != "none"
    if not staged and config.unroll != 1 and not statement.reduction_indices:
        return "nothing to unroll"
    if not staged and gett.k:
        return "k-steps without staging"
    divisible = all(size[i] % (t * g) == 0 for i, t, g in gett.tiles)
    divisible = divisible and all(size[i] % min(s, size[i]) == 0 for i, s in gett.k)
    if divisible and config.boundary != "exact":
        return "tiles divide the extents: boundary is exact"
    if not divisible and config.boundary == "exact":
        return "tiles do not divide the extents"
    return None


def _mapping_violation(task: Task, config: CudaConfig, limits: DeviceLimits) -> str | None:
    """The checks of a configuration's mapping: registers, then the lowering's."""
    boundary = config.boundary
    tiles = _tiles(task, config) if config.gett is None else gett_tiles(task, config)
    words = 2 if compute_dtype(task) == "float64" else 1
    per_thread = [t.per_thread for t in tiles]
    estimated_registers = words * (math.prod(per_thread) + sum(per_thread)) + 32
    if estimated_registers > limits.max_registers_per_thread:
        return "register estimate over the limit"
    mapping = config_to_mapping(task, config)
    if boundary == "pad":  # the kernel itself runs on the padded extents
        reasons = padding_problems(task, mapping)
        if reasons:
            return reasons[0]
        # the same mapping, exact, on the padded extents (not the configuration
        # re-read there: "the whole extent" would then name the padded one)
        task = padded_task(task, mapping)
        mapping = replace(mapping, boundary="exact")
    problems = check_mapping(task, mapping, limits.shared_per_block_optin, limits)
    return problems[0] if problems else None


def _pow2(n: int) -> int:
    return 1 << max(0, (n - 1).bit_length())
