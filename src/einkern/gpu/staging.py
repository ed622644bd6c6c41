"""Shared-memory staging of inputs, chunk by chunk of the reduction (k-step loop).

For a reduction group with staged inputs, the kernel runs a block-uniform loop
over *chunks*: every reduction index ``k`` advances by its k-step, the chunk
counter is flattened so that one loop covers all of them.  Per chunk:

    [prefetch: registers → shared]  or  [global → shared]
    barrier
    [prefetch: global (next chunk) → registers] + compute on shared memory
    barrier

Each staged tile is loaded cooperatively: element ``e`` of the tile is taken by
thread ``e mod threads``, with ``e`` numbered along the input's own memory order
(its contiguous index fastest), so consecutive threads read consecutive
addresses; it is stored at its place in the shared layout (``Staging.order``,
innermost first, ``padding`` extra elements on the stride of ``Staging.padded``:
:func:`einkern.gpu.builder.layout_strides`).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from ..ir.nodes import Access, Problem
from ..ir.task import Task
from ..semantics import C_TYPE as CTYPE
from ..semantics import ITEMSIZE
from . import exprs as E
from . import kir
from .builder import Context, KernelBuilder, StagedArray, compute_dtype, layout_strides
from .mapping import Mapping, Staging
from .normalize import Group, reduction_of

#: The compute step of a group over one context: ``accumulate(builder, group number,
#: group, context)`` emits ``acc ±= term`` (see :func:`einkern.gpu.lower.accumulate`).
Accumulate = Callable[[KernelBuilder, int, Group, Context], list[kir.Stmt]]


def natural_order(problem: Problem, access: Access) -> tuple[str, ...]:
    """The access's indices from its contiguous dimension outwards (memory order)."""
    layout = problem.program.tensor(access.tensor).layout
    return tuple(reversed(access.indices)) if layout == "row" else tuple(access.indices)


def _find_access(task: Task, text: str):
    groups = reduction_of(task.statement).groups
    for number, group in enumerate(groups):
        for access in group.accesses():
            if str(access) == text:
                return number, group, access
    return None


def vector_width_for(task: Task, mapping: Mapping, access: Access) -> int:
    """The widest vector (≤ ``mapping.vector_width``) usable to load this access's tile."""
    problem = task.problem
    statement = task.statement
    tensor = problem.program.tensor(access.tensor)
    width = mapping.vector_width
    if tensor.itemsize < 4:
        return 1  # 16-bit elements: loaded one at a time, widened on load
    if tensor.itemsize * width > 16:
        width = 16 // tensor.itemsize
    contiguous = natural_order(problem, access)[0]
    size = problem.index_size(statement, contiguous)
    if contiguous in statement.parallel_indices:
        chunk = mapping.tile_of(contiguous).tile
    else:
        chunk = mapping.step_of(contiguous, size)
    while width > 1 and (size % width or chunk % width):
        width //= 2
    return max(width, 1)


def _tile_elements(task: Task, mapping: Mapping, access: Access, staging: Staging) -> int:
    """Elements of ``access``'s shared tile: block tile along output indices, k-step
    along reduction indices, laid out as ``staging`` says (padding included)."""
    order = staging.order or natural_order(task.problem, access)
    extents = tile_extents(task, mapping, access)
    if sorted(order) != sorted(extents) or len(extents) != len(access.indices):
        return math.prod(extents[i] for i in access.indices)  # refused by check_staging
    return layout_strides(order, extents, staging.padding, staging.padded)[1]


def tile_extents(task: Task, mapping: Mapping, access: Access) -> dict[str, int]:
    """The shared tile's extent along each index of ``access``: the block tile
    along output indices, the k-step along reduction indices."""
    problem = task.problem
    statement = task.statement

    def extent(index: str) -> int:
        if index in statement.parallel_indices:
            return mapping.tile_of(index).tile
        return mapping.step_of(index, problem.index_size(statement, index))

    return {i: extent(i) for i in access.indices}


def staged_bytes(task: Task, mapping: Mapping) -> int:
    """Bytes of shared memory the mapping's staged tiles take (padding included)."""
    total = 0
    for staging in mapping.staged:
        found = _find_access(task, staging.access)
        if found is not None:
            access = found[2]
            total += _tile_elements(task, mapping, access, staging)
    return total * ITEMSIZE[compute_dtype(task)]  # tiles hold the computed type


def check_staging(task: Task, mapping: Mapping, max_shared_bytes: int) -> list[str]:
    problem = task.problem
    statement = task.statement
    problems: list[str] = []
    if mapping.vector_width not in (1, 2, 4):
        problems.append(f"vector width {mapping.vector_width} (use 1, 2 or 4)")
    if mapping.prefetch and not mapping.staged:
        problems.append("prefetch needs at least one staged input")
    for staging in mapping.staged:
        found = _find_access(task, staging.access)
        if found is None:
            problems.append(
                f"staged input {staging.access!r} is not read inside a sum of S{task.position}"
            )
            continue
        _, group, access = found
        if group.has_nested_sum():
            problems.append(f"{staging.access}: its sum contains another sum")
        if len(set(access.indices)) != len(access.indices):
            problems.append(f"{staging.access}: repeated index cannot be staged")
        allowed = set(statement.parallel_indices) | set(group.indices)
        if not set(access.indices) <= allowed:
            problems.append(f"{staging.access}: uses an index of a nested sum")
        if staging.order and sorted(staging.order) != sorted(access.indices):
            problems.append(
                f"{staging.access}: layout {staging.order} is not a permutation of its indices"
            )
        if staging.padding < 0:
            problems.append(f"{staging.access}: negative padding")
        layout = staging.order or natural_order(problem, access)
        if staging.padded and staging.padded not in layout[1:]:
            problems.append(
                f"{staging.access}: padded index {staging.padded!r} is not an outer "
                "dimension of its layout"
            )
        if mapping.boundary == "exact":
            for index in group.indices:
                size = problem.index_size(statement, index)
                if size % mapping.step_of(index, size):
                    problems.append(
                        f"boundary 'exact' but k-step of {index} does not divide {size}"
                    )
    total = staged_bytes(task, mapping)
    if total > max_shared_bytes:
        problems.append(f"{total} bytes of shared memory (limit {max_shared_bytes})")
    return problems


@dataclass(frozen=True)
class Chunks:
    """The chunk loop of a staged group: its reduction indices (in the mapping's
    reduction order, the innermost advancing fastest), their sizes, k-steps and
    chunk counts."""

    indices: tuple[str, ...]
    sizes: dict[str, int]
    steps: dict[str, int]
    counts: dict[str, int]

    @property
    def total(self) -> int:
        """Chunks in all: iterations of the chunk loop."""
        return math.prod(self.counts.values())

    def origin(self, chunk: kir.Expr) -> dict[str, kir.Expr]:
        """Where chunk number ``chunk`` starts along each reduction index."""
        origin = {}
        stride = 1
        for k in reversed(self.indices):  # the innermost reduction index advances fastest
            origin[k] = E.mul(E.mod(E.div(chunk, stride), self.counts[k]), E.const(self.steps[k]))
            stride *= self.counts[k]
        return origin


def chunks_of(b: KernelBuilder, group: Group) -> Chunks:
    """The chunk loop of ``group`` under the builder's mapping (its k-steps)."""
    indices = tuple(b.group_indices(group))
    sizes = {k: b.size(k) for k in indices}
    steps = {k: b.mapping.step_of(k, sizes[k]) for k in indices}
    counts = {k: math.ceil(sizes[k] / steps[k]) for k in indices}
    return Chunks(indices, sizes, steps, counts)


def staged_group_sections(
    b: KernelBuilder, number: int, group: Group, staged: list[Access], accumulate: Accumulate
) -> list[kir.Section]:
    """Sections of a staged reduction group (see the module docstring): the tiles
    of ``staged`` declared on the builder, the chunk loop, and ``accumulate`` over
    each chunk's shared tiles."""
    chunks = chunks_of(b, group)
    arrays = declare_tiles(b, number, staged)
    counter = f"c{number}"
    chunk = kir.Var(counter)

    def copies(at: kir.Expr, target: str) -> list[kir.Stmt]:
        return [s for a in arrays for s in tile_copy(b, a, chunks, at, target)]

    sections: list[kir.Section] = []
    if b.mapping.prefetch:
        first = copies(E.const(0), "registers")
        sections.append(kir.PerThread((kir.Comment("prefetch the first chunk"), *first)))
        commit = copies(chunk, "commit")
        following = copies(E.add(chunk, E.const(1)), "registers")
        prefetch_next = kir.If(
            E.less(E.add(chunk, E.const(1)), E.const(chunks.total)), tuple(following)
        )
        compute = chunk_compute(b, number, group, chunks, chunk, accumulate)
        loop_body: tuple[kir.Section, ...] = (
            kir.PerThread(tuple(commit)),
            kir.Barrier(),
            kir.PerThread((prefetch_next, *compute)),
            kir.Barrier(),
        )
    else:
        load = copies(chunk, "shared")
        loop_body = (
            kir.PerThread(tuple(load)),
            kir.Barrier(),
            kir.PerThread(tuple(chunk_compute(b, number, group, chunks, chunk, accumulate))),
            kir.Barrier(),
        )
    sections.append(kir.Uniform(counter, 0, chunks.total, 1, loop_body))
    return sections


def declare_tiles(b: KernelBuilder, number: int, staged: list[Access]) -> list[StagedArray]:
    """A shared tile for each staged access of group ``number`` (block tile along
    output indices, k-step along reduction indices), declared on the builder."""
    arrays = []
    for access in staged:
        staging = b.mapping.staging_of(str(access))
        assert staging is not None  # the caller passes the staged accesses
        order = staging.order or natural_order(b.problem, access)
        extents = tuple(tile_extents(b.task, b.mapping, access).items())
        array = StagedArray(
            b.fresh(f"sh{number}_"), access, tuple(order), extents, staging.padding, staging.padded
        )
        b.staged_arrays[(number, str(access))] = array
        b.shared.append(kir.SharedArray(array.name, b.ctype, array.size()))
        arrays.append(array)
    return arrays


def tile_copy(
    b: KernelBuilder, array: StagedArray, chunks: Chunks, chunk: kir.Expr, target: str
) -> list[kir.Stmt]:
    """Copy the chunk's tile of ``array`` from global memory to ``target``:
    ``"shared"`` or ``"registers"`` (prefetch), or registers → shared (``"commit"``)."""
    access = array.access
    memory_order = natural_order(b.problem, access)
    width = vector_width_for(b.task, b.mapping, access)
    counts = [array.extent(i) for i in memory_order]
    counts[0] //= width
    vectors = math.prod(counts)
    rounds = math.ceil(vectors / b.nthreads)
    origin = chunks.origin(chunk)
    register = f"pf{array.name}"
    if target == "registers" and not any(v.name == register for v in b.thread_vars):
        b.thread_vars.append(kir.ThreadVar(register, b.ctype, rounds * width))
    statements: list[kir.Stmt] = []
    for q in range(rounds):
        element = E.add(E.const(q * b.nthreads), kir.ThreadIdx())
        local: dict[str, kir.Expr] = {}
        stride = 1
        for position, (index, count) in enumerate(zip(memory_order, counts, strict=True)):
            coordinate = E.mod(E.div(element, stride), count)
            local[index] = E.mul(coordinate, E.const(width)) if position == 0 else coordinate
            stride *= count
        body: list[kir.Stmt] = []
        if target == "commit":
            for lane in range(width):
                lane_local = {
                    **local,
                    memory_order[0]: E.add(local[memory_order[0]], E.const(lane)),
                }
                body.append(
                    kir.Store(
                        array.name,
                        array.offset(lane_local),
                        kir.Load(register, E.const(q * width + lane)),
                    )
                )
        else:
            body.extend(_global_to(b, array, chunks, local, origin, width, target, q))
        if vectors % b.nthreads and q == rounds - 1:
            statements.append(kir.If(E.less(element, E.const(vectors)), tuple(body)))
        else:
            statements.extend(body)
    return statements


def _global_to(
    b: KernelBuilder,
    array: StagedArray,
    chunks: Chunks,
    local: dict[str, kir.Expr],
    origin: dict[str, kir.Expr],
    width: int,
    target: str,
    q: int,
) -> list[kir.Stmt]:
    """Round ``q`` of a tile copy from global memory: one (vector) load per thread,
    stored to the shared tile or the prefetch registers, zeros past ragged edges."""
    access = array.access
    register = f"pf{array.name}"
    strides = b.problem.strides(access.tensor)
    coords = {}
    conditions = []
    for index in access.indices:
        base = kir.Var(f"b_{index}") if index in b.parallel else origin[index]
        coordinate = E.add(base, local[index])
        limit = chunks.sizes.get(index) or b.size(index)
        ragged = (
            b.ragged(index)
            if index in b.parallel
            else chunks.sizes[index] % chunks.steps[index] != 0
        )
        if ragged and b.mapping.boundary == "redirect":
            # Clamp to the last valid element (the last whole vector along the
            # contiguous index, which stays aligned since width divides the extent).
            last = limit - (width if index == natural_order(b.problem, access)[0] else 1)
            coordinate = E.minimum(coordinate, E.const(last))
        elif ragged and b.mapping.boundary == "guard":
            conditions.append(E.less(coordinate, E.const(limit)))
        coords[index] = coordinate
    offset = E.linear([(coords[i], s) for i, s in zip(access.indices, strides, strict=True)])
    condition = E.conj(conditions)
    inner = natural_order(b.problem, access)[0]
    out: list[kir.Stmt] = []
    values: list[kir.Expr]
    if width > 1:
        vector = b.fresh("vec")
        element = CTYPE[b.problem.program.tensor(access.tensor).dtype]  # the array's type
        load: list[kir.Stmt] = [
            kir.VectorLoad(vector, element, f"p_{access.tensor}", offset, width)
        ]
        values = [kir.Lane(vector, lane) for lane in range(width)]
    else:
        load = []
        values = [kir.Load(f"p_{access.tensor}", offset)]
    stores: list[kir.Stmt] = []
    for lane, value in enumerate(values):
        if target == "registers":
            stores.append(kir.Store(register, E.const(q * width + lane), value))
        else:
            lane_local = {**local, inner: E.add(local[inner], E.const(lane))}
            stores.append(kir.Store(array.name, array.offset(lane_local), value))
    if condition is None:
        out.extend(load + stores)
    else:
        zeros: list[kir.Stmt] = []
        for lane in range(width):
            if target == "registers":
                zeros.append(kir.Store(register, E.const(q * width + lane), kir.Float(0.0)))
            else:
                lane_local = {**local, inner: E.add(local[inner], E.const(lane))}
                zeros.append(kir.Store(array.name, array.offset(lane_local), kir.Float(0.0)))
        out.append(kir.If(condition, tuple(load + stores), tuple(zeros)))
    return out


def chunk_compute(
    b: KernelBuilder,
    number: int,
    group: Group,
    chunks: Chunks,
    chunk: kir.Expr,
    accumulate: Accumulate,
) -> list[kir.Stmt]:
    """Loops over one chunk's reduction indices around ``accumulate`` (reads of the
    staged accesses come from their shared tiles); an index of k-step 1 takes no
    loop, and the loops are unrolled from the innermost out (:func:`_unrolls`)."""
    origin = chunks.origin(chunk)
    looped = [k for k in chunks.indices if chunks.steps[k] > 1]
    local: dict[str, kir.Expr] = {k: E.const(0) for k in chunks.indices}
    local.update({k: kir.Var(f"kk_{k}") for k in looped})
    coords = {k: E.add(origin[k], local[k]) for k in chunks.indices}
    body: tuple[kir.Stmt, ...] = tuple(accumulate(b, number, group, Context(coords, local)))
    unrolls = _unrolls(b.mapping.unroll, chunks, looped)
    for k in reversed(looped):
        stop: kir.Expr = E.const(chunks.steps[k])
        if chunks.sizes[k] % chunks.steps[k]:
            stop = E.minimum(stop, E.sub(E.const(chunks.sizes[k]), origin[k]))
        body = (kir.For(f"kk_{k}", E.const(0), stop, 1, body, unroll=unrolls[k]),)
    return list(body)


def _unrolls(budget: int, chunks: Chunks, looped: list[str]) -> dict[str, int]:
    """The ``unroll`` of each chunk loop (``looped``: the indices of k-step above
    1, outermost first).  From the innermost out, loops are unrolled fully while
    the product of their k-steps stays within the mapping's ``budget``, also a
    loop whose trip the extent's last chunk cuts short (``#pragma unroll``, as
    before: an explicit count there made ``tests/test_gett.py``'s c2_028 kernel
    spill); an innermost loop longer than the budget is unrolled ``budget``
    times, and a budget of 1 unrolls nothing.  Before, only the innermost
    index's loop was unrolled, even when its k-step was 1: ``s:15 p:2 v:1``
    kept nvcc's loop of 15 around one step (seed 47's ``spvn,pswv->nw``,
    1.07 -> 0.96 ms on an H100; docs/gpu.md "Chunk loops")."""
    unrolls = dict.fromkeys(looped, 0)
    if budget <= 1:
        return unrolls
    product = 1
    for depth, k in enumerate(reversed(looped)):
        step = chunks.steps[k]
        if product * step > budget:
            if depth == 0:
                unrolls[k] = budget
            break
        product *= step
        unrolls[k] = -1
    return unrolls
