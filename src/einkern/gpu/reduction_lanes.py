"""Reduction threads as runs of lanes: the loop of a reduction thread that sums
runs of adjacent terms into several independent accumulators, and the warp
shuffles that combine the threads' partial sums.

A mapping with reduction threads (:attr:`~einkern.gpu.mapping.Mapping.reduction_threads`,
R threads along index ``j`` of extent n) may set three fields:

* ``reduction_fastest``: the R threads are threadIdx.x's fastest digits, so a
  warp's lanes walk ``j`` (32 lanes read adjacent elements of every input whose
  stride-1 index is ``j``: whole 32-byte sectors per request); their partial
  sums combine by ``__shfl_xor_sync`` butterflies inside the warp
  (:class:`~einkern.gpu.kir.ShuffleSum`, no barrier), and for R > 32 the warps'
  totals through shared memory (one barrier);
* ``reduction_chunk`` c: thread r sums runs of c adjacent terms, r·c … r·c+c−1,
  then R·c + r·c, …; an input whose stride-1 index is ``j`` (and whose other
  strides c divides) is read one vector per run (``float4``/``double2``);
* ``accumulators`` U: the loop takes U runs per step, R·c apart, each added to
  its own accumulator, so U independent loads (of up to 16 bytes) per input are
  in flight per thread; the accumulators are added after the loop.

The loop: ``for (k = r·c; k < F; k += U·R·c)`` over the F = ⌊n / (U·R·c)⌋·U·R·c
terms that whole steps cover (no checks), then ``for (k = F + r·c; k < n; k +=
R·c)`` into the first accumulator (c divides n: no partial runs).  The index is
the group's innermost loop.  Without any of the three fields the reduction
threads keep their first form (slowest digits, a single ``k += R`` loop, a
shared-memory tree: :func:`einkern.gpu.lower.combine_sections`).
"""

from __future__ import annotations

from collections.abc import Callable

from ..ir.nodes import Access
from ..ir.task import Task
from ..semantics import C_TYPE
from . import exprs as E
from . import kir
from .builder import Context, KernelBuilder
from .mapping import Mapping
from .normalize import Group
from .staging import natural_order

#: Widest vector load: 16 bytes.
VECTOR_BYTES = 16
#: Accumulators a reduction thread may keep per output.
MAX_ACCUMULATORS = 8


def lane_form(mapping: Mapping) -> bool:
    """Whether the mapping's reduction threads take the form of this module."""
    return bool(mapping.reduction_threads) and (
        mapping.reduction_fastest or mapping.reduction_chunk > 1 or mapping.accumulators > 1
    )


def run_vector_width(task: Task, mapping: Mapping, access: Access, index: str) -> int:
    """Elements of ``access`` one vector load takes per run of a reduction thread
    along ``index`` (1: scalar loads): the run length when ``index`` is the
    access's stride-1 index, met once, the run is at most 16 bytes of elements of
    4 bytes or more, and it divides every other stride (aligned runs)."""
    chunk = mapping.reduction_chunk
    if chunk < 2 or access.indices.count(index) != 1:
        return 1
    problem = task.problem
    if natural_order(problem, access)[0] != index:
        return 1
    itemsize = problem.program.tensor(access.tensor).itemsize
    if itemsize < 4 or itemsize * chunk > VECTOR_BYTES:
        return 1
    strides = problem.strides(access.tensor)
    if any(s % chunk for i, s in zip(access.indices, strides, strict=True) if i != index):
        return 1
    return chunk


Accumulate = Callable[..., list[kir.Stmt]]


def lane_loops(
    b: KernelBuilder,
    number: int,
    group: Group,
    index: str,
    outer: dict[str, kir.Expr],
    accumulate: Accumulate,
) -> list[kir.Stmt]:
    """The reduction thread's loops over ``index`` (see the module docstring);
    ``outer``: the coordinates of the group's other indices (loops around these),
    ``accumulate``: :func:`einkern.gpu.lower.accumulate`."""
    mapping = b.mapping
    threads = dict(mapping.reduction_threads)[index]
    chunk, count = mapping.reduction_chunk, mapping.accumulators
    size = b.size(index)
    stride = threads * chunk  # between a thread's runs
    whole = size // (count * stride) * count * stride
    k = kir.Var(f"k_{index}")
    mine = E.mul(kir.Var(f"r_{index}"), E.const(chunk))
    loops: list[kir.Stmt] = []
    if whole:
        body: list[kir.Stmt] = []
        for u in range(count):
            body += _run(
                b, number, group, index, outer, E.add(k, E.const(u * stride)), u, accumulate
            )
        loops.append(kir.For(k.name, mine, E.const(whole), count * stride, tuple(body)))
    if whole < size:
        rest = _run(b, number, group, index, outer, k, 0, accumulate)
        loops.append(
            kir.For(k.name, E.add(mine, E.const(whole)), E.const(size), stride, tuple(rest))
        )
    return loops


def _run(
    b: KernelBuilder,
    number: int,
    group: Group,
    index: str,
    outer: dict[str, kir.Expr],
    start: kir.Expr,
    u: int,
    accumulate: Accumulate,
) -> list[kir.Stmt]:
    """One run of ``reduction_chunk`` terms from ``start`` into accumulator ``u``:
    the vector loads first, then the terms element by element."""
    chunk = b.mapping.reduction_chunk
    ctx = Context({**outer, index: start}, {})
    elements = [
        Context({**outer, index: E.add(start, E.const(e))}, {}, ctx.statements, ctx.memo)
        for e in range(chunk)
    ]
    for access in dict.fromkeys(group.accesses()):
        width = run_vector_width(b.task, b.mapping, access, index)
        if width > 1:
            _vector_load(b, access, ctx, elements, width)
    offset = u * len(b.slots)
    for element in elements:
        accumulate(b, number, group, element, offset=offset)
    return ctx.statements


def _vector_load(
    b: KernelBuilder, access: Access, ctx: Context, elements: list[Context], width: int
) -> None:
    """Vector loads of ``access``'s run (one per register-tile element that reads a
    different run), each lane declared and remembered as the value of its element
    (later loads of those elements reuse it).  Ragged output coordinates are
    clamped: the lanes of outputs past the edge are never stored."""
    for slot in b.slots:
        first = b.slot_context(slot, ctx)
        key = _key(access, first)
        if key in ctx.memo:
            continue
        vector = b.fresh("w")
        offset = _clamped_offset(b, access, first)
        ctype = C_TYPE[b.program.tensor(access.tensor).dtype]
        ctx.statements.append(kir.VectorLoad(vector, ctype, f"p_{access.tensor}", offset, width))
        ctx.memo[key] = kir.Var(vector)
        for lane, element in enumerate(elements):
            name = b.fresh("v")
            ctx.statements.append(kir.Declare(name, b.ctype, kir.Lane(vector, lane)))
            ctx.memo[_key(access, b.slot_context(slot, element))] = kir.Var(name)


def _key(access: Access, ctx: Context) -> tuple:
    """The memo key :func:`einkern.gpu.lower.load` gives ``access`` in ``ctx``."""
    return (str(access), tuple(str(ctx.coords.get(i)) for i in access.indices))


def _clamped_offset(b: KernelBuilder, access: Access, ctx: Context) -> kir.Expr:
    strides = b.problem.strides(access.tensor)
    terms = []
    for index, stride in zip(access.indices, strides, strict=True):
        coordinate = ctx.coords[index]
        if index in b.parallel and b.ragged(index) and b.mapping.boundary != "exact":
            coordinate = E.minimum(coordinate, E.const(b.size(index) - 1))
        terms.append((coordinate, stride))
    return E.linear(terms)


def add_accumulators(b: KernelBuilder, number: int) -> list[kir.Stmt]:
    """The independent accumulators added into the first (pairwise)."""
    slots, count = len(b.slots), b.mapping.accumulators
    found: list[kir.Stmt] = []
    step = 1
    while step < count:
        for u in range(0, count - step, 2 * step):
            for r in range(slots):
                other = kir.Load(f"acc{number}", E.const((u + step) * slots + r))
                found.append(kir.Store(f"acc{number}", E.const(u * slots + r), other, "+="))
        step *= 2
    return found


def shuffle_combine(b: KernelBuilder, number: int) -> list[kir.Section]:
    """The reduction threads' partial sums combined when they are the fastest
    digits: a butterfly of warp shuffles over the R ≤ 32 lanes of each output
    (every lane ends with the total), or over whole warps for R > 32, whose
    totals the first lane of each warp stores to shared memory and the first
    reduction thread adds after one barrier."""
    (index, threads), *_ = b.mapping.reduction_threads
    slots = len(b.slots)
    acc = f"acc{number}"
    lanes = min(threads, 32)
    offsets = tuple(1 << s for s in reversed(range(lanes.bit_length() - 1)))
    sections: list[kir.Section] = [kir.ShuffleSum(acc, slots, offsets)]
    if threads <= 32:
        return sections
    warps = b.nthreads // 32
    name = b.fresh(f"red{number}_")
    ctype = next(v.ctype for v in b.thread_vars if v.name == acc)
    b.shared.append(kir.SharedArray(name, ctype, slots * warps))
    digit = kir.Var(f"r_{index}")
    mine = E.div(kir.ThreadIdx(), 32)
    stores = tuple(
        kir.Store(name, E.add(E.const(r * warps), mine), kir.Load(acc, E.const(r)))
        for r in range(slots)
    )
    totals: list[kir.Stmt] = []
    for r in range(slots):
        for w in range(1, threads // 32):
            at = E.add(E.const(r * warps + w), mine)
            totals.append(kir.Store(acc, E.const(r), kir.Load(name, at), "+="))
    first_lane = E.less(E.mod(digit, 32), E.const(1))
    return [
        *sections,
        kir.PerThread((kir.If(first_lane, stores),)),
        kir.Barrier(),
        kir.PerThread((kir.If(E.less(digit, E.const(1)), tuple(totals)),)),
    ]


def lane_problems(task: Task, mapping: Mapping) -> list[str]:
    """What is wrong with the mapping's lane fields (empty: nothing)."""
    problems = []
    fields = mapping.reduction_fastest or mapping.reduction_chunk != 1 or mapping.accumulators != 1
    if not fields:
        return []
    if not mapping.reduction_threads:
        return ["reduction_fastest, reduction_chunk and accumulators need reduction threads"]
    if mapping.reduction_chunk not in (1, 2, 4):
        problems.append(f"reduction chunk {mapping.reduction_chunk} (use 1, 2 or 4)")
    if not 1 <= mapping.accumulators <= MAX_ACCUMULATORS:
        problems.append(f"accumulators {mapping.accumulators} (1 to {MAX_ACCUMULATORS})")
    for index, _ in mapping.reduction_threads:
        size = task.problem.index_size(task.statement, index)
        if index in task.statement.indices and size % max(1, mapping.reduction_chunk):
            problems.append(f"runs of {mapping.reduction_chunk} do not divide {index} = {size}")
    threads = mapping.threads
    if mapping.reduction_fastest and threads > 32 and threads % 32:
        problems.append(f"warp shuffles need whole warps, not {threads} threads")
    return problems
