"""CUDA C++ for a :class:`~einkern.gpu.kir.Kernel`, as NVRTC compiles it.

One kernel prints as::

    extern "C" __global__ void __launch_bounds__(THREADS)
    name(const double* __restrict__ A, double* __restrict__ C, double alpha)

Parameters keep the kernel's order (:func:`kernel_signature`): global arrays
are ``const T* __restrict__`` when read-only, else ``T* __restrict__``; scalars
are always passed as ``double`` (a scalar declared ``float`` arrives as
``double ekx_arg_NAME`` and is converted once at the top of the kernel).
Thread variables become local scalars/arrays (the lowering indexes register
arrays with constants only, so they stay in registers); shared arrays are
``__shared__`` arrays aligned to 16 bytes, or, when their total exceeds 48 KiB,
views into ``extern __shared__`` dynamic memory at 16-byte aligned offsets
(:func:`dynamic_shared_bytes` > 0: the launch must pass that many bytes and
first raise ``CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES`` to it).

Sections print in order: a :class:`~kir.PerThread` section as a ``{ ... }``
block (its Declares are local to it, as in the emulation), a
:class:`~kir.Barrier` as ``__syncthreads();``, a :class:`~kir.Uniform` as a
plain ``for`` loop, a :class:`~kir.ShuffleSum` as ``__shfl_xor_sync`` additions
(mask: every lane of the block's warps).  ``blockIdx.x``/``threadIdx.x`` print cast to the kernel's
``index_type``, so all index arithmetic runs in that type.  A
:class:`~kir.VectorLoad` is one ``float2/float4/double2/int2/int4/longlong2``
load through ``reinterpret_cast``; ``Lane(v, i)`` is ``v.x``/``.y``/``.z``/``.w``.
Literal typing is described in :mod:`.ctext` (shared with the CPU
emulation).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ..semantics import storage_helpers
from . import kir
from .ctext import (
    ELEMENT_BYTES,
    PREFIX,
    SHARED_ALIGNMENT,
    ArrayInfo,
    CText,
    check_identifier,
    check_load_matrix,
    check_shuffle,
    helper_functions,
    indent,
    mma_words,
    uses_storage,
    vector_type,
)
from .mma import SHAPES, asm_statement, registers
from .mma_warpgroup_text import (
    WGMMA_HELPER,
    uses_warpgroup_mma,
    warpgroup_mma_text,
    warpgroup_wait_text,
)
from .tma_text import (
    TMA_HELPER,
    barrier_arm_text,
    barrier_init_text,
    barrier_wait_text,
    map_parameter,
    tensor_copy_text,
    uses_tma,
)

#: fp32 → tf32 (``cvt.rna``: to nearest, ties away from zero), kept in a float;
#: ``ek_tf32_rest``: the part the tensor cores ignore, rounded so.
TF32_HELPER = """\
__device__ __forceinline__ float ek_tf32(float x)
{
    unsigned u;
    asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(u) : "f"(x));
    return __uint_as_float(u);
}
/* what the tensor cores drop of x when they read it as tf32 (its low 13 bits),
   rounded to tf32: the low part of 3xTF32's operands split in shared memory */
__device__ __forceinline__ float ek_tf32_rest(float x)
{
    return ek_tf32(x - __uint_as_float(__float_as_uint(x) & 0xffffe000u));
}
"""

STATIC_SHARED_LIMIT = 48 * 1024  # bytes of static shared memory a kernel may declare

CUDA_PRELUDE = (
    """\
#ifndef EKX_PRELUDE
#define EKX_PRELUDE
#define EKX_NAN_F __int_as_float(0x7fc00000)
#define EKX_INF_F __int_as_float(0x7f800000)
#define EKX_NAN_D __longlong_as_double(0x7ff8000000000000LL)
#define EKX_INF_D __longlong_as_double(0x7ff0000000000000LL)
"""
    + helper_functions("__device__ __forceinline__")
    + TF32_HELPER
    + "#endif\n"
)


class CudaText(CText):
    """CUDA spelling: plain names, ``A[i]``, ``v.x``, cast built-in indices."""

    def block_index(self, axis: str) -> str:
        return f"(({self.index_type})blockIdx.{axis})"

    def thread_index(self) -> str:
        return f"(({self.index_type})threadIdx.x)"

    def element(self, info: ArrayInfo, index: str, access: str) -> str:
        return f"{info.name}[{index}]"

    def atomic_add(self, element: str, value: str, ctype: str) -> list[str]:
        return [f"atomicAdd(&{element}, {value});"]

    def lane(self, vector: str, lane: int) -> str:
        return f"{vector}.{'xyzw'[lane]}"

    def vector_load(self, stmt: kir.VectorLoad, info: ArrayInfo, index: str) -> list[str]:
        vector, _ = vector_type(stmt)
        return [
            f"const {vector} {stmt.name} = "
            f"*reinterpret_cast<const {vector} *>({info.name} + ({index}));"
        ]

    def uninitialised(self, stmt: kir.Declare) -> str:
        return f"{stmt.ctype} {stmt.name};"

    def copy_async(self, s: kir.CopyAsync, env) -> list[str]:
        shared, source = self.array(s.shared), self.array(s.array)
        nbytes = ELEMENT_BYTES[shared.ctype] * s.width
        cache = "cg" if nbytes == 16 else "ca"  # 16-byte copies may bypass L1
        it = self.index_type
        inside = self.expr(s.inside, env)
        return [
            "{",
            f"    const int ekx_in = {inside};",
            f"    const unsigned ekx_dst = (unsigned)__cvta_generic_to_shared("
            f"&{shared.name}[{self.expr(s.shared_index, env, it)}]);",
            f"    const {shared.ctype} *ekx_src = {source.name} + "
            f"(ekx_in ? ({self.expr(s.index, env, it)}) : 0);",
            f'    asm volatile("cp.async.{cache}.shared.global [%0], [%1], {nbytes}, %2;"'
            f' :: "r"(ekx_dst), "l"(ekx_src), "r"(ekx_in ? {nbytes} : 0) : "memory");',
            "}",
        ]

    def copy_commit(self) -> list[str]:
        return ['asm volatile("cp.async.commit_group;" ::: "memory");']

    def copy_wait(self, pending: int) -> list[str]:
        return [f'asm volatile("cp.async.wait_group {pending};" ::: "memory");']

    def proxy_fence(self) -> list[str]:
        return ['asm volatile("fence.proxy.async.shared::cta;" ::: "memory");']

    def barrier_init(self, s: kir.BarrierInit, env) -> list[str]:
        return barrier_init_text(self, s, env)

    def barrier_arm(self, s: kir.BarrierArm, env) -> list[str]:
        return barrier_arm_text(self, s, env)

    def barrier_wait(self, s: kir.BarrierWait, env) -> list[str]:
        return barrier_wait_text(self, s, env)

    def tensor_copy(self, s: kir.TensorCopy, tmap: kir.TensorMap, env) -> list[str]:
        return tensor_copy_text(self, s, tmap, env)

    def unroll(self, unroll: int) -> list[str]:
        if unroll < 0:
            return ["#pragma unroll"]
        return [f"#pragma unroll {unroll}"] if unroll > 0 else []


# ---- launch information ------------------------------------------------------


@dataclass(frozen=True)
class KernelArgument:
    """One parameter of the ``__global__`` function, in launch order: arrays are
    passed as device pointers (``CUdeviceptr``), scalars as C ``double``."""

    name: str
    ctype: str  # element type for arrays; "double" for scalars
    is_array: bool
    readonly: bool = True
    size: int = 0  # elements (arrays)


@dataclass(frozen=True)
class LaunchShape:
    """How to launch one kernel (``cuLaunchKernel``)."""

    name: str
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    dynamic_shared_bytes: int
    arguments: tuple[KernelArgument, ...]

    @property
    def needs_shared_attribute(self) -> bool:
        """True when ``cuFuncSetAttribute(CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
        dynamic_shared_bytes)`` must precede the launch."""
        return self.dynamic_shared_bytes > 0


def kernel_signature(kernel: kir.Kernel) -> tuple[KernelArgument, ...]:
    """The kernel's parameters in the order :func:`print_cuda` declares them."""
    return tuple(
        KernelArgument(p.name, p.ctype, True, p.readonly, p.size)
        if p.is_array
        else KernelArgument(p.name, "double", False)
        for p in kernel.params
    )


def _align(offset: int, alignment: int = SHARED_ALIGNMENT) -> int:
    return -(-offset // alignment) * alignment


def shared_alignment(kernel: kir.Kernel) -> int:
    """Bytes the kernel's shared memory starts aligned to: the largest alignment
    any of its arrays asks for (16 at least)."""
    return max([SHARED_ALIGNMENT, *(a.align for a in kernel.shared)])


def shared_layout(kernel: kir.Kernel) -> tuple[tuple[kir.SharedArray, int], ...]:
    """Every shared array with its byte offset (each aligned as it asks, 16 bytes
    at least)."""
    offset, placed = 0, []
    for array in kernel.shared:
        offset = _align(offset, max(SHARED_ALIGNMENT, array.align))
        placed.append((array, offset))
        offset += array.size * ELEMENT_BYTES[array.ctype]
    return tuple(placed)


def shared_total(kernel: kir.Kernel) -> int:
    """Bytes the kernel's shared arrays take, alignment padding included."""
    placed = shared_layout(kernel)
    if not placed:
        return 0
    array, offset = placed[-1]
    return _align(offset + array.size * ELEMENT_BYTES[array.ctype])


def dynamic_shared_bytes(kernel: kir.Kernel) -> int:
    """Bytes of dynamic shared memory the launch must pass: 0 when the kernel's shared
    arrays fit in 48 KiB of static shared memory, else their total (16-byte aligned)."""
    total = shared_total(kernel)
    return total if total > STATIC_SHARED_LIMIT else 0


def launch_shape(kernel: kir.Kernel) -> LaunchShape:
    """Grid, block, dynamic shared memory and arguments of ``kernel``."""
    return LaunchShape(
        kernel.name,
        (kernel.blocks, 1, 1),
        (kernel.threads, 1, 1),
        dynamic_shared_bytes(kernel),
        kernel_signature(kernel),
    )


# ---- printing ----------------------------------------------------------------


def _parameter(p: kir.Param) -> str:
    check_identifier(p.name)
    if p.is_array:
        const = "const " if p.readonly else ""
        restrict = " __restrict__" if p.restrict else ""
        return f"{const}{p.ctype}*{restrict} {p.name}"
    return f"double {p.name}" if p.ctype == "double" else f"double {PREFIX}arg_{p.name}"


def _sections(printer: CText, sections: Sequence[kir.Section], env: dict[str, str]) -> list[str]:
    lines: list[str] = []
    for section in sections:
        if isinstance(section, kir.PerThread):
            lines += printer.block(section.body, env)
        elif isinstance(section, kir.Barrier):
            lines.append("__syncthreads();")
        elif isinstance(section, kir.Mma):
            lines.append(mma_text(section, mma_words(printer.kernel, section)))
        elif isinstance(section, kir.LoadMatrix):
            lines += load_matrix_text(printer, section, env)
        elif isinstance(section, kir.ShuffleSum):
            lines += shuffle_text(printer.kernel, section)
        elif isinstance(section, kir.WarpGroupMma):
            lines += warpgroup_mma_text(printer, section, env)
        elif isinstance(section, kir.WarpGroupFence):
            lines.append('asm volatile("wgmma.fence.sync.aligned;" ::: "memory");')
        elif isinstance(section, kir.WarpGroupCommit):
            lines.append('asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");')
        elif isinstance(section, kir.WarpGroupWait):
            lines += warpgroup_wait_text(printer.kernel, section)
        elif isinstance(section, kir.Uniform):
            v, it = printer.local(section.var), printer.index_type
            if section.step <= 0:
                raise ValueError(f"uniform loop {v}: step must be positive")
            lines.append(
                f"for ({it} {v} = {section.start}; {v} < {section.stop}; {v} += {section.step}) {{"
            )
            lines += indent(_sections(printer, section.body, {**env, v: it}))
            lines.append("}")
        else:
            raise TypeError(f"unknown kernel section {section!r}")
    return lines


def shuffle_text(kernel: kir.Kernel, section: kir.ShuffleSum) -> list[str]:
    """The ``__shfl_xor_sync`` additions of a :class:`~kir.ShuffleSum`."""
    mask = f"0x{check_shuffle(kernel, section):x}u"
    lines = []
    for offset in section.offsets:
        for i in range(section.count):
            element = f"{section.var}[{i}]"
            lines.append(f"{element} += __shfl_xor_sync({mask}, {element}, {offset});")
    return ["{", *indent(lines), "}"]


def load_matrix_text(printer: CText, section: kir.LoadMatrix, env: dict[str, str]) -> list[str]:
    """The ``ldmatrix`` of a :class:`~kir.LoadMatrix` section."""
    check_load_matrix(printer.kernel, section)
    shared = printer.array(section.shared)
    index = printer.expr(section.index, env, printer.index_type)
    trans = ".trans" if section.trans else ""
    outs = ", ".join(f'"=r"({section.d.var}[{section.d.first + j}])' for j in range(section.count))
    regs = ", ".join(f"%{j}" for j in range(section.count))
    row = f"(unsigned)__cvta_generic_to_shared(&{shared.name}[{index}])"
    return [
        "{",
        f"    const unsigned ekx_row = {row};",
        f'    asm volatile("ldmatrix.sync.aligned.m8n8.x{section.count}{trans}.shared.b16 '
        f'{{{regs}}}, [%{section.count}];" : {outs} : "r"(ekx_row));',
        "}",
    ]


def mma_text(section: kir.Mma, words: frozenset[str] = frozenset()) -> str:
    """The ``asm volatile`` statement of an :class:`~kir.Mma` section (tf32
    operands are floats already rounded to tf32, passed as their bits; bf16/f16
    operands are 32-bit words from ``ldmatrix``, their variables among ``words``:
    :func:`~.ctext.mma_words`)."""
    shape = SHAPES[section.shape]
    na, nb, nc = registers(shape)

    def regs(fragment: kir.Fragment, count: int, operand: bool = False) -> list[str]:
        v = fragment.var
        names = [f"{v}[{fragment.register(j)}]" for j in range(count)]
        if operand and v in words:
            return names
        return [f"__float_as_uint({n})" for n in names] if operand and tf32 else names

    tf32 = shape.input_type == "tf32"
    return asm_statement(
        shape,
        regs(section.d, nc),
        regs(section.a, na, operand=True),
        regs(section.b, nb, operand=True),
        regs(section.c, nc),
    )


def print_kernel(kernel: kir.Kernel) -> str:
    """The ``__global__`` function alone (no prelude)."""
    printer = CudaText(kernel)
    check_identifier(kernel.name)
    lines = [f"// {line}" for line in kernel.comment.splitlines()]
    params = ", ".join([*(_parameter(p) for p in kernel.params), *map(map_parameter, kernel.maps)])
    lines += [
        f'extern "C" __global__ void __launch_bounds__({kernel.threads}'
        + (f", {kernel.min_blocks})" if kernel.min_blocks else ")"),
        f"{kernel.name}({params})",
        "{",
    ]
    body = [
        f"const {p.ctype} {p.name} = ({p.ctype}){PREFIX}arg_{p.name};"
        for p in kernel.params
        if not p.is_array and p.ctype != "double"
    ]
    alignment = shared_alignment(kernel)
    if dynamic_shared_bytes(kernel):
        body.append(
            f"extern __shared__ __align__({alignment}) unsigned char {PREFIX}dynamic_shared[];"
        )
        if alignment > SHARED_ALIGNMENT:  # the alignment the descriptors rely on, checked
            body.append(
                f"if ((unsigned)__cvta_generic_to_shared({PREFIX}dynamic_shared) % {alignment}) "
                "__trap();"
            )
        body += [
            f"{a.ctype} *const {a.name} = reinterpret_cast<{a.ctype} *>"
            f"({PREFIX}dynamic_shared + {offset});"
            for a, offset in shared_layout(kernel)
        ]
    else:
        body += [
            f"__shared__ __align__({max(SHARED_ALIGNMENT, a.align)}) {a.ctype} {a.name}[{a.size}];"
            for a in kernel.shared
        ]
    body += [
        f"{v.ctype} {v.name}" + (f"[{v.count}];" if v.count else ";") for v in kernel.thread_vars
    ]
    body += _sections(printer, kernel.body, dict(printer.types))
    return "\n".join([*lines, *indent(body), "}", ""])


def print_cuda(kernel: kir.Kernel) -> str:
    """Complete CUDA C++ source (prelude and kernel) for NVRTC."""
    return print_cuda_module([kernel])


def print_cuda_module(kernels: Sequence[kir.Kernel]) -> str:
    """One CUDA source holding several kernels: the prelude once, then each kernel."""
    prelude = [CUDA_PRELUDE]
    if any(uses_warpgroup_mma(k) for k in kernels):
        prelude.append(WGMMA_HELPER)
    if any(uses_tma(k) for k in kernels):
        prelude.append(TMA_HELPER)
    if any(uses_storage(k) for k in kernels):
        prelude.append(storage_helpers("__device__ __forceinline__", cuda=True))
    return "\n".join([*prelude, *(print_kernel(k) for k in kernels)])
