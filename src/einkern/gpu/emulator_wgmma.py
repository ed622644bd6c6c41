"""CPU emulation of Hopper's warpgroup MMA sections (part of :mod:`.emulator_c`).

The sections run inside the thread loops like per-thread code (they do not
synchronise the block), acted on by the first thread of each warpgroup when it
reaches them.  A :class:`~.kir.WarpGroupMma` is *queued*: the site, the
warpgroup and the start indices of its two shared operands, tagged with the
number of groups the warpgroup has committed so far.  A
:class:`~.kir.WarpGroupCommit` closes the group; a :class:`~.kir.WarpGroupWait`
with ``pending`` runs, in issue order, every queued instruction of the
warpgroup's groups older than its newest ``pending`` and drops them.  So an
instruction reads shared memory and writes the accumulators of all 128 lanes
when it completes, not when it is issued: a kernel that overwrites a tile before
the wait that covers its readers, reads the accumulators without a wait, or
lets the instructions read a tile before a barrier made every thread's copies
land, computes a wrong result here as it may on a GPU.

Running one instruction: A (64 × k) and B (k × N) are gathered from shared
memory by the canonical 128-byte-swizzled layouts of the PTX ISA (the byte
offset from the array's start, whose 16-byte chunk bits 4–6 are XORed with its
line bits 7–9; the arrays are aligned to 1024 bytes), each element through the
bounds-checked accessor; a start off 16-byte alignment is recorded as
``misaligned`` (the descriptor cannot express it).  tf32 elements read from
shared memory are truncated to tf32 (their low 13 bits ignored, as the tensor
cores read a 32-bit word as tf32).  Products are exact, the sum in double,
truncated once to float (the tensor cores round their float32 sums toward
zero), and each lane's accumulators are read (unless the
instruction's ``accumulate`` is off) and written by the m16n8 layout of its
warp's 16 rows.

A from registers (tf32): every lane, as it passes the section, copies its four
registers into the queue entry its leader made (the leader runs first in the
thread loop).  The instruction reads that copy when it completes; it records
an error when not all 128 lanes had passed the section by then (issue and wait
in one thread loop: no barrier between them, so this emulation cannot see the
registers; the kernels put one there) or when a lane's registers differ from
the copy at that time (they changed before the wait that completes the
instruction: the GPU may have read either)."""

from __future__ import annotations

from ..ir.memo import by_identity
from . import emulator_tma
from .ctext import PREFIX, indent
from .kir import ELEMENT_BYTES, SWIZZLE_LINE, Fragment, Kernel, SharedMatrix, WarpGroupMma, walk
from .mma import SHAPES
from .mma_warpgroup_text import REGISTER_A, WARPGROUP, check_warpgroup_mma

QUEUE = ("site", "group", "wg")  # int fields of a queue entry; "a", "b" are long long
#: Error kinds of this module, numbered from :data:`FIRST_KIND` in
#: :data:`.emulator_c.KINDS` (after :mod:`.emulator_tma`'s).
KINDS = (
    "register operand of a warpgroup MMA read before every lane issued it",
    "registers of a warpgroup MMA operand changed before the wait that completes it",
    "shared operand of a warpgroup MMA written between its issue and its completion",
    "shared memory stored by a thread and read by a warpgroup MMA without a proxy fence",
)
FIRST_KIND = emulator_tma.FIRST_KIND + len(emulator_tma.KINDS)
UNISSUED, CHANGED, WRITTEN, NO_FENCE = (FIRST_KIND + i for i in range(4))
RA, LANES, LAST = f"{PREFIX}wq_ra", f"{PREFIX}wq_lanes", f"{PREFIX}wq_last"


@by_identity(maxsize=16)
def sites(kernel: Kernel) -> tuple[WarpGroupMma, ...]:
    """The kernel's warpgroup MMA sections in text order (their queue site ids)."""
    return tuple(n for n in walk(kernel.body) if isinstance(n, WarpGroupMma))


def shared_operands(kernel: Kernel) -> set[str]:
    """The shared arrays that warpgroup MMAs of ``kernel`` read."""
    return {o.shared for s in sites(kernel) for o in (s.a, s.b) if isinstance(o, SharedMatrix)}


UNFENCED = f"{PREFIX}unfenced"


def unfenced(stored: bool) -> str:
    """The thread's mark of stores into MMA operands since its last proxy fence
    (set by such a store, cleared by ``fence.proxy.async``): the tensor cores
    read shared memory through the asynchronous proxy, which sees a thread's
    stores only after that fence (TMA copies are in that proxy already; a
    ``cp.async`` tile's fence follows its wait, which this mark does not follow)."""
    return f"{UNFENCED}[{PREFIX}thread] = {int(stored)};"


def _capacity(kernel: Kernel) -> int:
    """Queue entries per block: each site issued four times per warpgroup."""
    return 4 * len(sites(kernel)) * (kernel.threads // WARPGROUP)


def _registers(kernel: Kernel) -> bool:
    """Whether some warpgroup MMA of ``kernel`` takes A from registers."""
    return any(isinstance(s.a, Fragment) for s in sites(kernel))


def queue_declarations(kernel: Kernel) -> list[str]:
    """The per-block queue of issued, incomplete warpgroup MMAs and each
    warpgroup's count of committed groups (empty: no warpgroup MMA); with A in
    registers, each entry's copy of them, the lanes that made it, and each
    warpgroup's newest entry per site."""
    if not sites(kernel):
        return []
    groups, cap = kernel.threads // WARPGROUP, _capacity(kernel)
    q = f"{PREFIX}wq"
    lines = [
        *(f"int {q}_{f}[{cap}];" for f in QUEUE),
        f"long long {q}_a[{cap}], {q}_b[{cap}];",
        f"unsigned long long {q}_sum[{cap}];",
        f"int {q}_len = 0, {q}_committed[{groups}] = {{0}};",
        f"char {UNFENCED}[{kernel.threads}] = {{0}};",
    ]
    if _registers(kernel):
        lines += [
            f"float {RA}[{cap}][{WARPGROUP * REGISTER_A}];",
            f"int {LANES}[{cap}], {LAST}[{groups * len(sites(kernel))}];",
        ]
    return lines


def _leader(lines: list[str]) -> list[str]:
    """``lines`` run by the first thread of each warpgroup, as ``ekx_g``."""
    thread = f"{PREFIX}thread"
    return [
        f"if ({thread} % {WARPGROUP} == 0) {{",
        f"    const int {PREFIX}g = (int)({thread} / {WARPGROUP});",
        *indent(lines),
        "}",
    ]


def issue(printer, section: WarpGroupMma, env: dict[str, str]) -> list[str]:
    """Queue ``section`` for the warpgroup (its start indices must be the same in
    all its threads; the first one evaluates them)."""
    check_warpgroup_mma(printer.kernel, section)
    all_sites = sites(printer.kernel)
    site = all_sites.index(section)
    q, it = f"{PREFIX}wq", printer.index_type
    cap = _capacity(printer.kernel)
    registers = isinstance(section.a, Fragment)
    a = "0" if isinstance(section.a, Fragment) else printer.expr(section.a.index, env, it)
    b = printer.expr(section.b.index, env, it)
    last = f"{LAST}[{PREFIX}g * {len(all_sites)} + {site}]"
    t = f"{PREFIX}u"
    lines = _leader(
        [
            f"for (int {t} = 0; {t} < {printer.kernel.threads}; ++{t})",
            f"    if ({UNFENCED}[{t}]) ekx_record({PREFIX}c, -1, {t}, {NO_FENCE});",
            f"if ({q}_len == {cap}) {{",
            f"    ekx_record({PREFIX}c, -1, {q}_len, 2);",
            *([f"    {last} = -1;"] if registers else []),
            "} else {",
            f"    {q}_site[{q}_len] = {site}; {q}_group[{q}_len] = {q}_committed[{PREFIX}g];",
            f"    {q}_wg[{q}_len] = {PREFIX}g; {q}_a[{q}_len] = {a}; {q}_b[{q}_len] = {b};",
            *indent(_checksum(printer, section, f"{q}_a[{q}_len]", f"{q}_b[{q}_len]")),
            f"    {q}_sum[{q}_len] = {SUM};",
            *([f"    {LANES}[{q}_len] = 0; {last} = {q}_len;"] if registers else []),
            f"    ++{q}_len;",
            "}",
        ]
    )
    if not isinstance(section.a, Fragment):
        return lines
    f, thread = section.a, f"{PREFIX}thread"
    count = {v.name: max(1, v.count) for v in printer.kernel.thread_vars}[f.var]
    e = f"{PREFIX}e"
    return [
        *lines,
        "{",
        f"    const int {PREFIX}g = (int)({thread} / {WARPGROUP});",
        f"    const int {e} = {last};",
        f"    if ({e} >= 0) {{",
        f"        for (int {PREFIX}i = 0; {PREFIX}i < {REGISTER_A}; ++{PREFIX}i)",
        f"            {RA}[{e}][({thread} % {WARPGROUP}) * {REGISTER_A} + {PREFIX}i] ="
        f" {PREFIX}tv_{f.var}[{thread} * {count} + {f.first} + {PREFIX}i];",
        f"        ++{LANES}[{e}];",
        "    }",
        "}",
    ]


def commit() -> list[str]:
    return _leader([f"++{PREFIX}wq_committed[{PREFIX}g];"])


def wait(printer, pending: int) -> list[str]:
    """Run and drop the warpgroup's queued instructions of all but its newest
    ``pending`` groups."""
    q, n = f"{PREFIX}wq", f"{PREFIX}n"
    cases: list[str] = []
    for site, section in enumerate(sites(printer.kernel)):
        cases += [f"case {site}: {{", *indent(run(printer, section)), "    break;", "}"]
    keep = f"{PREFIX}keep"
    done = f"{q}_wg[{n}] == {PREFIX}g && {q}_group[{n}] < {q}_committed[{PREFIX}g] - {pending}"
    return _leader(
        [
            f"int {keep} = 0;",
            f"for (int {n} = 0; {n} < {q}_len; ++{n}) {{",
            f"    if (!({done})) {{",
            *(f"        {q}_{f}[{keep}] = {q}_{f}[{n}];" for f in (*QUEUE, "a", "b", "sum")),
            *(_move_registers(keep, n) if _registers(printer.kernel) else []),
            f"        ++{keep};",
            "        continue;",
            "    }",
            f"    const long long {PREFIX}ia = {q}_a[{n}], {PREFIX}ib = {q}_b[{n}];",
            f"    switch ({q}_site[{n}]) {{",
            *indent(cases),
            "    }",
            "}",
            f"{q}_len = {keep};",
        ]
    )


def _move_registers(keep: str, n: str) -> list[str]:
    """A queue entry's register copy and lane count moved from ``n`` to ``keep``."""
    i = f"{PREFIX}i"
    return [
        f"        for (int {i} = 0; {i} < {WARPGROUP * REGISTER_A}; ++{i})",
        f"            {RA}[{keep}][{i}] = {RA}[{n}][{i}];",
        f"        {LANES}[{keep}] = {LANES}[{n}];",
    ]


def _offset(k_major: bool, leading: int, stride: int, mn: str, k: str, size: int) -> str:
    """Byte offset (before the swizzle) of element (mn, k) from the operand start,
    for elements of ``size`` bytes."""
    if k_major:
        return f"({mn} / 8) * {stride}LL + ({mn} % 8) * {SWIZZLE_LINE}LL + {size}LL * {k}"
    line = SWIZZLE_LINE // size
    return (
        f"({mn} / {line}) * {leading}LL + ({k} / 8) * {stride}LL"
        f" + ({k} % 8) * {SWIZZLE_LINE}LL + {size}LL * ({mn} % {line})"
    )


def _register_a(section: WarpGroupMma, count: int) -> list[str]:
    """A (64 × k) from the entry's register copy, after the checks that every
    lane made it and that no lane's registers (``count`` per thread) changed since."""
    f, shape = section.a, SHAPES[section.shape]
    assert isinstance(f, Fragment)
    wa, n = f"{PREFIX}wa", f"{PREFIX}n"
    pairs = [[shape.a.at(lane, i) for i in range(REGISTER_A)] for lane in range(32)]
    table = ", ".join("{" + ", ".join(f"{{{r}, {c}}}" for r, c in p) + "}" for p in pairs)
    t, i, lane, w = (f"{PREFIX}{x}" for x in ("t", "i", "lane", "w"))
    return [
        f"static const int {PREFIX}wat[32][{REGISTER_A}][2] = {{{table}}};",
        f"if ({LANES}[{n}] != {WARPGROUP}) ekx_record({PREFIX}c, -1, {LANES}[{n}], {UNISSUED});",
        f"for (int {w} = 0; {w} < 4; ++{w})",
        f"    for (int {lane} = 0; {lane} < 32; ++{lane})",
        f"        for (int {i} = 0; {i} < {REGISTER_A}; ++{i}) {{",
        f"            const long long {t} = {PREFIX}g * {WARPGROUP}LL + {w} * 32 + {lane};",
        f"            const float {PREFIX}v = {RA}[{n}][({w} * 32 + {lane}) * {REGISTER_A} + {i}];",
        f"            const float {PREFIX}now = {PREFIX}tv_{f.var}[{t} * {count}"
        f" + {f.first} + {i}];",
        f"            if (memcmp(&{PREFIX}v, &{PREFIX}now, sizeof {PREFIX}v))",
        f"                ekx_record({PREFIX}c, -1, {t}, {CHANGED});",
        f"            {wa}[16 * {w} + {PREFIX}wat[{lane}][{i}][0]][{PREFIX}wat[{lane}][{i}][1]]"
        f" = (double){PREFIX}v;",
        "        }",
    ]


SUM = f"{PREFIX}sum"


def _elements(operand, rows: int, k_size: int, start: str, size: int, body: list[str]) -> list[str]:
    """Loops over the (row, k) elements of a shared operand (``rows`` × ``k_size``
    from element ``start``, ``size`` bytes each) with ``ekx_r``/``ekx_k`` and the
    swizzled byte offset ``ekx_off`` set, running ``body`` for each."""
    r, k, off = (f"{PREFIX}{x}" for x in ("r", "k", "off"))
    offset = _offset(operand.k_major, operand.leading, operand.stride, r, k, size)
    return [
        f"for (int {r} = 0; {r} < {rows}; ++{r})",
        f"    for (int {k} = 0; {k} < {k_size}; ++{k}) {{",
        f"        long long {off} = ({start}) * {size} + {offset};",
        f"        {off} ^= (({off} >> 7) & 7) << 4;",
        *(f"        {line}" for line in body),
        "    }",
    ]


def _checksum(printer, section: WarpGroupMma, a: str, b: str) -> list[str]:
    """``ekx_sum``: a hash of the bits of every shared element ``section`` reads
    (A from start ``a`` unless in registers, B from start ``b``), taken at issue and
    again at completion: a difference means the operands were written in between
    (a missing barrier or wait).  Elements out of bounds count as zero (the
    instruction's reads record them)."""
    k_size = SHAPES[section.shape].k
    idx, bits = f"{PREFIX}idx", f"{PREFIX}bits"
    lines = [f"unsigned long long {SUM} = 1469598103934665603ULL;"]
    operands = [(section.b, section.n, b)]
    if not isinstance(section.a, Fragment):
        operands.insert(0, (section.a, 64, a))
    for operand, rows, start in operands:
        info = printer.array(operand.shared)
        size = ELEMENT_BYTES[info.ctype]
        body = [
            f"const long long {idx} = {PREFIX}off / {size};",
            f"unsigned long long {bits} = 0;",
            f"if ({idx} >= 0 && {idx} < {info.size}LL)",
            f"    memcpy(&{bits}, &{info.name}[{idx}], {size});",
            f"{SUM} = ({SUM} ^ {bits}) * 1099511628211ULL;",
        ]
        lines += _elements(operand, rows, k_size, start, size, body)
    return lines


def run(printer, section: WarpGroupMma) -> list[str]:
    """Code executing ``section`` for warpgroup ``ekx_g`` from starts ``ekx_ia``/``ib``
    (run by the warpgroup's first thread: the error records name it)."""
    n, k_size = section.n, SHAPES[section.shape].k
    tf32 = SHAPES[section.shape].input_type == "tf32"
    counts = {v.name: max(1, v.count) for v in printer.kernel.thread_vars}
    d, count = section.d, counts[section.d.var]
    wa, wb, r, k, off = (f"{PREFIX}{x}" for x in ("wa", "wb", "r", "k", "off"))
    lines = [
        *_checksum(printer, section, f"{PREFIX}ia", f"{PREFIX}ib"),
        f"if ({SUM} != {PREFIX}wq_sum[{PREFIX}n]) ekx_record({PREFIX}c, -1, {PREFIX}n, {WRITTEN});",
        f"double {wa}[64][{k_size}], {wb}[{k_size}][{n}];",
    ]
    operands = [(wb, section.b, n, f"{PREFIX}ib")]
    if isinstance(section.a, Fragment):
        lines += _register_a(section, counts[section.a.var])
    else:
        operands.insert(0, (wa, section.a, 64, f"{PREFIX}ia"))
    for name, operand, rows, start in operands:
        info = printer.array(operand.shared)
        size = ELEMENT_BYTES[info.ctype]
        site, _ = printer._site(info, "wgmma operand")
        element = printer.loaded(info, printer.element(info, f"{off} / {size}", "load"))
        if tf32:  # the tensor cores read the word as tf32: its low 13 bits ignored
            element = f"ekx_tf32_truncated({element})"
        target = f"{name}[{r}][{k}]" if name == wa else f"{name}[{k}][{r}]"
        lines += [
            f"if (({start} * {size}) % 16) ekx_record({PREFIX}c, {site}, {start}, 1);",
            *_elements(operand, rows, k_size, start, size, [f"{target} = (double){element};"]),
        ]
    w, lane, j, i, t, row, col, s = (
        f"{PREFIX}{x}" for x in ("w", "lane", "j", "i", "t", "row", "col", "sum")
    )
    slot = f"{PREFIX}tv_{d.var}[{t} * {count} + {d.first} + 4 * {j} + {i}]"
    lines += [
        f"for (int {w} = 0; {w} < 4; ++{w})",
        f"    for (int {lane} = 0; {lane} < 32; ++{lane}) {{",
        f"        const long long {t} = {PREFIX}g * {WARPGROUP}LL + {w} * 32 + {lane};",
        f"        for (int {j} = 0; {j} < {n // 8}; ++{j})",
        f"            for (int {i} = 0; {i} < 4; ++{i}) {{",
        f"                const int {row} = 16 * {w} + {lane} / 4 + 8 * ({i} >> 1);",
        f"                const int {col} = 8 * {j} + 2 * ({lane} % 4) + ({i} & 1);",
        f"                double {s} = {slot if section.accumulate else '0.0'};",
        f"                for (int {k} = 0; {k} < {k_size}; ++{k})",
        f"                    {s} += {wa}[{row}][{k}] * {wb}[{k}][{col}];",
        f"                {slot} = ekx_toward_zero({s});",
        "            }",
        "    }",
    ]
    return lines
