"""Lowering: a one-statement :class:`~einkern.ir.task.Task` and a
:class:`~einkern.gpu.mapping.Mapping` → kernel IR, as passes over a
:class:`~einkern.gpu.builder.KernelBuilder` (:func:`new_builder`, then
:func:`build_kernel`; :func:`lower` checks the mapping first).

Kernel shape (one thread block computes one block tile of the output):

1. prologue: decode the thread's coordinate along every threaded index and the
   block's base along every output index; zero the accumulators;
2. for every reduction group (one accumulator per group, see normalize.py):
   * without staged inputs: per-thread loops over the group's indices;
   * with staged inputs: a block-uniform loop over k-step chunks; each chunk
     is copied to shared memory by all threads (coalesced along each input's
     contiguous index), a barrier, the per-thread compute over the chunk, a
     barrier.  With ``prefetch`` the next chunk is loaded into registers
     before computing the current one;
   the compute step evaluates the group's body once per register-tile element,
   loading each distinct input value once (outer-product register reuse);
   the staged section is :func:`einkern.gpu.staging.staged_group_sections`;
3. epilogue: evaluate the statement's epilogue expression per register-tile
   element and store (``=``, ``+=`` or ``-=``), predicated at the edges.
"""

from __future__ import annotations

import math
from dataclasses import replace

from ..ir.memo import by_identity
from ..ir.nodes import (
    Access,
    Binary,
    Call,
    Const,
    Neg,
    Problem,
    ScalarRef,
    Sum,
    accesses,
    signed_terms,
)
from ..ir.task import Task
from ..semantics import C_TYPE as CTYPE
from ..semantics import FUNCTIONS, ITEMSIZE
from . import exprs as E
from . import kir
from .accumulation import sum_block
from .builder import Context, KernelBuilder, OnChipArray, compute_dtype
from .contraction import NotAContraction, gemm_form
from .device import H100, DeviceLimits
from .mapping import ACCUMULATIONS, BOUNDARY_POLICIES, Mapping, MappingError
from .mma_config import STRATEGY as MMA
from .mma_family import lower_family
from .mma_family import problems as family_problems
from .mma_family import shared_bytes as family_shared_bytes
from .mma_lower import lower_mma
from .mma_lower import problems as mma_problems
from .mma_lower import shared_bytes as mma_shared_bytes
from .normalize import Group, Placeholder, reduction_of
from .padding import padding_problems
from .pair import pair_kernel
from .pair import why_not as pair_problems
from .reduction_lanes import add_accumulators, lane_form, lane_loops, lane_problems, shuffle_combine
from .staging import check_staging, staged_group_sections
from .transpose import STRATEGY as TRANSPOSE
from .transpose import build_transpose


@by_identity(maxsize=64)
def preload_sign(statement) -> int:
    """How an update's single sum enters its output: +1 or -1 (the sign with which
    the products are accumulated onto the preloaded output), 0 when the output
    cannot be preloaded: not ``+=``/``-=``, not exactly one sum (possibly negated)
    on the right, or the output tensor also read on the right."""
    if statement.op not in ("+=", "-="):
        return 0
    if statement.output.tensor in {a.tensor for a in accesses(statement.rhs)}:
        return 0
    reduction = reduction_of(statement)
    if len(reduction.groups) != 1:
        return 0
    epilogue, sign = reduction.epilogue, 1
    if isinstance(epilogue, Neg):
        epilogue, sign = epilogue.operand, -1
    if not isinstance(epilogue, Placeholder):
        return 0
    return sign if statement.op == "+=" else -sign


def preload_applies(statement) -> bool:
    """Whether ``Mapping.preload_output`` is valid for this statement."""
    return preload_sign(statement) != 0


def index_type(problem: Problem) -> str:
    largest = max((problem.numel(t.name) for t in problem.program.tensors), default=1)
    return "long long" if largest >= 2**31 else "int"


def new_builder(task: Task, mapping: Mapping, name: str) -> KernelBuilder:
    """A :class:`~.builder.KernelBuilder` for ``task`` under ``mapping`` (unchecked:
    :func:`lower` checks the mapping first)."""
    preload = preload_sign(task.statement) if mapping.preload_output else 0
    return KernelBuilder(
        task, mapping, name, compute_dtype(task), index_type(task.problem), preload
    )


def build_kernel(builder: KernelBuilder) -> kir.Kernel:
    """Run the passes over ``builder`` (prologue, one section per reduction group,
    epilogue) and assemble the kernel; the transpose strategy is its own pass."""
    if builder.mapping.strategy == TRANSPOSE:
        return build_transpose(builder)
    sections: list[kir.Section] = [kir.PerThread(tuple(prologue(builder)))]
    for number, group in enumerate(builder.reduction.groups):
        sections.extend(group_sections(builder, number, group))
        if builder.mapping.reduction_fastest:
            sections.extend(shuffle_combine(builder, number))
        elif builder.mapping.reduction_threads:
            sections.extend(combine_sections(builder, number))
    sections.append(kir.PerThread(tuple(epilogue(builder))))
    statement = builder.statement
    tensors = [statement.output.tensor] + [a.tensor for a in statement.reads()]
    params = []
    for tensor in builder.program.tensors:
        if tensor.name in tensors and tensor.name not in builder.on_chip:
            params.append(
                kir.Param(
                    f"p_{tensor.name}",
                    CTYPE[tensor.dtype],
                    True,
                    builder.problem.numel(tensor.name),
                    readonly=tensor.name != statement.output.tensor,
                )
            )
    for scalar in builder.program.scalars:
        params.append(kir.Param(f"s_{scalar.name}", "double", False))
    return kir.Kernel(
        name=builder.name,
        params=tuple(params),
        threads=builder.nthreads,
        blocks=builder.blocks(),
        thread_vars=tuple(builder.thread_vars),
        shared=tuple(builder.shared),
        body=tuple(sections),
        index_type=builder.index_type,
        comment=f"{statement}  [{builder.mapping.strategy}]",
        meta=(("compute_type", builder.ctype),),
        min_blocks=builder.mapping.min_blocks,
    )


# -- the prologue ----------------------------------------------------------------


def prologue(b: KernelBuilder) -> list[kir.Stmt]:
    """Decode the thread's coordinate along every threaded index and the block's
    base along every output index; zero (or preload) the accumulators."""
    body: list[kir.Stmt] = []
    # the reduction threads are threadIdx's fastest digits or its slowest
    fastest = b.mapping.reduction_fastest
    digits = [(f"r_{i}", n) for i, n in b.mapping.reduction_threads]
    threaded = [(f"t_{t.index}", t.threads) for t in b.mapping.parallel if t.threads > 1]
    stride = 1
    for name, threads in digits + threaded if fastest else threaded + digits:
        b.thread_vars.append(kir.ThreadVar(name, b.index_type))
        body.append(kir.Assign(name, E.mod(E.div(kir.ThreadIdx(), stride), threads)))
        stride *= threads
    stride = 1
    for index in b.grid_order:
        count = math.ceil(b.size(index) / b.tiles[index].tile)
        b.thread_vars.append(kir.ThreadVar(f"b_{index}", b.index_type))
        coordinate = E.mod(E.div(kir.BlockIdx(), stride), count)
        base = E.mul(coordinate, E.const(b.tiles[index].tile))
        body.append(kir.Assign(f"b_{index}", base))
        stride *= count
    count = len(b.slots) * b.mapping.accumulators  # independent accumulators after the first
    for number in range(len(b.reduction.groups)):
        b.thread_vars.append(kir.ThreadVar(f"acc{number}", accumulator_ctype(b), count))
        for r in range(count):
            start: kir.Expr = kir.Float(0.0)
            if b.preload:
                start = global_load(b, b.statement.output, b.slot_context(b.slots[r]))
            body.append(kir.Store(f"acc{number}", E.const(r), start))
    return body


# -- values ----------------------------------------------------------------------


def value(b: KernelBuilder, expr, ctx: Context, group: int | None = None) -> kir.Expr:
    """Emit ``expr`` in context; returns a kernel expression (may append statements)."""
    if isinstance(expr, Const):
        return kir.Float(float(expr.value))
    if isinstance(expr, ScalarRef):
        return kir.Var(f"s_{expr.name}")
    if isinstance(expr, Placeholder):
        return kir.Load(f"acc{expr.group}", ctx.local["__slot__"])
    if isinstance(expr, Access):
        return load(b, expr, ctx, group)
    if isinstance(expr, Neg):
        return kir.Neg(value(b, expr.operand, ctx, group))
    if isinstance(expr, Binary):
        return kir.Op(expr.op, value(b, expr.left, ctx, group), value(b, expr.right, ctx, group))
    if isinstance(expr, Call):
        args = tuple(value(b, a, ctx, group) for a in expr.args)
        if expr.func in ("max", "min"):  # the printers' NaN-propagating max/min
            return kir.Op(expr.func, *args)
        return kir.Call(FUNCTIONS[expr.func].c_name(b.dtype), args)
    if isinstance(expr, Sum):
        return inline_sum(b, expr, ctx)
    raise TypeError(f"cannot lower {expr!r}")


def inline_sum(b: KernelBuilder, expr: Sum, ctx: Context) -> kir.Expr:
    """A sum nested in an expression: serial per-thread loops."""
    name = b.fresh("sum")
    ctx.statements.append(kir.Declare(name, accumulator_ctype(b), kir.Float(0.0)))
    inner = Context({**ctx.coords}, {**ctx.local}, [], {})
    loop_vars = {i: b.fresh(f"k_{i}_") for i in expr.indices}
    for index, var in loop_vars.items():
        inner.coords[index] = kir.Var(var)
    term = value(b, expr.body, inner)
    body: tuple[kir.Stmt, ...] = (*inner.statements, kir.Assign(name, term, "+="))
    for index in reversed(expr.indices):
        body = (kir.For(loop_vars[index], E.const(0), E.const(b.size(index)), 1, body),)
    ctx.statements.extend(body)
    return kir.Var(name)


def load(b: KernelBuilder, access: Access, ctx: Context, group: int | None) -> kir.Expr:
    """A value of ``access``, from its staged tile when group ``group`` stages it,
    else from global memory; loaded once per context."""
    key = (str(access), tuple(str(ctx.coords.get(i)) for i in access.indices))
    if key in ctx.memo:
        return ctx.memo[key]
    staged = b.staged_arrays.get((group, str(access))) if group is not None else None
    if staged is not None:
        loaded: kir.Expr = kir.Load(staged.name, staged.offset(ctx.local))
    else:
        loaded = global_load(b, access, ctx)
    name = b.fresh("v")
    ctx.statements.append(kir.Declare(name, b.ctype, loaded))
    ctx.memo[key] = kir.Var(name)
    return kir.Var(name)


def global_load(b: KernelBuilder, access: Access, ctx: Context) -> kir.Expr:
    """A load of ``access`` from global memory (from its shared block tile when
    the tensor is kept on chip), guarded or clamped at ragged edges as the
    boundary policy says."""
    on_chip = b.on_chip.get(access.tensor)
    strides = b.problem.strides(access.tensor) if on_chip is None else on_chip.strides()
    coords = []
    conditions = []
    for index, stride in zip(access.indices, strides, strict=True):
        coordinate = ctx.coords[index]
        if index in b.parallel and b.ragged(index):
            if b.mapping.boundary == "redirect":
                coordinate = E.minimum(coordinate, E.const(b.size(index) - 1))
            elif b.mapping.boundary == "guard":
                conditions.append(E.less(coordinate, E.const(b.size(index))))
        if on_chip is not None:  # the block tile's coordinate
            coordinate = ctx.local[index] if index in b.parallel else ctx.coords[index]
        coords.append((coordinate, stride))
    array = f"p_{access.tensor}" if on_chip is None else on_chip.name
    loaded = kir.Load(array, E.linear(coords))
    condition = E.conj(list(dict.fromkeys(conditions)))
    return loaded if condition is None else kir.Select(condition, loaded, kir.Float(0.0))


# -- reduction groups ------------------------------------------------------------


def accumulate(
    b: KernelBuilder, number: int, group: Group, ctx: Context, into: str = "acc", offset: int = 0
) -> list[kir.Stmt]:
    """``acc[r] ±= term`` for every term of the body and register-tile element,
    term by term: the values of one term are loaded once, used by every element
    and dead before the next term's are loaded (a whole CCSD(T) family keeps
    one term's operands live, not all eighteen).  ``into``: the accumulators'
    name (``part``: a blocked group's chunk partials); ``offset``: the first
    accumulator (a reduction thread's independent accumulators)."""
    for sign, term in signed_terms(group.body):
        add = (sign > 0) == (b.preload >= 0)
        for r, slot in enumerate(b.slots):
            slot_ctx = b.slot_context(slot, ctx)
            term_value = value(b, term, slot_ctx, number)
            ctx.statements.append(
                kir.Store(f"{into}{number}", E.const(offset + r), term_value, "+=" if add else "-=")
            )
    return ctx.statements


def accumulator_ctype(b: KernelBuilder) -> str:
    """The accumulators' C type: double for a ``wide`` float kernel."""
    return "double" if b.mapping.accumulate == "wide" and b.ctype == "float" else b.ctype


def _into_partials(b: KernelBuilder, number: int, group: Group, ctx: Context) -> list[kir.Stmt]:
    return accumulate(b, number, group, ctx, "part")


def group_sections(b: KernelBuilder, number: int, group: Group) -> list[kir.Section]:
    """The sections of reduction group ``number``: serial, or staged when the
    mapping stages any of its inputs.  A ``blocked`` float group with staged
    inputs sums runs of k-step chunks (:func:`partial_period`) into partials
    (``part``), zeroed at a run's first chunk and added to the accumulators after
    its last (serial groups: :func:`serial_group`).  A 0-dimensional access has
    no tile: it is read where it is used, whatever the mapping says."""
    staged = [a for a in group.accesses() if a.indices and b.mapping.staging_of(str(a)) is not None]
    if not staged:
        return [kir.PerThread(tuple(serial_group(b, number, group)))]
    if b.mapping.accumulate != "blocked" or b.ctype != "float":
        return staged_group_sections(b, number, group, staged, accumulate)
    sections = staged_group_sections(b, number, group, staged, _into_partials)
    zero, add = _partials(b, number, "zero"), _partials(b, number, "add")
    wrapped: list[kir.Section] = []
    for section in sections:
        if isinstance(section, kir.Uniform):
            chunks = section.stop - section.start
            period = partial_period(b.size, group, b.mapping, chunks)
            if period > 1:  # a partial spans `period` chunks
                chunk = kir.Var(section.var)
                phase = E.mod(chunk, period)
                last = E.less(E.const(period - 2), phase)
                if chunks % period:
                    last = kir.Op("||", last, E.less(E.const(chunks - 2), chunk))
                zero = (kir.If(E.less(phase, E.const(1)), zero),)
                add = (kir.If(last, add),)
            body = (kir.PerThread(zero), *section.body, kir.PerThread(add))
            section = replace(section, body=body)
        wrapped.append(section)
    return wrapped


def partial_period(size, group: Group, mapping: Mapping, chunks: int) -> int:
    """Chunks per partial sum of a blocked group: the power of two that makes a
    block nearest sqrt(n) terms (error ~ (b + n/b)·u is smallest at b = sqrt(n)),
    at least 1 and at most ``chunks``."""
    terms = math.prod(size(i) for i in group.indices)
    per_chunk = max(1, terms // max(chunks, 1))
    period = 1 << max(0, round(math.log2(math.sqrt(terms) / per_chunk)))
    return min(period, max(chunks, 1))


def serial_group(b: KernelBuilder, number: int, group: Group) -> list[kir.Stmt]:
    """Per-thread loops over the group's indices around :func:`accumulate`.  A
    ``blocked`` float group sums blocks of about sqrt(n) terms
    (:func:`~.accumulation.sum_block`: from one loop inwards, that loop tiled when
    needed) into partials ``part``, each added to the accumulators after its block."""
    indices = b.group_indices(group)
    split = dict(b.mapping.reduction_threads)
    if lane_form(b.mapping):
        return lane_group(b, number, group, indices, split)
    loop_vars = {i: f"k_{i}" for i in indices}
    ctx = Context({i: kir.Var(v) for i, v in loop_vars.items()}, {})
    sizes = [b.size(i) for i in indices]
    block = None
    if b.mapping.accumulate == "blocked" and b.ctype == "float" and not split:
        block = sum_block(sizes)  # (reduction threads sum 1/R of the terms, then a tree)
    body: tuple[kir.Stmt, ...] = tuple(
        accumulate(b, number, group, ctx, "acc" if block is None else "part")
    )
    for depth, index in enumerate(reversed(indices)):
        position, size = len(indices) - 1 - depth, sizes[len(indices) - 1 - depth]
        unroll = b.mapping.unroll if depth == 0 and b.mapping.unroll > 1 else 0
        if index in split:  # this thread's share: every split-th term
            start0: kir.Expr = kir.Var(f"r_{index}")
            body = (kir.For(loop_vars[index], start0, E.const(size), split[index], body),)
            continue
        if block is None or position != block[0]:
            body = (kir.For(loop_vars[index], E.const(0), E.const(size), 1, body, unroll=unroll),)
            continue
        tile = block[1]
        start: kir.Expr = E.const(0)
        stop: kir.Expr = E.const(size)
        if tile is not None:
            start = kir.Var(f"kb_{index}")
            stop = E.add(start, E.const(tile))
            if size % tile:
                stop = E.minimum(stop, E.const(size))
        body = (
            *_partials(b, number, "zero"),
            kir.For(loop_vars[index], start, stop, 1, body, unroll=unroll),
            *_partials(b, number, "add"),
        )
        if tile is not None:
            body = (kir.For(f"kb_{index}", E.const(0), E.const(size), tile, body),)
    return [kir.Comment(f"reduction over {', '.join(indices)}"), *body]


def lane_group(
    b: KernelBuilder, number: int, group: Group, indices: list[str], split: dict[str, int]
) -> list[kir.Stmt]:
    """A serial group whose reduction threads take runs into several accumulators
    (:mod:`einkern.gpu.reduction_lanes`): the split index innermost, the other
    indices' loops around it, the accumulators added after them."""
    (index,) = split
    outer = [i for i in indices if i != index]
    coords: dict[str, kir.Expr] = {i: kir.Var(f"k_{i}") for i in outer}
    body = tuple(lane_loops(b, number, group, index, coords, accumulate))
    for i in reversed(outer):
        body = (kir.For(f"k_{i}", E.const(0), E.const(b.size(i)), 1, body),)
    return [
        kir.Comment(f"reduction over {', '.join([*outer, index])}"),
        *body,
        *add_accumulators(b, number),
    ]


def combine_sections(b: KernelBuilder, number: int) -> list[kir.Section]:
    """The partial sums of the reduction threads combined by a tree in shared
    memory: each thread stores its accumulators, then for s = R/2 … 2 the threads
    below s add the partial s above them (a barrier after each step), and the
    first reduction thread of each output adds the last two into its
    accumulators (log2 R barriers)."""
    combine = b.mapping.combine_threads
    outputs = b.mapping.output_threads
    name = b.fresh(f"red{number}_")
    b.shared.append(kir.SharedArray(name, accumulator_ctype(b), len(b.slots) * b.nthreads))
    mine = kir.ThreadIdx()
    (index, _), *_ = b.mapping.reduction_threads
    digit = kir.Var(f"r_{index}")

    def at(slot: int, offset: int = 0) -> kir.Expr:
        return E.add(E.const(slot * b.nthreads + offset), mine)

    stores = tuple(
        kir.Store(name, at(r), kir.Load(f"acc{number}", E.const(r))) for r in range(len(b.slots))
    )
    sections: list[kir.Section] = [kir.PerThread(stores), kir.Barrier()]
    step = combine // 2
    while step > 1:
        adds = tuple(
            kir.Store(name, at(r), kir.Load(name, at(r, step * outputs)), "+=")
            for r in range(len(b.slots))
        )
        sections += [kir.PerThread((kir.If(E.less(digit, E.const(step)), adds),)), kir.Barrier()]
        step //= 2
    # the last step straight into the accumulators (the thread reads what it wrote)
    totals = tuple(
        kir.Store(
            f"acc{number}",
            E.const(r),
            kir.Op("+", kir.Load(name, at(r)), kir.Load(name, at(r, outputs))),
        )
        for r in range(len(b.slots))
    )
    sections.append(kir.PerThread((kir.If(E.less(digit, E.const(1)), totals),)))
    return sections


def _partials(b: KernelBuilder, number: int, what: str) -> tuple[kir.Stmt, ...]:
    """Zero the partials of group ``number`` (declaring them once), or add them to
    its accumulators."""
    part, acc, count = f"part{number}", f"acc{number}", len(b.slots)
    if not any(var.name == part for var in b.thread_vars):
        b.thread_vars.append(kir.ThreadVar(part, b.ctype, count))
    if what == "zero":
        return tuple(kir.Store(part, E.const(r), kir.Float(0.0)) for r in range(count))
    return tuple(kir.Store(acc, E.const(r), kir.Load(part, E.const(r)), "+=") for r in range(count))


# -- the epilogue ----------------------------------------------------------------


def epilogue(b: KernelBuilder) -> list[kir.Stmt]:
    """Evaluate the epilogue expression per register-tile element and store it
    (``=``, ``+=`` or ``-=``), predicated at ragged edges."""
    out = b.statement.output
    strides = b.problem.strides(out.tensor)
    on_chip = b.on_chip.get(out.tensor)
    statements: list[kir.Stmt] = []
    op = {"=": "=", "+=": "+=", "-=": "-="}[b.statement.op]
    for r, slot in enumerate(b.slots):
        ctx = b.slot_context(slot)
        ctx.local["__slot__"] = E.const(r)
        conditions = [
            E.less(ctx.coords[d], E.const(b.size(d)))
            for d in b.parallel
            if b.ragged(d) and b.mapping.boundary != "exact"
        ]
        # Elementwise reads at ragged edges may be out of range: always guard them
        # (redirect clamps them instead).
        if b.preload:  # the accumulator already holds the updated output
            result: kir.Expr = kir.Load("acc0", E.const(r))
            op = "="
        else:
            result = value(b, b.reduction.epilogue, ctx)
        if on_chip is None:
            at = [(ctx.coords[d], s) for d, s in zip(out.indices, strides, strict=True)]
            store = kir.Store(f"p_{out.tensor}", E.linear(at), result, op)
        else:  # the block tile of a temporary kept on chip
            at = [(ctx.local[d], s) for d, s in zip(out.indices, on_chip.strides(), strict=True)]
            store = kir.Store(on_chip.name, E.linear(at), result)
        condition = E.conj(conditions)
        block = (*ctx.statements, store)
        statements.append(
            block[0]
            if len(block) == 1 and condition is None
            else kir.If(condition or kir.Int(1), tuple(block))
        )
    if b.mapping.reduction_threads:  # the totals are in the first reduction thread's
        first = E.conj(
            [E.less(kir.Var(f"r_{i}"), E.const(1)) for i, _ in b.mapping.reduction_threads]
        )
        assert first is not None
        return [kir.If(first, tuple(statements))]
    return statements


def lower(
    task: Task,
    mapping: Mapping,
    name: str | None = None,
    max_shared_bytes: int = H100.shared_per_block_optin,
    on_chip: tuple[OnChipArray, ...] = (),
) -> kir.Kernel:
    """Kernel IR for ``task`` (one statement) under ``mapping`` (validated first;
    ``max_shared_bytes``: a block's shared memory with the opt-in launch attribute,
    which the runtime sets for kernels over 48 KiB).  ``on_chip``: temporaries of
    a block-local chain read and written in their shared block tiles (declared by
    the chain, not by this kernel; :mod:`einkern.gpu.chain_memory`)."""
    problems = check_mapping(task, mapping, max_shared_bytes)
    if mapping.boundary == "pad":
        problems.append(
            "boundary 'pad' is planned as copies around an exact kernel: "
            "use einkern.gpu.plan.plan_task"
        )
    if problems:
        raise MappingError(
            f"mapping does not fit statement S{task.position}: " + "; ".join(problems),
            hint="fix the mapping file, or let einkern choose one (omit --mapping)",
        )
    name = name or f"einkern_s{task.position}"
    if mapping.pair:
        return pair_kernel(task, mapping, name, max_shared_bytes, lower)
    if mapping.mma is not None and mapping.mma.box:
        return lower_family(task, mapping.mma, name)
    if mapping.mma is not None:
        return lower_mma(task, mapping.mma, name)
    builder = new_builder(task, mapping, name)
    builder.on_chip = {a.tensor: a for a in on_chip}
    return build_kernel(builder)


def _mma_problems(
    task: Task, mapping: Mapping, max_shared_bytes: int | None, limits: DeviceLimits
) -> list[str]:
    """:func:`check_mapping` of a tensor-core mapping: the statement has a GEMM form
    the configuration's instruction takes, and the block fits the device."""
    if mapping.mma is None or mapping.strategy != MMA:
        return [f"strategy {MMA} needs an mma configuration, and only it"]
    if not task.single:
        return ["tensor-core kernels compute one statement"]
    if mapping.mma.box:  # a product family: its own checks and shared memory
        problems = family_problems(task, mapping.mma)
        if problems:
            return problems
        shared = family_shared_bytes(task, mapping.mma)
    else:
        try:
            gemm_form(task)
        except NotAContraction as error:
            return [f"no GEMM form for tensor cores: {error}"]
        problems = mma_problems(task, mapping.mma)  # the threads' limit among them
        if problems:
            return problems
        shared = mma_shared_bytes(mapping.mma)
    allowed = limits.shared_per_block if max_shared_bytes is None else max_shared_bytes
    if shared > allowed:
        return [f"{shared} bytes of shared memory per block (limit {allowed})"]
    return []


def check_mapping(
    task: Task, mapping: Mapping, max_shared_bytes: int | None = None, limits: DeviceLimits = H100
) -> list[str]:
    """Every reason why ``mapping`` cannot be lowered for this statement on a device
    with ``limits`` (empty: fine).  ``max_shared_bytes`` is the shared memory a block
    may use (default: ``limits.shared_per_block``, the amount without opt-in)."""
    if mapping.pair:
        return pair_problems(task, mapping, max_shared_bytes, limits, check_mapping)
    if mapping.mma is not None or mapping.strategy == MMA:
        return _mma_problems(task, mapping, max_shared_bytes, limits)
    problem = task.problem
    statement = task.statement
    parallel = statement.parallel_indices
    reductions = statement.reduction_indices
    problems: list[str] = []
    seen = set()
    for tile in mapping.parallel:
        if tile.index not in parallel:
            problems.append(f"{tile.index!r} is not an output index of S{task.position}")
            continue
        if tile.index in seen:
            problems.append(f"{tile.index!r} listed twice")
        seen.add(tile.index)
        if tile.tile < 1 or tile.threads < 1 or tile.tile % tile.threads:
            problems.append(
                f"{tile.index}: tile {tile.tile} is not a multiple of threads {tile.threads}"
            )
        elif tile.chunk < 1 or (tile.cyclic and tile.per_thread % tile.chunk):
            problems.append(
                f"{tile.index}: runs of {tile.chunk} do not divide the "
                f"{tile.per_thread} elements per thread"
            )
    if not 1 <= mapping.threads <= limits.max_threads_per_block:
        problems.append(
            f"{mapping.threads} threads per block (limit {limits.max_threads_per_block})"
        )
    if mapping.register_tile > limits.max_register_tile:
        problems.append(
            f"register tile of {mapping.register_tile} outputs per thread "
            f"(max {limits.max_register_tile})"
        )
    for index in mapping.grid_order:
        if index not in parallel:
            problems.append(f"grid order names {index!r}, not an output index")
    for index in mapping.reduction_order:
        if index not in reductions:
            problems.append(f"reduction order names {index!r}, not a reduction index")
    for index, step in mapping.k_step:
        if index not in reductions or step < 1:
            problems.append(f"k-step {index}={step} is not valid")
    if mapping.preload_output and not preload_applies(statement):
        problems.append(
            "preload_output needs an update (+= or -=) of one sum that does not read its own output"
        )
    if max_shared_bytes is None:
        max_shared_bytes = limits.shared_per_block
    problems.extend(_reduction_thread_problems(task, mapping, max_shared_bytes))
    problems.extend(lane_problems(task, mapping))
    if mapping.boundary not in BOUNDARY_POLICIES:
        problems.append(
            f"boundary policy {mapping.boundary!r} (use {', '.join(BOUNDARY_POLICIES)})"
        )
    if mapping.unroll < 1:
        problems.append("unroll must be at least 1")
    if mapping.accumulate not in ACCUMULATIONS:
        problems.append(f"accumulate {mapping.accumulate!r} (use {', '.join(ACCUMULATIONS)})")
    if not 0 <= mapping.min_blocks <= limits.max_blocks_per_sm:
        problems.append(
            f"min_blocks {mapping.min_blocks} (0 to {limits.max_blocks_per_sm} blocks per SM)"
        )
    elif mapping.min_blocks * mapping.threads > limits.max_threads_per_sm:
        problems.append(
            f"{mapping.min_blocks} blocks of {mapping.threads} threads exceed "
            f"{limits.max_threads_per_sm} threads per SM"
        )
    if mapping.boundary == "exact":
        for tile in mapping.parallel:
            if tile.index in parallel and problem.index_size(statement, tile.index) % tile.tile:
                problems.append(
                    f"boundary 'exact' but tile {tile.tile} does not divide "
                    f"{tile.index} = {problem.index_size(statement, tile.index)}"
                )
    blocks = mapping.blocks(problem, statement)
    if blocks > 2**31 - 1:
        problems.append(f"{blocks} blocks exceed the grid limit")
    if max_shared_bytes is None:
        max_shared_bytes = limits.shared_per_block
    problems.extend(check_staging(task, mapping, max_shared_bytes))
    if mapping.boundary == "pad":
        problems.extend(padding_problems(task, mapping))
    return problems


def _reduction_thread_problems(task: Task, mapping: Mapping, max_shared_bytes: int) -> list[str]:
    """Reduction threads: one entry, a power of two, over an index of the only
    reduction group, which is not staged; no preloaded output; the partial sums
    (one per register-tile element and thread) fit in shared memory."""
    if not mapping.reduction_threads:
        return []
    groups = reduction_of(task.statement).groups
    problems = []
    if len(mapping.reduction_threads) != 1:
        problems.append("reduction threads along more than one index")
    for index, threads in mapping.reduction_threads:
        if threads < 2 or threads & (threads - 1):
            problems.append(f"reduction threads {index}={threads}: a power of two from 2")
        if len(groups) != 1 or index not in groups[0].indices:
            problems.append(f"reduction threads over {index!r}: not the index of the only sum")
        elif groups[0].has_nested_sum():
            problems.append("reduction threads: the sum contains another sum")
    if mapping.staged:
        problems.append("reduction threads with staged inputs")
    if mapping.preload_output:
        problems.append("reduction threads with a preloaded output")
    partials = mapping.register_tile * mapping.threads * ITEMSIZE[compute_dtype(task)]
    if partials > max_shared_bytes:
        problems.append(f"{partials} bytes of partial sums in shared memory")
    return problems


def itemsize(ctype: str) -> int:
    return kir.ELEMENT_BYTES.get(ctype, ITEMSIZE.get(ctype, 8))
