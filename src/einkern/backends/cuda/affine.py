"""Launching the kernels of an affine program (:mod:`einkern.gpu.affine`) through the
CUDA backend's executable: the same NVRTC compile, ``cuda.core`` launches, stream
semantics and host-array copies as a tensor program's kernels, and the one
argument check (:class:`~einkern.backends.cpu.affine.AffineBinder`)."""

from __future__ import annotations

from typing import Any

from ...errors import BackendError
from ...gpu.affine import affine_kernels, distinct_kernels
from ...gpu.cuda_printer import launch_shape, print_cuda_module
from ...ir.affine import AffineProblem
from ..binding import Call
from ..cpu.affine import AffineBinder, shadow_problem
from .codegen import CudaSource, KernelSpec
from .executable import CudaExecutable


def affine_source(problem: AffineProblem) -> CudaSource:
    """The CUDA C of ``problem`` and how to launch each kernel, in order."""
    kernels = affine_kernels(problem)
    function = problem.function
    specs = []
    for kernel in kernels:
        shape = launch_shape(kernel.kernel)
        specs.append(
            KernelSpec(
                name=kernel.kernel.name,
                statement=0,
                tensors=tuple(a.name for a in function.arrays),
                scalars=tuple(s.name for s in function.scalars)
                + tuple(host_key(name, value) for name, value in kernel.values),
                output=function.statements[0].target.array if function.statements else "",
                grid=shape.grid,
                block=shape.block,
                mapping=None,  # type: ignore[arg-type]  # no tensor mapping: see gpu.affine
                shared_bytes=shape.dynamic_shared_bytes,
            )
        )
    return CudaSource(print_cuda_module(distinct_kernels(kernels)), tuple(specs))


def host_key(iterator: str, value: int) -> str:
    """The name under which a launch finds a host loop iterator's value."""
    return f"{iterator}={value}"


class AffineCudaExecutable(CudaExecutable):
    """The kernels of an affine program; the arrays it writes are copied back."""

    def __init__(self, problem: AffineProblem, source: CudaSource, compiled: Any):
        super().__init__(shadow_problem(problem), source, compiled)
        self._written = frozenset(problem.outputs)


class AffineCudaKernel:
    """An affine program compiled for GPU 0: called like
    :class:`~einkern.backends.cpu.affine.AffineKernel` (NumPy arrays are copied to
    the GPU and the written ones back; device arrays are used in place)."""

    def __init__(self, problem: AffineProblem):
        from . import CudaBackend, driver
        from .nvrtc import arch_for, compile_cubin

        backend = CudaBackend()
        if not backend.available():
            raise BackendError(
                f"the CUDA backend is not usable here: {backend.unavailable_reason()}",
                hint="use the cpu backend",
            )
        self.problem = problem
        self._binder = AffineBinder(problem, backend)
        source = affine_source(problem)
        arch = arch_for(*driver.device_properties(0).compute_capability)
        self.executable = AffineCudaExecutable(problem, source, compile_cubin(source.text, arch))
        self.executable.module(0)
        self._host_values = {
            host_key(name, value): float(value)
            for launch in affine_kernels(problem)
            for name, value in launch.values
        }

    @property
    def outputs(self) -> tuple[str, ...]:
        return self.problem.outputs

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        stream = kwargs.pop("stream", None)
        call = self._binder.bind(args, kwargs, stream)
        call = Call(call.arrays, call.infos, {**call.scalars, **self._host_values}, call.stream)
        self.executable.run_checked(call)
        results = tuple(call.arrays[name] for name in self.outputs)
        return results[0] if len(results) == 1 else results
