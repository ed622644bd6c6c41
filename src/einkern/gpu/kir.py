"""Kernel IR: a structured GPU kernel that two printers turn into CUDA C and into a
CPU emulation (MCUDA style) running the *same* index arithmetic.

Structure.  A kernel body is a list of *sections*:

* :class:`PerThread` — code every thread of the block runs independently;
* :class:`Uniform` — a loop whose bounds are the same for all threads of a
  block (k-step loops); its body is again a list of sections;
* :class:`Barrier` — ``__syncthreads()``;
* :class:`Mma` — one warp-level ``mma.sync`` per warp (warp-collective: every
  lane's fragment registers are read at once, so it separates per-thread code
  as a barrier does);
* :class:`ShuffleSum` — a butterfly of ``__shfl_xor_sync`` additions inside
  each warp (warp-collective too);
* :class:`LoadMatrix` — ``ldmatrix``: 8×8 matrices of 16-bit elements from shared
  memory into the lanes' fragment registers (warp-collective).

Between two barriers, threads may not communicate.  The CUDA printer emits the
sections in order; the emulator runs each :class:`PerThread` section as a loop
over the block's threads, so two per-thread sections *not* separated by a
barrier are fused into one thread loop: a missing barrier then shows up as a
wrong result, as it would on a GPU.

Variables that live across sections (accumulators, prefetch registers, thread
coordinates) are declared in :attr:`Kernel.thread_vars`; the emulator gives
every thread its own copy.  Shared arrays are per block.

Expressions are small dataclasses; global and shared accesses are explicit
(:class:`Load`, :class:`Store`) so that the emulator can bounds-check every one.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field, fields, is_dataclass, replace
from typing import Any

from ..semantics import C_TYPE, ITEMSIZE

# ---- expressions -------------------------------------------------------------


#: Bytes of each C type a kernel declares (the floating ones from the table of meaning).
ELEMENT_BYTES: dict[str, int] = {
    **{C_TYPE[d]: ITEMSIZE[d] for d in C_TYPE},
    "int": 4,
    "unsigned": 4,  # 32-bit words of two packed 16-bit MMA operands (:class:`LoadMatrix`)
    "long long": 8,
    "unsigned long long": 8,  # mbarriers (:class:`BarrierInit`)
}


@dataclass(frozen=True)
class Var:
    name: str


@dataclass(frozen=True)
class Int:
    value: int


@dataclass(frozen=True)
class Float:
    value: float


@dataclass(frozen=True)
class BlockIdx:
    """``blockIdx.x`` (the grid is one-dimensional in x, or x/y for huge grids)."""

    axis: str = "x"


@dataclass(frozen=True)
class ThreadIdx:
    """``threadIdx.x`` (blocks are one-dimensional; per-index coordinates are decoded)."""


@dataclass(frozen=True)
class Op:
    """Binary operator: ``+ - * / % < <= > >= == != && || min max``."""

    op: str
    left: Expr
    right: Expr


@dataclass(frozen=True)
class Neg:
    operand: Expr


@dataclass(frozen=True)
class Call:
    """Math function (``sqrt exp log fabs sin cos tanh fmax fmin pow``)."""

    func: str
    args: tuple[Expr, ...]


@dataclass(frozen=True)
class Select:
    """``cond ? a : b``."""

    cond: Expr
    if_true: Expr
    if_false: Expr


@dataclass(frozen=True)
class Load:
    """Element ``array[index]``; ``array`` names a kernel parameter (global memory),
    a shared array, or a thread variable (register array)."""

    array: str
    index: Expr


@dataclass(frozen=True)
class Lane:
    """Component ``i`` of a vector variable loaded by :class:`VectorLoad`."""

    vector: str
    lane: int


Expr = Var | Int | Float | BlockIdx | ThreadIdx | Op | Neg | Call | Select | Load | Lane


# ---- statements --------------------------------------------------------------


@dataclass(frozen=True)
class Declare:
    """A local scalar ``ctype name = init;`` (scoped to the enclosing block)."""

    name: str
    ctype: str
    init: Expr | None = None


@dataclass(frozen=True)
class Assign:
    """``name op= value`` for a scalar variable (op ``=``, ``+=``, ``-=``)."""

    name: str
    value: Expr
    op: str = "="


#: :attr:`Store.op` of an atomic addition.
ATOMIC_ADD = "atomic+="


@dataclass(frozen=True)
class Store:
    """``array[index] op= value`` (global, shared or register array).  ``op``
    ``"atomic+="`` adds atomically (``atomicAdd``: the element may be updated by
    other threads and blocks at the same time; float and double only)."""

    array: str
    index: Expr
    value: Expr
    op: str = "="


@dataclass(frozen=True)
class For:
    """``for (int var = start; var < stop; var += step)``; per-thread loop.
    ``unroll``: 0 none, -1 full, n>0 ``#pragma unroll n``."""

    var: str
    start: Expr
    stop: Expr
    step: int
    body: tuple[Stmt, ...]
    unroll: int = 0


@dataclass(frozen=True)
class If:
    cond: Expr
    body: tuple[Stmt, ...]
    orelse: tuple[Stmt, ...] = ()


@dataclass(frozen=True)
class VectorLoad:
    """``width`` consecutive elements ``array[index .. index+width)`` into vector ``name``
    (CUDA: one ``float2/float4/double2`` load; ``index`` is a multiple of ``width``)."""

    name: str
    ctype: str
    array: str
    index: Expr
    width: int


@dataclass(frozen=True)
class Comment:
    text: str


@dataclass(frozen=True)
class CopyAsync:
    """``cp.async``: elements ``array[index .. index + width)`` (global) copied to
    ``shared[shared_index ..]`` without passing through registers, landing only when a
    later :class:`CopyWait` lets its group complete; where ``inside`` is false the
    shared elements are zero-filled and global memory is not read.  ``width`` × the
    element size is 4, 8 or 16 bytes, and both indices are multiples of ``width``
    (16-bit elements are copied 8 at a time: cp.async has no 2-byte copy)."""

    shared: str
    shared_index: Expr
    array: str
    index: Expr
    inside: Expr
    width: int = 1


@dataclass(frozen=True)
class CopyCommit:
    """``cp.async.commit_group``: the thread's copies issued since the last commit
    form one group."""


@dataclass(frozen=True)
class CopyWait:
    """``cp.async.wait_group pending``: wait until at most ``pending`` of the
    thread's most recent groups are incomplete (the older ones have landed)."""

    pending: int


@dataclass(frozen=True)
class ProxyFence:
    """``fence.proxy.async.shared::cta``: the thread's completed writes to shared
    memory become visible to the asynchronous proxy (the tensor cores of a
    :class:`WarpGroupMma`); needed after a :class:`CopyWait` and before the
    barrier that hands the tile to the warpgroups."""


#: The C type of a shared array of mbarriers (:class:`BarrierInit`...).
MBARRIER = "unsigned long long"


@dataclass(frozen=True)
class BarrierInit:
    """``mbarrier.init``: the mbarrier ``array[index]`` (a shared array of
    :data:`MBARRIER`) starts its phase 0, expecting ``count`` arrivals per phase.
    Followed by the fences that make the initialisation visible to the other
    threads (after the next :class:`Barrier`) and to the TMA unit."""

    array: str
    index: Expr
    count: int = 1


@dataclass(frozen=True)
class BarrierArm:
    """``mbarrier.arrive.expect_tx``: one arrival on the mbarrier's current phase,
    which then also waits for ``bytes`` bytes of :class:`TensorCopy` transactions."""

    array: str
    index: Expr
    bytes: int


@dataclass(frozen=True)
class TensorCopy:
    """``cp.async.bulk.tensor``: the TMA unit copies one box of the tensor map
    ``map`` (a :class:`TensorMap` of the kernel), starting at ``coords`` (one per
    map dimension, dimension 0 first; a box reaching past the extents is filled
    with zeros), into ``shared[shared_index ..]`` in the map's swizzled layout,
    and completes its bytes on the mbarrier ``barrier[barrier_index]``.  Issued
    by one thread; the data is visible only to threads that waited
    (:class:`BarrierWait`) for the phase it completes."""

    map: str
    coords: tuple[Expr, ...]
    shared: str
    shared_index: Expr
    barrier: str
    barrier_index: Expr


@dataclass(frozen=True)
class BarrierWait:
    """``mbarrier.try_wait.parity`` in a loop: the thread waits until the phase of
    ``array[index]`` with parity ``parity`` (0 or 1) has completed (returns at once
    when the mbarrier's current phase has the other parity)."""

    array: str
    index: Expr
    parity: Expr


Stmt = (
    Declare
    | Assign
    | Store
    | For
    | If
    | Comment
    | VectorLoad
    | CopyAsync
    | CopyCommit
    | CopyWait
    | ProxyFence
    | BarrierInit
    | BarrierArm
    | TensorCopy
    | BarrierWait
)


# ---- sections ----------------------------------------------------------------


@dataclass(frozen=True)
class PerThread:
    body: tuple[Stmt, ...]


@dataclass(frozen=True)
class Barrier:
    pass


@dataclass(frozen=True)
class Uniform:
    """A loop with block-uniform bounds (``stop`` may use only constants, block
    indices and variables of enclosing uniform loops)."""

    var: str
    start: int
    stop: int
    step: int
    body: tuple[Section, ...]


@dataclass(frozen=True)
class Fragment:
    """A lane's registers of one MMA operand: ``var[first]``, ``var[first + 1]``, ...
    of the thread-variable array ``var`` (as many as the instruction takes), or
    ``var[slots[0]]``, ``var[slots[1]]``, ... where ``slots`` is given (an
    accumulator whose elements another instruction's layout placed)."""

    var: str
    first: int = 0
    slots: tuple[int, ...] = ()

    def register(self, j: int) -> int:
        """The array element of the fragment's register ``j``."""
        return self.slots[j] if self.slots else self.first + j


@dataclass(frozen=True)
class Mma:
    """``D = A·B + C`` by every warp of the block with the instruction
    ``einkern.gpu.mma.SHAPES[shape]``; each lane's operands are fragments of
    thread-variable arrays laid out as that shape's fragment layouts say (``d``
    may be ``c``: accumulate in place).  The block's threads must be whole warps."""

    shape: str
    d: Fragment
    a: Fragment
    b: Fragment
    c: Fragment


@dataclass(frozen=True)
class ShuffleSum:
    """Warp-shuffle sums: for each ``offset`` in order, every lane adds element
    ``i < count`` of the thread-variable array ``var`` of lane ``lane ^ offset``
    to its own (``var[i] += __shfl_xor_sync(mask, var[i], offset)``).  With the
    offsets g/2 … 1 (g a power of two up to 32), every lane of each group of g
    aligned lanes then holds the group's total.  Warp-collective: every thread of
    the block runs it; the block's threads must be fewer than a warp or whole
    warps, and ``lane ^ offset`` a thread of the block."""

    var: str
    count: int
    offsets: tuple[int, ...]


@dataclass(frozen=True)
class LoadMatrix:
    """``ldmatrix.sync.aligned.m8n8.x{count}[.trans].shared.b16``: every warp loads
    ``count`` 8×8 matrices of 16-bit elements from the shared array ``shared``; lane
    ``8·j + r`` (``j < count``) gives, as ``index`` evaluated in that lane, the
    element index of row ``r`` of matrix ``j`` (8 contiguous elements, 16-byte
    aligned).  Lane ``t`` receives, in register ``j`` (a 32-bit word,
    ``d.var[d.first + j]``, thread-variable type ``unsigned``), elements ``2·(t%4)``
    and ``2·(t%4) + 1`` of row ``t/4`` of matrix ``j`` (low half first), or with
    ``trans`` elements ``t/4`` of rows ``2·(t%4)`` and ``2·(t%4) + 1``.
    Warp-collective, like :class:`Mma`."""

    shared: str
    index: Expr
    count: int
    trans: bool
    d: Fragment


#: Bytes per line of a 128-byte-swizzled :class:`SharedMatrix` (64 16-bit or 32
#: tf32 elements).
SWIZZLE_LINE = 128


@dataclass(frozen=True)
class SharedMatrix:
    """An operand of a :class:`WarpGroupMma` in shared memory, in the PTX ISA's
    canonical 128-byte-swizzled layout.  The array is a sequence of 128-byte
    *lines* of ``L`` elements (64 of 16 bits, 32 of tf32); 16-byte chunk ``c`` of
    line ``l`` is stored at chunk ``c ^ (l % 8)`` of that line (lines are grouped
    in 1024-byte atoms).

    ``index`` (evaluated by the warpgroup's first thread) is the element where the
    operand starts.  ``k_major``: element (r, k) of the ``rows × k`` operand (A:
    64 × k; B: n × k, transposed) lies in line ``r`` from the start, ``k``
    elements in (``stride`` bytes from one 8-line group to the next).  Else (M or
    N contiguous, 16-bit types only): element (r, k) lies in line ``k``
    (``stride`` from one 8-line group of k to the next), ``r % L`` elements in,
    plus ``leading`` bytes per ``L`` rows.  The descriptor carries ``leading`` and
    ``stride`` as they are."""

    shared: str
    index: Expr
    k_major: bool
    leading: int
    stride: int


@dataclass(frozen=True)
class WarpGroupMma:
    """``wgmma.mma_async.sync.aligned.m64n{n}k{k}.f32.{type}.{type}``: every
    warpgroup (four consecutive warps from a warp index divisible by 4) adds
    ``A·B`` to its 64 × ``n`` accumulator tile, reading B (k × ``n``) from shared
    memory and A (64 × k) from shared memory or, when ``a`` is a
    :class:`Fragment` (tf32 only), from registers: lane ``t`` of the group's warp
    ``w`` holds element ``i`` of the instruction's A layout (the m16n8k8 tf32 one)
    of rows ``16·w ..`` in ``a.var[a.first + i]``.  Lane ``t`` of warp ``w`` holds,
    in ``d.var[d.first + 4·j + i]``, the accumulator of row ``16·w + r`` and column
    ``8·j + c`` where (r, c) is element ``i`` of the m16n8 accumulator layout
    (``einkern.gpu.mma.C16x8``).  Asynchronous: the operands are read and the
    accumulators written some time before the :class:`WarpGroupWait` that
    completes its group (:class:`WarpGroupCommit`), so neither the accumulators
    nor A's registers may change before it; a :class:`WarpGroupFence` must precede
    the first one after either was written.  ``accumulate`` False (the
    instruction's scale-d 0): ``d`` is set to ``A·B``, its old values ignored."""

    shape: str
    n: int
    a: SharedMatrix | Fragment
    b: SharedMatrix
    d: Fragment
    accumulate: bool = True


@dataclass(frozen=True)
class WarpGroupFence:
    """``wgmma.fence.sync.aligned``: orders the warpgroup's register and shared
    accesses before the following :class:`WarpGroupMma` instructions."""


@dataclass(frozen=True)
class WarpGroupCommit:
    """``wgmma.commit_group.sync.aligned``: the warpgroup's uncommitted
    :class:`WarpGroupMma` instructions form one group."""


@dataclass(frozen=True)
class WarpGroupWait:
    """``wgmma.wait_group.sync.aligned pending``: wait until at most ``pending`` of
    the warpgroup's most recent groups are incomplete."""

    pending: int


Section = (
    PerThread
    | Barrier
    | Uniform
    | Mma
    | ShuffleSum
    | LoadMatrix
    | WarpGroupMma
    | WarpGroupFence
    | WarpGroupCommit
    | WarpGroupWait
)


# ---- declarations ------------------------------------------------------------


@dataclass(frozen=True)
class Param:
    """A kernel parameter: a global array (``ctype`` is the element type) or a scalar."""

    name: str
    ctype: str
    is_array: bool
    size: int = 0  # elements (arrays), for the emulator's bounds checks
    readonly: bool = True
    #: False: a read-only array printed without ``__restrict__``, so that its loads
    #: stay after the barriers written before them (read-only-path loads may be
    #: scheduled far ahead: the product family's pointwise factors spilled so).
    restrict: bool = True


@dataclass(frozen=True)
class ThreadVar:
    """A per-thread variable living across sections: ``ctype name[count]``
    (``count`` 0 means a scalar)."""

    name: str
    ctype: str
    count: int = 0


@dataclass(frozen=True)
class SharedArray:
    name: str
    ctype: str
    size: int
    #: bytes its start is aligned to (1024: the atoms of a :class:`SharedMatrix`)
    align: int = 16


@dataclass(frozen=True)
class MapDim:
    """One dimension of a :class:`TensorMap`: it runs along tensor index ``index``
    (``extent`` elements, ``stride`` elements apart; 1 for dimension 0) and its
    boxes are ``box`` elements long."""

    index: str
    extent: int
    stride: int
    box: int


@dataclass(frozen=True)
class TensorMap:
    """A TMA tensor map (``CUtensorMap``) of the global array parameter ``array``:
    its ``dims`` (dimension 0 first: the contiguous one), boxes of
    ``dims[i].box`` elements, ``swizzle`` bytes of swizzle (128: the layout of a
    :class:`SharedMatrix`), zeros past the extents.  The CUDA kernel takes it as a
    ``__grid_constant__`` parameter ``name`` after the scalars, which the runtime
    encodes for each call from the array's address; the emulation reads the
    array through the same description."""

    name: str
    array: str
    ctype: str
    dims: tuple[MapDim, ...]
    swizzle: int = SWIZZLE_LINE

    def box_elements(self) -> int:
        count = 1
        for d in self.dims:
            count *= d.box
        return count

    def box_bytes(self) -> int:
        """Bytes one :class:`TensorCopy` of this map moves (zero-filled ones too)."""
        return self.box_elements() * ELEMENT_BYTES[self.ctype]


@dataclass(frozen=True)
class Kernel:
    """One ``__global__`` function and its launch shape."""

    name: str
    params: tuple[Param, ...]
    threads: int  # blockDim.x
    blocks: int  # gridDim.x (one-dimensional grid)
    thread_vars: tuple[ThreadVar, ...]
    shared: tuple[SharedArray, ...]
    body: tuple[Section, ...]
    index_type: str = "int"  # "int" or "long long" for > 2^31 elements
    comment: str = ""
    meta: tuple[tuple[str, str], ...] = field(default=())
    min_blocks: int = 0  # __launch_bounds__ minimum blocks per SM (0: none)
    #: TMA tensor maps, parameters after the scalars (:class:`TensorCopy`)
    maps: tuple[TensorMap, ...] = ()

    def shared_bytes(self) -> int:
        return sum(a.size * ELEMENT_BYTES[a.ctype] for a in self.shared)


def walk(node: Any) -> Iterator[Any]:
    """Every kernel IR node under ``node`` (a node or a tuple of them), pre-order."""
    if isinstance(node, tuple):
        for n in node:
            yield from walk(n)
    elif is_dataclass(node) and not isinstance(node, type):
        yield node
        for f in fields(node):
            value = getattr(node, f.name)
            if isinstance(value, tuple) or is_dataclass(value):
                yield from walk(value)


def without_barriers(kernel: Kernel) -> Kernel:
    """The same kernel with every barrier removed (fault injection for tests)."""

    def strip(sections: tuple[Section, ...]) -> tuple[Section, ...]:
        out: list[Section] = []
        for section in sections:
            if isinstance(section, Barrier):
                continue
            if isinstance(section, Uniform):
                section = Uniform(
                    section.var, section.start, section.stop, section.step, strip(section.body)
                )
            out.append(section)
        return tuple(out)

    return replace(kernel, body=strip(kernel.body))
