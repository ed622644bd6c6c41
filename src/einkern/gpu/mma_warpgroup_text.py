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

#: Instruction N of ``wgmma``: multiples of 8 up to 256.
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


#: Input types of the warpgroup shapes einkern prints.
INPUT_TYPES = ("bf16", "f16", "tf32")
#: A's registers per lane of a tf32 instruction from registers (m64nNk8).
REGISTER_A = 4


def check_warpgroup_mma(kernel: kir.Kernel, section: kir.WarpGroupMma) -> None:
    """ValueError unless ``section`` can run in ``kernel``: whole warpgroups, a
    bf16/f16/tf32 warpgroup shape, N a multiple of 8 up to 256, enough
    accumulators (and A registers), tf32 operands K-major."""
    shape = SHAPES.get(section.shape)
    if shape is None or shape.group != 4 or shape.input_type not in INPUT_TYPES:
        raise ValueError(f"{section.shape!r} is not a bf16, f16 or tf32 warpgroup MMA shape")
    shared = [o for o in (section.a, section.b) if isinstance(o, kir.SharedMatrix)]
    if isinstance(section.a, kir.Fragment) and shape.input_type != "tf32":
        raise ValueError("a warpgroup MMA takes A from registers for tf32 only")
    if shape.input_type == "tf32" and not all(o.k_major for o in shared):
        raise ValueError("tf32 warpgroup MMA operands in shared memory must be K-major")
    if kernel.threads % WARPGROUP:
        raise ValueError(f"a warpgroup MMA needs whole warpgroups, not {kernel.threads} threads")
    if section.n % 8 or not 8 <= section.n <= MAX_N:
        raise ValueError(f"warpgroup MMA N = {section.n} (a multiple of 8 up to {MAX_N})")
    counts = {v.name: v.count for v in kernel.thread_vars}
    if counts.get(section.d.var, 0) < section.d.first + section.n // 2:
        raise ValueError(f"accumulator {section.d.var!r} has fewer than {section.n // 2} registers")
    a = section.a
    if isinstance(a, kir.Fragment) and counts.get(a.var, 0) < a.first + REGISTER_A:
        raise ValueError(f"A fragment {a.var!r} has fewer than {a.first + REGISTER_A} registers")
    aligned = {a.name: a.align for a in kernel.shared}
    for operand in shared:
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
    operands = [("ekx_db", section.b)]
    if isinstance(section.a, kir.SharedMatrix):
        operands.insert(0, ("ekx_da", section.a))
    for name, operand in operands:
        shared = printer.array(operand.shared)
        index = printer.expr(operand.index, env, printer.index_type)
        lines.append(
            f"    const unsigned long long {name} = ek_wgmma_desc(&{shared.name}[{index}], "
            f"{operand.leading}u, {operand.stride}u);"
        )
    regs = ", ".join(f"%{i}" for i in range(count))
    kind, a = shape.input_type, section.a
    if isinstance(a, kir.Fragment):  # four 32-bit registers, then B's descriptor
        a_text = "{" + ", ".join(f"%{count + i}" for i in range(REGISTER_A)) + "}"
        ins = [f'"r"(__float_as_uint({a.var}[{a.first + i}]))' for i in range(REGISTER_A)]
        ins += ['"l"(ekx_db)', f'"r"({int(section.accumulate)})']
    else:
        a_text = f"%{count}"
        ins = ['"l"(ekx_da)', '"l"(ekx_db)', f'"r"({int(section.accumulate)})']
    b_text, flag = f"%{count + len(ins) - 2}", count + len(ins) - 1
    # 16-bit operands may be transposed; tf32 ones are K-major (no immediates)
    trans = ""
    if isinstance(a, kir.SharedMatrix) and kind != "tf32":
        trans = f", {int(not a.k_major)}, {int(not section.b.k_major)}"
    body = (
        f"{{\\n.reg .pred p;\\nsetp.ne.b32 p, %{flag}, 0;\\n"
        f"wgmma.mma_async.sync.aligned.m64n{section.n}k{shape.k}.f32.{kind}.{kind} "
        f"{{{regs}}}, {a_text}, {b_text}, p, 1, 1{trans};\\n}}\\n"
    )
    d = section.d
    outs = ", ".join(f'"+f"({d.var}[{d.first + i}])' for i in range(count))
    lines += [
        f'    asm volatile("{body}"',
        f"        : {outs}",
        f'        : {", ".join(ins)} : "memory");',
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
