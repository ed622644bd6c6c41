"""Tensor-core kernels on Hopper's warpgroup MMA (``wgmma``, sm_90a) for bf16/f16
and tf32 contractions: :class:`WarpGroupBuilder`, a subclass of
:class:`~.mma_builder.TileBuilder`.

Kernel shape, for an :class:`~.mma_config.MmaConfig` of a ``wgmma_*`` shape
(``warps_m`` a multiple of 4, ``warps_n`` = ``tiles_m`` = 1, ``k_step`` one
128-byte line: 64 16-bit or 32 tf32 elements):

* the block's ``warps_m / 4`` warpgroups each own 64 rows of the BM × BN output
  tile; one instruction per warpgroup and instruction k-step (16, or 8 for
  tf32) computes its whole 64 × BN share (N = BN = ``8 · tiles_n``, at most
  256); each warp's accumulators are the m16n8 layout's, so
  :mod:`.mma_epilogue` stores them as it stores ``mma.sync`` accumulators (warp
  ``w`` at rows ``16·w``);
* the operand tiles are staged by 16-byte ``cp.async`` copies (or TMA,
  :mod:`.mma_tma`) into 128-byte swizzled lines (:class:`~.mma_staging.Staging`
  with ``swizzle``), each along its operand's own stride-1 index: k-contiguous
  ("K-major") tiles have one line per row, M- or N-contiguous tiles one line
  per k in blocks of a line's elements, and the instruction reads them through
  shared-memory descriptors (:class:`~.kir.SharedMatrix`), transposing the
  latter;
* tf32 operands cannot be transposed by the instruction, so B must be K-major:
  where only A is (``ik,kj→ij``: B runs along N), :func:`oriented` exchanges
  the operands (the tile's rows are then the N group); an A tile that is not
  K-major is read into registers (the m16n8k8 tf32 layout, rounded to tf32 on
  the way), the instruction's register form;
* the pipeline keeps ``stages - 2`` tiles in flight and one group of MMAs: per
  k-step, wait for the tile, ``fence.proxy.async`` (the copies become visible to
  the tensor cores), a barrier, the copies of the tile ``stages - 2`` steps ahead
  into the buffer the MMAs of two steps ago read (each warpgroup waited for them
  before the barrier), the MMAs, commit, and a wait that leaves this step's
  group in flight.  With A in registers the wait for the step before comes
  instead just before the A fragments are loaded (they are the registers the
  step before's MMAs read), and a barrier precedes the last wait;
* 3xTF32 (``split``): A is always read into registers and split there into
  rounded high and low parts; B's high part is the staged tile (the tensor cores
  truncate it to tf32), its low part (:meth:`WarpGroupBuilder.low_parts`) is
  written by every thread to one of two ``Bl`` buffers after the tile landed,
  then a proxy fence and a barrier; each step's 3 × 4 MMAs sum into registers of
  their own (``part``, the first without adding the old values), which are added
  to the accumulators in fp32 after the wait that completes them (the tensor
  cores truncate their float32 sums: accumulated over the whole K the error
  grew to 10× cuBLAS fp32's).
"""

from __future__ import annotations

from dataclasses import replace

from . import exprs as E
from . import kir
from .contraction import Contraction
from .mma import SHAPES, coordinates
from .mma_builder import TileBuilder
from .mma_config import MmaConfig
from .mma_staging import LoadCall, line_elements, staging
from .mma_warpgroup_text import ATOM, MAX_N, REGISTER_A, WARPGROUP


def _k_major(c: Contraction, config: MmaConfig, which: str) -> bool:
    return staging(c, config, which).along_k(which)


def oriented(c: Contraction, config: MmaConfig) -> Contraction:
    """``c`` as a warpgroup tile of ``config`` computes it: tf32 operands with B
    not K-major but A K-major exchanged (A and B, M and N), else ``c``."""
    if SHAPES[config.shape].input_type != "tf32" or SHAPES[config.shape].group == 1:
        return c
    if _k_major(c, config, "b") or not _k_major(c, config, "a"):
        return c
    return replace(c, a=c.b, b=c.a, m=c.n, n=c.m)


def registers_a(c: Contraction, config: MmaConfig) -> bool:
    """Whether the warpgroup tile of ``config`` reads A from registers (tf32 with
    an A tile that is not K-major, and 3xTF32, which splits A there; ``c`` as
    :func:`oriented` gives it)."""
    shape = SHAPES[config.shape]
    if shape.group == 1 or shape.input_type != "tf32":
        return False
    return config.split or not _k_major(c, config, "a")


def warpgroup_problems(c: Contraction, config: MmaConfig) -> list[str]:
    """Why ``config`` (a warpgroup shape) cannot compute contraction ``c`` (as
    :func:`oriented` gives it)."""
    found = []
    if config.copy not in ("async", "tma"):
        found.append("warpgroup MMA tiles are copied by cp.async or TMA (copy 'async' or 'tma')")
    if config.warps_m % 4 or config.warps_n != 1 or config.tiles_m != 1:
        found.append("warpgroup MMA: warps_m a multiple of 4, warps_n = tiles_m = 1")
    n = 8 * config.tiles_n
    if n > MAX_N:
        found.append(f"warpgroup MMA: N = 8·tiles_n = {n} is more than {MAX_N}")
    line = line_elements(config)
    if config.k_step != line:
        found.append(f"warpgroup MMA: k_step {config.k_step} (one 128-byte line: {line})")
    if config.stages < 3:
        found.append(f"warpgroup MMA: stages {config.stages} (3 or 4)")
    if config.padding != -1:
        found.append("warpgroup MMA tiles are swizzled, not padded (padding -1)")
    bm, bn = config.block_tile()
    for which, extent in (("a", bm), ("b", bn)):
        if not _k_major(c, config, which) and extent % line:
            found.append(
                f"warpgroup MMA: the {which.upper()} tile runs along M or N in shared memory,"
                f" so its extent {extent} must be a multiple of {line}"
            )
    if SHAPES[config.shape].input_type == "tf32" and not _k_major(c, config, "b"):
        found.append(
            "tf32 warpgroup MMA: neither operand's stride-1 index is contracted"
            " (the instruction reads tf32 operands K-major only)"
        )
    return found


class WarpGroupBuilder(TileBuilder):
    """The :mod:`.mma_lower` builder with warpgroup MMAs from swizzled shared tiles
    (see the module docstring); ``c`` as :func:`oriented` gives it."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.line = line_elements(self.config)
        self.registers_a = registers_a(self.c, self.config)
        self.split = self.config.split  # 3xTF32: B's low parts in shared "Bl"

    def _load_calls(self) -> dict[str, list[LoadCall]]:
        return {}  # no ldmatrix: the instruction reads shared memory itself

    def operand(self, which: str, current: kir.Expr, ks: int) -> kir.SharedMatrix:
        """The descriptor of the A or B operand of instruction k-step ``ks`` from
        shared buffer ``current`` (``which`` "low": B's low parts, from buffer
        ``current`` of ``Bl``); A starts at the warpgroup's 64 rows."""
        staged = "b" if which == "low" else which  # B's low parts lie as B does
        layout = self.staging[staged]
        k_major = layout.along_k(staged)
        group = E.div(kir.ThreadIdx(), WARPGROUP)
        line = self.line
        start: kir.Expr
        if k_major:  # line = row (M or N), k along the line
            start = E.const(ks)
            if which == "a":
                start = E.add(E.mul(group, E.const(64 * line)), start)
            leading = 16  # unused by the hardware for K-major swizzled operands
        else:  # line = k within each block of a line's rows (M) or columns (N)
            start = E.const(ks * line)
            if which == "a":  # the warpgroup's block of 64 rows
                start = E.add(E.mul(group, E.const(layout.lines * 64)), start)
            leading = layout.lines * kir.SWIZZLE_LINE
        index = E.add(self.buffer(staged, current), start)
        shared = {"a": "As", "b": "Bs", "low": "Bl"}[which]
        return kir.SharedMatrix(shared, index, k_major, leading, ATOM)

    def a_fragments(self, current: kir.Expr) -> list[kir.Stmt]:
        """The lane's A registers of every instruction k-step from shared buffer
        ``current`` (the tf32 m16n8k8 layout of its warp's 16 rows), rounded to tf32;
        3xTF32: the low parts (:meth:`_fragment`) after all the high ones."""
        group, quad = self.lane_group_quad()
        row0, _ = self.warp_bases()
        low = REGISTER_A * (self.bk // self.shape.k)
        stmts: list[kir.Stmt] = []
        for step, ks in enumerate(range(0, self.bk, self.shape.k)):
            for i in range(REGISTER_A):
                r, col = coordinates(self.shape.a, group, quad, i)
                at = self.staging["a"].index(E.add(row0, r), E.add(E.const(ks), col), True)
                value = kir.Load("As", E.add(self.buffer("a", current), at))
                stmts += self._fragment("fa", step * REGISTER_A + i, value, low)
        return stmts

    def low_parts(self, current: kir.Expr, number: kir.Expr) -> list[kir.Stmt]:
        """3xTF32: B's low parts of shared buffer ``current`` (what the tensor
        cores ignore of each element, rounded to tf32) into buffer ``number`` of
        ``Bl``, element by element in B's layout; then the proxy fence that makes
        them visible to the instructions."""
        size = self.buffer_size("b")
        stmts: list[kir.Stmt] = []
        for _, e, share in E.thread_shares(size, self.config.threads):
            value = kir.Load("Bs", E.add(self.buffer("b", current), e))
            store: kir.Stmt = kir.Store(
                "Bl", E.add(self.buffer("b", number), e), kir.Call("ek_tf32_rest", (value,))
            )
            stmts.append(kir.If(share, (store,)) if share is not None else store)
        return [*stmts, kir.ProxyFence()]

    def multiply(self, current: kir.Expr) -> list[kir.Section]:
        """One group of warpgroup MMAs over the k-step from buffer ``current``."""
        n = 8 * self.config.tiles_n
        sections: list[kir.Section] = []
        low = E.mod(E.div(kir.Var("kk"), self.bk), 2)  # 3xTF32: this step's Bl buffer
        if self.split:  # written while the step before's MMAs run (they read the other)
            sections += [kir.PerThread(tuple(self.low_parts(current, low))), kir.Barrier()]
        if self.registers_a:  # the step before's MMAs read the registers refilled here
            fragments = self.promoted() + self.a_fragments(current)
            sections += [kir.WarpGroupWait(0), kir.PerThread(tuple(fragments))]
        sections.append(kir.WarpGroupFence())
        small = REGISTER_A * (self.bk // self.shape.k)  # 3xTF32: A's low parts
        products: list[tuple[kir.Fragment | kir.SharedMatrix, kir.SharedMatrix]] = []
        for step, ks in enumerate(range(0, self.bk, self.shape.k)):
            a: kir.SharedMatrix | kir.Fragment = kir.Fragment("fa", step * REGISTER_A)
            if not self.registers_a:
                a = self.operand("a", current, ks)
            b = self.operand("b", current, ks)
            if self.split:  # the small products first: lo·hi, hi·lo, then hi·hi
                a_low = kir.Fragment("fa", small + step * REGISTER_A)
                products += [(a_low, b), (a, self.operand("low", low, ks))]
            products.append((a, b))
        # 3xTF32: the step's products summed apart ("part", from zero), then added to
        # the accumulators in fp32 (the tensor cores truncate as they accumulate)
        d = kir.Fragment("part" if self.split else "acc", 0)
        for i, (a, b) in enumerate(products):
            first = not (self.split and i == 0)
            sections.append(kir.WarpGroupMma(self.shape.name, n, a, b, d, accumulate=first))
        sections.append(kir.WarpGroupCommit())
        return sections if self.registers_a else [*sections, kir.WarpGroupWait(1)]

    def prologue(self) -> list[kir.Stmt]:
        """3xTF32: the step sums zeroed too (the first step adds them)."""
        zeros = [kir.Store("part", E.const(i), kir.Float(0.0)) for i in range(self._parts())]
        return super().prologue() + zeros

    def completed(self) -> list[kir.Section]:
        """After the k loop: every MMA completed, with A in registers after a
        barrier (each lane's registers are read by the instruction it issued
        before); 3xTF32: the last step's sums added."""
        first = [kir.Barrier()] if self.registers_a else []
        last = [kir.PerThread(tuple(self.promoted()))] if self.split else []
        return [*first, kir.WarpGroupWait(0), *last]

    def tiles_ahead(self) -> int:
        """``stages - 2``: the buffer the MMAs of the step before read stays
        untouched while their group may still be in flight."""
        return self.config.stages - 2

    def landed(self) -> list[kir.Stmt]:
        """The wait, then the copies made visible to the tensor cores."""
        return [*super().landed(), kir.ProxyFence()]

    def drain(self) -> list[kir.Section]:
        """:meth:`completed`, and every copy."""
        return [*self.completed(), *super().drain()]

    def kernel(self) -> kir.Kernel:
        kernel = super().kernel()
        thread_vars = [v for v in kernel.thread_vars if v.name not in ("fa", "fb")]
        if self.registers_a:  # A's registers of every instruction k-step (3xTF32: twice)
            count = REGISTER_A * (self.bk // self.shape.k) * (2 if self.split else 1)
            thread_vars.append(kir.ThreadVar("fa", self.ctype, count))
        shared = [replace(a, align=ATOM) if a.name in ("As", "Bs") else a for a in kernel.shared]
        if self.split:  # B's low parts: two buffers, this step's and the step before's
            size = 2 * self.buffer_size("b")
            shared.insert(2, kir.SharedArray("Bl", self.ctype, size, align=ATOM))
        return replace(kernel, thread_vars=tuple(thread_vars), shared=tuple(shared), min_blocks=1)
