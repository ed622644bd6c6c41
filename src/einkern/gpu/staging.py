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
innermost first, ``padding`` extra elements per innermost row).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..ir.nodes import Access, Problem
from ..semantics import C_TYPE as CTYPE
from . import exprs as E
from . import kir
from .mapping import Mapping
from .normalize import Group, reduction_of


@dataclass(frozen=True)
class StagedArray:
    """A staged tile: shared array ``name`` holding ``access`` over ``extents``."""

    name: str
    access: Access
    order: tuple[str, ...]  # innermost first
    extents: tuple[tuple[str, int], ...]
    padding: int

    def extent(self, index: str) -> int:
        return dict(self.extents)[index]

    def strides(self) -> dict[str, int]:
        strides = {}
        step = 1
        for position, index in enumerate(self.order):
            strides[index] = step
            step *= self.extent(index) + (self.padding if position == 0 else 0)
        return strides

    def size(self) -> int:
        inner = self.order[0]
        total = self.extent(inner) + self.padding
        for index in self.order[1:]:
            total *= self.extent(index)
        return total

    def offset(self, local: dict[str, kir.Expr]) -> kir.Expr:
        strides = self.strides()
        return E.linear([(local[i], strides[i]) for i in self.order])


def natural_order(problem: Problem, access: Access) -> tuple[str, ...]:
    """The access's indices from its contiguous dimension outwards (memory order)."""
    layout = problem.program.tensor(access.tensor).layout
    return tuple(reversed(access.indices)) if layout == "row" else tuple(access.indices)


def _find_access(problem: Problem, position: int, text: str):
    groups = reduction_of(problem.program.statements[position]).groups
    for number, group in enumerate(groups):
        for access in group.accesses():
            if str(access) == text:
                return number, group, access
    return None


def vector_width_for(problem: Problem, position: int, mapping: Mapping, access: Access) -> int:
    """The widest vector (≤ ``mapping.vector_width``) usable to load this access's tile."""
    statement = problem.program.statements[position]
    tensor = problem.program.tensor(access.tensor)
    width = mapping.vector_width
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


def check_staging(problem: Problem, position: int, mapping: Mapping,
                  max_shared_bytes: int) -> list[str]:
    statement = problem.program.statements[position]
    problems: list[str] = []
    total = 0
    if mapping.vector_width not in (1, 2, 4):
        problems.append(f"vector width {mapping.vector_width} (use 1, 2 or 4)")
    if mapping.prefetch and not mapping.staged:
        problems.append("prefetch needs at least one staged input")
    for staging in mapping.staged:
        found = _find_access(problem, position, staging.access)
        if found is None:
            problems.append(f"staged input {staging.access!r} is not read inside a sum of "
                            f"S{position}")
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
            problems.append(f"{staging.access}: layout {staging.order} is not a permutation "
                            f"of its indices")
        if staging.padding < 0:
            problems.append(f"{staging.access}: negative padding")
        elements = 1
        for index in access.indices:
            if index in statement.parallel_indices:
                elements *= mapping.tile_of(index).tile
            else:
                elements *= mapping.step_of(index, problem.index_size(statement, index))
        order = staging.order or natural_order(problem, access)
        inner = order[0] if order else None
        if inner is not None:
            inner_extent = (mapping.tile_of(inner).tile if inner in statement.parallel_indices
                            else mapping.step_of(inner, problem.index_size(statement, inner)))
            elements = elements // max(inner_extent, 1) * (inner_extent + staging.padding)
        dtype = "float64" if any(
            problem.program.tensor(t).dtype == "float64"
            for t in {statement.output.tensor, *(a.tensor for a in statement.reads())}
        ) else "float32"
        total += elements * (8 if dtype == "float64" else 4)
        if mapping.boundary == "exact":
            for index in group.indices:
                size = problem.index_size(statement, index)
                if size % mapping.step_of(index, size):
                    problems.append(f"boundary 'exact' but k-step of {index} does not divide "
                                    f"{size}")
    if total > max_shared_bytes:
        problems.append(f"{total} bytes of shared memory (limit {max_shared_bytes})")
    return problems


def staged_group_sections(lowering, number: int, group: Group,
                          staged: list[Access]) -> list[kir.Section]:
    """Sections of a staged reduction group (see the module docstring)."""
    mapping: Mapping = lowering.mapping
    problem: Problem = lowering.problem
    indices = lowering.group_indices(group)
    sizes = {k: lowering.size(k) for k in indices}
    steps = {k: mapping.step_of(k, sizes[k]) for k in indices}
    chunks = {k: math.ceil(sizes[k] / steps[k]) for k in indices}
    total_chunks = math.prod(chunks.values())
    counter = f"c{number}"

    def chunk_origin(chunk: kir.Expr) -> dict[str, kir.Expr]:
        origin = {}
        stride = 1
        for k in reversed(indices):  # the innermost reduction index advances fastest
            origin[k] = E.mul(E.mod(E.div(chunk, stride), chunks[k]), E.const(steps[k]))
            stride *= chunks[k]
        return origin

    arrays = []
    for access in staged:
        staging = mapping.staging_of(str(access))
        order = staging.order or natural_order(problem, access)
        extents = tuple(
            (i, lowering.tiles[i].tile if i in lowering.parallel else steps[i])
            for i in access.indices
        )
        array = StagedArray(lowering.fresh(f"sh{number}_"), access, tuple(order), extents,
                            staging.padding)
        lowering.staged_arrays[(number, str(access))] = array
        lowering.shared.append(kir.SharedArray(array.name, lowering.ctype, array.size()))
        arrays.append(array)

    def tile_copy(array: StagedArray, chunk: kir.Expr, target: str) -> list[kir.Stmt]:
        """Copy the chunk's tile of ``array`` from global memory to ``target``:
        ``"shared"`` or ``"registers"`` (prefetch), or registers → shared (``"commit"``)."""
        access = array.access
        memory_order = natural_order(problem, access)
        width = vector_width_for(problem, lowering.position, mapping, access)
        counts = [array.extent(i) for i in memory_order]
        counts[0] //= width
        vectors = math.prod(counts)
        rounds = math.ceil(vectors / lowering.nthreads)
        origin = chunk_origin(chunk)
        strides = problem.strides(access.tensor)
        register = f"pf{array.name}"
        if target == "registers" and not any(v.name == register for v in lowering.thread_vars):
            lowering.thread_vars.append(kir.ThreadVar(register, lowering.ctype, rounds * width))
        statements: list[kir.Stmt] = []
        for q in range(rounds):
            element = E.add(E.const(q * lowering.nthreads), kir.ThreadIdx())
            local: dict[str, kir.Expr] = {}
            stride = 1
            for position, (index, count) in enumerate(zip(memory_order, counts, strict=True)):
                coordinate = E.mod(E.div(element, stride), count)
                local[index] = E.mul(coordinate, E.const(width)) if position == 0 else coordinate
                stride *= count
            body: list[kir.Stmt] = []
            if target == "commit":
                for lane in range(width):
                    lane_local = {**local, memory_order[0]: E.add(local[memory_order[0]],
                                                                  E.const(lane))}
                    body.append(kir.Store(array.name, array.offset(lane_local),
                                          kir.Load(register, E.const(q * width + lane))))
            else:
                body.extend(global_to(array, local, origin, strides, width, target, register, q))
            if vectors % lowering.nthreads and q == rounds - 1:
                statements.append(kir.If(E.less(element, E.const(vectors)), tuple(body)))
            else:
                statements.extend(body)
        return statements

    def global_to(array, local, origin, strides, width, target, register, q) -> list[kir.Stmt]:
        access = array.access
        coords = {}
        conditions = []
        for index in access.indices:
            base = kir.Var(f"b_{index}") if index in lowering.parallel else origin[index]
            coordinate = E.add(base, local[index])
            limit = sizes.get(index) or lowering.size(index)
            ragged = (lowering.ragged(index) if index in lowering.parallel
                      else sizes[index] % steps[index] != 0)
            if ragged and mapping.boundary == "redirect":
                # Clamp to the last valid element (the last whole vector along the
                # contiguous index, which stays aligned since width divides the extent).
                last = limit - (width if index == natural_order(problem, access)[0] else 1)
                coordinate = E.minimum(coordinate, E.const(last))
            elif ragged and mapping.boundary == "guard":
                conditions.append(E.less(coordinate, E.const(limit)))
            coords[index] = coordinate
        offset = E.linear([(coords[i], s) for i, s in zip(access.indices, strides, strict=True)])
        condition = E.conj(conditions)
        inner = natural_order(problem, access)[0]
        out: list[kir.Stmt] = []
        values: list[kir.Expr]
        if width > 1:
            vector = lowering.fresh("vec")
            element = CTYPE[problem.program.tensor(access.tensor).dtype]  # the array's type
            load: list[kir.Stmt] = [kir.VectorLoad(vector, element,
                                                   f"p_{access.tensor}", offset, width)]
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

    def compute(chunk: kir.Expr) -> list[kir.Stmt]:
        from .lower import _Context

        origin = chunk_origin(chunk)
        loop_vars = {k: f"kk_{k}" for k in indices}
        coords = {k: E.add(origin[k], kir.Var(v)) for k, v in loop_vars.items()}
        ctx = _Context(coords, {k: kir.Var(v) for k, v in loop_vars.items()})
        body: tuple[kir.Stmt, ...] = tuple(lowering.accumulate(number, group, ctx))
        for depth, k in enumerate(reversed(indices)):
            stop: kir.Expr = E.const(steps[k])
            if sizes[k] % steps[k]:
                stop = E.minimum(stop, E.sub(E.const(sizes[k]), origin[k]))
            unroll = 0
            if depth == 0 and mapping.unroll > 1:
                unroll = -1 if mapping.unroll >= steps[k] else mapping.unroll
            body = (kir.For(loop_vars[k], E.const(0), stop, 1, body, unroll=unroll),)
        return list(body)

    chunk = kir.Var(counter)
    sections: list[kir.Section] = []
    if mapping.prefetch:
        first = [s for a in arrays for s in tile_copy(a, E.const(0), "registers")]
        sections.append(kir.PerThread((kir.Comment("prefetch the first chunk"), *first)))
        commit = [s for a in arrays for s in tile_copy(a, chunk, "commit")]
        following = [s for a in arrays for s in tile_copy(a, E.add(chunk, E.const(1)),
                                                          "registers")]
        prefetch_next = kir.If(E.less(E.add(chunk, E.const(1)), E.const(total_chunks)),
                               tuple(following))
        loop_body: tuple[kir.Section, ...] = (
            kir.PerThread(tuple(commit)),
            kir.Barrier(),
            kir.PerThread((prefetch_next, *compute(chunk))),
            kir.Barrier(),
        )
    else:
        load = [s for a in arrays for s in tile_copy(a, chunk, "shared")]
        loop_body = (
            kir.PerThread(tuple(load)),
            kir.Barrier(),
            kir.PerThread(tuple(compute(chunk))),
            kir.Barrier(),
        )
    sections.append(kir.Uniform(counter, 0, total_chunks, 1, loop_body))
    return sections
