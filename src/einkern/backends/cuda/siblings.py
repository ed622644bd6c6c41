"""Sibling kernels as one launch: statements with no dependence between them (a
``nest`` group of the fusion planner whose members neither read nor write what
another writes, such as local_grad3's three derivatives of ``u``) run as one
CUDA kernel.

Each member is lowered as usual (:func:`einkern.gpu.plan.plan_task`) and printed
as a ``__device__`` function of its block number; one ``__global__`` kernel
launches the blocks of all members.  When the members have as many blocks,
they are interleaved (block ``b`` runs member ``b mod n``, block ``b div n``), so
the blocks of every member that read one tile of the shared input run together
and that tile comes from DRAM once (the others hit L2); otherwise each member
takes a range of blocks.  A block runs one member, so the members' shared
arrays overlap in one buffer (the largest member's size), and a member with
fewer threads than the launch runs on its first threads (only when it has no
barrier).  The members are independent, so running their blocks in any order
is their sequential result.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ...gpu import kir
from ...gpu.ctext import SHARED_ALIGNMENT
from ...gpu.cuda_printer import (
    STATIC_SHARED_LIMIT,
    dynamic_shared_bytes,
    print_kernel,
    shared_layout,
    shared_total,
)

INT_MAX = 2**31 - 1


@dataclass(frozen=True)
class Member:
    """A member's kernel and the buffer bound to each of its array parameters."""

    kernel: kir.Kernel
    buffers: tuple[str, ...]


@dataclass(frozen=True)
class Combined:
    """The one kernel's source (device functions and the ``__global__`` wrapper)
    and how to launch it."""

    name: str
    text: str
    buffers: tuple[str, ...]  # array parameters, in order
    scalars: tuple[str, ...]  # scalar parameters after them (names without prefix)
    threads: int
    blocks: int


def why_not_combined(members: Sequence[Member]) -> str | None:
    """None when the members can run as one kernel, else why not."""
    threads = max(m.kernel.threads for m in members)
    if sum(m.kernel.blocks for m in members) > INT_MAX:
        return "more blocks than one grid dimension holds"
    if max(shared_total(m.kernel) for m in members) > STATIC_SHARED_LIMIT:
        return "a member needs dynamic shared memory"
    bound: dict[str, str] = {}
    for member in members:
        kernel = member.kernel
        if dynamic_shared_bytes(kernel):
            return f"{kernel.name} needs dynamic shared memory"
        text = print_kernel(kernel)
        if "blockIdx.y" in text:
            return f"{kernel.name} has a two-dimensional grid"
        if kernel.threads < threads and "__syncthreads" in text:
            return f"{kernel.name} has fewer threads than the launch and a barrier"
        arrays = [p for p in kernel.params if p.is_array]
        for param, buffer in zip(arrays, member.buffers, strict=True):
            if bound.setdefault(param.name, buffer) != buffer:
                return f"parameter {param.name} is bound to two buffers"
    return None


def combine(name: str, members: Sequence[Member]) -> Combined:
    """The members as one kernel called ``name`` (see the module docstring);
    raises ValueError when :func:`why_not_combined` refuses them."""
    why = why_not_combined(members)
    if why is not None:
        raise ValueError(f"cannot combine {', '.join(m.kernel.name for m in members)}: {why}")
    threads = max(m.kernel.threads for m in members)
    blocks = sum(m.kernel.blocks for m in members)
    interleave = len({m.kernel.blocks for m in members}) == 1
    shared = max(shared_total(m.kernel) for m in members)
    params: dict[str, kir.Param] = {}
    buffers: dict[str, str] = {}
    for member in members:
        arrays = [p for p in member.kernel.params if p.is_array]
        for param, buffer in zip(arrays, member.buffers, strict=True):
            known = params.get(param.name)
            readonly = param.readonly and (known is None or known.readonly)
            params[param.name] = kir.Param(param.name, param.ctype, True, param.size, readonly)
            buffers[param.name] = buffer
    for member in members:
        for param in member.kernel.params:
            if not param.is_array:
                params.setdefault(param.name, param)
    texts = [_device_function(m.kernel) for m in members]
    header = print_kernel(
        kir.Kernel(name, tuple(params.values()), threads, blocks, (), (), (), "int")
    ).splitlines()
    opening = header.index("{")
    size = max(shared, 16)
    body = [f"    __shared__ __align__({SHARED_ALIGNMENT}) unsigned char ekx_shared[{size}];"]
    body.append("    const int ekx_b = (int)blockIdx.x;")
    start = 0
    for number, member in enumerate(members):
        kernel = member.kernel
        args = ", ".join(
            p.name if p.is_array or p.ctype == "double" else f"ekx_arg_{p.name}"
            for p in kernel.params
        )
        if interleave:
            test = f"ekx_b % {len(members)} == {number}"
            block = f"ekx_b / {len(members)}"
        else:
            test = f"ekx_b < {start + kernel.blocks}"
            block = f"ekx_b - {start}"
        start += kernel.blocks
        call = f"{kernel.name}({args}{', ' if args else ''}ekx_shared, {block});"
        if kernel.threads < threads:
            call = f"if ((int)threadIdx.x < {kernel.threads}) {call}"
        keyword = "if" if number == 0 else "} else if"
        body += [f"    {keyword} ({test}) {{", f"        {call}"]
    body.append("    }")
    text = "\n".join([*texts, *header[: opening + 1], *body, "}", ""])
    scalars = tuple(p.name[2:] for p in params.values() if not p.is_array)
    arrays_in_order = tuple(buffers[p.name] for p in params.values() if p.is_array)
    return Combined(name, text, arrays_in_order, scalars, threads, blocks)


def _device_function(kernel: kir.Kernel) -> str:
    """The kernel printed as a ``__device__`` function of ``ekx_shared`` (where its
    shared arrays live) and ``ekx_block`` (its block number)."""
    lines = print_kernel(kernel).splitlines()
    start = next(n for n, line in enumerate(lines) if line.startswith('extern "C" __global__'))
    signature = lines[start + 1]
    assert signature.startswith(f"{kernel.name}(") and signature.endswith(")")
    inner = signature[len(kernel.name) + 1 : -1]
    extra = "unsigned char *__restrict__ ekx_shared, const int ekx_block"
    lines[start : start + 2] = [
        f"static __device__ __forceinline__ void {kernel.name}("
        + (f"{inner}, " if inner else "")
        + f"{extra})"
    ]
    views = {
        f"__shared__ __align__({SHARED_ALIGNMENT}) {a.ctype} {a.name}[{a.size}];": (
            f"{a.ctype} *const {a.name} = reinterpret_cast<{a.ctype} *>(ekx_shared + {offset});"
        )
        for a, offset in shared_layout(kernel)
    }
    found = 0
    for number, line in enumerate(lines):
        stripped = line.strip()
        if stripped in views:
            lines[number] = line.replace(stripped, views[stripped])
            found += 1
        else:
            lines[number] = line.replace("blockIdx.x", "ekx_block")
    assert found == len(views), f"{kernel.name}: shared arrays not where expected"
    if not views:
        lines.insert(start + 2, "    (void)ekx_shared;")
    return "\n".join(lines)
