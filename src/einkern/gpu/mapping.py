"""The mapping ("recipe"): plain data that fully determines a CUDA kernel for one
statement.  Frozen and JSON-serialisable; ``einkern emit --mapping FILE.json``
reads one.

Vocabulary (Treduda §3.1, MAGMA Table 4.2, R-Stream §4):

* every *parallel* (output) index gets a :class:`ParallelTile`: ``tile``
  elements per thread block, spread over ``threads`` threads, so each thread
  owns ``tile // threads`` elements (its register tile along that index),
  taken *adjacent* (thread t owns t·r … t·r+r−1) or *cyclic* (t, t+threads, …),
  possibly in runs of ``chunk`` adjacent elements (vector loads from shared memory).
  Indices not listed have tile 1 and go to the grid only;
* the block's threads are numbered along ``parallel`` in order (the first entry
  varies fastest: it is threadIdx.x's fastest digit, so it should be the
  output's contiguous index for coalesced stores);
* blocks are numbered along ``grid_order`` (fastest first);
* reduction indices are stepped in ``k_step`` chunks (``reduction_order``
  outermost first); each chunk of every *staged* input is copied to shared
  memory by all threads, coalesced along the input's contiguous index, laid out
  in ``Staging.order`` (innermost first) with ``padding`` extra elements on the
  innermost dimension (bank conflicts), between two barriers;
* ``prefetch`` loads the next chunk into registers while computing the current
  one (Treduda's "preloading", MAGMA's prefetching);
* ``preload_output`` starts the accumulators of an update (``+=``/``-=``) from
  the output's values, read before the reduction instead of after it;
* ``boundary`` says what happens at the edges when tiles do not divide the
  extents: ``guard`` (predicated loads/stores), ``redirect`` (MAGMA's pointer
  redirecting: out-of-range lanes read a clamped, valid element and only the
  store is predicated), ``exact`` (no checks: only valid when every tile
  divides its extent) or ``pad`` (MAGMA's padding: the tensors are copied into
  zero-filled buffers whose extents the tiles divide, the kernel runs exact,
  the output is cropped back);
* ``accumulate`` says how a float32 reduction sums its terms: ``plain`` (one
  accumulator per output), ``blocked`` (a partial per output per k-step chunk,
  added to the accumulator at the chunk's end) or ``wide`` (double
  accumulators); :mod:`einkern.gpu.accumulation` has the rule that picks it.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING

from ..errors import EinkernError
from .mma_config import STRATEGY as MMA
from .mma_config import MmaConfig

if TYPE_CHECKING:
    from ..ir.nodes import Problem, Statement

BOUNDARY_POLICIES = ("guard", "redirect", "exact", "pad")
ACCUMULATIONS = ("plain", "blocked", "wide")


class MappingError(EinkernError):
    """A mapping that does not fit its statement or the device."""


@dataclass(frozen=True)
class ParallelTile:
    """How the block tile of one output index is spread over threads and registers.

    ``cyclic`` with ``chunk`` c: thread t owns runs of c adjacent elements, one
    every ``threads · c`` (t·c … t·c+c−1, then threads·c + t·c …); c = 1 is the
    plain cyclic assignment, and runs of the vector width let a thread read its
    elements from shared memory with vector loads while a warp still covers a
    contiguous stretch.  Not ``cyclic``: thread t owns t·r … t·r+r−1 (adjacent).
    """

    index: str
    tile: int = 1
    threads: int = 1
    cyclic: bool = True
    chunk: int = 1

    @property
    def per_thread(self) -> int:
        return self.tile // self.threads

    def local(self, thread: int, element: int) -> int:
        """Coordinate inside the block tile of the thread's ``element``-th element."""
        if not self.cyclic:
            return thread * self.per_thread + element
        run, within = divmod(element, self.chunk)
        return (run * self.threads + thread) * self.chunk + within


def first_coordinates(
    tiles: tuple[ParallelTile, ...], thread: int, coordinate: dict[str, int]
) -> int:
    """Set in ``coordinate`` the block-tile coordinate of the first element that
    thread number ``thread`` holds of each of ``tiles`` (its digits, the first
    tile's fastest); return the thread number the tiles leave (its next digits)."""
    for tile in tiles:
        digit, thread = thread % tile.threads, thread // tile.threads
        coordinate[tile.index] = tile.local(digit, 0)
    return thread


@dataclass(frozen=True)
class Staging:
    """An input access (written as in the IR, e.g. ``"B[l,j]"``) promoted to shared memory.

    ``order``: the shared tile's dimensions, innermost first (() = the input's
    memory order); ``padding``: elements added to the stride of ``padded``, a
    dimension of ``order`` other than the innermost, and so to every stride
    outside it (``""``: the second of ``order``, i.e. padding each row of the
    innermost dimension)."""

    access: str
    order: tuple[str, ...] = ()
    padding: int = 0
    padded: str = ""


@dataclass(frozen=True)
class Mapping:
    strategy: str
    parallel: tuple[ParallelTile, ...]
    grid_order: tuple[str, ...] = ()
    reduction_order: tuple[str, ...] = ()
    k_step: tuple[tuple[str, int], ...] = ()
    staged: tuple[Staging, ...] = ()
    prefetch: bool = False
    unroll: int = 1
    vector_width: int = 1
    boundary: str = "guard"
    #: Blocks per SM the compiler must make room for (``__launch_bounds__``'s
    #: second argument: it caps registers per thread); 0 leaves it free.
    min_blocks: int = 0
    #: Updates (``+=``/``-=``) of one sum: the accumulators start from the output's
    #: values, loaded before the reduction (their DRAM latency overlaps it), and the
    #: epilogue only stores.  See :func:`einkern.gpu.lower.preload_applies`.
    preload_output: bool = False
    #: Threads along reduction indices (index, threads): each thread sums every
    #: ``threads``-th term of the index (serial groups only), and the partial sums
    #: are combined by a tree in shared memory before the epilogue.  Empty: one
    #: thread per output element sums all its terms.
    reduction_threads: tuple[tuple[str, int], ...] = ()
    #: The reduction threads are threadIdx.x's fastest digits (a warp's lanes walk
    #: the reduction index: coalesced where it is an input's stride-1 index) and
    #: their partial sums combine by warp shuffles; else its slowest digits,
    #: combined by a shared-memory tree.  :mod:`einkern.gpu.reduction_lanes`.
    reduction_fastest: bool = False
    #: Each reduction thread sums runs of this many adjacent terms (vector loads
    #: of the inputs whose stride-1 index the reduction index is).
    reduction_chunk: int = 1
    #: Independent accumulators per output of a reduction thread: its loop takes
    #: this many runs per step, each into its own accumulator (loads in flight).
    accumulators: int = 1
    #: How reductions accumulate (:data:`ACCUMULATIONS`); absent from the JSON form
    #: when ``plain``, so mapping files written before it load unchanged.
    accumulate: str = "plain"
    #: Strategy ``"mma"`` only: the tensor-core kernel's tile shape (the other
    #: fields keep their defaults); absent from the JSON form otherwise.
    mma: MmaConfig | None = None
    #: Two output indices the statement's terms pair under (:mod:`einkern.ir.pairing`):
    #: the block computes the kept terms ``Y`` once for a tile covering both whole,
    #: keeps it in shared memory and writes ``Y ± Y[exchanged]``
    #: (:mod:`einkern.gpu.pair`).  Empty (absent from the JSON form): no pairing.
    pair: tuple[str, ...] = ()
    reasons: tuple[str, ...] = field(default=(), compare=False)

    # -- derived -------------------------------------------------------------

    @property
    def threads(self) -> int:
        """Threads per block: the output tiles' times the reduction threads (the
        warps of a tensor-core kernel)."""
        if self.mma is not None:
            return self.mma.threads
        return self.output_threads * self.combine_threads

    @property
    def output_threads(self) -> int:
        total = 1
        for tile in self.parallel:
            total *= tile.threads
        return total

    @property
    def combine_threads(self) -> int:
        """Threads that share one output element (the reduction threads)."""
        total = 1
        for _, threads in self.reduction_threads:
            total *= threads
        return total

    @property
    def register_tile(self) -> int:
        total = 1
        for tile in self.parallel:
            total *= tile.per_thread
        return total

    def blocks(self, problem: Problem, statement: Statement) -> int:
        """Thread blocks of ``statement``'s kernel under this mapping: one per block
        tile of its output (an index not listed has tile 1)."""
        return math.prod(
            math.ceil(problem.index_size(statement, d) / self.tile_of(d).tile)
            for d in statement.parallel_indices
        )

    def tile_of(self, index: str) -> ParallelTile:
        for tile in self.parallel:
            if tile.index == index:
                return tile
        return ParallelTile(index)

    def step_of(self, index: str, extent: int) -> int:
        for name, step in self.k_step:
            if name == index:
                return min(step, extent)
        return 1

    def staging_of(self, access: str) -> Staging | None:
        for staging in self.staged:
            if staging.access == access:
                return staging
        return None

    # -- serialisation -------------------------------------------------------

    def to_json(self, indent: int | None = 2) -> str:
        data = asdict(self)
        data.pop("reasons")
        if not self.reduction_threads:  # absent: the form of mappings before the field
            data.pop("reduction_threads")
        for name, neutral in (("reduction_fastest", False), ("reduction_chunk", 1)):
            if data[name] == neutral:  # absent when neutral, likewise
                data.pop(name)
        if self.accumulators == 1:
            data.pop("accumulators")
        if self.accumulate == "plain":
            data.pop("accumulate")
        if self.mma is None:
            data.pop("mma")
        else:  # absent when neutral: the form before the fields
            for name, neutral in (("group_m", 1), ("batch_inner", False), ("group_terms", False)):
                if data["mma"].get(name) == neutral:
                    data["mma"].pop(name)
        for staging in data["staged"]:
            if not staging["padded"]:  # absent when neutral: the form before the field
                staging.pop("padded")
        if not self.pair:
            data.pop("pair")
        return json.dumps(data, indent=indent)

    @staticmethod
    def from_json(text: str) -> Mapping:
        try:
            data = json.loads(text)
            return Mapping(
                strategy=str(data["strategy"]),
                parallel=tuple(ParallelTile(**p) for p in data["parallel"]),
                grid_order=tuple(data.get("grid_order", ())),
                reduction_order=tuple(data.get("reduction_order", ())),
                k_step=tuple((str(i), int(s)) for i, s in data.get("k_step", ())),
                staged=tuple(
                    Staging(
                        s["access"],
                        tuple(s.get("order", ())),
                        int(s.get("padding", 0)),
                        str(s.get("padded", "")),
                    )
                    for s in data.get("staged", ())
                ),
                prefetch=bool(data.get("prefetch", False)),
                unroll=int(data.get("unroll", 1)),
                vector_width=int(data.get("vector_width", 1)),
                boundary=str(data.get("boundary", "guard")),
                min_blocks=int(data.get("min_blocks", 0)),
                preload_output=bool(data.get("preload_output", False)),
                reduction_threads=tuple(
                    (str(i), int(t)) for i, t in data.get("reduction_threads", ())
                ),
                reduction_fastest=bool(data.get("reduction_fastest", False)),
                reduction_chunk=int(data.get("reduction_chunk", 1)),
                accumulators=int(data.get("accumulators", 1)),
                accumulate=str(data.get("accumulate", "plain")),
                mma=None if data.get("mma") is None else MmaConfig.from_values(data["mma"]),
                pair=tuple(str(i) for i in data.get("pair", ())),
            )
        except (KeyError, TypeError, ValueError, json.JSONDecodeError) as error:
            raise MappingError(
                f"not a valid mapping: {error}",
                hint="write one with `einkern emit PROGRAM --explain --backend cuda` and edit it",
            ) from None

    def describe(self) -> str:
        """One line per decision, for ``--explain``."""
        if self.mma is not None:
            lines = [f"strategy {MMA}: {self.threads} threads/block, {self.mma.describe()}"]
            lines.extend(f"  why: {reason}" for reason in self.reasons)
            return "\n".join(lines)
        lines = [
            f"strategy {self.strategy}: {self.threads} threads/block, "
            f"{self.register_tile} outputs/thread"
        ]
        if self.pair:
            lines.append(
                f"  paired terms: {' <-> '.join(self.pair)} exchanged, the kept terms "
                "computed once into shared memory"
            )
        for tile in self.parallel:
            how = "cyclic" if tile.cyclic else "adjacent"
            if tile.cyclic and tile.chunk > 1:
                how = f"cyclic in runs of {tile.chunk}"
            lines.append(
                f"  {tile.index}: tile {tile.tile} over {tile.threads} threads "
                f"({tile.per_thread}/thread, {how})"
            )
        if self.grid_order:
            lines.append(f"  grid order (fastest first): {', '.join(self.grid_order)}")
        if self.k_step:
            lines.append("  k-step: " + ", ".join(f"{i}={s}" for i, s in self.k_step))
        if self.reduction_threads:
            parts = ["the fastest thread digits"] if self.reduction_fastest else []
            if self.reduction_chunk > 1:
                parts.append(f"runs of {self.reduction_chunk}")
            if self.accumulators > 1:
                parts.append(f"{self.accumulators} accumulators")
            combine = "by warp shuffles" if self.reduction_fastest else "in shared memory"
            parts.append(f"partial sums combined {combine}")
            lines.append(
                "  reduction threads: "
                + ", ".join(f"{i} over {t}" for i, t in self.reduction_threads)
                + f" ({'; '.join(parts)})"
            )
        for staging in self.staged:
            order = ",".join(staging.order) or "natural"
            where = f" on the stride of {staging.padded}" if staging.padded else ""
            lines.append(
                f"  shared: {staging.access} layout {order} "
                f"padding {staging.padding} elements{where}"
            )
        lines.append(
            f"  prefetch {'on' if self.prefetch else 'off'}, unroll {self.unroll}, "
            f"vector width {self.vector_width}, boundary {self.boundary}"
            + (f", at least {self.min_blocks} blocks/SM" if self.min_blocks else "")
            + (", output preloaded" if self.preload_output else "")
            + (f", {self.accumulate} accumulation" if self.accumulate != "plain" else "")
        )
        lines.extend(f"  why: {reason}" for reason in self.reasons)
        return "\n".join(lines)
