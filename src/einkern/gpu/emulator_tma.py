"""CPU emulation of Hopper's TMA bulk tensor copies and their mbarriers (part of
:mod:`.emulator_c`).

The four statements run inside the thread loops like any per-thread code, acted
on by the emulated thread that reaches them.  Each block keeps, per element of
each shared array of :data:`~.kir.MBARRIER` (the arrays' own storage is not
used), whether it was initialised, its arrival count, its current phase, the
arrivals its current phase still expects and the transaction bytes armed on it;
and one queue of the bulk copies issued and not yet performed (room for
:func:`capacity` copies: more are recorded as ``too many asynchronous copies
in flight`` and dropped).

* :class:`~.kir.BarrierInit` ``(array, index, count)``: phase 0, ``count``
  arrivals expected, no bytes armed.
* :class:`~.kir.BarrierArm` ``(array, index, bytes)``: one arrival, ``bytes``
  more expected; an arrival on a phase that expects none is recorded (on a GPU
  it would race with the phase's completion and count towards the next one).
* :class:`~.kir.TensorCopy`: the destination box is *poisoned* at once (NaN,
  the poison value of its type: a thread that reads it without waiting sees a
  copy still in flight) and the copy queued on its mbarrier with the
  coordinates and destination index the issuing thread computed.  A
  destination whose byte offset from the array's start is not a multiple of 128,
  or an array not declared aligned to 128 bytes, is recorded as ``misaligned``
  (the TMA unit writes 128-byte aligned shared addresses only).
* :class:`~.kir.BarrierWait` ``(array, index, parity)``: when the current phase
  has the parity waited for (``phase % 2 == parity & 1``), the wait completes it
  now: if arrivals are still expected the GPU would hang (recorded as ``wait
  for a barrier phase that never completes``; the emulation then goes on as if
  they had arrived), else every copy queued on the mbarrier is performed, in
  issue order, and the bytes they move (whole boxes, zero-filled elements
  included: :meth:`~.kir.TensorMap.box_bytes`) compared with the bytes armed
  (``transaction bytes armed differ from the bytes copied``); then the phase
  advances (the arrivals expected and bytes armed start again).  When the
  current phase has the other parity, the phase waited for has completed
  already: nothing happens.
* At the end of each block, copies still queued are recorded as ``bulk copies
  never waited for`` (on a GPU they could land after the block exits).
* Using an mbarrier that was never initialised in the block is recorded as
  ``mbarrier used before its initialisation`` (and the statement skipped:
  a copy's destination stays poisoned); an mbarrier index outside its array as
  ``out of bounds``.

Performing a copy of map ``m`` at ``coords`` into ``shared[at ..]``: box element
``L`` (``b0 + box0·(b1 + box1·(b2 ...))``, ``b0`` fastest) comes from global
coordinates ``c_i = coords[i] + b_i``, element ``sum c_i · stride_i`` of the
map's array (through the bounds-checked accessor), or is zero when some ``c_i``
lies outside ``[0, extent_i)``; it lands at byte offset ``o = (at + L) · size``
from the start of the shared array (element ``o / size``, through the
accessor), with a 128-byte swizzle ``o ^= ((o >> 7) & 7) << 4`` — the layout
:mod:`.emulator_wgmma` reads (the arrays are aligned to 1024 bytes).  Any element
type with an accessor (16-bit storage types, float, double, int, long long) is
copied bit for bit.

Limits.  Threads run one after another in each thread loop, so the *first*
waiting thread completes a phase: exact when the thread that arms an mbarrier
and issues its copies runs before the threads that wait for it in the same
thread loop (thread 0 in einkern's kernels); a kernel whose waiting threads come
first is reported as waiting for a phase that never completes.  Copies are
performed as late as a GPU may perform them (at the completing wait), never
earlier, so a thread reading a box without waiting always sees poison, and a
wait whose parity names a phase two or more phases behind the current one
completes the current one (a GPU may hang there or return at once).  The
bytes and arrivals are checked when the phase completes, not as they arrive.
"""

from __future__ import annotations

from ..ir.memo import by_identity
from .ctext import PREFIX, indent
from .kir import (
    ELEMENT_BYTES,
    MBARRIER,
    BarrierArm,
    BarrierInit,
    BarrierWait,
    Kernel,
    SharedArray,
    TensorCopy,
    TensorMap,
    walk,
)

#: Error kinds of this module, numbered from :data:`FIRST_KIND` in
#: :data:`.emulator_c.KINDS` (appended after its own).
KINDS = (
    "wait for a barrier phase that never completes",
    "transaction bytes armed differ from the bytes copied",
    "bulk copies never waited for",
    "mbarrier used before its initialisation",
    "more arrivals on an mbarrier phase than it expects",
)
FIRST_KIND = 3
HANG, BYTES, UNWAITED, UNINITIALISED, EXTRA_ARRIVAL = range(FIRST_KIND, FIRST_KIND + len(KINDS))
OUT_OF_BOUNDS, MISALIGNED, OVERFLOW = 0, 1, 2  # the kinds of :mod:`.emulator_c`
#: Bytes a bulk tensor copy's shared destination is aligned to.
DESTINATION_ALIGNMENT = 128
#: Most queue entries per block (the queue lives on the stack).
MAX_CAPACITY = 4096

Q = f"{PREFIX}tq"  # the queue of bulk copies
MB = f"{PREFIX}mb"  # the mbarrier state
QUEUE_INT = ("site", "bar", "idx", "report")  # int fields of a queue entry
QUEUE_LONG = ("thread", "at")  # long long fields; the coordinates are ``Q_co[n][i]``


@by_identity(maxsize=16)
def sites(kernel: Kernel) -> tuple[TensorCopy, ...]:
    """The kernel's bulk tensor copies in text order (their queue site ids)."""
    return tuple(n for n in walk(kernel.body) if isinstance(n, TensorCopy))


def barriers(kernel: Kernel) -> dict[str, tuple[int, SharedArray]]:
    """Each shared array of mbarriers with the number of its first element in the
    block's mbarrier state."""
    found: dict[str, tuple[int, SharedArray]] = {}
    first = 0
    for a in kernel.shared:
        if a.ctype == MBARRIER:
            found[a.name] = (first, a)
            first += max(1, a.size)
    return found


def _map(kernel: Kernel, name: str) -> TensorMap:
    return {m.name: m for m in kernel.maps}[name]


def _rank(kernel: Kernel) -> int:
    return max([1, *(len(s.coords) for s in sites(kernel))])


@by_identity(maxsize=16)
def capacity(kernel: Kernel) -> int:
    """Queue entries per block: each mbarrier holds the copies of one phase at a
    time, at most its arrivals × the largest bytes armed / the smallest box (or
    one per copy statement, if more), twice over."""
    copies = sites(kernel)
    if not copies:
        return 0
    boxes = [m.box_bytes() for m in kernel.maps if any(s.map == m.name for s in copies)]
    nodes = list(walk(kernel.body))
    armed = max([0, *(n.bytes for n in nodes if isinstance(n, BarrierArm))])
    count = max([1, *(n.count for n in nodes if isinstance(n, BarrierInit))])
    per_phase = max(len(copies), -(-count * armed // max(1, min(boxes, default=1))))
    elements = sum(max(1, a.size) for _, a in barriers(kernel).values())
    return min(MAX_CAPACITY, max(16, 2 * elements * per_phase))


def declarations(kernel: Kernel) -> list[str]:
    """The block's mbarrier state and copy queue (empty: no mbarrier)."""
    count = sum(max(1, a.size) for _, a in barriers(kernel).values())
    if not count:
        return []
    lines = [
        f"int {MB}_init[{count}] = {{0}}, {MB}_count[{count}] = {{0}}, "
        f"{MB}_phase[{count}] = {{0}}, {MB}_left[{count}] = {{0}};",
        f"long long {MB}_armed[{count}] = {{0}};",
    ]
    cap = capacity(kernel)
    if cap:
        lines += [
            *(f"int {Q}_{f}[{cap}];" for f in QUEUE_INT),
            *(f"long long {Q}_{f}[{cap}];" for f in QUEUE_LONG),
            f"long long {Q}_co[{cap}][{_rank(kernel)}];",
            f"int {Q}_len = 0;",
        ]
    return lines


def _site(printer, array: str, access: str) -> int:
    """A new access site of the mbarrier array ``array`` (its records name it)."""
    site, _ = printer._site(printer.array(array), access)
    return site


def _barrier(printer, array: str, index: str, site: int, body: list[str]) -> list[str]:
    """``body`` run with ``ekx_k`` the state slot of mbarrier ``array[index]`` and
    ``ekx_bi`` its index, once the index is checked (an index outside the array
    is recorded at ``site``, the statement skipped)."""
    first, shared = barriers(printer.kernel)[array]
    c, bi, k = f"{PREFIX}c", f"{PREFIX}bi", f"{PREFIX}k"
    return [
        "{",
        f"    const long long {bi} = {index};",
        f"    if ({bi} < 0 || {bi} >= {shared.size}) {{",
        f"        ekx_record({c}, {site}, {bi}, {OUT_OF_BOUNDS});",
        "    } else {",
        f"        const int {k} = {first} + (int){bi};",
        *indent(body, 2),
        "    }",
        "}",
    ]


def _uninitialised(site: int) -> str:
    return f"if (!{MB}_init[{PREFIX}k]) ekx_record({PREFIX}c, {site}, {PREFIX}bi, {UNINITIALISED});"


def init(printer, s: BarrierInit, env: dict[str, str]) -> list[str]:
    k = f"{PREFIX}k"
    index = printer.expr(s.index, env, printer.index_type)
    body = [
        f"{MB}_init[{k}] = 1; {MB}_count[{k}] = {MB}_left[{k}] = {s.count};",
        f"{MB}_phase[{k}] = 0; {MB}_armed[{k}] = 0;",
    ]
    return _barrier(printer, s.array, index, _site(printer, s.array, "mbarrier init"), body)


def arm(printer, s: BarrierArm, env: dict[str, str]) -> list[str]:
    k, c, bi = f"{PREFIX}k", f"{PREFIX}c", f"{PREFIX}bi"
    index = printer.expr(s.index, env, printer.index_type)
    site = _site(printer, s.array, "mbarrier arm")
    body = [
        _uninitialised(site),
        f"else if ({MB}_left[{k}] == 0) ekx_record({c}, {site}, {bi}, {EXTRA_ARRIVAL});",
        f"else {{ --{MB}_left[{k}]; {MB}_armed[{k}] += {s.bytes}LL; }}",
    ]
    return _barrier(printer, s.array, index, site, body)


def _offset(tmap: TensorMap, at: str, box: str) -> list[str]:
    """Lines computing ``ekx_o``, the byte offset of box element ``box`` of a copy
    into shared element ``at``, and ``ekx_e``, its element."""
    size = ELEMENT_BYTES[tmap.ctype]
    o = f"{PREFIX}o"
    lines = [f"long long {o} = ({at} + {box}) * {size}LL;"]
    if tmap.swizzle:
        lines.append(f"{o} ^= (({o} >> 7) & 7) << 4;")
    return [*lines, f"const long long {PREFIX}e = {o} / {size};"]


def issue(printer, s: TensorCopy, tmap: TensorMap, env: dict[str, str], poison: str) -> list[str]:
    """Poison the destination box, check its alignment, queue the copy."""
    shared = printer.array(s.shared)
    target = {a.name: a for a in printer.kernel.shared}[s.shared]
    it, c, k = printer.index_type, f"{PREFIX}c", f"{PREFIX}k"
    at, co, box, e = f"{PREFIX}at", f"{PREFIX}co", f"{PREFIX}l", f"{PREFIX}e"
    size = ELEMENT_BYTES[tmap.ctype]
    coords = ", ".join(f"(long long)({printer.expr(x, env, it)})" for x in s.coords)
    destination, _ = printer._site(shared, "bulk tensor copy")
    misaligned = f"({at} * {size}LL) % {DESTINATION_ALIGNMENT}"
    if target.align % DESTINATION_ALIGNMENT:
        misaligned = "1"  # the array's start may lie anywhere 16 bytes apart
    index = printer.expr(s.barrier_index, env, it)
    n, cap, number = f"{Q}_len", capacity(printer.kernel), sites(printer.kernel).index(s)
    site = _site(printer, s.barrier, "bulk tensor copy")
    queue = [
        _uninitialised(site),
        f"else if ({n} == {cap}) ekx_record({c}, {site}, {PREFIX}bi, {OVERFLOW});",
        "else {",
        f"    {Q}_site[{n}] = {number}; {Q}_bar[{n}] = {k}; {Q}_idx[{n}] = (int){PREFIX}bi;",
        f"    {Q}_report[{n}] = {site}; {Q}_thread[{n}] = {PREFIX}thread; {Q}_at[{n}] = {at};",
        *(f"    {Q}_co[{n}][{i}] = {co}[{i}];" for i in range(len(s.coords))),
        f"    ++{n};",
        "}",
    ]
    queued = _barrier(printer, s.barrier, index, site, queue)
    return [
        "{",
        f"    const long long {at} = {printer.expr(s.shared_index, env, it)};",
        f"    const long long {co}[{len(s.coords)}] = {{{coords}}};",
        f"    if ({misaligned}) ekx_record({c}, {destination}, {at}, {MISALIGNED});",
        f"    for (long long {box} = 0; {box} < {tmap.box_elements()}; ++{box}) {{",
        *indent(_offset(tmap, at, box), 2),
        f"        if ({e} >= 0 && {e} < {shared.size}) {s.shared}[{e}] = {poison};",
        "    }",
        *indent(queued),
        "}",
    ]


def perform(printer, s: TensorCopy) -> list[str]:
    """Code performing a queued copy of ``s`` from coordinates ``ekx_co[i]`` into
    shared element ``ekx_at`` (bounds-checked, as the waiting thread)."""
    tmap = _map(printer.kernel, s.map)
    source, shared = printer.array(tmap.array), printer.array(s.shared)
    at, co, box, rest, inside, g = (f"{PREFIX}{x}" for x in ("at", "co", "l", "rest", "in", "g"))
    lines = [f"for (long long {box} = 0; {box} < {tmap.box_elements()}; ++{box}) {{"]
    body = [f"long long {rest} = {box}, {g} = 0;", f"int {inside} = 1;"]
    for i, d in enumerate(tmap.dims):
        x = f"{PREFIX}x{i}"
        body.append(f"const long long {x} = {co}[{i}] + {rest} % {d.box};")
        if i + 1 < len(tmap.dims):
            body.append(f"{rest} /= {d.box};")
        body += [
            f"{inside} = {inside} && {x} >= 0 && {x} < {d.extent}LL;",
            f"{g} += {x} * {d.stride}LL;",
        ]
    body += _offset(tmap, at, box)
    value = printer.element(source, g, "bulk tensor copy")
    target = printer.element(shared, f"{PREFIX}e", "bulk tensor copy")
    body.append(f"{target} = {inside} ? {value} : ({tmap.ctype})0;")
    return [*lines, *indent(body), "}"]


def wait(printer, s: BarrierWait, env: dict[str, str]) -> list[str]:
    """Complete the mbarrier's current phase if it has the parity waited for."""
    k, c, bi, n = f"{PREFIX}k", f"{PREFIX}c", f"{PREFIX}bi", f"{PREFIX}n"
    keep, done = f"{PREFIX}keep", f"{PREFIX}done"
    it = printer.index_type
    index = printer.expr(s.index, env, it)
    parity = printer.expr(s.parity, env, it)
    cases: list[str] = []
    for number, copy in enumerate(sites(printer.kernel)):
        if copy.barrier != s.array or copy in sites(printer.kernel)[:number]:
            continue
        bytes_ = _map(printer.kernel, copy.map).box_bytes()
        cases += [
            f"case {number}: {{",
            *indent(perform(printer, copy)),
            f"    {done} += {bytes_}LL;",
            "    break;",
            "}",
        ]
    site = _site(printer, s.array, "mbarrier wait")
    complete = [
        f"if ({MB}_left[{k}] > 0) ekx_record({c}, {site}, {bi}, {HANG});",
        f"long long {done} = 0;",
    ]
    if capacity(printer.kernel):
        complete += [
            f"int {keep} = 0;",
            f"for (int {n} = 0; {n} < {Q}_len; ++{n}) {{",
            f"    if ({Q}_bar[{n}] != {k}) {{",
            *(f"        {Q}_{f}[{keep}] = {Q}_{f}[{n}];" for f in (*QUEUE_INT, *QUEUE_LONG)),
            f"        for (int {PREFIX}i = 0; {PREFIX}i < {_rank(printer.kernel)}; ++{PREFIX}i)",
            f"            {Q}_co[{keep}][{PREFIX}i] = {Q}_co[{n}][{PREFIX}i];",
            f"        ++{keep};",
            "        continue;",
            "    }",
            f"    const long long {PREFIX}at = {Q}_at[{n}];",
            f"    const long long *const {PREFIX}co = {Q}_co[{n}];",
            f"    switch ({Q}_site[{n}]) {{",
            *indent(cases),
            "    }",
            "}",
            f"{Q}_len = {keep};",
        ]
    complete += [
        f"if ({MB}_left[{k}] == 0 && {done} != {MB}_armed[{k}])",
        f"    ekx_record({c}, {site}, {bi}, {BYTES});",
        f"++{MB}_phase[{k}]; {MB}_left[{k}] = {MB}_count[{k}]; {MB}_armed[{k}] = 0;",
    ]
    body = [
        _uninitialised(site),
        f"else if (({MB}_phase[{k}] & 1) == (({parity}) & 1)) {{",
        *indent(complete),
        "}",
    ]
    return _barrier(printer, s.array, index, site, body)


def block_end(printer) -> list[str]:
    """Copies still queued when the block ends, recorded (as their issuing thread)."""
    if not capacity(printer.kernel):
        return []
    n, c = f"{PREFIX}n", f"{PREFIX}c"
    return [
        f"for (int {n} = 0; {n} < {Q}_len; ++{n}) {{",
        f"    {c}->thread = {Q}_thread[{n}];",
        f"    ekx_record({c}, {Q}_report[{n}], {Q}_idx[{n}], {UNWAITED});",
        "}",
    ]
