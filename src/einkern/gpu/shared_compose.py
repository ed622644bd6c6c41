"""Kernel IR composition: members lowered alone run one after the other in every
block of one kernel, their names prefixed so that nothing clashes.

* :func:`compose` (:mod:`einkern.gpu.shared_input`): members whose mappings
  share one staged tile of an input; the first stages it, the later ones drop
  their copy and read the first one's tile.
* :func:`chain` (:mod:`einkern.gpu.chain`): dependent members, a barrier
  between consecutive ones where a dependence crosses threads; the block has
  the most threads of any member, and a member with fewer runs its per-thread
  code on the first threads only.

Pure functions over :mod:`einkern.gpu.kir`."""

from __future__ import annotations

from dataclasses import fields, is_dataclass, replace
from typing import Any

from . import exprs as E
from . import kir

_NAME_FIELDS = ("name", "var", "array", "vector", "shared")


def _rename(node: Any, names: dict[str, str]) -> Any:
    """``node`` with every name field found in ``names`` replaced (a pure walk)."""
    if isinstance(node, tuple):
        return tuple(_rename(n, names) for n in node)
    if not is_dataclass(node) or isinstance(node, type):
        return node
    changes = {}
    for f in fields(node):
        value = getattr(node, f.name)
        if f.name in _NAME_FIELDS and isinstance(value, str):
            new = names.get(value, value)
        elif isinstance(value, tuple) or is_dataclass(value):
            new = _rename(value, names)
        else:
            continue
        if new is not value:
            changes[f.name] = new
    return replace(node, **changes) if changes else node


def _local_names(kernel: kir.Kernel) -> set[str]:
    names = {v.name for v in kernel.thread_vars} | {a.name for a in kernel.shared}
    for node in kir.walk(kernel.body):
        if isinstance(node, kir.Declare | kir.VectorLoad):
            names.add(node.name)
        elif isinstance(node, kir.For | kir.Uniform):
            names.add(node.var)
    return names


def staged_array(kernel: kir.Kernel, tensor: str) -> str:
    """The shared array that ``kernel`` fills from global ``tensor`` (exactly one)."""
    param = f"p_{tensor}"
    vectors = {
        n.name for n in kir.walk(kernel.body) if isinstance(n, kir.VectorLoad) and n.array == param
    }
    shared = {a.name for a in kernel.shared}
    found = set()
    for node in kir.walk(kernel.body):
        if isinstance(node, kir.Store) and node.array in shared:
            reads = list(kir.walk(node.value))
            if any(isinstance(r, kir.Load) and r.array == param for r in reads) or any(
                isinstance(r, kir.Lane) and r.vector in vectors for r in reads
            ):
                found.add(node.array)
    if len(found) != 1:
        raise ValueError(f"{kernel.name}: {len(found)} shared arrays hold {tensor}")
    return found.pop()


def _drop_copies(stmts: tuple, array: str) -> tuple:
    """Statements without the stores into ``array`` and what only fed them."""
    out: list = []
    for s in stmts:
        if isinstance(s, kir.Store) and s.array == array:
            continue
        if isinstance(s, kir.If):
            body, orelse = _drop_copies(s.body, array), _drop_copies(s.orelse, array)
            if not body and not orelse:
                continue
            s = replace(s, body=body, orelse=orelse)
        elif isinstance(s, kir.For):
            s = replace(s, body=_drop_copies(s.body, array))
        out.append(s)
    used = {n.vector for n in kir.walk(tuple(out)) if isinstance(n, kir.Lane)}
    return tuple(s for s in out if not (isinstance(s, kir.VectorLoad) and s.name not in used))


def _drop_sections(sections: tuple, array: str) -> tuple:
    out: list = []
    for section in sections:
        if isinstance(section, kir.PerThread):
            body = _drop_copies(section.body, array)
            if not body:
                continue
            section = kir.PerThread(body)
        elif isinstance(section, kir.Uniform):
            section = replace(section, body=_drop_sections(section.body, array))
        out.append(section)
    return tuple(out)


def _merged_params(kernels: list[kir.Kernel]) -> tuple[kir.Param, ...]:
    """The members' parameters, each once (read-only only when every member only
    reads it), arrays first in order of appearance, then scalars."""
    params: dict[str, kir.Param] = {}
    for kernel in kernels:
        for p in kernel.params:
            known = params.get(p.name)
            params[p.name] = replace(p, readonly=p.readonly and (known is None or known.readonly))
    return tuple(sorted(params.values(), key=lambda p: not p.is_array))


def compose(kernels: list[kir.Kernel], tensor: str, name: str) -> kir.Kernel:
    """One kernel running ``kernels`` (lowered under mappings that
    :func:`why_not_shared` accepts) one after the other in every block, the first
    staging ``tensor`` and the others reading its shared tile."""
    first = kernels[0]
    if any((k.threads, k.blocks) != (first.threads, first.blocks) for k in kernels):
        raise ValueError("the members' launch shapes differ")
    tile = staged_array(first, tensor)
    size = next(a for a in first.shared if a.name == tile)
    thread_vars = list(first.thread_vars)
    shared = list(first.shared)
    body = list(first.body)
    for number, kernel in enumerate(kernels[1:], start=1):
        own = staged_array(kernel, tensor)
        if next(a for a in kernel.shared if a.name == own).size != size.size:
            raise ValueError(f"{kernel.name}: its tile of {tensor} has another size")
        names = {n: f"m{number}_{n}" for n in _local_names(kernel)}
        names[own] = tile
        thread_vars += _rename(kernel.thread_vars, names)
        shared += [_rename(a, names) for a in kernel.shared if a.name != own]
        body += _drop_sections(_rename(kernel.body, names), tile)
    return kir.Kernel(
        name=name,
        params=_merged_params(kernels),
        threads=first.threads,
        blocks=first.blocks,
        thread_vars=tuple(thread_vars),
        shared=tuple(shared),
        body=tuple(body),
        index_type=max((k.index_type for k in kernels), key=len),
        comment="; ".join(k.comment for k in kernels) + f"  [{tensor} staged once]",
        meta=first.meta,
    )


def _on_first_threads(sections: tuple, threads: int, launch: int) -> tuple:
    """``sections`` with every per-thread statement run by the first ``threads``
    threads only (all of them when ``threads`` is the launch's); barriers and
    block-uniform loops stay block-wide."""
    if threads == launch:
        return sections
    cond = E.less(kir.ThreadIdx(), E.const(threads))
    out: list = []
    for section in sections:
        if isinstance(section, kir.PerThread):
            section = kir.PerThread((kir.If(cond, section.body),))
        elif isinstance(section, kir.Uniform):
            section = replace(section, body=_on_first_threads(section.body, threads, launch))
        elif not isinstance(section, kir.Barrier):
            raise ValueError(f"a warp-collective section on fewer threads: {section!r}")
        out.append(section)
    return tuple(out)


def chain(
    kernels: list[kir.Kernel],
    name: str,
    barriers: tuple[bool, ...] | None = None,
    common: tuple[kir.SharedArray, ...] = (),
) -> kir.Kernel:
    """One kernel running ``kernels`` (lowered under mappings that
    :func:`einkern.gpu.chain.why_not_chain` accepts: the same blocks) one after
    the other in every block, a barrier before each later one where ``barriers``
    (one flag per later member; all when None) says so.  ``common``: shared
    arrays the members use under these names (declared by none of them: the
    on-chip temporaries of :mod:`einkern.gpu.chain_memory`)."""
    first = kernels[0]
    if barriers is None:
        barriers = (True,) * (len(kernels) - 1)
    if len(barriers) != len(kernels) - 1:
        raise ValueError("one barrier flag per member after the first")
    if any(k.blocks != first.blocks for k in kernels):
        raise ValueError("the members' grids differ")
    launch = max(k.threads for k in kernels)
    thread_vars: list = []
    shared: list = list(common)
    body: list = []
    for number, kernel in enumerate(kernels):
        names = {n: f"m{number}_{n}" for n in _local_names(kernel)}
        thread_vars += _rename(kernel.thread_vars, names)
        shared += [_rename(a, names) for a in kernel.shared]
        if number and barriers[number - 1]:
            body.append(kir.Barrier())
        body += _on_first_threads(_rename(kernel.body, names), kernel.threads, launch)
    return kir.Kernel(
        name=name,
        params=_merged_params(kernels),
        threads=launch,
        blocks=first.blocks,
        thread_vars=tuple(thread_vars),
        shared=tuple(shared),
        body=tuple(body),
        index_type=max((k.index_type for k in kernels), key=len),
        comment="; ".join(k.comment for k in kernels)
        + f"  [chained in each block, {sum(barriers)} barrier(s)]",
        meta=first.meta,
        min_blocks=max(k.min_blocks for k in kernels),
    )
