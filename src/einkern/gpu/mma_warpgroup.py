"""Tensor-core kernels on Hopper's warpgroup MMA (``wgmma``, sm_90a) for bf16/f16
contractions: :class:`WarpGroupBuilder`, a subclass of :class:`~.mma_builder.TileBuilder`.

Kernel shape, for an :class:`~.mma_config.MmaConfig` of a ``wgmma_k16_*`` shape
(``warps_m`` a multiple of 4, ``warps_n`` = ``tiles_m`` = 1, ``k_step`` 64):

* the block's ``warps_m / 4`` warpgroups each own 64 rows of the BM × BN output
  tile; one instruction per warpgroup and 16-wide k-step computes its whole
  64 × BN share (N = BN = ``8 · tiles_n``, at most 256); each warp's
  accumulators are the m16n8 layout's, so :mod:`.mma_epilogue` stores them as
  it stores ``mma.sync`` accumulators (warp ``w`` at rows ``16·w``);
* the operand tiles are staged by 16-byte ``cp.async`` copies into 128-byte
  swizzled lines (:class:`~.mma_staging.Staging` with ``swizzle``), each along
  its operand's own stride-1 index: k-contiguous ("K-major") tiles have one line
  per row, M- or N-contiguous tiles one line per k in blocks of 64 columns, and
  the instruction reads them through shared-memory descriptors
  (:class:`~.kir.SharedMatrix`), transposing the latter;
* the pipeline keeps ``stages - 2`` tiles in flight and one group of MMAs: per
  k-step, wait for the tile, ``fence.proxy.async`` (the copies become visible to
  the tensor cores), a barrier, the copies of the tile ``stages - 2`` steps ahead
  into the buffer the MMAs of two steps ago read (each warpgroup waited for them
  before the barrier), the MMAs, commit, and a wait that leaves this step's
  group in flight.
"""

from __future__ import annotations

from dataclasses import replace

from . import exprs as E
from . import kir
from .contraction import Contraction
from .mma_builder import TileBuilder
from .mma_config import MmaConfig
from .mma_staging import SWIZZLE_ELEMENTS, LoadCall, staging
from .mma_warpgroup_text import ATOM, MAX_N, WARPGROUP

#: k-step of a warpgroup tile: one 128-byte line of 16-bit elements along k.
K_STEP = SWIZZLE_ELEMENTS


def warpgroup_problems(c: Contraction, config: MmaConfig) -> list[str]:
    """Why ``config`` (a warpgroup shape) cannot compute contraction ``c``."""
    found = []
    if config.copy not in ("async", "tma"):
        found.append("warpgroup MMA tiles are copied by cp.async or TMA (copy 'async' or 'tma')")
    if config.warps_m % 4 or config.warps_n != 1 or config.tiles_m != 1:
        found.append("warpgroup MMA: warps_m a multiple of 4, warps_n = tiles_m = 1")
    n = 8 * config.tiles_n
    if n > MAX_N:
        found.append(f"warpgroup MMA: N = 8·tiles_n = {n} is more than {MAX_N}")
    if config.k_step != K_STEP:
        found.append(f"warpgroup MMA: k_step {config.k_step} (one 128-byte line: {K_STEP})")
    if config.stages < 3:
        found.append(f"warpgroup MMA: stages {config.stages} (3 or 4)")
    if config.padding != -1:
        found.append("warpgroup MMA tiles are swizzled, not padded (padding -1)")
    bm, bn = config.block_tile()
    for which, extent in (("a", bm), ("b", bn)):
        if not staging(c, config, which).along_k(which) and extent % SWIZZLE_ELEMENTS:
            found.append(
                f"warpgroup MMA: the {which.upper()} tile runs along M or N in shared memory,"
                f" so its extent {extent} must be a multiple of {SWIZZLE_ELEMENTS}"
            )
    return found


class WarpGroupBuilder(TileBuilder):
    """The :mod:`.mma_lower` builder with warpgroup MMAs from swizzled shared tiles
    (see the module docstring)."""

    def _load_calls(self) -> dict[str, list[LoadCall]]:
        return {}  # no ldmatrix: the instruction reads shared memory itself

    def operand(self, which: str, current: kir.Expr, ks: int) -> kir.SharedMatrix:
        """The descriptor of the A or B operand of instruction k-step ``ks`` from
        shared buffer ``current``; A starts at the warpgroup's 64 rows."""
        layout = self.staging[which]
        k_major = layout.along_k(which)
        group = E.div(kir.ThreadIdx(), WARPGROUP)
        start: kir.Expr
        if k_major:  # line = row (M or N), k along the line: 2 bytes per k
            start = E.const(ks)
            if which == "a":
                start = E.add(E.mul(group, E.const(64 * SWIZZLE_ELEMENTS)), start)
            leading = 16  # unused by the hardware for K-major swizzled operands
        else:  # line = k within each block of 64 rows (M) or columns (N)
            start = E.const(ks * SWIZZLE_ELEMENTS)
            if which == "a":  # the warpgroup's block of 64 rows
                start = E.add(E.mul(group, E.const(layout.lines * SWIZZLE_ELEMENTS)), start)
            leading = layout.lines * kir.SWIZZLE_LINE
        index = E.add(self.buffer(which, current), start)
        shared = "As" if which == "a" else "Bs"
        return kir.SharedMatrix(shared, index, k_major, leading, ATOM)

    def multiply(self, current: kir.Expr) -> list[kir.Section]:
        """One group of warpgroup MMAs over the k-step from buffer ``current``."""
        n = 8 * self.config.tiles_n
        acc = kir.Fragment("acc", 0)
        sections: list[kir.Section] = [kir.WarpGroupFence()]
        for ks in range(0, self.bk, self.shape.k):
            a, b = self.operand("a", current, ks), self.operand("b", current, ks)
            sections.append(kir.WarpGroupMma(self.shape.name, n, a, b, acc))
        return [*sections, kir.WarpGroupCommit(), kir.WarpGroupWait(1)]

    def tiles_ahead(self) -> int:
        """``stages - 2``: the buffer the MMAs of the step before read stays
        untouched while their group may still be in flight."""
        return self.config.stages - 2

    def landed(self) -> list[kir.Stmt]:
        """The wait, then the copies made visible to the tensor cores."""
        return [*super().landed(), kir.ProxyFence()]

    def drain(self) -> list[kir.Section]:
        return [kir.WarpGroupWait(0), *super().drain()]

    def kernel(self) -> kir.Kernel:
        kernel = super().kernel()
        return replace(
            kernel,
            thread_vars=tuple(v for v in kernel.thread_vars if v.name not in ("fa", "fb")),
            shared=tuple(
                replace(a, align=ATOM) if a.name in ("As", "Bs") else a for a in kernel.shared
            ),
            min_blocks=1,
        )
