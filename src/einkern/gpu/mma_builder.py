"""The builder of :mod:`.mma_lower`'s tensor-core kernels (:class:`TileBuilder`),
in a module of its own so that variants (:mod:`.mma_warpgroup`) subclass it
without importing the module that dispatches to them.  The kernel shape is
described in :mod:`.mma_lower`."""

from __future__ import annotations

import math
from collections import Counter

from ..ir.task import Task
from ..semantics import C_TYPE
from . import exprs as E
from . import kir
from .contraction import Contraction, Pointwise
from .mma import SHAPES, coordinates
from .mma_config import MmaConfig
from .mma_epilogue import epilogue_sections, shared_epilogue_elements
from .mma_staging import (
    LoadCall,
    copy_position,
    lane_offset,
    load_calls,
    register_origins,
    runs_along_cols,
    staging,
)

#: The dtype of the tensors each instruction input type multiplies.
INPUT_DTYPE = {"f64": "float64", "tf32": "float32", "bf16": "bfloat16", "f16": "float16"}


def statement_params(task: Task) -> list[kir.Param]:
    """The kernel parameters of a one-statement kernel: the statement's tensors in
    program order (all but the output read-only), then every scalar."""
    used = set(task.statement.tensors())
    output = task.statement.output.tensor
    params = [
        kir.Param(
            f"p_{t.name}",
            C_TYPE[t.dtype],
            True,
            task.problem.numel(t.name),
            readonly=t.name != output,
        )
        for t in task.program.tensors
        if t.name in used
    ]
    return params + [kir.Param(f"s_{s.name}", "double", False) for s in task.program.scalars]


#: Thread variables of :meth:`TileBuilder.carried_step`: the shared buffer read
#: this k-step, the one read next, and the one the k-step's copies fill.
STAGE_VARS = ("stage", "stage_next", "stage_fill")


def _wrapped(value: kir.Expr, stages: int) -> kir.Expr:
    """``value % stages`` for ``0 <= value < 2·stages``, by a comparison."""
    over = kir.Op(">=", value, E.const(stages))
    return kir.Select(over, E.sub(value, E.const(stages)), value)


def _within(start: kir.Expr, at: kir.Expr, tile: int, size: int) -> kir.Expr:
    """Whether position ``at`` of a tile of ``tile`` positions from ``start`` (a
    multiple of ``tile``) is below ``size``: where ``tile`` divides ``size`` the
    whole tile is in or out, so the test is on ``start`` alone (the same for every
    thread and element of the tile, computed once)."""
    return E.less(start if size % tile == 0 else at, E.const(size))


class TileBuilder:
    """Builds the kernel IR of one contraction in GEMM form on ``mma.sync`` tiles."""

    def __init__(
        self,
        task: Task,
        c: Contraction,
        config: MmaConfig,
        name: str,
        pointwise: tuple[Pointwise, ...] = (),
        late_copies: bool = False,
        carried: bool = False,
    ):
        self.task, self.c, self.config, self.name = task, c, config, name
        #: the k-step's copies issued after a quarter of its MMAs (:meth:`async_step`)
        self.late_copies = late_copies
        self.pointwise = pointwise  # added to each output element as it is stored
        self.shape = SHAPES[config.shape]
        self.bm, self.bn = config.block_tile()
        self.bk = config.k_step
        self.M, self.N, self.K = c.size(c.m), c.size(c.n), c.size(c.k)
        self.tiles_m = math.ceil(self.M / self.bm)
        self.tiles_n = math.ceil(self.N / self.bn)
        self.batches = c.size(c.batch)
        largest = max(task.problem.numel(t) for t in task.statement.tensors())
        self.itype = "long long" if largest >= 2**31 else "int"
        self.ctype = "double" if self.shape.input_type == "f64" else "float"
        self.half = self.shape.packed > 1  # 16-bit tiles, fragments by ldmatrix
        self.staging = {w: staging(c, config, w) for w in ("a", "b")}
        self.calls = self._load_calls() if self.half else {}
        groups = self.bk // self.shape.k
        #: fragments carried across the k-step's barrier (:meth:`carried_step`):
        #: fp64/tf32 fragments by the layout formulas, an even number of
        #: instruction k-steps per k-step (two fragment slots alternate)
        self.carried = carried and not self.half and not config.split and groups % 2 == 0
        #: each operand's distinct ldmatrix call patterns (one lane offset each)
        self.patterns = {
            which: list(dict.fromkeys(c.pattern for c in calls))
            for which, calls in self.calls.items()
        }

    # -- pieces ---------------------------------------------------------------

    def tid(self) -> kir.Expr:
        return kir.ThreadIdx()

    def warp_bases(self) -> tuple[kir.Expr, kir.Expr]:
        """Row (M) and column (N) of the warp's first instruction tile in the block."""
        warp = E.div(self.tid(), 32)
        shape, cfg = self.shape, self.config
        row = E.mul(E.mod(warp, cfg.warps_m), E.const(cfg.tiles_m * shape.m))
        col = E.mul(E.div(warp, cfg.warps_m), E.const(cfg.tiles_n * shape.n))
        return row, col

    def lane_group_quad(self) -> tuple[kir.Expr, kir.Expr]:
        lane = E.mod(self.tid(), 32)
        return E.div(lane, 4), E.mod(lane, 4)

    def block_split(self, block: kir.Expr) -> tuple[kir.Expr, kir.Expr]:
        """(the block's number within its batch, its batch): the batch slowest, or
        fastest with ``batch_inner``."""
        if self.batches == 1:
            return block, E.const(0)
        if self.config.batch_inner:
            return E.div(block, self.batches), E.mod(block, self.batches)
        tiles = self.tiles_m * self.tiles_n
        return E.mod(block, tiles), E.div(block, tiles)

    def block_tile_coordinates(self, within: kir.Expr) -> tuple[kir.Expr, kir.Expr]:
        """The M and N tile of block number ``within`` of its batch: M fastest, in
        groups of ``group_m`` M tiles (the last group may be shorter) swept across N."""
        group = min(self.config.group_m, self.tiles_m)
        if group <= 1 or self.tiles_n == 1:
            return E.mod(within, self.tiles_m), E.mod(E.div(within, self.tiles_m), self.tiles_n)
        per_group = group * self.tiles_n
        first = E.mul(E.div(within, per_group), E.const(group))
        local = E.mod(within, per_group)
        size: kir.Expr = E.const(group)
        if self.tiles_m % group:
            size = E.minimum(E.sub(E.const(self.tiles_m), first), size)
            return E.add(first, kir.Op("%", local, size)), kir.Op("/", local, size)
        return E.add(first, E.mod(local, group)), E.div(local, group)

    def prologue(self) -> list[kir.Stmt]:
        """Block coordinates (:meth:`block_tile_coordinates`, then batch) and the
        batch's base offsets into every tensor."""
        within, flat = self.block_split(kir.BlockIdx())
        tile_m, tile_n = self.block_tile_coordinates(within)
        body: list[kir.Stmt] = [
            kir.Assign("row0", E.mul(tile_m, E.const(self.bm))),
            kir.Assign("col0", E.mul(tile_n, E.const(self.bn))),
        ]
        coords = self.c.coordinates(self.c.batch, flat) if self.c.batch else {}
        for name, operand in (
            ("base_a", self.c.a),
            ("base_b", self.c.b),
            ("base_c", self.c.output),
        ):
            body.append(kir.Assign(name, self.c.offset(operand, coords)))
        count = self.config.tiles_m * self.config.tiles_n * self.shape.c.count
        body += [kir.Store("acc", E.const(i), kir.Float(0.0)) for i in range(count)]
        return body + self.lane_offsets()

    def _tile(self, which: str, kk: kir.Expr) -> tuple:
        """(operand, rows, cols, row group, col group, row0, col0) of the A
        (M × k_step) or B (k_step × N) tile at k offset ``kk``."""
        c = self.c
        if which == "a":
            return c.a, self.bm, self.bk, c.m, c.k, kir.Var("row0"), kk
        return c.b, self.bk, self.bn, c.k, c.n, kk, kir.Var("col0")

    def _elements(self, which: str, ahead: int = 0, kk: kir.Expr | None = None):
        """Per element a thread copies of one tile: (register, guard on the
        thread's share, shared-memory index, in-extents condition, global index);
        ``ahead``: the tile ``ahead`` k-steps after ``kk``.  Consecutive threads
        go along the operand's contiguous index."""
        for j, share, target, inside, index, _ in self._element_parts(which, ahead, kk):
            yield j, share, target, inside, index

    def _element_parts(self, which: str, ahead: int = 0, kk: kir.Expr | None = None):
        """:meth:`_elements`, each with its global index also in two parts where
        :meth:`shares_k` (else None): the tile's base plus its M or N coordinates'
        offset, and its k coordinates' offset, decoded from the k position
        clamped to the last (an in-bounds offset for every thread, so that
        :meth:`issue` may compute it outside the copy's guard)."""
        kk = kir.Var("kk") if kk is None else kk
        operand, rows, cols, row_group, col_group, row0, col0 = self._tile(which, kk)
        if ahead:
            if which == "a":
                col0 = E.add(col0, E.const(ahead * self.bk))
            else:
                row0 = E.add(row0, E.const(ahead * self.bk))
        threads = self.config.threads
        fastest_col = runs_along_cols(operand, col_group)
        layout = self.staging[which]
        width = layout.width  # 16-bit cp.async: 8 elements along the contiguous run
        total = rows * cols // width
        base = kir.Var("base_a" if which == "a" else "base_b")
        split = self.shares_k(which)
        for j, e, share in E.thread_shares(total, threads):
            r, col = copy_position(e, rows, cols, width, fastest_col)
            gr, gc = E.add(row0, r), E.add(col0, col)
            coords = {**self.c.coordinates(row_group, gr), **self.c.coordinates(col_group, gc)}
            index = E.add(base, self.c.offset(operand, coords))
            inside = E.conj(
                [
                    _within(row0, gr, rows, self.c.size(row_group)),
                    _within(col0, gc, cols, self.c.size(col_group)),
                ]
            )
            parts = None
            if split:
                k_at, k_group, mn_at, mn_group = (
                    (gr, row_group, gc, col_group)
                    if which == "b"
                    else (gc, col_group, gr, row_group)
                )
                clamped = E.minimum(k_at, E.const(self.K - 1))
                k_part = self.c.offset(operand, self.c.coordinates(k_group, clamped))
                rest = E.add(base, self.c.offset(operand, self.c.coordinates(mn_group, mn_at)))
                parts = (rest, k_part)
            yield j, share, layout.index(r, col), inside, index, parts

    def shares_k(self, which: str) -> bool:
        """Whether the copies of the A or B tile decode their k position once per
        distinct position (:meth:`issue`): where the k group has more indices than
        the tile's M or N group, the k decode is most of a copy's index
        arithmetic, and NVRTC repeats it under each copy's guard otherwise
        (qkausf,qupfa->skp, four summed indices: 1050 instructions per k-step
        for 32 MMAs, 317 decoded once).
        Where the M or N group has as many indices or more, sharing was measured
        to lose (docs/tensor_cores.md "Shared k decodes")."""
        mn = self.c.m if which == "a" else self.c.n
        return len(self.c.k) > max(1, len(mn))

    def fetch(self, which: str, ahead: int, kk: kir.Expr | None = None) -> list[kir.Stmt]:
        """Global loads of a tile into the thread's prefetch registers (zero past
        the extents); ``kk``: the k offset (default: the k-step loop's)."""
        operand = self.c.a if which == "a" else self.c.b
        register = f"pre_{which}"
        stmts: list[kir.Stmt] = []
        for j, share, _, inside, index in self._elements(which, ahead, kk):
            load: kir.Stmt = kir.If(
                inside,
                (kir.Store(register, E.const(j), kir.Load(f"p_{operand.tensor}", index)),),
                (kir.Store(register, E.const(j), kir.Float(0.0)),),
            )
            stmts.append(kir.If(share, (load,)) if share is not None else load)
        return stmts

    def buffer_size(self, which: str) -> int:
        """Shared elements of one buffer of the A or B tile."""
        rows, cols = (self.bm, self.bk) if which == "a" else (self.bk, self.bn)
        return self.staging[which].elements(rows, cols)

    def buffer(self, which: str, number: kir.Expr) -> kir.Expr:
        """Offset of shared buffer ``number`` of the A or B tile."""
        return E.mul(number, E.const(self.buffer_size(which)))

    def deposit(self, which: str, number: kir.Expr) -> list[kir.Stmt]:
        """The prefetch registers stored into shared buffer ``number`` of the tile."""
        shared = "As" if which == "a" else "Bs"
        stmts: list[kir.Stmt] = []
        for j, share, target, _, _ in self._elements(which):
            at = E.add(self.buffer(which, number), target)
            store: kir.Stmt = kir.Store(shared, at, kir.Load(f"pre_{which}", E.const(j)))
            stmts.append(kir.If(share, (store,)) if share is not None else store)
        return stmts

    def k_step(self) -> list[kir.Section]:
        """One k-step on double-buffered shared tiles: the next tile's global
        loads issued into registers (they overlap the MMAs), fragments and MMAs
        from the current buffer, the registers stored into the other buffer, one
        barrier (the other buffer was last read before the previous barrier)."""
        step = E.div(kir.Var("kk"), self.bk)
        current, following = E.mod(step, 2), E.mod(E.add(step, E.const(1)), 2)
        sections: list[kir.Section] = []
        if self.config.stages == 1:  # one buffer: store, barrier, ..., barrier
            current = following = E.const(0)
            deposit = self.deposit("a", current) + self.deposit("b", current)
            sections += [kir.PerThread(tuple(deposit)), kir.Barrier()]
        sections.append(kir.PerThread(tuple(self.fetch("a", 1) + self.fetch("b", 1))))
        sections += self.multiply(current)
        if self.config.stages == 2:
            deposit = self.deposit("a", following) + self.deposit("b", following)
            sections.append(kir.PerThread(tuple(deposit)))
        sections.append(kir.Barrier())
        return sections

    def issue(self, ahead: int, number: kir.Expr, kk: kir.Expr | None = None) -> list[kir.Stmt]:
        """Asynchronous copies of the A and B tiles ``ahead`` k-steps after ``kk``
        into shared buffer ``number``, committed as one group; where
        :meth:`shares_k`, the k part of the index that several of a thread's
        copies share is decoded once, into a local."""
        stmts: list[kir.Stmt] = []
        for which, shared in (("a", "As"), ("b", "Bs")):
            operand = self.c.a if which == "a" else self.c.b
            width = self.staging[which].width
            elements = list(self._element_parts(which, ahead, kk))
            uses = Counter(parts[1] for *_, parts in elements if parts is not None)
            locals_: dict[kir.Expr, kir.Var] = {}
            for k_part in (k for k, n in uses.items() if n > 1):
                name = f"k_{which}{ahead}_{len(locals_)}"
                locals_[k_part] = kir.Var(name)
                stmts.append(kir.Declare(name, self.itype, k_part))
            for _, share, target, inside, index, parts in elements:
                if parts is not None and parts[1] in locals_:
                    index = E.add(parts[0], locals_[parts[1]])
                at = E.add(self.buffer(which, number), target)
                copy: kir.Stmt = kir.CopyAsync(
                    shared, at, f"p_{operand.tensor}", index, inside, width
                )
                stmts.append(kir.If(share, (copy,)) if share is not None else copy)
        return [*stmts, kir.CopyCommit()]

    def tiles_ahead(self) -> int:
        """How many k-steps ahead the asynchronous pipeline copies: ``stages - 1``
        (every buffer but the one being read is in flight)."""
        return self.config.stages - 1

    def landed(self) -> list[kir.Stmt]:
        """Per thread, before the k-step's barrier: wait until this step's tile
        has landed (at most ``tiles_ahead() - 1`` younger groups in flight)."""
        return [kir.CopyWait(self.tiles_ahead() - 1)]

    def async_step(self) -> list[kir.Section]:
        """One k-step of the asynchronous pipeline: wait until this step's tiles
        have landed, a barrier (they are visible, and every warp is done with the
        buffer refilled next), the copies of the tiles :meth:`tiles_ahead` steps
        ahead issued into that buffer, then the fragments and MMAs of this step."""
        stages, ahead = self.config.stages, self.tiles_ahead()
        step = E.div(kir.Var("kk"), self.bk)
        current = E.mod(step, stages)
        number = E.mod(E.add(step, E.const(ahead)), stages)
        sections = self.multiply(current)
        cut = self._late_cut(len(sections)) if self.late_copies else 0
        return [
            kir.PerThread(tuple(self.landed())),
            kir.Barrier(),
            *sections[:cut],
            kir.PerThread(tuple(self.issue(ahead, number))),
            *sections[cut:],
        ]

    def _late_cut(self, count: int) -> int:
        """Sections of :meth:`multiply` (``count`` in all: per instruction k-step,
        the fragments and the MMAs) before which late copies are issued: those of
        the first quarter of the instruction k-steps, at least one.  With one block
        per SM every warp leaves the barrier together; copies issued first leave the
        tensor pipe idle while they are issued (the 128×128 fp64 tiles ran 3.6 and
        4.3 % faster on geometric mean with them late, 52 cases on an H100; tiles of
        two blocks per SM, where the other block covers them, ±1 %)."""
        per_step = 1 + self.config.tiles_m * self.config.tiles_n
        return self._late_steps(count // per_step) * per_step

    def _late_steps(self, steps: int) -> int:
        """Instruction k-steps (of ``steps``) whose MMAs go before late copies:
        the first quarter, at least one (:meth:`_late_cut`)."""
        return max(1, round(steps / 4))

    def carried_step(self) -> list[kir.Section]:
        """One k-step of the asynchronous pipeline whose first fragments the step
        before loaded (:attr:`carried`).  Instruction k-step ``s`` loads the
        fragments of ``s + 1`` into the other slot, then issues its MMAs; the last
        one waits until the next tile has landed, passes the barrier and loads the
        next tile's first fragments before its own MMAs, so every warp has MMAs to
        issue as it leaves the barrier, and nobody reads this step's buffer after
        it (the copies of the next step may refill it).  The copies of the tile
        :meth:`tiles_ahead` steps ahead go first, or after a quarter of the MMAs
        (:attr:`late_copies`).  Buffer numbers are counters (``stage``, and
        ``stage_next``, ``stage_fill`` derived from it), not ``kk / k_step % stages``
        (a chain of some twenty dependent instructions before every barrier)."""
        stages, ahead = self.config.stages, self.tiles_ahead()
        stage, following, fill = (kir.Var(v) for v in STAGE_VARS)
        na, nb = self.fragment_slots()
        low_a, low_b = na * self.config.tiles_m, nb * self.config.tiles_n
        steps = list(range(0, self.bk, self.shape.k))
        groups: list[list[kir.Section]] = []
        for step in range(len(steps)):
            slot = step % 2
            if step + 1 < len(steps):
                other = 1 - slot
                loads = self._fragments(stage, steps[step + 1], other * low_a, other * low_b)
                group: list[kir.Section] = [kir.PerThread(tuple(loads))]
            else:  # the next tile's first fragments go to slot 0 (len(steps) is even)
                group = [
                    kir.PerThread(tuple(self.landed())),
                    kir.Barrier(),
                    kir.PerThread(tuple(self._fragments(following, 0))),
                ]
            groups.append(group + self.products(slot * low_a, slot * low_b))
        cut = self._late_steps(len(steps)) if self.late_copies else 0
        counters = kir.PerThread(
            (
                kir.Assign("stage_next", _wrapped(E.add(stage, E.const(1)), stages)),
                kir.Assign("stage_fill", _wrapped(E.add(stage, E.const(ahead)), stages)),
            )
        )
        copies = kir.PerThread(tuple(self.issue(ahead, fill)))
        body = [s for group in groups[:cut] for s in group] + [copies]
        body += [s for group in groups[cut:] for s in group]
        return [counters, *body, kir.PerThread((kir.Assign("stage", following),))]

    def products(
        self,
        slot_a: int,
        slot_b: int,
        total: str = "acc",
        pairs: tuple[tuple[int, int], ...] = ((0, 0),),
    ) -> list[kir.Section]:
        """The warp's MMAs of one instruction k-step on the fragments from
        ``slot_a`` and ``slot_b`` into ``total``: per instruction tile, one MMA
        per ``pairs`` entry (offsets of the A and B fragments: 3xTF32's parts)."""
        cfg, nc = self.config, self.shape.c.count
        na, nb = self.fragment_slots()
        sections: list[kir.Section] = []
        for tm in range(cfg.tiles_m):
            for tn in range(cfg.tiles_n):
                acc = kir.Fragment(total, (tm * cfg.tiles_n + tn) * nc)
                for da, db in pairs:
                    a = kir.Fragment("fa", slot_a + da + tm * na)
                    b = kir.Fragment("fb", slot_b + db + tn * nb)
                    sections.append(kir.Mma(self.shape.name, acc, a, b, acc))
        return sections

    def multiply(self, current: kir.Expr) -> list[kir.Section]:
        """Fragments from shared buffer ``current`` and the warp's MMAs, per
        instruction k-step."""
        sections: list[kir.Section] = []
        shape, cfg = self.shape, self.config
        na, nb = self.fragment_slots()
        low_a, low_b = na * cfg.tiles_m, nb * cfg.tiles_n
        steps = list(range(0, self.bk, shape.k))
        # 3xTF32: the step's products summed apart from zero ("part"), then added to
        # the accumulators in fp32 (the tensor cores truncate as they accumulate)
        total = "part" if cfg.split else "acc"
        if cfg.split:
            zero = [kir.Store("part", E.const(i), kir.Float(0.0)) for i in range(self._parts())]
            sections.append(kir.PerThread(tuple(zero)))
        if self.half:  # ldmatrix of the next k-step before the MMAs of this one
            sections += self.load_matrices(current, 0, 0, 0)
        for step, ks in enumerate(steps):
            slot_a = slot_b = 0
            if self.half:
                slot_a, slot_b = step % 2 * low_a, step % 2 * low_b
                if step + 1 < len(steps):
                    other = (step + 1) % 2
                    sections += self.load_matrices(
                        current, steps[step + 1], other * low_a, other * low_b
                    )
            else:
                sections.append(kir.PerThread(tuple(self._fragments(current, ks))))
            # 3xTF32: the small products first (lo·hi, hi·lo), then hi·hi
            pairs = ((low_a, 0), (0, low_b), (0, 0)) if cfg.split else ((0, 0),)
            sections += self.products(slot_a, slot_b, total, pairs)
        if cfg.split:
            sections.append(kir.PerThread(tuple(self.promoted())))
        return sections

    def _parts(self) -> int:
        """3xTF32: registers of the step sums (as many as accumulators), else 0."""
        cfg = self.config
        return cfg.tiles_m * cfg.tiles_n * self.shape.c.count if cfg.split else 0

    def promoted(self) -> list[kir.Stmt]:
        """3xTF32: a completed step's sums ("part") added to the accumulators,
        rounded to nearest (empty otherwise)."""
        return [
            kir.Store("acc", i, kir.Op("+", kir.Load("acc", i), kir.Load("part", i)))
            for i in map(E.const, range(self._parts()))
        ]

    def _load_calls(self) -> dict[str, list[LoadCall]]:
        """The ``ldmatrix`` calls of a warp's A and B fragments per instruction k-step."""
        shape, cfg = self.shape, self.config
        return {
            "a": load_calls(cfg.tiles_m, register_origins(shape.a, True), shape.m),
            "b": load_calls(cfg.tiles_n, register_origins(shape.b, False), shape.n),
        }

    def fragment_slots(self) -> tuple[int, int]:
        """Fragment array elements per A and B instruction tile: the layouts'
        element counts, or 32-bit words of two 16-bit elements."""
        na, nb = self.shape.a.count, self.shape.b.count
        return (na // 2, nb // 2) if self.half else (na, nb)

    def lane_offset_names(self) -> list[str]:
        """Thread variables of the lanes' ldmatrix row offsets, one per pattern."""
        return [f"lm_{w}{p}" for w, patterns in self.patterns.items() for p in range(len(patterns))]

    def lane_offsets(self) -> list[kir.Stmt]:
        """Each lane's row offset of every ldmatrix pattern (in the prologue)."""
        stmts: list[kir.Stmt] = []
        for which, patterns in self.patterns.items():
            layout = self.staging[which]
            for p, pattern in enumerate(patterns):
                offset = lane_offset(pattern, layout.along_k(which), layout.ld)
                stmts.append(kir.Assign(f"lm_{which}{p}", offset))
        return stmts

    def load_matrices(
        self, current: kir.Expr, ks: int, slot_a: int, slot_b: int
    ) -> list[kir.Section]:
        """The ``ldmatrix`` sections of instruction k-step ``ks`` from shared buffer
        ``current`` (each call's tile origin plus the lane's offset) into the
        fragment registers from ``slot_a`` (A) and ``slot_b`` (B) on."""
        sections: list[kir.Section] = []
        bases = dict(zip(("a", "b"), self.warp_bases(), strict=True))
        for which, calls in self.calls.items():
            layout = self.staging[which]
            size = self.shape.m if which == "a" else self.shape.n
            patterns = self.patterns[which]
            for call in calls:
                mn = E.add(bases[which], E.const(call.tile * size))
                origin = (
                    layout.index(mn, E.const(ks)) if which == "a" else layout.index(E.const(ks), mn)
                )
                at = E.add(self.buffer(which, current), origin)
                at = E.add(at, kir.Var(f"lm_{which}{patterns.index(call.pattern)}"))
                d = kir.Fragment(f"f{which}", call.first + (slot_a if which == "a" else slot_b))
                sections.append(
                    kir.LoadMatrix(
                        "As" if which == "a" else "Bs", at, call.count, not layout.along_k(which), d
                    )
                )
        return sections

    def _fragments(
        self, current: kir.Expr, ks: int, slot_a: int = 0, slot_b: int = 0
    ) -> list[kir.Stmt]:
        """fp64/tf32 fragments of instruction k-step ``ks`` loaded from shared
        buffer ``current`` by the layout formulas, into the fragment registers
        from ``slot_a`` (A) and ``slot_b`` (B) on."""
        shape, cfg = self.shape, self.config
        na, nb = shape.a.count, shape.b.count
        group, quad = self.lane_group_quad()
        wrow, wcol = self.warp_bases()
        frags: list[kir.Stmt] = []
        for tm in range(cfg.tiles_m):
            for i in range(na):
                r, col = coordinates(shape.a, group, quad, i)
                row = E.add(wrow, E.add(E.const(tm * shape.m), r))
                at = self.staging["a"].index(row, E.add(E.const(ks), col), single=True)
                at = E.add(self.buffer("a", current), at)
                frags += self._fragment(
                    "fa", slot_a + tm * na + i, kir.Load("As", at), na * cfg.tiles_m
                )
        for tn in range(cfg.tiles_n):
            for i in range(nb):
                r, col = coordinates(shape.b, group, quad, i)
                column = E.add(wcol, E.add(E.const(tn * shape.n), col))
                at = self.staging["b"].index(E.add(E.const(ks), r), column, single=True)
                at = E.add(self.buffer("b", current), at)
                frags += self._fragment(
                    "fb", slot_b + tn * nb + i, kir.Load("Bs", at), nb * cfg.tiles_n
                )
        return frags

    def _fragment(self, var: str, slot: int, value: kir.Expr, low: int) -> list[kir.Stmt]:
        """Element ``slot`` of fragment array ``var`` from ``value``: as it is
        (fp64), rounded to tf32, or (3xTF32) its tf32 high part with the low part
        ``low`` elements further on."""
        if self.shape.input_type != "tf32":
            return [kir.Store(var, E.const(slot), value)]
        high = kir.Call("ek_tf32", (value,))
        stmts: list[kir.Stmt] = [kir.Store(var, E.const(slot), high)]
        if self.config.split:
            rest = kir.Op("-", value, kir.Load(var, E.const(slot)))
            stmts.append(kir.Store(var, E.const(low + slot), kir.Call("ek_tf32", (rest,))))
        return stmts

    # -- the kernel -------------------------------------------------------------

    def drain(self) -> list[kir.Section]:
        """The sections after the k loop that complete everything in flight."""
        return [kir.PerThread((kir.CopyWait(0),))]

    def async_body(self, steps: int) -> list[kir.Section]:
        """The prologue and the k loop of the asynchronous pipeline: the first
        :meth:`tiles_ahead` tiles issued, then :meth:`async_step` per k-step,
        then :meth:`drain`."""
        first: list[kir.Stmt] = []
        for s in range(self.tiles_ahead()):
            first += self.issue(s, E.const(s), E.const(0))
        if self.carried:
            zero = E.const(0)
            return [
                kir.PerThread(tuple(self.prologue() + first)),
                kir.PerThread((*self.landed(), kir.Assign("stage", zero))),
                kir.Barrier(),
                kir.PerThread(tuple(self._fragments(zero, 0))),
                kir.Uniform("kk", 0, steps, self.bk, tuple(self.carried_step())),
                *self.drain(),
            ]
        return [
            kir.PerThread(tuple(self.prologue() + first)),
            kir.Uniform("kk", 0, steps, self.bk, tuple(self.async_step())),
            *self.drain(),
        ]

    def kernel(self) -> kir.Kernel:
        task, cfg = self.task, self.config
        (na, nb), nc = self.fragment_slots(), self.shape.c.count
        steps = math.ceil(self.K / self.bk) * self.bk
        zero = E.const(0)
        if cfg.copy in ("async", "tma"):
            body: tuple[kir.Section, ...] = (*self.async_body(steps), *epilogue_sections(self))
        else:
            first = self.fetch("a", 0, zero) + self.fetch("b", 0, zero)
            if cfg.stages == 2:
                first += self.deposit("a", zero) + self.deposit("b", zero)
            body = (
                kir.PerThread(tuple(self.prologue() + first)),
                *([kir.Barrier()] if cfg.stages == 2 else []),
                kir.Uniform("kk", 0, steps, self.bk, tuple(self.k_step())),
                *epilogue_sections(self),
            )
        per_thread = math.ceil(self.bm * self.bk / cfg.threads)
        # 3xTF32 keeps high and low parts; 16-bit fragments two k-steps
        copies = 2 if cfg.split or self.carried or (self.half and self.bk > self.shape.k) else 1
        fragment = "unsigned" if self.half else self.ctype  # ldmatrix: packed words
        staged = C_TYPE[INPUT_DTYPE[self.shape.input_type]]
        prefetch = (
            ()
            if cfg.copy in ("async", "tma")
            else (
                kir.ThreadVar("pre_a", self.ctype, per_thread),
                kir.ThreadVar("pre_b", self.ctype, math.ceil(self.bk * self.bn / cfg.threads)),
            )
        )
        params = statement_params(task)
        it = self.itype
        return kir.Kernel(
            name=self.name,
            params=tuple(params),
            threads=cfg.threads,
            blocks=self.tiles_m * self.tiles_n * self.batches,
            thread_vars=(
                kir.ThreadVar("row0", it),
                kir.ThreadVar("col0", it),
                kir.ThreadVar("base_a", it),
                kir.ThreadVar("base_b", it),
                kir.ThreadVar("base_c", it),
                kir.ThreadVar("fa", fragment, copies * cfg.tiles_m * na),
                kir.ThreadVar("fb", fragment, copies * cfg.tiles_n * nb),
                kir.ThreadVar("acc", self.ctype, cfg.tiles_m * cfg.tiles_n * nc),
                *([kir.ThreadVar("part", self.ctype, self._parts())] if cfg.split else []),
                *(kir.ThreadVar(name, it) for name in self.lane_offset_names()),
                *(kir.ThreadVar(name, "int") for name in (STAGE_VARS if self.carried else ())),
                *prefetch,
            ),
            shared=(
                kir.SharedArray("As", staged, cfg.stages * self.buffer_size("a")),
                kir.SharedArray("Bs", staged, cfg.stages * self.buffer_size("b")),
                *(
                    [kir.SharedArray("Cs", self.ctype, shared_epilogue_elements(cfg))]
                    if cfg.epilogue == "shared"
                    else []
                ),
            ),
            body=body,
            index_type=it,
            comment=f"{task.statement}  [mma {self.shape.name}, {cfg.to_json()}]",
            meta=(("compute_type", self.ctype),),
        )
