"""Tensor-core kernels for a *product family*: one output updated by a sum of
binary contractions (``t3[..] -= Σ_j ± A_j[..]·B_j[..]``, the merged CCSD(T)
families), each term with its own split of the output indices between its two
operands.

A single MMA accumulator cannot serve every term: its rows are one operand's
output indices and its columns the other's, and the terms of a CCSD(T) family
split the six output indices nine different ways.  So the block's output tile
lives in shared memory and each term's products are *relaid* into it:

* a block owns a box of the output, ``box`` elements per output index (the
  tile ``Ts``, the output's contiguous index fastest), loaded once (updates) or
  zeroed (``=``) and stored once at the end, coalesced;
* for each term the box is a GEMM: rows are the term's output indices in its
  first operand (``M_j`` = the product of their box extents), columns those in
  its second (``N_j``), the term's summed indices its K.  ``warps_m × warps_n``
  warps tile the ``M_j × N_j`` grid of instruction tiles (operands swapped when
  that is the way it divides), the K dimension stepped ``k_step`` elements at a
  time through ``stages`` shared buffers filled by ``cp.async``; the steps of all
  terms form one pipeline, so the next term's first tiles land while the
  current term's last MMAs run;
* after a term's last step every lane adds its accumulator elements, times the
  term's sign and scalars, into ``Ts`` at the box positions the accumulator
  layout gives (:mod:`.mma`), then zeroes them; ``Ts``'s strides are padded so
  that these adds hit few bank conflicts (:mod:`.mma_family_layout`).  Within a term each element is
  one lane's; between terms the next step's barrier orders the adds;
* with ``MmaConfig.group_terms``, terms whose lanes can own the same box
  elements accumulate in the same registers and are relaid once per group
  (:mod:`.mma_family_groups`: each term's view is a permutation of the box's
  bits, and its instruction tiles name their accumulator registers).

Terms without a sum (*pointwise*: the CCSD(T) singles ``t1[p4,h1]·v2[h3,h2,p6,p5]``,
a plain ``+ D[i,j]``) join the family: after the last product each thread adds
their values at its box elements, summed in registers with each factor's values
loaded once per thread where its elements share them, as it stores the box
(:mod:`.mma_family_pointwise`; the 27 triples statements, nine of them
singles, run in one kernel so).

The relayout costs two shared accesses per output element and term against
``K`` multiply-adds, so the kernel pays where the terms' K is long enough
(docs/tensor_cores.md has the measurements).  :func:`family_of` says why a
statement is not such a family; :func:`problems` why a box does not fit it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from functools import lru_cache

from ..ir.nodes import signed_terms
from ..ir.task import Task
from . import exprs as E
from . import kir
from .contraction import (
    Contraction,
    NotAContraction,
    Operand,
    Pointwise,
    _operand,
    pointwise_term,
    scale_factor,
    split_term,
    term_contraction,
)
from .mma import SHAPES, coordinates
from .mma_config import MmaConfig
from .mma_family_groups import (
    Grouping,
    TermBits,
    TermView,
    bit_coordinates,
    bit_position,
    group_count,
    staging_order,
    term_groups,
)
from .mma_family_layout import box_strides
from .mma_family_pointwise import POINTWISE_CHUNK, add_loop, mixed_coordinates, register_sums
from .mma_lower import statement_params
from .thread_offsets import constant_offset

__all__ = ["Family", "family_of", "lower_family", "problems", "shared_bytes"]


@dataclass(frozen=True)
class Family:
    """A statement as a sum of binary contractions into one output."""

    output: Operand
    op: str  # "=", "+=" or "-="
    terms: tuple[Contraction, ...]
    extents: tuple[tuple[str, int], ...]  # the output indices' extents
    dtypes: tuple[str, ...]  # of the statement's tensors, sorted
    pointwise: tuple[Pointwise, ...] = ()  # terms without a sum (see :class:`Pointwise`)

    def extent(self, index: str) -> int:
        return dict(self.extents)[index]

    @property
    def flops(self) -> int:
        size = math.prod(e for _, e in self.extents)
        return sum(t.flops for t in self.terms) + sum(
            2 * size * len(p.factors) for p in self.pointwise
        )


def family_of(task: Task) -> Family:
    """The task's statement as a product family (two terms at least, one or more
    of them contractions without batch indices, the others :class:`Pointwise`);
    :class:`NotAContraction` otherwise."""
    statement = task.statement
    terms = signed_terms(statement.rhs)
    if len(terms) < 2:
        raise NotAContraction("one term: a plain contraction, not a family")
    found: list[Contraction] = []
    pointwise: list[Pointwise] = []
    for number, term in enumerate(terms):
        parts = split_term(*term)
        try:
            contraction = term_contraction(task, *parts, output_order=False)
        except NotAContraction:
            point = pointwise_term(task, *parts)
            if point is None:
                raise
            pointwise.append(point)
            continue
        if contraction.batch:
            raise NotAContraction(f"term {number} has batch indices {', '.join(contraction.batch)}")
        found.append(contraction)
    if not found:
        raise NotAContraction("no term is a contraction (every term elementwise)")
    output = _operand(task, statement.output)
    extents = tuple((i, task.problem.index_size(statement, i)) for i in statement.output.indices)
    dtypes = tuple(sorted({task.program.tensor(t).dtype for t in statement.tensors()}))
    return Family(output, statement.op, tuple(found), extents, dtypes, tuple(pointwise))


@dataclass(frozen=True)
class _Term:
    """How one term is laid on the warps: its contraction with ``a`` the operand
    of the rows, the row and column indices (slowest first), M, N, and each
    warp's instruction tiles.  With ``MmaConfig.group_terms``: ``bits``, its view
    as box bits and its accumulator registers (:mod:`.mma_family_groups`);
    ``negate``, its sign is the opposite of its group's (its A fragments are
    negated); ``relay``, where its group ends, the position (in the kernel's
    order) of the term whose view and factor the relayout uses (without groups:
    its own position)."""

    c: Contraction
    a: Operand
    b: Operand
    rows: tuple[str, ...]
    cols: tuple[str, ...]
    m: int
    n: int
    tiles_m: int
    tiles_n: int
    bits: TermBits | None = None
    negate: bool = False
    relay: int | None = None


def _box(config: MmaConfig, family: Family) -> dict[str, int]:
    box = dict(config.box)
    return {i: box.get(i, 1) for i, _ in family.extents}


@lru_cache(maxsize=256)
def _orientations(
    family: Family, box: tuple[tuple[str, int], ...]
) -> tuple[tuple[tuple[Operand, Operand, tuple[str, ...], tuple[str, ...], int, int], ...], ...]:
    """Per term, its two GEMM views of ``box`` (the output indices' box
    extents): (rows' operand, columns' operand, rows and columns with extents
    over 1, M, N), the statement's order first.  Shared by the warp shapes a
    box is tried with."""
    extents = dict(box)
    found = []
    for c in family.terms:
        views = []
        for a, b, rows, cols in ((c.a, c.b, c.m, c.n), (c.b, c.a, c.n, c.m)):
            rows = tuple(i for i in rows if extents[i] > 1)
            cols = tuple(i for i in cols if extents[i] > 1)
            m = math.prod(extents[i] for i in rows)
            n = math.prod(extents[i] for i in cols)
            views.append((a, b, rows, cols, m, n))
        found.append(tuple(views))
    return tuple(found)


@lru_cache(maxsize=1024)
def _layouts(family: Family, config: MmaConfig) -> tuple[tuple[_Term, ...], tuple[str, ...]]:
    """Each term on the warps, or why a term does not divide into them (cached:
    the checks, the model, the layout and the builder all ask)."""
    shape = SHAPES[config.shape]
    wm, wn = shape.m * config.warps_m, shape.n * config.warps_n
    laid: list[_Term] = []
    trouble: list[str] = []
    box = _box(config, family)
    views = _orientations(family, tuple(box.items()))
    if config.group_terms:
        return _grouped(family, config, box, views, (wm, wn))
    for number, (c, term_views) in enumerate(zip(family.terms, views, strict=True)):
        options = [
            _Term(c, a, b, rows, cols, m, n, m // wm, n // wn, relay=len(laid))
            for a, b, rows, cols, m, n in term_views
            if m % wm == 0 and n % wn == 0
        ]
        if not options:
            m, n = term_views[0][4], term_views[0][5]
            trouble.append(
                f"term {number}: its {m} x {n} box does not divide into "
                f"{config.warps_m} x {config.warps_n} warps of {shape.m} x {shape.n} tiles"
            )
            continue
        laid.append(options[0])
    return tuple(laid), tuple(trouble)


def _term_views(family: Family, views: tuple) -> list[TermView]:
    """What :mod:`.mma_family_groups` needs of each term's two views."""
    return [
        TermView(
            (term_views[0][2], term_views[1][2]),
            (term_views[0][3], term_views[1][3]),
            (c.constant, c.scale),
        )
        for c, term_views in zip(family.terms, views, strict=True)
    ]


def relayouts(family: Family, config: MmaConfig) -> int | None:
    """Relayouts per block of ``config``'s kernel: one per term, or with
    ``group_terms`` one per group (None: the terms cannot share accumulators),
    without laying the terms out."""
    if not config.group_terms:
        return len(family.terms)
    box = _box(config, family)
    return group_count(_grouping(family, config, box, _orientations(family, tuple(box.items()))))


def _grouping(family: Family, config: MmaConfig, box: dict[str, int], views: tuple) -> Grouping:
    """What :func:`.mma_family_groups.term_groups` reads of ``config``'s kernel
    (``views``: the terms' two views, :func:`_orientations`)."""
    return Grouping(
        tuple(_term_views(family, views)),
        tuple(sorted(box.items())),
        box_order(family),
        config.warps_m,
        config.warps_n,
        config.shape,
    )


def _grouped(
    family: Family, config: MmaConfig, box: dict[str, int], views: tuple, warp: tuple[int, int]
) -> tuple[tuple[_Term, ...], tuple[str, ...]]:
    """:func:`_layouts` with ``group_terms``: the terms in their groups' order
    (:func:`.mma_family_groups.term_groups`); ``warp``: a warp's M and N."""
    wm, wn = warp
    groups = term_groups(_grouping(family, config, box, views))
    if groups is None:
        return (), (
            "terms share accumulators only with power-of-two box extents and warps "
            "on an m16n8 instruction",
        )
    laid: list[_Term] = []
    for group in groups:
        first = len(laid)
        lead = family.terms[group.terms[0]]
        for n, (t, bits) in enumerate(zip(group.terms, group.bits, strict=True)):
            c = family.terms[t]
            a, b, rows, cols, m, n_ = views[t][bits.view]
            last = n == len(group.terms) - 1
            laid.append(
                _Term(
                    c, a, b, rows, cols, m, n_, m // wm, n_ // wn,
                    bits=bits,
                    negate=c.sign != lead.sign,
                    relay=first if last else None,
                )
            )  # fmt: skip
    return tuple(laid), ()


def problems(task: Task, config: MmaConfig, family: Family | None = None) -> list[str]:
    """Why the family kernel of ``config`` cannot compute ``task`` (empty: it can);
    ``family``: the task's, when the caller has it."""
    if family is None:
        try:
            family = family_of(task)
        except NotAContraction as error:
            return [str(error)]
    if config.shape not in SHAPES or SHAPES[config.shape].input_type != "f64":
        return ["product families run on the fp64 instructions only"]
    if family.dtypes != ("float64",):
        return [f"product families need float64 tensors, not {', '.join(family.dtypes)}"]
    found = []
    unknown = sorted(set(dict(config.box)) - {i for i, _ in family.extents})
    if unknown:
        found.append(f"box names {', '.join(unknown)}, not output indices")
    if config.copy != "async" or config.stages not in (2, 3, 4):
        found.append("product families stage through 2 to 4 cp.async buffers")
    if config.k_step % SHAPES[config.shape].k:
        found.append(f"k_step {config.k_step} is not a multiple of the instruction's k")
    if config.threads > 1024:
        found.append(f"{config.threads} threads per block")
    if not found:
        laid, trouble = _layouts(family, config)
        found += trouble
        count = SHAPES[config.shape].c.count
        most = max((t.tiles_m * t.tiles_n * count for t in laid), default=0)
        if most > MAX_ACCUMULATORS:
            found.append(
                f"{most} accumulator registers per thread (at most {MAX_ACCUMULATORS}: "
                "beside the addresses of nine terms more spill)"
            )
    return found


#: Accumulator registers per thread a family kernel may hold: on an H100 a box of
#: 4x4 tiles per warp (64) spilled 2-3 KiB per thread and ran 6x slower.
MAX_ACCUMULATORS = 32


def _lead(config: MmaConfig) -> int:
    """A shared row of ``k_step`` doubles padded to 4 or 12 modulo 16, whichever
    comes first: the fragment reads of a half-warp (four rows of four doubles)
    then fall on sixteen different 8-byte banks."""
    return next(n for n in range(config.k_step, config.k_step + 16) if n % 16 in (4, 12))


def _sizes(family: Family, config: MmaConfig) -> tuple[int, int, int, int]:
    """(padded box elements, A buffer, B buffer, B row) in elements."""
    laid, _ = _layouts(family, config)
    ldb = max(t.n for t in laid)
    ldb += (4 - ldb) % 16
    box = tile_layout(family, config)[1]
    return box, max(t.m for t in laid) * _lead(config), config.k_step * ldb, ldb


def box_order(family: Family) -> tuple[str, ...]:
    """The output indices slowest first by the output's strides: the box's order
    in shared memory and the blocks' (the contiguous index fastest)."""
    return tuple(sorted((i for i, _ in family.extents), key=lambda i: -family.output.stride(i)))


def tile_layout(family: Family, config: MmaConfig) -> tuple[tuple[int, ...], int, int]:
    """(strides of :func:`box_order`'s indices in the shared box, its padded
    elements, the relayout's shared-memory wavefronts per block):
    :func:`.mma_family_layout.box_strides`."""
    laid, _ = _layouts(family, config)
    box = tuple(sorted(_box(config, family).items()))
    relaid = tuple(laid[t.relay] for t in laid if t.relay is not None)
    return box_strides(box_order(family), box, relaid, config)


def shared_bytes(task: Task, config: MmaConfig, family: Family | None = None) -> int:
    """Shared memory per block: the output box and the A and B buffers."""
    box, a, b, _ = _sizes(family or family_of(task), config)
    return 8 * (box + config.stages * (a + b))


def lower_family(task: Task, config: MmaConfig, name: str | None = None) -> kir.Kernel:
    """The kernel IR of the product family ``task`` (ValueError when it cannot)."""
    trouble = problems(task, config)
    if trouble:
        raise ValueError("; ".join(trouble))
    return _Builder(task, family_of(task), config, name or f"einkern_s{task.position}").kernel()


class _Builder:
    def __init__(self, task: Task, family: Family, config: MmaConfig, name: str):
        self.task, self.family, self.config, self.name = task, family, config, name
        self.shape = SHAPES[config.shape]
        self.box = _box(config, family)
        self.terms, _ = _layouts(family, config)
        self.box_size, self.a_size, self.b_size, self.ldb = _sizes(family, config)
        self.lda = _lead(config)
        self.order = box_order(family)
        self.strides = dict(zip(self.order, tile_layout(family, config)[0], strict=True))
        self.elements = math.prod(self.box.values())
        self.slot = {index: n for n, (index, _) in enumerate(family.extents)}
        self.blocks = {i: math.ceil(family.extent(i) / self.box[i]) for i in self.order}
        largest = max(task.problem.numel(t) for t in task.statement.tensors())
        self.itype = "long long" if largest >= 2**31 else "int"
        self.steps = [
            (j, k0)
            for j, term in enumerate(self.terms)
            for k0 in range(0, term.c.size(term.c.k), config.k_step)
        ]
        # the block's own variables (indices are linear in them) and the
        # thread-dependent bases that indices are written against (:meth:`based`)
        self.block_vars = [f"o{n}" for n in range(len(family.extents))]
        self.block_vars += [f"b{w}{j}" for j in range(len(self.terms)) for w in "ab"]
        self.bases: dict[str, kir.Expr] = {}
        self.pointwise_values = 0  # registers ``px`` (:func:`.mma_family_pointwise.register_sums`)
        self.sums: list[list[kir.Stmt]] | None = None  # its chunks, set by :meth:`fill`

    # -- coordinates -------------------------------------------------------------

    def origin(self, index: str) -> kir.Expr:
        return kir.Var(f"o{self.slot[index]}")

    def inside(self, local: dict[str, kir.Expr]) -> list[kir.Expr]:
        return [
            E.less(E.add(self.origin(i), x), E.const(self.family.extent(i)))
            for i, x in local.items()
            if self.family.extent(i) % self.box[i]
        ]

    def view_coordinates(
        self, names: tuple[str, ...], bits: tuple | None, flat: kir.Expr
    ) -> dict[str, kir.Expr]:
        """Box coordinates at position ``flat`` of a term's rows or columns: its
        box bits where terms share accumulators (``bits``), else mixed radix over
        its indices ``names``."""
        if bits is not None:
            return bit_coordinates(bits, flat)
        return mixed_coordinates(names, self.box, flat) if names else {}

    def tile_index(self, local: dict[str, kir.Expr]) -> kir.Expr:
        """Position in ``Ts`` of box coordinates ``local`` (absent: 0)."""
        return E.linear([(local[i], self.strides[i]) for i in reversed(self.order) if i in local])

    def based(self, e: kir.Expr, base: str) -> kir.Expr:
        """``e`` as the thread variable ``base`` plus a constant where it is that
        on every thread (:mod:`.thread_offsets`: one register and an immediate
        instead of a live division chain per index), else ``e`` itself."""
        c = constant_offset(e, self.bases[base], self.config.threads, self.block_vars)
        return e if c is None else E.add(kir.Var(base), E.const(c))

    def prologue(self) -> list[kir.Stmt]:
        """Block origins (the output's contiguous index fastest), each term's
        operand bases, the accumulators zeroed and ``Ts`` filled."""
        body: list[kir.Stmt] = []
        inner = 1
        for index in reversed(self.order):
            count = self.blocks[index]
            at = E.mod(E.div(kir.BlockIdx(), inner), count) if count > 1 else E.const(0)
            body.append(kir.Assign(f"o{self.slot[index]}", E.mul(at, E.const(self.box[index]))))
            inner *= count
        for j, term in enumerate(self.terms):
            for which, operand in (("a", term.a), ("b", term.b)):
                coords = {i: self.origin(i) for i in self.box}
                body.append(kir.Assign(f"b{which}{j}", term.c.offset(operand, coords)))
        count = max(t.tiles_m * t.tiles_n for t in self.terms) * self.shape.c.count
        body += [kir.Store("acc", E.const(i), kir.Float(0.0)) for i in range(count)]
        return body

    def fill(self) -> list[kir.Stmt]:
        """``Ts`` filled: the output's box (zero for ``=``), zero outside the
        extents; the pointwise terms added here by a loop where they cannot be
        summed in registers at the end (:meth:`epilogue`)."""
        body: list[kir.Stmt] = []
        for e, share, local in self.box_elements():
            value: kir.Expr = kir.Float(0.0)
            if self.family.op != "=":
                value = kir.Load(f"p_{self.family.output.tensor}", self.global_index(local))
            store: kir.Stmt = kir.Store("Ts", e, value)
            inside = E.conj(self.inside(local))
            if inside is not None and self.family.op != "=":
                store = kir.If(inside, (store,), (kir.Store("Ts", e, kir.Float(0.0)),))
            body.append(kir.If(share, (store,)) if share is not None else store)
        self.sums = register_sums(self, list(self.box_elements()))
        if self.sums is None:
            body += add_loop(self)
        return body

    def box_elements(self):
        """(Ts index, guard on the thread's share, box coordinates) of each box
        element a thread loads or stores; consecutive threads consecutive elements."""
        for _, e, share in E.thread_shares(self.elements, self.config.threads):
            local = mixed_coordinates(self.order, self.box, e)
            yield self.tile_index(local), share, local

    def global_index(self, local: dict[str, kir.Expr]) -> kir.Expr:
        out = self.family.output
        return E.linear([(E.add(self.origin(i), local[i]), out.stride(i)) for i in self.order])

    # -- staging -------------------------------------------------------------------

    def tile_elements(self, j: int, k0: int, which: str):
        """(guard on the thread's share, shared index, in-extents condition, global
        index) of each element a thread copies of term ``j``'s A (M × k_step) or B
        (k_step × N) tile at k offset ``k0``; consecutive threads go along the
        operand's contiguous index."""
        term = self.terms[j]
        c, k_step, threads = term.c, self.config.k_step, self.config.threads
        operand, names, width = (
            (term.a, term.rows, term.m) if which == "a" else (term.b, term.cols, term.n)
        )
        along_k = operand.contiguous() in c.k
        total = width * k_step
        K = c.size(c.k)
        view = None if term.bits is None else term.bits.rows if which == "a" else term.bits.cols
        walk = None if view is None else staging_order(view, operand.contiguous(), along_k)
        for _, e, share in E.thread_shares(total, threads):
            if along_k:
                r, kk = E.div(e, k_step), E.mod(e, k_step)
            else:
                r, kk = E.mod(e, width), E.div(e, width)
            local = self.view_coordinates(names, walk, r)
            flat_k = E.add(E.const(k0), kk)
            coords = {**local, **c.coordinates(c.k, flat_k)}
            index = E.add(kir.Var(f"b{which}{j}"), c.offset(operand, coords))
            conditions = self.inside(local)
            if K % k_step:
                conditions.append(E.less(flat_k, E.const(K)))
            inside = E.conj(conditions) or kir.Int(1)
            if view is not None:  # the row or column of these coordinates
                r = bit_position(view, local)
            if which == "a":
                target = E.add(E.mul(r, E.const(self.lda)), kk)
            else:
                target = E.add(E.mul(kk, E.const(self.ldb)), r)
            yield share, target, inside, index

    def issue(self, step: int) -> list[kir.Stmt]:
        """The cp.async copies of step ``step``'s tiles into its buffer, one group."""
        j, k0 = self.steps[step]
        stmts: list[kir.Stmt] = []
        for which, shared, size in (("a", "As", self.a_size), ("b", "Bs", self.b_size)):
            tensor = (self.terms[j].a if which == "a" else self.terms[j].b).tensor
            source, target = f"g{which}{j}", f"s{which}{j}"
            if k0 == 0:  # the term's first step: its bases, from its first element
                _, first_target, _, first_index = next(self.tile_elements(j, 0, which))
                self.bases[source], self.bases[target] = first_index, first_target
                stmts += [kir.Assign(source, first_index), kir.Assign(target, first_target)]
            for share, at, inside, index in self.tile_elements(j, k0, which):
                at = E.add(E.const((step % self.config.stages) * size), self.based(at, target))
                index = self.based(index, source)
                copy: kir.Stmt = kir.CopyAsync(shared, at, f"p_{tensor}", index, inside)
                stmts.append(kir.If(share, (copy,)) if share is not None else copy)
        return [*stmts, kir.CopyCommit()]

    # -- products --------------------------------------------------------------------

    def warp_bases(self, term: _Term) -> tuple[kir.Expr, kir.Expr]:
        warp = E.div(kir.ThreadIdx(), 32)
        row = E.mul(E.mod(warp, self.config.warps_m), E.const(term.tiles_m * self.shape.m))
        col = E.mul(E.div(warp, self.config.warps_m), E.const(term.tiles_n * self.shape.n))
        return row, col

    def lane(self) -> tuple[kir.Expr, kir.Expr]:
        lane = E.mod(kir.ThreadIdx(), 32)
        return E.div(lane, 4), E.mod(lane, 4)

    def multiply(self, step: int) -> list[kir.Section]:
        """Fragments of step ``step`` from its buffer and the warp's MMAs."""
        j, _ = self.steps[step]
        term, shape = self.terms[j], self.shape
        na, nb, nc = shape.a.count, shape.b.count, shape.c.count
        group, quad = self.lane()
        wrow, wcol = self.warp_bases(term)
        buffer = step % self.config.stages
        base_a, base_b = buffer * self.a_size, buffer * self.b_size
        sections: list[kir.Section] = []
        # the instruction steps that reach into K (a term's last step may be
        # partly padding: its zeros are not multiplied)
        k0 = self.steps[step][1]
        needed = min(self.config.k_step, term.c.size(term.c.k) - k0)
        for ks in range(0, needed, shape.k):
            frags: list[kir.Stmt] = []
            for tm in range(term.tiles_m):
                for i in range(na):
                    r, col = coordinates(shape.a, group, quad, i)
                    row = E.add(wrow, E.add(E.const(tm * shape.m), r))
                    at = E.add(E.mul(row, E.const(self.lda)), E.add(E.const(ks + base_a), col))
                    value: kir.Expr = kir.Load("As", at)
                    if term.negate:  # the opposite sign of its group's first term
                        value = kir.Neg(value)
                    frags.append(kir.Store("fa", E.const(tm * na + i), value))
            for tn in range(term.tiles_n):
                for i in range(nb):
                    r, col = coordinates(shape.b, group, quad, i)
                    column = E.add(wcol, E.add(E.const(tn * shape.n), col))
                    at = E.add(E.mul(E.add(E.const(ks), r), E.const(self.ldb)), column)
                    at = E.add(E.const(base_b), at)
                    frags.append(kir.Store("fb", E.const(tn * nb + i), kir.Load("Bs", at)))
            sections.append(kir.PerThread(tuple(frags)))
            for tm in range(term.tiles_m):
                for tn in range(term.tiles_n):
                    tile = tm * term.tiles_n + tn
                    if term.bits is not None:  # the group's registers of these elements
                        acc = kir.Fragment("acc", 0, term.bits.slots[tile])
                    else:
                        acc = kir.Fragment("acc", tile * nc)
                    a, b = kir.Fragment("fa", tm * na), kir.Fragment("fb", tn * nb)
                    sections.append(kir.Mma(shape.name, acc, a, b, acc))
        return sections

    def factor(self, term: _Term) -> kir.Expr:
        """The term's sign (relative to the output's operator), constant, scalars."""
        return self.scaled(term.c.sign, term.c.constant, term.c.scale)

    def scaled(self, sign: int, constant: float, scale: tuple[str, ...]) -> kir.Expr:
        """``sign · constant · scalars``, the sign relative to the output's operator."""
        return scale_factor(self.signed(sign), constant, scale)

    def signed(self, sign: int) -> int:
        """A term's sign relative to the output's operator (``-=`` flips it)."""
        return -sign if self.family.op == "-=" else sign

    def relayout(self, j: int) -> list[kir.Stmt]:
        """Term ``j``'s accumulators (its group's, where it ends one) added into
        ``Ts`` and zeroed; nothing where a later term of its group follows."""
        relay = self.terms[j].relay
        if relay is None:
            return []
        term, shape = self.terms[relay], self.shape
        row_bits = None if term.bits is None else term.bits.rows
        col_bits = None if term.bits is None else term.bits.cols
        nc = shape.c.count
        group, quad = self.lane()
        wrow, wcol = self.warp_bases(term)
        factor = self.factor(term)
        base = f"t{j}"
        stmts: list[kir.Stmt] = []
        for tm in range(term.tiles_m):
            for tn in range(term.tiles_n):
                for i in range(nc):
                    r, col = coordinates(shape.c, group, quad, i)
                    row = E.add(wrow, E.add(E.const(tm * shape.m), r))
                    column = E.add(wcol, E.add(E.const(tn * shape.n), col))
                    local = {
                        **self.view_coordinates(term.rows, row_bits, row),
                        **self.view_coordinates(term.cols, col_bits, column),
                    }
                    at = self.tile_index(local)
                    if not stmts:  # the first element's index is the term's base
                        self.bases[base] = at
                        stmts.append(kir.Assign(base, at))
                    slot = E.const((tm * term.tiles_n + tn) * nc + i)
                    value = E.mul(factor, kir.Load("acc", slot))
                    stmts.append(kir.Store("Ts", self.based(at, base), value, "+="))
                    stmts.append(kir.Store("acc", slot, kir.Float(0.0)))
        return stmts

    # -- the kernel --------------------------------------------------------------------

    def epilogue(self) -> list[kir.Stmt]:
        """The box stored, the pointwise terms' register sums added (after the
        products, where few registers are live: in the prologue beside the
        terms' bases and the first copies their loads spilled), a chunk of
        :data:`POINTWISE_CHUNK` elements at a time."""
        out = f"p_{self.family.output.tensor}"
        elements = list(self.box_elements())
        stmts: list[kir.Stmt] = []
        for j, (e, share, local) in enumerate(elements):
            value: kir.Expr = kir.Load("Ts", e)
            if self.sums is not None:
                if j % POINTWISE_CHUNK == 0:
                    stmts += self.sums[j // POINTWISE_CHUNK]
                value = E.add(value, kir.Load("pv", E.const(j % POINTWISE_CHUNK)))
            store: kir.Stmt = kir.Store(out, self.global_index(local), value)
            inside = E.conj(self.inside(local))
            if inside is not None:
                store = kir.If(inside, (store,))
            stmts.append(kir.If(share, (store,)) if share is not None else store)
        return stmts

    def kernel(self) -> kir.Kernel:
        task, cfg, shape = self.task, self.config, self.shape
        ahead, count = cfg.stages - 1, len(self.steps)
        first = [stmt for step in range(min(ahead, count)) for stmt in self.issue(step)]
        body: list[kir.Section] = [kir.PerThread((*self.prologue(), *first, *self.fill()))]
        last = {j: s for s, (j, _) in enumerate(self.steps)}
        for step, (j, _) in enumerate(self.steps):
            # this step's group has landed when at most the younger ones are pending
            pending = min(ahead - 1, count - 1 - step)
            body += [kir.PerThread((kir.CopyWait(pending),)), kir.Barrier()]
            if step + ahead < count:
                body.append(kir.PerThread(tuple(self.issue(step + ahead))))
            body += self.multiply(step)
            if last[j] == step:
                body.append(kir.PerThread(tuple(self.relayout(j))))
        body += [kir.Barrier(), kir.PerThread(tuple(self.epilogue()))]
        # tensors only the pointwise terms read: loaded in the epilogue, after the
        # products (kir.Param.restrict)
        staged = {t.c.a.tensor for t in self.terms} | {t.c.b.tensor for t in self.terms}
        late = {f"p_{o.tensor}" for p in self.family.pointwise for o in p.factors} - {
            f"p_{t}" for t in staged
        }
        params = [replace(p, restrict=p.name not in late) for p in statement_params(task)]
        it = self.itype
        na, nb, nc = shape.a.count, shape.b.count, shape.c.count
        bases = [kir.ThreadVar(f"b{w}{j}", it) for j in range(len(self.terms)) for w in "ab"]
        bases += [kir.ThreadVar(name, it) for name in self.bases]
        registers = []
        if self.pointwise_values:
            shares = min(POINTWISE_CHUNK, -(-self.elements // cfg.threads))
            registers = [
                kir.ThreadVar("pv", "double", shares),
                kir.ThreadVar("px", "double", self.pointwise_values),
            ]
        return kir.Kernel(
            name=self.name,
            params=tuple(params),
            threads=cfg.threads,
            blocks=math.prod(self.blocks.values()),
            thread_vars=(
                *(kir.ThreadVar(f"o{n}", it) for n in range(len(self.family.extents))),
                *bases,
                kir.ThreadVar("fa", "double", max(t.tiles_m for t in self.terms) * na),
                kir.ThreadVar("fb", "double", max(t.tiles_n for t in self.terms) * nb),
                kir.ThreadVar("acc", "double", max(t.tiles_m * t.tiles_n for t in self.terms) * nc),
                *registers,
            ),
            shared=(
                kir.SharedArray("Ts", "double", self.box_size),
                kir.SharedArray("As", "double", cfg.stages * self.a_size),
                kir.SharedArray("Bs", "double", cfg.stages * self.b_size),
            ),
            body=tuple(body),
            index_type=it,
            comment=f"{task.statement}  [mma family {shape.name}, {cfg.to_json()}]",
            meta=(("compute_type", "double"),),
        )
