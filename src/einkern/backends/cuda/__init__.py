"""The CUDA backend: NVRTC-compiled kernels launched through ``cuda.core`` on the
caller's stream.

Importing this package needs neither ``cuda-bindings`` nor a GPU; only
:meth:`CudaBackend.build` (and running) does.  ``emit`` and ``resources`` work
anywhere (``resources`` needs NVRTC, not a GPU).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ...arrays import ArrayInfo
from ...errors import BackendError
from ...gpu.mapping import Mapping
from ...ir.nodes import Problem
from . import arrays as _arrays
from .codegen import CudaSource, KernelSpec
from .executable import CudaExecutable
from .generate import MappingSpec, Nests, generate, resolve_mappings
from .nvrtc import DEFAULT_ARCH, KernelResources
from .resources import kernel_resources

__all__ = [
    "CudaBackend",
    "CudaExecutable",
    "CudaSource",
    "KernelResources",
    "KernelSpec",
    "kernel_resources",
]


class CudaBackend:
    """Backend ``cuda``: one kernel per statement, each under a mapping (the decision
    algorithm's unless given), NVRTC, driver API."""

    name = "cuda"

    def __init__(self) -> None:
        self._executables: dict[tuple[Problem, str], CudaExecutable] = {}
        self._why_unavailable: str | None = None
        self._available: bool | None = None

    # -- availability ---------------------------------------------------------

    def available(self) -> bool:
        """True when cuda-bindings, cuda-core, NVRTC, a driver and at least one GPU
        are usable."""
        if self._available is None:
            self._available, self._why_unavailable = _probe()
        return self._available

    def unavailable_reason(self) -> str | None:
        """Why :meth:`available` is False (None when it is True)."""
        self.available()
        return self._why_unavailable

    # -- the protocol -----------------------------------------------------------

    def source(
        self, problem: Problem, mappings: MappingSpec = None, nests: Nests = ()
    ) -> CudaSource:
        """Kernels of the problem: each statement under its mapping (given, or the
        decision algorithm's); each group of ``nests`` (statements without
        dependences between them, from the fusion planner) as one kernel."""
        return generate(problem, mappings, nests)

    def emit(self, problem: Problem, mappings: MappingSpec = None, nests: Nests = ()) -> str:
        """CUDA C source of the problem (needs no GPU)."""
        return self.source(problem, mappings, nests).text

    def build(
        self, problem: Problem, mappings: MappingSpec = None, nests: Nests = ()
    ) -> CudaExecutable:
        """Compile (or fetch from the caches) the problem's kernels for GPU 0."""
        if not self.available():
            raise BackendError(
                f"the CUDA backend is not usable here: {self._why_unavailable}",
                hint="run on a machine with an NVIDIA GPU and `pip install 'einkern[cuda]'`, "
                "or use backend='cpu' (`--backend cpu` on the command line)",
            )
        source = self.source(problem, mappings, nests)
        key = (problem, source.text)
        executable = self._executables.get(key)
        if executable is None:
            from . import driver
            from .nvrtc import arch_for, compile_cubin

            arch = arch_for(*driver.device_properties(0).compute_capability)
            executable = CudaExecutable(problem, source, compile_cubin(source.text, arch))
            executable.module(0)  # load now: problems surface at build time (not in a capture)
            self._executables[key] = executable
        return executable

    def describe(self, array: Any, stream: int | None = None) -> ArrayInfo | None:
        """See :func:`.arrays.describe`: ``stream`` is the call's stream, which the
        array's producer is ordered before."""
        return _arrays.describe(array, stream)

    def resolve_stream(self, stream: Any, arrays: Sequence[Any]) -> int:
        """The stream handle a call launches on (see :func:`.arrays.resolve_stream`)."""
        return _arrays.resolve_stream(stream, arrays)

    def allocate(self, problem: Problem, tensor: str, like: Sequence[Any]) -> Any:
        return _arrays.allocate(problem, tensor, like)

    # -- information ------------------------------------------------------------

    def device_properties(self, ordinal: int = 0):
        """:class:`~.driver.DeviceProperties` of GPU ``ordinal``."""
        from . import driver

        return driver.device_properties(ordinal)

    def resources(
        self, problem: Problem, arch: str | None = None, mappings: MappingSpec = None
    ) -> list[KernelResources]:
        """Registers, shared memory, stack and spill bytes of each kernel, for
        ``arch`` (default: GPU 0's architecture, or sm_90 without a GPU)."""
        if arch is None:
            arch = self.device_properties(0).arch if self.available() else DEFAULT_ARCH
        return kernel_resources(problem, arch, mappings)

    def mappings(self, problem: Problem, mappings: MappingSpec = None) -> list[Mapping]:
        """The :class:`~einkern.gpu.mapping.Mapping` each statement's kernel is
        compiled under (the given ones, the decision algorithm's for the others),
        in statement order: the mappings :meth:`source` lowers."""
        chosen = resolve_mappings(problem, mappings)
        return [chosen[p] for p in range(len(problem.program.statements))]


def _probe() -> tuple[bool, str | None]:
    try:
        import cuda.bindings.driver  # noqa: F401
        import cuda.bindings.nvrtc  # noqa: F401
    except ImportError:
        return False, "cuda-bindings is not installed"
    try:
        import cuda.core  # noqa: F401 - compiles and launches
    except ImportError:
        return False, "cuda-core is not installed"
    try:
        from . import driver
        from .nvrtc import nvrtc_version

        nvrtc_version()
        if driver.device_count() == 0:
            return False, "no CUDA GPU is present"
    except BackendError as error:
        return False, error.message
    except Exception as error:  # noqa: BLE001 - any failure means "not here"
        return False, f"{type(error).__name__}: {error}"
    return True, None
