"""The register probe of the decision (:func:`einkern.gpu.decision.register_check`):
a candidate mapping's kernel compiled with NVRTC (cached on disk like every
kernel; no GPU needed) and its registers per thread read from the compile log;
and :func:`compile_task`, one task's kernels compiled with their resources,
which the tuner's CUDA target uses too."""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING

from ...errors import EinkernError
from ...gpu.decision import RegisterProbe
from ...gpu.device import DeviceLimits
from ...gpu.mapping import Mapping
from ...ir.task import Task

if TYPE_CHECKING:
    from ...gpu.plan import Plan
    from .nvrtc import CompiledModule, KernelResources

#: The kernel name the probe compiles under.
PROBE_KERNEL = "ek_probe"


def register_probe(limits: DeviceLimits) -> RegisterProbe | None:
    """A probe compiling for ``limits.arch``, or None when NVRTC is unusable."""
    from .nvrtc import nvrtc_version

    try:
        nvrtc_version()
    except EinkernError:
        return None
    return functools.partial(_registers, arch=limits.arch, shared=limits.shared_per_block_optin)


def compile_task(
    task: Task, mapping: Mapping, name: str, arch: str, shared: int
) -> tuple[Plan, CompiledModule, KernelResources | None]:
    """``task``'s launches under ``mapping`` (main kernel ``name``, at most
    ``shared`` bytes of shared memory a block), compiled for ``arch``, and the
    main kernel's resources (None when NVRTC reported none)."""
    from ...gpu.cuda_printer import print_cuda_module
    from ...gpu.plan import plan_task
    from .nvrtc import compile_cubin

    plan = plan_task(task, mapping, name, max_shared_bytes=shared)
    module = compile_cubin(print_cuda_module([launch.kernel for launch in plan.launches]), arch)
    found = [r for r in module.resources if r.name == name]
    return plan, module, found[0] if found else None


@functools.lru_cache(maxsize=4096)
def _registers(task: Task, mapping: Mapping, *, arch: str, shared: int) -> int | None:
    """Registers per thread of ``mapping``'s main kernel; None when it does not
    lower or compile (the decision then keeps the model's estimate)."""
    try:
        resources = compile_task(task, mapping, PROBE_KERNEL, arch, shared)[2]
    except EinkernError:
        return None
    return None if resources is None else resources.registers
