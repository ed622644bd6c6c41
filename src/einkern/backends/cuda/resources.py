"""Registers, shared memory and spills of a problem's CUDA kernels, compiled with
NVRTC (no GPU needed): the generation pipeline and the compiler together."""

from __future__ import annotations

from ...ir.nodes import Problem
from .nvrtc import DEFAULT_ARCH, KernelResources, compile_cubin


def kernel_resources(
    problem: Problem, arch: str = DEFAULT_ARCH, mappings=None
) -> list[KernelResources]:
    """Registers, shared memory, stack and spills of every kernel of ``problem``
    for ``arch`` (needs NVRTC, not a GPU), in statement order."""
    from .generate import generate

    generated = generate(problem, mappings)
    module = compile_cubin(generated.text, arch)
    found = {r.name: r for r in module.resources}
    return [found[k.name] for k in generated.kernels if k.name in found]
