"""CUDA text of Hopper's warpgroup MMA sections (:class:`~.kir.WarpGroupMma` and
its fence, commit and wait), and the checks both printers apply to them.

A :class:`~.kir.SharedMatrix` becomes a 64-bit shared-memory matrix descriptor
(the PTX ISA's "matrix descriptor"): bits 0–13 the start address, 16–29 the
leading byte offset, 32–45 the stride byte offset (each in 16-byte units),
bits 62–63 the swizzle mode (1: 128-byte swizzle).  The kernels need the
``sm_90a`` target (:func:`needs_arch_specific`)."""

from __future__ import annotations

from . import kir
from .mma import SHAPES

#: Instruction N of ``wgmma`` with 16-bit inputs: multiples of 8 up to 256.
MAX_N = 256
WARPGROUP = 128  # threads
ATOM = 1024  # bytes of eight 128-byte swizzled lines: the swizzle repeats with it

WGMMA_HELPER = """\
__device__ __forceinline__ unsigned long long ek_wgmma_desc(const void *p, unsigned leading,
                                                            unsigned stride)
{
    const unsigned a = (unsigned)__cvta_generic_to_shared(p);
    return (unsigned long long)((a & 0x3FFFFu) >> 4)
        | ((unsigned long long)((leading & 0x3FFFFu) >> 4) << 16)
        | ((unsigned long long)((stride & 0x3FFFFu) >> 4) << 32) | (1ull << 62);
}
"""


def uses_warpgroup_mma(kernel: kir.Kernel) -> bool:
    """Whether ``kernel`` has warpgroup MMA sections (and so needs ``sm_90a``)."""
    return any(isinstance(n, kir.WarpGroupMma) for n in kir.walk(kernel.body))


def needs_arch_specific(source: str) -> bool:
    """Whether CUDA ``source`` must be compiled for the architecture-specific target
    (``sm_90a``): it issues ``wgmma`` instructions."""
    return "wgmma." in source


def check_warpgroup_mma(kernel: kir.Kernel, section: kir.WarpGroupMma) -> None:
    """ValueError unless ``section`` can run in ``kernel``: whole warpgroups, a
    16-bit warpgroup shape, N a multiple of 8 up to 256, enough accumulators."""
    shape = SHAPES.get(section.shape)
    if shape is None or shape.group != 4 or shape.input_type not in ("bf16", "f16"):
        raise ValueError(f"{section.shape!r} is not a 16-bit warpgroup MMA shape")
    if kernel.threads % WARPGROUP:
        raise ValueError(f"a warpgroup MMA needs whole warpgroups, not {kernel.threads} threads")
    if section.n % 8 or not 8 <= section.n <= MAX_N:
        raise ValueError(f"warpgroup MMA N = {section.n} (a multiple of 8 up to {MAX_N})")
    counts = {v.name: v.count for v in kernel.thread_vars}
    if counts.get(section.d.var, 0) < section.d.first + section.n // 2:
        raise ValueError(f"accumulator {section.d.var!r} has fewer than {section.n // 2} registers")
    aligned = {a.name: a.align for a in kernel.shared}
    for operand in (section.a, section.b):
        if operand.leading % 16 or operand.stride % 16:
            raise ValueError("descriptor byte offsets must be multiples of 16")
        if aligned.get(operand.shared, 0) % ATOM:
            raise ValueError(
                f"shared array {operand.shared!r} of a warpgroup MMA: align it to {ATOM} bytes"
            )


def accumulators(kernel: kir.Kernel) -> list[str]:
    """C names of every register some warpgroup MMA of ``kernel`` accumulates into."""
    names: dict[str, None] = {}
    for node in kir.walk(kernel.body):
        if isinstance(node, kir.WarpGroupMma):
            d = node.d
            names.update({f"{d.var}[{d.first + i}]": None for i in range(node.n // 2)})
    return list(names)


def warpgroup_mma_text(printer, section: kir.WarpGroupMma, env: dict[str, str]) -> list[str]:
    """The descriptors and the ``wgmma.mma_async`` asm statement of ``section``."""
    check_warpgroup_mma(printer.kernel, section)
    shape = SHAPES[section.shape]
    count = section.n // 2
    lines = ["{"]
    for name, operand in (("ekx_da", section.a), ("ekx_db", section.b)):
        shared = printer.array(operand.shared)
        index = printer.expr(operand.index, env, printer.index_type)
        lines.append(
            f"    const unsigned long long {name} = ek_wgmma_desc(&{shared.name}[{index}], "
            f"{operand.leading}u, {operand.stride}u);"
        )
    regs = ", ".join(f"%{i}" for i in range(count))
    trans_a, trans_b = int(not section.a.k_major), int(not section.b.k_major)
    kind = shape.input_type
    body = (
        f"{{\\n.reg .pred p;\\nsetp.ne.b32 p, %{count + 2}, 0;\\n"
        f"wgmma.mma_async.sync.aligned.m64n{section.n}k16.f32.{kind}.{kind} "
        f"{{{regs}}}, %{count}, %{count + 1}, p, 1, 1, {trans_a}, {trans_b};\\n}}\\n"
    )
    d = section.d
    outs = ", ".join(f'"+f"({d.var}[{d.first + i}])' for i in range(count))
    lines += [
        f'    asm volatile("{body}"',
        f"        : {outs}",
        '        : "l"(ekx_da), "l"(ekx_db), "r"(1) : "memory");',
        "}",
    ]
    return lines


def warpgroup_wait_text(kernel: kir.Kernel, section: kir.WarpGroupWait) -> list[str]:
    """``wgmma.wait_group``, then every accumulator pinned (an empty asm that reads
    and writes it), so that no use of one moves above the wait."""
    if section.pending < 0:
        raise ValueError(f"wgmma.wait_group {section.pending}")
    pins = [f'asm volatile("" : "+f"({name}) :: "memory");' for name in accumulators(kernel)]
    return [
        f'asm volatile("wgmma.wait_group.sync.aligned {section.pending};" ::: "memory");',
        *pins,
    ]
