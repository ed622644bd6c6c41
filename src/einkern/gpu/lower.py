"""Lowering: a statement and a :class:`~einkern.gpu.mapping.Mapping` → kernel IR.

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
3. epilogue: evaluate the statement's epilogue expression per register-tile
   element and store (``=``, ``+=`` or ``-=``), predicated at the edges.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from .. import semantics
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
from ..semantics import C_TYPE as CTYPE
from ..semantics import FUNCTIONS, ITEMSIZE
from . import exprs as E
from . import kir
from .mapping import BOUNDARY_POLICIES, Mapping, MappingError
from .normalize import Group, Placeholder, reduction_of


def compute_dtype(problem: Problem, position: int) -> str:
    """The dtype statement ``position`` computes in (:func:`einkern.semantics.compute_dtype`)."""
    statement = problem.program.statements[position]
    dtype = problem.program.tensor
    return semantics.compute_dtype(dtype(statement.output.tensor).dtype,
                                   [dtype(a.tensor).dtype for a in statement.reads()])


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


@dataclass
class _Context:
    """Where the values of indices come from while emitting one expression."""

    coords: dict[str, kir.Expr]  # global coordinate of each index
    local: dict[str, kir.Expr]  # coordinate inside the block tile / k chunk (staged reads)
    statements: list = field(default_factory=list)
    memo: dict = field(default_factory=dict)


class _Lowering:
    def __init__(self, problem: Problem, position: int, mapping: Mapping, name: str):
        self.problem = problem
        self.program = problem.program
        self.position = position
        self.statement = problem.program.statements[position]
        self.mapping = mapping
        self.name = name
        self.dtype = compute_dtype(problem, position)
        self.ctype = CTYPE[self.dtype]
        self.reduction = reduction_of(self.statement)
        self.parallel = self.statement.parallel_indices
        self.tiles = {d: mapping.tile_of(d) for d in self.parallel}
        order = [d for d in mapping.grid_order if d in self.parallel]
        self.grid_order = order + [d for d in self.parallel if d not in order]
        self.thread_order = [t.index for t in mapping.parallel if t.threads > 1]
        self.nthreads = mapping.threads
        self.counter = 0
        self.thread_vars: list[kir.ThreadVar] = []
        self.shared: list[kir.SharedArray] = []
        self.slots = self._register_slots()
        self.index_type = index_type(problem)  # "long long" past 2^31 elements
        self.staged_arrays: dict = {}  # (group, access text) -> StagedArray
        #: +1/-1: accumulate onto the preloaded output with this sign; 0: no preload
        self.preload = preload_sign(self.statement) if mapping.preload_output else 0

    # -- sizes -----------------------------------------------------------------

    def size(self, index: str) -> int:
        return self.problem.index_size(self.statement, index)

    def fresh(self, prefix: str) -> str:
        self.counter += 1
        return f"{prefix}{self.counter}"

    def _register_slots(self) -> list[dict[str, int]]:
        """Register-tile elements: for each, the slot number j along every output index."""
        ranges = [(t.index, t.per_thread) for t in self.mapping.parallel if t.per_thread > 1]
        slots: list[dict[str, int]] = [{}]
        for index, count in ranges:  # first listed index varies fastest
            slots = [{**s, index: j} for j in range(count) for s in slots]
        return slots

    def local_coord(self, index: str, slot: dict[str, int]) -> kir.Expr:
        tile = self.tiles[index]
        j = slot.get(index, 0)
        if tile.threads == 1:
            return E.const(j)
        # ParallelTile.local is affine in the thread: its element j lies at
        # t · (thread's step) + (where thread 0's element j lies)
        step = tile.local(1, 0) - tile.local(0, 0)
        return E.add(E.mul(kir.Var(f"t_{index}"), E.const(step)), E.const(tile.local(0, j)))

    def global_coord(self, index: str, slot: dict[str, int]) -> kir.Expr:
        return E.add(kir.Var(f"b_{index}"), self.local_coord(index, slot))

    def ragged(self, index: str) -> bool:
        """True when the output index's block tiles overhang its extent."""
        return self.size(index) % self.tiles[index].tile != 0

    # -- kernel --------------------------------------------------------------

    def kernel(self) -> kir.Kernel:
        blocks = math.prod(math.ceil(self.size(d) / self.tiles[d].tile) for d in self.parallel)
        sections: list[kir.Section] = [kir.PerThread(tuple(self.prologue()))]
        for number, group in enumerate(self.reduction.groups):
            sections.extend(self.group_sections(number, group))
        sections.append(kir.PerThread(tuple(self.epilogue())))
        tensors = [self.statement.output.tensor] + [a.tensor for a in self.statement.reads()]
        params = []
        for tensor in self.program.tensors:
            if tensor.name in tensors:
                params.append(kir.Param(
                    f"p_{tensor.name}", CTYPE[tensor.dtype], True,
                    self.problem.numel(tensor.name),
                    readonly=tensor.name != self.statement.output.tensor,
                ))
        for scalar in self.program.scalars:
            params.append(kir.Param(f"s_{scalar.name}", "double", False))
        return kir.Kernel(
            name=self.name,
            params=tuple(params),
            threads=self.nthreads,
            blocks=blocks,
            thread_vars=tuple(self.thread_vars),
            shared=tuple(self.shared),
            body=tuple(sections),
            index_type=self.index_type,
            comment=f"{self.statement}  [{self.mapping.strategy}]",
            meta=(("compute_type", self.ctype),),
            min_blocks=self.mapping.min_blocks,
        )

    def prologue(self) -> list[kir.Stmt]:
        body: list[kir.Stmt] = []
        stride = 1
        for tile in self.mapping.parallel:
            if tile.threads > 1:
                self.thread_vars.append(kir.ThreadVar(f"t_{tile.index}", self.index_type))
                value = E.mod(E.div(kir.ThreadIdx(), stride), tile.threads)
                body.append(kir.Assign(f"t_{tile.index}", value))
                stride *= tile.threads
        stride = 1
        for index in self.grid_order:
            count = math.ceil(self.size(index) / self.tiles[index].tile)
            self.thread_vars.append(kir.ThreadVar(f"b_{index}", self.index_type))
            coordinate = E.mod(E.div(kir.BlockIdx(), stride), count)
            base = E.mul(coordinate, E.const(self.tiles[index].tile))
            body.append(kir.Assign(f"b_{index}", base))
            stride *= count
        for number in range(len(self.reduction.groups)):
            self.thread_vars.append(kir.ThreadVar(f"acc{number}", self.ctype, len(self.slots)))
            for r, slot in enumerate(self.slots):
                start: kir.Expr = kir.Float(0.0)
                if self.preload:
                    ctx = self.slot_context(slot)
                    start = self.global_load(self.statement.output, ctx)
                body.append(kir.Store(f"acc{number}", E.const(r), start))
        return body

    # -- values ----------------------------------------------------------------

    def value(self, expr, ctx: _Context, group: int | None = None) -> kir.Expr:
        """Emit ``expr`` in context; returns a kernel expression (may append statements)."""
        if isinstance(expr, Const):
            return kir.Float(float(expr.value))
        if isinstance(expr, ScalarRef):
            return kir.Var(f"s_{expr.name}")
        if isinstance(expr, Placeholder):
            return kir.Load(f"acc{expr.group}", ctx.local["__slot__"])
        if isinstance(expr, Access):
            return self.load(expr, ctx, group)
        if isinstance(expr, Neg):
            return kir.Neg(self.value(expr.operand, ctx, group))
        if isinstance(expr, Binary):
            return kir.Op(expr.op, self.value(expr.left, ctx, group),
                          self.value(expr.right, ctx, group))
        if isinstance(expr, Call):
            args = tuple(self.value(a, ctx, group) for a in expr.args)
            if expr.func in ("max", "min"):  # the printers' NaN-propagating max/min
                return kir.Op(expr.func, *args)
            return kir.Call(FUNCTIONS[expr.func].c_name(self.dtype), args)
        if isinstance(expr, Sum):
            return self.inline_sum(expr, ctx)
        raise TypeError(f"cannot lower {expr!r}")

    def inline_sum(self, expr: Sum, ctx: _Context) -> kir.Expr:
        """A sum nested in an expression: serial per-thread loops."""
        name = self.fresh("sum")
        ctx.statements.append(kir.Declare(name, self.ctype, kir.Float(0.0)))
        inner = _Context({**ctx.coords}, {**ctx.local}, [], {})
        loop_vars = {i: self.fresh(f"k_{i}_") for i in expr.indices}
        for index, var in loop_vars.items():
            inner.coords[index] = kir.Var(var)
        term = self.value(expr.body, inner)
        body: tuple[kir.Stmt, ...] = (*inner.statements, kir.Assign(name, term, "+="))
        for index in reversed(expr.indices):
            body = (kir.For(loop_vars[index], E.const(0), E.const(self.size(index)), 1, body),)
        ctx.statements.extend(body)
        return kir.Var(name)

    def load(self, access: Access, ctx: _Context, group: int | None) -> kir.Expr:
        key = (str(access), tuple(str(ctx.coords.get(i)) for i in access.indices))
        if key in ctx.memo:
            return ctx.memo[key]
        staged = self.staged_arrays.get((group, str(access))) if group is not None else None
        if staged is not None:
            value: kir.Expr = kir.Load(staged.name, staged.offset(ctx.local))
        else:
            value = self.global_load(access, ctx)
        name = self.fresh("v")
        ctx.statements.append(kir.Declare(name, self.ctype, value))
        ctx.memo[key] = kir.Var(name)
        return kir.Var(name)

    def global_load(self, access: Access, ctx: _Context) -> kir.Expr:
        strides = self.problem.strides(access.tensor)
        coords = []
        conditions = []
        for index, stride in zip(access.indices, strides, strict=True):
            coordinate = ctx.coords[index]
            if index in self.parallel and self.ragged(index):
                if self.mapping.boundary == "redirect":
                    coordinate = E.minimum(coordinate, E.const(self.size(index) - 1))
                elif self.mapping.boundary == "guard":
                    conditions.append(E.less(coordinate, E.const(self.size(index))))
            coords.append((coordinate, stride))
        load = kir.Load(f"p_{access.tensor}", E.linear(coords))
        condition = E.conj(list(dict.fromkeys(conditions)))
        return load if condition is None else kir.Select(condition, load, kir.Float(0.0))

    # -- groups ----------------------------------------------------------------

    def group_indices(self, group: Group) -> list[str]:
        order = [i for i in self.mapping.reduction_order if i in group.indices]
        return order + [i for i in group.indices if i not in order]

    def slot_context(self, slot: dict[str, int], ctx: _Context | None = None) -> _Context:
        coords = {d: self.global_coord(d, slot) for d in self.parallel}
        local = {d: self.local_coord(d, slot) for d in self.parallel}
        if ctx is not None:
            coords.update({k: v for k, v in ctx.coords.items() if k not in self.parallel})
            local.update({k: v for k, v in ctx.local.items() if k not in self.parallel})
            return _Context(coords, local, ctx.statements, ctx.memo)
        return _Context(coords, local)

    def accumulate(self, number: int, group: Group, ctx: _Context) -> list[kir.Stmt]:
        """``acc[r] ±= term`` for every term of the body and register-tile element,
        term by term: the values of one term are loaded once, used by every element
        and dead before the next term's are loaded (a whole CCSD(T) family keeps
        one term's operands live, not all eighteen)."""
        for sign, term in signed_terms(group.body):
            add = (sign > 0) == (self.preload >= 0)
            for r, slot in enumerate(self.slots):
                slot_ctx = self.slot_context(slot, ctx)
                value = self.value(term, slot_ctx, number)
                ctx.statements.append(kir.Store(f"acc{number}", E.const(r), value,
                                                "+=" if add else "-="))
        return ctx.statements

    def group_sections(self, number: int, group: Group) -> list[kir.Section]:
        staged = [a for a in group.accesses() if self.mapping.staging_of(str(a)) is not None]
        if not staged:
            return [kir.PerThread(tuple(self.serial_group(number, group)))]
        from .staging import staged_group_sections

        return staged_group_sections(self, number, group, staged)

    def serial_group(self, number: int, group: Group) -> list[kir.Stmt]:
        indices = self.group_indices(group)
        loop_vars = {i: f"k_{i}" for i in indices}
        ctx = _Context({i: kir.Var(v) for i, v in loop_vars.items()}, {})
        body: tuple[kir.Stmt, ...] = tuple(self.accumulate(number, group, ctx))
        for depth, index in enumerate(reversed(indices)):
            unroll = self.mapping.unroll if depth == 0 and self.mapping.unroll > 1 else 0
            body = (kir.For(loop_vars[index], E.const(0), E.const(self.size(index)), 1, body,
                            unroll=unroll),)
        return [kir.Comment(f"reduction over {', '.join(indices)}"), *body]

    # -- epilogue --------------------------------------------------------------

    def epilogue(self) -> list[kir.Stmt]:
        out = self.statement.output
        strides = self.problem.strides(out.tensor)
        statements: list[kir.Stmt] = []
        op = {"=": "=", "+=": "+=", "-=": "-="}[self.statement.op]
        for r, slot in enumerate(self.slots):
            ctx = self.slot_context(slot)
            ctx.local["__slot__"] = E.const(r)
            conditions = [
                E.less(ctx.coords[d], E.const(self.size(d)))
                for d in self.parallel if self.ragged(d) and self.mapping.boundary != "exact"
            ]
            # Elementwise reads at ragged edges may be out of range: always guard them
            # (redirect clamps them instead).
            if self.preload:  # the accumulator already holds the updated output
                value: kir.Expr = kir.Load("acc0", E.const(r))
                op = "="
            else:
                value = self.value(self.reduction.epilogue, ctx)
            offset = E.linear([(ctx.coords[d], s) for d, s in zip(out.indices, strides,
                                                                    strict=True)])
            store = kir.Store(f"p_{out.tensor}", offset, value, op)
            condition = E.conj(conditions)
            block = (*ctx.statements, store)
            statements.append(block[0] if len(block) == 1 and condition is None else
                              kir.If(condition or kir.Int(1), tuple(block)))
        return statements


def lower(problem: Problem, position: int, mapping: Mapping, name: str | None = None,
          max_shared_bytes: int = 48 * 1024) -> kir.Kernel:
    """Kernel IR for statement ``position`` under ``mapping`` (validated first)."""
    problems = check_mapping(problem, position, mapping, max_shared_bytes)
    if mapping.boundary == "pad":
        problems.append("boundary 'pad' is planned as copies around an exact kernel: "
                        "use einkern.gpu.padding.plan_statement")
    if problems:
        raise MappingError(
            f"mapping does not fit statement S{position}: " + "; ".join(problems),
            hint="fix the mapping file, or let einkern choose one (omit --mapping)",
        )
    return _Lowering(problem, position, mapping, name or f"einkern_s{position}").kernel()


def check_mapping(problem: Problem, position: int, mapping: Mapping,
                  max_shared_bytes: int = 48 * 1024, max_threads: int = 1024) -> list[str]:
    """Every reason why ``mapping`` cannot be lowered for this statement (empty: fine)."""
    from .staging import check_staging

    statement = problem.program.statements[position]
    parallel = statement.parallel_indices
    reductions = statement.reduction_indices
    problems: list[str] = []
    seen = set()
    for tile in mapping.parallel:
        if tile.index not in parallel:
            problems.append(f"{tile.index!r} is not an output index of S{position}")
            continue
        if tile.index in seen:
            problems.append(f"{tile.index!r} listed twice")
        seen.add(tile.index)
        if tile.tile < 1 or tile.threads < 1 or tile.tile % tile.threads:
            problems.append(f"{tile.index}: tile {tile.tile} is not a multiple of "
                            f"threads {tile.threads}")
        elif tile.chunk < 1 or (tile.cyclic and tile.per_thread % tile.chunk):
            problems.append(f"{tile.index}: runs of {tile.chunk} do not divide the "
                            f"{tile.per_thread} elements per thread")
    if not 1 <= mapping.threads <= max_threads:
        problems.append(f"{mapping.threads} threads per block (limit {max_threads})")
    if mapping.register_tile > 256:
        problems.append(f"register tile of {mapping.register_tile} outputs per thread (max 256)")
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
        problems.append("preload_output needs an update (+= or -=) of one sum that does "
                        "not read its own output")
    if mapping.boundary not in BOUNDARY_POLICIES:
        problems.append(f"boundary policy {mapping.boundary!r} "
                        f"(use {', '.join(BOUNDARY_POLICIES)})")
    if mapping.unroll < 1:
        problems.append("unroll must be at least 1")
    if not 0 <= mapping.min_blocks <= 32:
        problems.append(f"min_blocks {mapping.min_blocks} (0 to 32 blocks per SM)")
    elif mapping.min_blocks * mapping.threads > 2048:
        problems.append(f"{mapping.min_blocks} blocks of {mapping.threads} threads exceed "
                        "2048 threads per SM")
    if mapping.boundary == "exact":
        for tile in mapping.parallel:
            if tile.index in parallel and problem.index_size(statement, tile.index) % tile.tile:
                problems.append(f"boundary 'exact' but tile {tile.tile} does not divide "
                                f"{tile.index} = {problem.index_size(statement, tile.index)}")
    blocks = math.prod(
        math.ceil(problem.index_size(statement, d) / mapping.tile_of(d).tile) for d in parallel
    )
    if blocks > 2**31 - 1:
        problems.append(f"{blocks} blocks exceed the grid limit")
    problems.extend(check_staging(problem, position, mapping, max_shared_bytes))
    if mapping.boundary == "pad":
        from .padding import padding_problems

        problems.extend(padding_problems(problem, position, mapping))
    return problems


def itemsize(ctype: str) -> int:
    return kir.ELEMENT_BYTES.get(ctype, ITEMSIZE.get(ctype, 8))
