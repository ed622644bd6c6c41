"""CUDA text of Hopper's TMA statements: mbarriers (:class:`~.kir.BarrierInit`,
:class:`~.kir.BarrierArm`, :class:`~.kir.BarrierWait`) and bulk tensor copies
(:class:`~.kir.TensorCopy`) of :class:`~.kir.TensorMap` parameters.

A tensor map is a ``const __grid_constant__ ek_tmap`` parameter (the 128-byte
``CUtensorMap``, 64-byte aligned, as ``cuTensorMapEncodeTiled`` writes it; NVRTC
has no ``cuda.h``, so the struct is declared here with the same size and
alignment).  A copy names the map by its parameter's generic address, which the
PTX ISA accepts for a ``__grid_constant__`` parameter.  The statements need
``sm_90`` (:func:`uses_tma`)."""

from __future__ import annotations

from collections.abc import Mapping

from . import kir

TMA_HELPER = """\
struct __align__(64) ek_tmap { unsigned long long v[16]; };

__device__ __forceinline__ unsigned ek_smem(const void *p)
{
    return (unsigned)__cvta_generic_to_shared(p);
}

__device__ __forceinline__ void ek_mbarrier_wait(unsigned bar, unsigned parity)
{
    asm volatile("{\\n.reg .pred P1;\\nEK_WAIT:\\n"
                 "mbarrier.try_wait.parity.shared::cta.b64 P1, [%0], %1;\\n"
                 "@!P1 bra EK_WAIT;\\n}\\n" :: "r"(bar), "r"(parity) : "memory");
}
"""

#: The C type of a tensor-map parameter.
MAP_TYPE = "ek_tmap"


def uses_tma(kernel: kir.Kernel) -> bool:
    """Whether ``kernel`` has tensor maps or mbarriers (its source needs
    :data:`TMA_HELPER`)."""
    return bool(kernel.maps) or any(a.ctype == kir.MBARRIER for a in kernel.shared)


def map_parameter(tmap: kir.TensorMap) -> str:
    """The kernel parameter of a tensor map."""
    return f"const __grid_constant__ {MAP_TYPE} {tmap.name}"


def _address(printer, array: str, index: kir.Expr, env: Mapping[str, str]) -> str:
    info = printer.array(array)
    return f"ek_smem(&{info.name}[{printer.expr(index, env, printer.index_type)}])"


def barrier_init_text(printer, s: kir.BarrierInit, env: Mapping[str, str]) -> list[str]:
    """``mbarrier.init``, then the fences that publish it to the block (after the
    next barrier) and to the asynchronous proxy (the TMA unit)."""
    return [
        f'asm volatile("mbarrier.init.shared::cta.b64 [%0], {s.count};" :: '
        f'"r"({_address(printer, s.array, s.index, env)}) : "memory");',
        'asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");',
        'asm volatile("fence.proxy.async.shared::cta;" ::: "memory");',
    ]


def barrier_arm_text(printer, s: kir.BarrierArm, env: Mapping[str, str]) -> list[str]:
    return [
        'asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" :: '
        f'"r"({_address(printer, s.array, s.index, env)}), "r"({s.bytes}u) : "memory");'
    ]


def barrier_wait_text(printer, s: kir.BarrierWait, env: Mapping[str, str]) -> list[str]:
    parity = printer.expr(s.parity, env, "int")
    return [f"ek_mbarrier_wait({_address(printer, s.array, s.index, env)}, (unsigned)({parity}));"]


def tensor_copy_text(
    printer, s: kir.TensorCopy, tmap: kir.TensorMap, env: Mapping[str, str]
) -> list[str]:
    """``cp.async.bulk.tensor.{rank}d`` of one box into shared memory, completing
    on the mbarrier (coordinates as 32-bit integers, dimension 0 first)."""
    rank = len(tmap.dims)
    coords = ", ".join(f"%{2 + i}" for i in range(rank))
    values = ", ".join(f'"r"((int)({printer.expr(c, env, "int")}))' for c in s.coords)
    return [
        f'asm volatile("cp.async.bulk.tensor.{rank}d.shared::cluster.global.mbarrier'
        f'::complete_tx::bytes [%0], [%1, {{{coords}}}], [%{2 + rank}];"',
        f'    :: "r"({_address(printer, s.shared, s.shared_index, env)}), '
        f'"l"((unsigned long long)&{tmap.name}), {values}, '
        f'"r"({_address(printer, s.barrier, s.barrier_index, env)}) : "memory");',
    ]


def map_buffers(
    kernel: kir.Kernel, buffers: tuple[str, ...]
) -> tuple[tuple[str, kir.TensorMap], ...]:
    """Each tensor map of ``kernel`` with the buffer (tensor or temporary name) of
    its array, given ``buffers``, the buffers bound to the kernel's array
    parameters in order: what the runtime encodes a map from for each call."""
    arrays = [p.name for p in kernel.params if p.is_array]
    return tuple((buffers[arrays.index(m.array)], m) for m in kernel.maps)
