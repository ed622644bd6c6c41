"""The kernel builder: the state of one kernel while lowering builds it.

Lowering a :class:`~einkern.ir.task.Task` under a
:class:`~einkern.gpu.mapping.Mapping` is a sequence of passes over one
:class:`KernelBuilder` (see :mod:`einkern.gpu.lower`): the prologue, one
reduction section per accumulator group (serial, or staged through shared
memory: :mod:`einkern.gpu.staging`), the epilogue.  Each pass returns the kernel
statements or sections it emits and declares what else the kernel needs on the
builder: per-thread variables (:attr:`KernelBuilder.thread_vars`), shared arrays
(:attr:`KernelBuilder.shared`) and staged tiles
(:attr:`KernelBuilder.staged_arrays`, which later loads read from).

The builder also answers the questions every pass asks: the size of an index,
a fresh name, where element ``slot`` of a thread's register tile lies (block
base + thread coordinate), whether an output index's tiles overhang its extent.
A :class:`Context` says where index values come from while one expression is
emitted.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from .. import semantics
from ..ir.nodes import Access
from ..ir.task import Task
from ..semantics import C_TYPE
from . import exprs as E
from . import kir
from .mapping import Mapping
from .normalize import Group, reduction_of


def compute_dtype(task: Task) -> str:
    """The dtype the task's statement computes in (:func:`einkern.semantics.compute_dtype`)."""
    statement = task.statement
    dtype = task.program.tensor
    return semantics.compute_dtype(
        dtype(statement.output.tensor).dtype, [dtype(a.tensor).dtype for a in statement.reads()]
    )


@dataclass
class Context:
    """Where the values of indices come from while emitting one expression, and
    the statements emitted so far for it (``memo``: loads already emitted)."""

    coords: dict[str, kir.Expr]  # global coordinate of each index
    local: dict[str, kir.Expr]  # coordinate inside the block tile / k chunk (staged reads)
    statements: list = field(default_factory=list)
    memo: dict = field(default_factory=dict)


def layout_strides(
    order: tuple[str, ...], extent: dict[str, int], padding: int = 0, padded: str = ""
) -> tuple[dict[str, int], int]:
    """The strides of a shared tile with dimensions ``order`` (innermost first) of
    ``extent`` elements, ``padding`` elements added to the stride of ``padded``
    (``""``: the second dimension, padding each innermost row), and the tile's
    size in elements."""
    padded = padded or (order[1] if len(order) > 1 else "")
    strides: dict[str, int] = {}
    step = 1
    for index in order:
        if index == padded and index != order[0]:
            step += padding
        strides[index] = step
        step *= extent[index]
    if len(order) == 1:  # one dimension: the padding ends it, as before
        step += padding
    return strides, step


@dataclass(frozen=True)
class StagedArray:
    """A staged tile: shared array ``name`` holding ``access`` over ``extents``
    (layout: :func:`layout_strides` of ``order``, ``padding`` and ``padded``)."""

    name: str
    access: Access
    order: tuple[str, ...]  # innermost first
    extents: tuple[tuple[str, int], ...]
    padding: int
    padded: str = ""

    def extent(self, index: str) -> int:
        return dict(self.extents)[index]

    def strides(self) -> dict[str, int]:
        return layout_strides(self.order, dict(self.extents), self.padding, self.padded)[0]

    def size(self) -> int:
        return layout_strides(self.order, dict(self.extents), self.padding, self.padded)[1]

    def offset(self, local: dict[str, kir.Expr]) -> kir.Expr:
        strides = self.strides()
        return E.linear([(local[i], strides[i]) for i in self.order])


class KernelBuilder:
    """One kernel being built for a one-statement ``task`` under ``mapping``.

    Fixed at the start: the task, its problem and statement, the mapping, the
    kernel's ``name``, the ``dtype`` it computes in and its C type ``ctype``, the
    ``index_type`` of offsets (``int`` or ``long long``), ``preload`` (+1/-1:
    accumulate onto the preloaded output with this sign; 0: no preload), the
    statement's reduction groups, its output indices (``parallel``) with their
    tiles, the grid order, the threads per block and the register-tile slots.

    Grown by the passes: ``thread_vars`` (per-thread variables, declared in the
    order added), ``shared`` (shared arrays), ``staged_arrays`` (``(group,
    access text)`` → :class:`StagedArray`) and the counter behind :meth:`fresh`.
    """

    def __init__(
        self, task: Task, mapping: Mapping, name: str, dtype: str, index_type: str, preload: int
    ):
        self.task = task
        self.problem = task.problem
        self.program = task.problem.program
        self.statement = task.statement
        self.mapping = mapping
        self.name = name
        self.dtype = dtype
        self.ctype = C_TYPE[dtype]
        self.index_type = index_type
        self.preload = preload
        self.reduction = reduction_of(self.statement)
        self.parallel = self.statement.parallel_indices
        self.tiles = {d: mapping.tile_of(d) for d in self.parallel}
        order = [d for d in mapping.grid_order if d in self.parallel]
        self.grid_order = order + [d for d in self.parallel if d not in order]
        self.thread_order = [t.index for t in mapping.parallel if t.threads > 1]
        self.nthreads = mapping.threads
        self.slots = register_slots(mapping)
        self.counter = 0
        self.thread_vars: list[kir.ThreadVar] = []
        self.shared: list[kir.SharedArray] = []
        self.staged_arrays: dict[tuple[int, str], StagedArray] = {}
        #: temporaries kept on chip (tensor name -> its block tile in shared memory)
        self.on_chip: dict[str, OnChipArray] = {}

    # -- names and sizes ---------------------------------------------------------

    def size(self, index: str) -> int:
        """Size of one of the statement's indices."""
        return self.problem.index_size(self.statement, index)

    def fresh(self, prefix: str) -> str:
        """A new name: ``prefix`` and the next number."""
        self.counter += 1
        return f"{prefix}{self.counter}"

    def blocks(self) -> int:
        """Thread blocks of the kernel: one per block tile of the output."""
        return math.prod(math.ceil(self.size(d) / self.tiles[d].tile) for d in self.parallel)

    # -- coordinates -------------------------------------------------------------

    def local_coord(self, index: str, slot: dict[str, int]) -> kir.Expr:
        """Coordinate of register-tile element ``slot`` inside the block tile."""
        tile = self.tiles[index]
        j = slot.get(index, 0)
        if tile.threads == 1:
            return E.const(j)
        # ParallelTile.local is affine in the thread: its element j lies at
        # t · (thread's step) + (where thread 0's element j lies)
        step = tile.local(1, 0) - tile.local(0, 0)
        return E.add(E.mul(kir.Var(f"t_{index}"), E.const(step)), E.const(tile.local(0, j)))

    def global_coord(self, index: str, slot: dict[str, int]) -> kir.Expr:
        """Coordinate of register-tile element ``slot`` in the output."""
        return E.add(kir.Var(f"b_{index}"), self.local_coord(index, slot))

    def ragged(self, index: str) -> bool:
        """True when the output index's block tiles overhang its extent."""
        return self.size(index) % self.tiles[index].tile != 0

    def group_indices(self, group: Group) -> list[str]:
        """A group's reduction indices, in the mapping's reduction order."""
        order = [i for i in self.mapping.reduction_order if i in group.indices]
        return order + [i for i in group.indices if i not in order]

    def slot_context(self, slot: dict[str, int], ctx: Context | None = None) -> Context:
        """The context of register-tile element ``slot``: output indices at its
        coordinates, the other indices (and the emitted statements) from ``ctx``."""
        coords = {d: self.global_coord(d, slot) for d in self.parallel}
        local = {d: self.local_coord(d, slot) for d in self.parallel}
        if ctx is not None:
            coords.update({k: v for k, v in ctx.coords.items() if k not in self.parallel})
            local.update({k: v for k, v in ctx.local.items() if k not in self.parallel})
            return Context(coords, local, ctx.statements, ctx.memo)
        return Context(coords, local)


@dataclass(frozen=True)
class OnChipArray:
    """A temporary a block-local chain keeps on chip: shared array ``name`` holds the
    block's tile of ``tensor`` (``extents`` along its dimensions, row-major), which
    one member writes instead of global memory and later members read.
    ``padding``: elements appended to each row of the innermost dimension (a row
    read across threads at a stride of whole rows then spreads over the banks)."""

    name: str
    tensor: str
    ctype: str
    extents: tuple[int, ...]
    padding: int = 0

    @property
    def size(self) -> int:
        return math.prod(self._rows())

    def _rows(self) -> tuple[int, ...]:
        if not self.extents:
            return ()
        return (*self.extents[:-1], self.extents[-1] + self.padding)

    def strides(self) -> tuple[int, ...]:
        strides, step = [], 1
        for extent in reversed(self._rows()):
            strides.append(step)
            step *= extent
        return tuple(reversed(strides))


def register_slots(mapping: Mapping) -> list[dict[str, int]]:
    """Register-tile elements: for each, the slot number j along every output index."""
    ranges = [(t.index, t.per_thread) for t in mapping.parallel if t.per_thread > 1]
    slots: list[dict[str, int]] = [{}]
    for index, count in ranges:  # first listed index varies fastest
        slots = [{**s, index: j} for j in range(count) for s in slots]
    return slots
