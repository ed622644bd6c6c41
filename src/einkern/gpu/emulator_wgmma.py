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

Running one instruction: A (64 × 16) and B (16 × N) are gathered from shared
memory by the canonical 128-byte-swizzled layouts of the PTX ISA (the byte
offset from the array's start, whose 16-byte chunk bits 4–6 are XORed with its
line bits 7–9; the arrays are aligned to 1024 bytes), each element through the
bounds-checked accessor; a start off 16-byte alignment is recorded as
``misaligned`` (the descriptor cannot express it).  Products are exact, the sum
in double, rounded once to float, and each lane's accumulators are read and
written by the m16n8 layout of its warp's 16 rows."""

from __future__ import annotations

from .ctext import PREFIX, indent
from .kir import SWIZZLE_LINE, Kernel, WarpGroupMma, walk
from .mma_warpgroup_text import WARPGROUP, check_warpgroup_mma

QUEUE = ("site", "group", "wg")  # int fields of a queue entry; "a", "b" are long long


def sites(kernel: Kernel) -> list[WarpGroupMma]:
    """The kernel's warpgroup MMA sections in text order (their queue site ids)."""
    return [n for n in walk(kernel.body) if isinstance(n, WarpGroupMma)]


def _capacity(kernel: Kernel) -> int:
    """Queue entries per block: each site issued four times per warpgroup."""
    return 4 * len(sites(kernel)) * (kernel.threads // WARPGROUP)


def queue_declarations(kernel: Kernel) -> list[str]:
    """The per-block queue of issued, incomplete warpgroup MMAs and each
    warpgroup's count of committed groups (empty: no warpgroup MMA)."""
    if not sites(kernel):
        return []
    groups, cap = kernel.threads // WARPGROUP, _capacity(kernel)
    q = f"{PREFIX}wq"
    return [
        *(f"int {q}_{f}[{cap}];" for f in QUEUE),
        f"long long {q}_a[{cap}], {q}_b[{cap}];",
        f"int {q}_len = 0, {q}_committed[{groups}] = {{0}};",
    ]


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
    site = sites(printer.kernel).index(section)
    q, it = f"{PREFIX}wq", printer.index_type
    cap = _capacity(printer.kernel)
    a = printer.expr(section.a.index, env, it)
    b = printer.expr(section.b.index, env, it)
    return _leader(
        [
            f"if ({q}_len == {cap}) {{",
            f"    ekx_record({PREFIX}c, -1, {q}_len, 2);",
            "} else {",
            f"    {q}_site[{q}_len] = {site}; {q}_group[{q}_len] = {q}_committed[{PREFIX}g];",
            f"    {q}_wg[{q}_len] = {PREFIX}g; {q}_a[{q}_len] = {a}; {q}_b[{q}_len] = {b};",
            f"    ++{q}_len;",
            "}",
        ]
    )


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
            *(f"        {q}_{f}[{keep}] = {q}_{f}[{n}];" for f in (*QUEUE, "a", "b")),
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


def _offset(k_major: bool, leading: int, stride: int, mn: str, k: str) -> str:
    """Byte offset (before the swizzle) of element (mn, k) from the operand start."""
    if k_major:
        return f"({mn} / 8) * {stride}LL + ({mn} % 8) * {SWIZZLE_LINE}LL + 2LL * {k}"
    return (
        f"({mn} / 64) * {leading}LL + ({k} / 8) * {stride}LL + ({k} % 8) * {SWIZZLE_LINE}LL"
        f" + 2LL * ({mn} % 64)"
    )


def run(printer, section: WarpGroupMma) -> list[str]:
    """Code executing ``section`` for warpgroup ``ekx_g`` from starts ``ekx_ia``/``ib``
    (run by the warpgroup's first thread: the error records name it)."""
    n = section.n
    counts = {v.name: max(1, v.count) for v in printer.kernel.thread_vars}
    d, count = section.d, counts[section.d.var]
    wa, wb, r, k, off = (f"{PREFIX}{x}" for x in ("wa", "wb", "r", "k", "off"))
    lines = [f"double {wa}[64][16], {wb}[16][{n}];"]
    for name, operand, rows, start in (
        (wa, section.a, 64, f"{PREFIX}ia"),
        (wb, section.b, n, f"{PREFIX}ib"),
    ):
        info = printer.array(operand.shared)
        site, _ = printer._site(info, "wgmma operand")
        element = printer.loaded(info, printer.element(info, f"{off} / 2", "load"))
        target = f"{name}[{r}][{k}]" if name == wa else f"{name}[{k}][{r}]"
        offset = _offset(operand.k_major, operand.leading, operand.stride, r, k)
        lines += [
            f"if (({start} * 2) % 16) ekx_record({PREFIX}c, {site}, {start}, 1);",
            f"for (int {r} = 0; {r} < {rows}; ++{r})",
            f"    for (int {k} = 0; {k} < 16; ++{k}) {{",
            f"        long long {off} = {start} * 2 + {offset};",
            f"        {off} ^= (({off} >> 7) & 7) << 4;",
            f"        {target} = (double){element};",
            "    }",
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
        f"                double {s} = {slot};",
        f"                for (int {k} = 0; {k} < 16; ++{k})",
        f"                    {s} += {wa}[{row}][{k}] * {wb}[{k}][{col}];",
        f"                {slot} = (float){s};",
        "            }",
        "    }",
    ]
    return lines
