"""The decision algorithm of the direct CUDA mapping (one thread per output element).

After Rivera's decision algorithm (seed 001, §3.1), simplified to what one
kernel per statement needs:

1. *Dependence test*: the output's indices carry no dependence (parallel); the
   indices bound by a ``Sum`` carry the reduction and stay sequential loops
   inside a thread, accumulated in registers.
2. *Thread_x*: the parallel index that is contiguous in the output (the
   innermost one of its layout), so a warp's stores, and the loads of every
   operand with that index at stride 1 (the *contiguous tensors*), coalesce.
3. *Thread_y*: when ``threadIdx.x`` fills a warp, a parallel index the
   contiguous tensors do not use, so the threads of a block share their
   elements through the cache; when it does not, the next index of the output
   in memory, so a warp still covers contiguous memory.  Tiny extents are
   folded together until the block has enough threads.
4. *Blocks*: the tiles of the thread axes and every other parallel index go to
   ``blockIdx.x/y/z``; more than three are folded into ``blockIdx.z``, and a
   dimension over the device's ``y``/``z`` limit is folded into ``x``.
5. *Reduction loops*: per ``Sum``, the index of smallest stride innermost,
   unrolled by the largest factor (at most 8) that divides its extent.

:func:`decide` is a pure function of the problem, the statement and the
device limits; every choice is recorded with its reason for ``--explain``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ...errors import BackendError
from ...ir.nodes import Access, Problem, Statement, Sum, accesses, walk

MAX_UNROLL = 8
INT32_LIMIT = 2**31 - 1


@dataclass(frozen=True)
class DeviceLimits:
    """The device limits the decision respects (defaults: any GPU since Volta)."""

    max_threads_per_block: int = 1024
    max_grid: tuple[int, int, int] = (2**31 - 1, 65535, 65535)
    warp_size: int = 32
    threads_per_block: int = 256  # the block size aimed at


DEFAULT_LIMITS = DeviceLimits()


@dataclass(frozen=True)
class ThreadAxis:
    """Parallel indices mapped to one thread coordinate, folded (first fastest).

    Threads ``tile * block + threadIdx`` enumerate the ``total`` combinations;
    the last tile is guarded when ``block`` does not divide ``total``."""

    indices: tuple[str, ...]
    extents: tuple[int, ...]
    block: int

    @property
    def total(self) -> int:
        return math.prod(self.extents)

    @property
    def tiles(self) -> int:
        return -(-self.total // self.block)

    @property
    def guarded(self) -> bool:
        return self.total % self.block != 0


@dataclass(frozen=True)
class GridItem:
    """What a grid dimension enumerates: the tiles of thread axis ``tiles_of``
    (``"x"``/``"y"``), or every value of the parallel index ``index``."""

    count: int
    index: str | None = None
    tiles_of: str | None = None

    def __str__(self) -> str:
        return f"tiles of threadIdx.{self.tiles_of}" if self.tiles_of else str(self.index)


@dataclass(frozen=True)
class ReductionLoop:
    """The loops of one ``Sum`` node (pre-order position ``sum_id`` in the rhs)."""

    sum_id: int
    order: tuple[str, ...]  # outermost first
    extents: tuple[int, ...]
    unroll: int  # factor of the innermost loop; divides its extent


@dataclass(frozen=True)
class DirectMapping:
    """How one statement runs as one kernel: one thread per output element."""

    parallel: tuple[str, ...]  # distinct output indices
    reduction: tuple[str, ...]
    thread_x: ThreadAxis | None
    thread_y: ThreadAxis | None
    grid: tuple[tuple[GridItem, ...], tuple[GridItem, ...], tuple[GridItem, ...]]
    constant: tuple[str, ...]  # parallel indices of extent 1 (always 0)
    reductions: tuple[ReductionLoop, ...]
    index_bits: int  # 32 or 64
    compute_dtype: str
    reasons: tuple[str, ...]

    @property
    def thread_x_index(self) -> str | None:
        return self.thread_x.indices[0] if self.thread_x else None

    @property
    def thread_y_indices(self) -> tuple[str, ...]:
        return self.thread_y.indices if self.thread_y else ()

    @property
    def block(self) -> tuple[int, int, int]:
        bx = self.thread_x.block if self.thread_x else 1
        by = self.thread_y.block if self.thread_y else 1
        return (bx, by, 1)

    @property
    def grid_dims(self) -> tuple[int, int, int]:
        x, y, z = (math.prod(item.count for item in dim) for dim in self.grid)
        return (x, y, z)

    @property
    def index_type(self) -> str:
        return "long long" if self.index_bits == 64 else "int"

    def explain(self) -> str:
        """The decisions, one per line."""
        return "\n".join(self.reasons)


# ---- helpers -----------------------------------------------------------------


def largest_unroll(extent: int, limit: int = MAX_UNROLL) -> int:
    """The largest factor not above ``limit`` that divides ``extent`` (1 for primes > limit)."""
    return max(f for f in range(1, min(limit, extent) + 1) if extent % f == 0)


def index_stride(problem: Problem, access: Access, index: str) -> int:
    """Elements between neighbouring values of ``index`` in ``access`` (0 if absent)."""
    strides = problem.strides(access.tensor)
    return sum(s for i, s in zip(access.indices, strides, strict=True) if i == index)


def sum_nodes(statement: Statement) -> tuple[Sum, ...]:
    """The ``Sum`` nodes of the right-hand side, pre-order (their ``sum_id`` order)."""
    return tuple(node for node in walk(statement.rhs) if isinstance(node, Sum))


def statement_tensors(statement: Statement) -> tuple[str, ...]:
    """The output, then every tensor read, in order of first appearance."""
    names = [statement.output.tensor] + [a.tensor for a in accesses(statement.rhs)]
    return tuple(dict.fromkeys(names))


# ---- the decision ------------------------------------------------------------


def decide(
    problem: Problem, statement: Statement, limits: DeviceLimits = DEFAULT_LIMITS
) -> DirectMapping:
    """The direct mapping of ``statement`` (see the module docstring)."""
    program = problem.program
    out = statement.output
    layout = program.tensor(out.tensor).layout
    size = {i: problem.index_size(statement, i) for i in statement.indices}
    parallel = tuple(dict.fromkeys(out.indices))
    reduction = statement.reduction_indices
    carried = (
        f"{_names(reduction)} {'carries' if len(reduction) == 1 else 'carry'} the reduction "
        f"(bound by a sum)"
        if reduction
        else "no index carries a reduction"
    )
    reasons = [f"dependence test: {_names(parallel)} parallel (indices of {out.tensor}); {carried}"]

    out_stride = {i: index_stride(problem, out, i) for i in parallel}
    constant = tuple(i for i in parallel if size[i] == 1)
    if constant:
        reasons.append(f"{_names(constant)}: extent 1, fixed at 0")
    ordered = sorted(
        (i for i in parallel if size[i] > 1), key=lambda i: (out_stride[i], parallel.index(i))
    )
    reads = accesses(statement.rhs)

    thread_x = thread_y = None
    if ordered:
        thread_x, x_reason = _thread_x(ordered[0], size, limits, out.tensor, layout, reads, problem)
        reasons.append(x_reason)
        if len(ordered) > 1:
            inputs = tuple(a for a in reads if a.tensor != out.tensor)
            thread_y, y_reason = _thread_y(ordered, thread_x, size, limits, inputs, problem)
            reasons.append(y_reason)
    else:
        reasons.append(f"{out.tensor} has one element: a single thread computes it")

    grid, grid_reasons = _grid(ordered, thread_x, thread_y, size, limits)
    reasons.extend(grid_reasons)

    reductions = tuple(
        _reduction_loop(n, node, size, problem) for n, node in enumerate(sum_nodes(statement))
    )
    for loop in reductions:
        if not loop.order:
            continue
        inner, extent = loop.order[-1], loop.extents[-1]
        if loop.unroll > 1:
            unroll = f"unrolled by {loop.unroll} (divides its extent {extent})"
        elif extent == 1:
            unroll = "a single iteration"
        else:
            unroll = f"not unrolled (no factor <= {MAX_UNROLL} divides its extent {extent})"
        reasons.append(
            f"sum #{loop.sum_id} over {_names(loop.order)}: sequential in each thread, "
            f"accumulated in a register; {inner} innermost (smallest stride), {unroll}"
        )

    tensors = statement_tensors(statement)
    biggest = max(problem.numel(t) for t in tensors)
    space = max([biggest, math.prod(size[i] for i in parallel), *size.values()])
    index_bits = 64 if space + limits.max_threads_per_block > INT32_LIMIT else 32
    reasons.append(f"{index_bits}-bit index arithmetic (largest tensor: {biggest} elements)")
    dtypes = {program.tensor(t).dtype for t in tensors}
    compute = "float64" if "float64" in dtypes else "float32"
    reasons.append(f"arithmetic in {compute} (the widest operand)")

    return DirectMapping(
        parallel=parallel,
        reduction=reduction,
        thread_x=thread_x,
        thread_y=thread_y,
        grid=grid,
        constant=constant,
        reductions=reductions,
        index_bits=index_bits,
        compute_dtype=compute,
        reasons=tuple(reasons),
    )


def _names(indices: tuple[str, ...]) -> str:
    return ", ".join(indices) if indices else "none"


def _contiguous_reads(reads: tuple[Access, ...], index: str, problem: Problem) -> tuple[str, ...]:
    """Tensors read with ``index`` at stride 1 (the contiguous tensors)."""
    names = (a.tensor for a in reads if index_stride(problem, a, index) == 1)
    return tuple(dict.fromkeys(names))


def _thread_x(x, size, limits, output, layout, reads, problem) -> tuple[ThreadAxis, str]:
    axis = ThreadAxis((x,), (size[x],), min(size[x], limits.warp_size))
    contiguous = _contiguous_reads(reads, x, problem)
    also = f"; also stride 1 in {', '.join(contiguous)}" if contiguous else ""
    reason = (
        f"{x} -> threadIdx.x ({axis.block} threads): contiguous index of {output} "
        f"({layout}-major), coalesced stores{also}"
    )
    return axis, reason


def _thread_y(ordered, thread_x, size, limits, reads, problem) -> tuple[ThreadAxis, str]:
    x = thread_x.indices[0]
    candidates = ordered[1:]
    contiguous = _contiguous_reads(reads, x, problem)
    used_by_contiguous = {i for a in reads if a.tensor in contiguous for i in a.indices}
    if thread_x.block < limits.warp_size:
        first = candidates[0]
        why = (
            f"next index of the output in memory, so a warp covers contiguous memory "
            f"although {x} has only {size[x]} values"
        )
    else:
        reuse = [i for i in candidates if i not in used_by_contiguous]
        if contiguous and reuse:
            first = reuse[0]
            why = (
                f"not an index of {', '.join(contiguous)}, so the threads along y share "
                f"its elements through the cache"
            )
        else:
            first = candidates[0]
            why = "next index of the output in memory"
    bx = thread_x.block
    target = max(1, min(limits.threads_per_block, limits.max_threads_per_block) // bx)
    group = [first]
    rest = [i for i in candidates if i != first]
    while math.prod(size[i] for i in group) < target and rest:
        group.append(rest.pop(0))
    extents = tuple(size[i] for i in group)
    by = min(math.prod(extents), target)
    step = limits.warp_size // math.gcd(bx, limits.warp_size)
    if by == target and target >= step:
        by = target // step * step  # whole warps: bx * by a multiple of the warp size
    axis = ThreadAxis(tuple(group), extents, by)
    folded = f" (folded: {', '.join(group)})" if len(group) > 1 else ""
    reason = f"{first} -> threadIdx.y ({axis.block} threads){folded}: {why}"
    return axis, reason


def _grid(ordered, thread_x, thread_y, size, limits):
    items: list[GridItem] = []
    if thread_x is not None and thread_x.tiles > 1:
        items.append(GridItem(thread_x.tiles, tiles_of="x"))
    if thread_y is not None and thread_y.tiles > 1:
        items.append(GridItem(thread_y.tiles, tiles_of="y"))
    threaded = set(thread_x.indices if thread_x else ()) | set(
        thread_y.indices if thread_y else ()
    )
    items.extend(GridItem(size[i], index=i) for i in ordered if i not in threaded)
    dims: list[list[GridItem]] = [[], [], []]
    reasons = []
    for n, item in enumerate(items):
        dims[min(n, 2)].append(item)
    if len(dims[2]) > 1:
        reasons.append(f"blockIdx.z folds {', '.join(map(str, dims[2]))} (more than 3 remain)")
    for d in (1, 2):
        while math.prod(i.count for i in dims[d]) > limits.max_grid[d]:
            moved = dims[d].pop()
            dims[0].append(moved)
            reasons.append(
                f"{moved} moved from blockIdx.{'xyz'[d]} to blockIdx.x "
                f"(gridDim.{'xyz'[d]} <= {limits.max_grid[d]})"
            )
    if math.prod(i.count for i in dims[0]) > limits.max_grid[0]:
        raise BackendError(
            f"the direct CUDA mapping needs more than {limits.max_grid[0]} blocks along x",
            hint="split the statement, or use the cpu backend",
        )
    for d, dim in enumerate(dims):
        if dim:
            reasons.append(f"blockIdx.{'xyz'[d]} <- {', '.join(map(str, dim))}")
    return (tuple(dims[0]), tuple(dims[1]), tuple(dims[2])), reasons


def _reduction_loop(sum_id: int, node: Sum, size, problem: Problem) -> ReductionLoop:
    indices = tuple(dict.fromkeys(node.indices))
    body = accesses(node.body)

    def stride(index: str) -> float:
        found = [index_stride(problem, a, index) for a in body if index in a.indices]
        return min(found) if found else math.inf

    order = tuple(sorted(indices, key=lambda i: -stride(i)))
    extents = tuple(size[i] for i in order)
    return ReductionLoop(sum_id, order, extents, largest_unroll(extents[-1]) if extents else 1)
