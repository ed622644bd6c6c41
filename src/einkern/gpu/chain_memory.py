"""Which temporaries a block-local chain keeps on chip (:mod:`einkern.gpu.chain`).

A *temporary* (``Tensor.temporary``: a mapped function's local variable, never
passed nor returned) that only the chain's members touch need not reach global
memory: by the chain's legality every member reads only what its own block
produced, so the block's tile of the temporary is all it ever needs.  The tile
lives in shared memory (row-major over the tensor's dimensions, each dimension
as long as the producer's block tile of its index: the fused tile or the whole
extent); the producer's epilogue stores there instead of global memory and
later members load from there (:class:`~einkern.gpu.builder.OnChipArray`;
:func:`einkern.gpu.lower.lower`).  Where a consumer reads another thread's
elements the chain's barrier schedule orders it (:mod:`.chain_barriers`: the
same analysis by tensor name); where it reads its own, the compiler may keep
the value in a register.

:func:`on_chip` keeps a temporary on chip when

* one member writes it, with ``=``, before any member reads it, and no
  statement outside the chain touches it;
* it is ``float32`` or ``float64`` (the shared tile holds the stored value, so
  rounding is the global store's);
* no member stages it or reads it through a view, every member's boundary is
  ``exact`` or ``guard``, and every consumer's access covers the tile as the
  producer does (a parallel index tiled like the producer's at that dimension,
  or a reduction index over a whole dimension);
* the tiles of all the kept temporaries, with the members' own shared memory,
  fit in a block's shared memory (temporaries in chain order; the first that
  does not fit and every later one stay in global memory).
"""

from __future__ import annotations

import math

from ..ir.nodes import Access, Problem
from ..semantics import C_TYPE
from .builder import OnChipArray
from .device import H100, DeviceLimits
from .mapping import Mapping

#: Dtypes whose temporaries a chain may keep on chip.
ON_CHIP_DTYPES = ("float32", "float64")


def _tile(problem: Problem, position: int, mapping: Mapping) -> tuple[int, ...] | None:
    """The producer's block tile of its output, per dimension (None: repeated indices)."""
    statement = problem.program.statements[position]
    indices = statement.output.indices
    if len(set(indices)) != len(indices):
        return None
    return tuple(min(mapping.tile_of(i).tile, problem.index_size(statement, i)) for i in indices)


def _covers(problem: Problem, position: int, mapping: Mapping, access: Access, tile) -> bool:
    """Whether the consumer's ``access`` stays inside the block tile ``tile`` as
    its producer laid it out."""
    statement = problem.program.statements[position]
    if len(set(access.indices)) != len(access.indices):
        return False
    for index, extent in zip(access.indices, tile, strict=True):
        size = problem.index_size(statement, index)
        if index in statement.parallel_indices:
            if min(mapping.tile_of(index).tile, size) != extent:
                return False
        elif extent != size:  # a reduction index runs over the whole dimension
            return False
    return True


def _keepable(
    problem: Problem, order: tuple[int, ...], mappings: dict[int, Mapping], tensor: str
) -> tuple[int, ...] | None:
    """The tile of ``tensor`` when the chain (members in ``order``) may keep it on
    chip, else None (see the module docstring)."""
    program = problem.program
    t = program.tensor(tensor)
    if not t.temporary or t.view_of is not None or t.dtype not in ON_CHIP_DTYPES:
        return None
    if any(v.view_of == tensor for v in program.tensors):
        return None
    members = set(order)
    for position, statement in enumerate(program.statements):
        if position not in members and tensor in statement.tensors():
            return None
    writers = [p for p in order if program.statements[p].output.tensor == tensor]
    if len(writers) != 1 or program.statements[writers[0]].op != "=":
        return None
    producer = writers[0]
    for p in order[: order.index(producer)]:
        if tensor in program.statements[p].tensors():
            return None  # read before it is written
    tile = _tile(problem, producer, mappings[producer])
    if tile is None:
        return None
    for p in order:
        m = mappings[p]
        if m.boundary not in ("exact", "guard"):
            return None
        for access in program.statements[p].reads():
            if access.tensor != tensor:
                continue
            if m.staging_of(str(access)) is not None or not _covers(problem, p, m, access, tile):
                return None
    return tile


def on_chip(
    problem: Problem,
    order: tuple[int, ...],
    mappings: dict[int, Mapping],
    own_shared: int,
    limits: DeviceLimits = H100,
) -> tuple[OnChipArray, ...]:
    """The temporaries the chain (members in ``order``, using ``own_shared`` bytes
    of shared memory themselves) keeps on chip, with their shared block tiles."""
    program = problem.program
    kept: list[OnChipArray] = []
    budget = limits.shared_per_block - own_shared
    for p in order:
        tensor = program.statements[p].output.tensor
        if any(a.tensor == tensor for a in kept):
            continue
        tile = _keepable(problem, order, mappings, tensor)
        if tile is None:
            continue
        dtype = program.tensor(tensor).dtype
        nbytes = math.prod(tile) * program.tensor(tensor).itemsize
        if nbytes > budget:
            break
        budget -= nbytes
        kept.append(OnChipArray(f"oc_{tensor}", tensor, C_TYPE[dtype], tile))
    return tuple(kept)
