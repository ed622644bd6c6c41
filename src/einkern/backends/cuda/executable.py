"""A compiled problem on the GPU: its kernels launched on the caller's stream.

The executable takes a :class:`~einkern.backends.binding.Call` (arrays and
scalars checked once by the binder) and launches through ``cuda.core``
(``ObjectCode``, ``launch``, ``Stream``) on the call's stream — the current
stream of the arrays' library, or the one the caller gave — with no host wait:
work queued on that stream afterwards is ordered after the kernels, and the
launches can be captured into a CUDA graph.  Device arrays are used in place;
host (NumPy) arrays are copied to the device on the stream, and the ones the
program writes are copied back before the call returns.  Temporaries (the padded
copies of the ``pad`` boundary policy, and a program rewrite's temporaries) are
allocated stream-ordered for each call from einkern's memory pool (from the
graph's memory during a capture), so concurrent calls on different streams
never share them.
"""

from __future__ import annotations

import os
import statistics
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from ...errors import BackendError
from ...ir.nodes import Problem
from ..binding import Call, bind_arguments
from ..temporaries import owned, resolve_views, roots, views
from . import driver
from .arrays import READER
from .nvrtc import CompiledModule, KernelResources, arch_for, compile_cubin
from .tensor_maps import map_arguments

if TYPE_CHECKING:
    from .codegen import CudaSource, KernelSpec

#: EINKERN_SYNC=1 waits for the kernels after every call (errors at the call that caused them).
SYNCHRONIZE = os.environ.get("EINKERN_SYNC", "") not in ("", "0")
_STATIC_SHARED_LIMIT = 48 * 1024
#: Bytes to which the kernels' widest global accesses (16-byte vector loads and
#: cp.async copies) need device arrays aligned; others run from an aligned copy.
DEVICE_ALIGNMENT = 16


def as_stream(handle: int) -> Any:
    """The ``cuda.core`` Stream of a handle (0: the legacy default stream)."""
    core = driver.core()
    return core.LEGACY_DEFAULT_STREAM if handle == 0 else core.Stream.from_handle(handle)


class CudaExecutable:
    """The kernels of one problem; the CUBIN is loaded for each device on first use."""

    def __init__(self, problem: Problem, source: CudaSource, compiled: CompiledModule):
        self.problem = problem
        self.source = source
        self._compiled = {compiled.arch: compiled}
        self._kernels: dict[int, dict[str, Any]] = {}
        self._plans: dict[int, tuple] = {}
        self._written = frozenset(problem.program.outputs)
        program = problem.program
        declared = {t.name for t in program.tensors}  # (kernels also name temporaries)
        named = tuple(dict.fromkeys(t for k in source.kernels for t in k.tensors if t in declared))
        # the caller's tensors the kernels use (through views too), and the rewrite's
        # temporaries with memory of their own (allocated for each call, as the pad copies)
        used = roots(problem, named)
        self._used = tuple(t for t in used if not program.tensor(t).temporary)
        # (a temporary no kernel names, one a chain keeps on chip, gets no memory)
        self._owned = tuple((t, problem.nbytes(t)) for t in owned(problem) if t in used)
        self._views = bool(views(problem))

    @property
    def resources(self) -> tuple[KernelResources, ...]:
        """ptxas' report for each kernel, for the architecture first built."""
        return next(iter(self._compiled.values())).resources

    def module(self, ordinal: int) -> dict[str, Any]:
        """The ``cuda.core`` kernels by name for device ``ordinal`` (compiled for its
        architecture and loaded on first use)."""
        kernels = self._kernels.get(ordinal)
        if kernels is None:
            core = driver.core()
            device = core.Device(ordinal)
            device.set_current()
            arch = arch_for(*device.compute_capability)
            if arch not in self._compiled:
                self._compiled[arch] = compile_cubin(self.source.text, arch)
            code = core.ObjectCode.from_cubin(
                self._compiled[arch].cubin, name=self.problem.program.name
            )
            kernels = {}
            for spec in self.source.kernels:
                kernel = code.get_kernel(spec.name)
                if spec.shared_bytes > _STATIC_SHARED_LIMIT:
                    driver.allow_dynamic_shared(
                        kernel.handle, spec.shared_bytes, ordinal, spec.name
                    )
                kernels[spec.name] = kernel
            self._kernels[ordinal] = kernels
        return kernels

    def run(
        self, arrays: Mapping[str, Any], scalars: Mapping[str, Any], *, stream: Any = None
    ) -> None:
        """Check the arrays and scalars by name (the one check,
        :class:`~einkern.backends.binding.Binder`; names the program does not have
        are ignored) and run: see :meth:`run_checked`."""
        self.run_checked(self._bind(arrays, scalars, stream))

    def run_checked(self, call: Call) -> None:
        """Run every statement in order on the call's stream, in place."""
        self._execute(call, repeat=0)

    def profile(
        self,
        arrays: Mapping[str, Any],
        scalars: Mapping[str, Any],
        repeat: int = 10,
        *,
        stream: Any = None,
    ) -> list[float]:
        """Check the arguments (as :meth:`run`) and :meth:`profile_checked` them."""
        return self.profile_checked(self._bind(arrays, scalars, stream), repeat)

    def profile_checked(self, call: Call, repeat: int = 10) -> list[float]:
        """Median milliseconds of each kernel over ``repeat`` launches (after one
        warm-up) on the call's stream.  Kernels of ``+=`` statements accumulate
        into their outputs."""
        return self._execute(call, repeat=max(1, repeat))

    def _bind(self, arrays: Mapping[str, Any], scalars: Mapping[str, Any], stream: Any) -> Call:
        return bind_arguments(self.problem, READER, arrays, scalars, stream, ignore_unknown=True)

    # -- implementation ------------------------------------------------------

    def _plan(self, ordinal: int) -> tuple[tuple[Any, Any, KernelSpec, Any], ...]:
        """Each kernel with its launch configuration and specification, in order, and
        its prepared driver launch when it takes tensor maps (else None)."""
        plan = self._plans.get(ordinal)
        if plan is None:
            core = driver.core()
            kernels = self.module(ordinal)
            plan = tuple(
                (
                    kernels[spec.name],
                    core.LaunchConfig(
                        grid=spec.grid, block=spec.block, shmem_size=spec.shared_bytes
                    ),
                    spec,
                    # tensor maps are 128-byte parameters cuda.core's launch cannot take
                    driver.PreparedLaunch(
                        kernels[spec.name].handle,
                        spec.grid,
                        spec.block,
                        spec.shared_bytes,
                        spec.name,
                    )
                    if spec.maps
                    else None,
                )
                for spec in self.source.kernels
            )
            self._plans[ordinal] = plan
        return plan

    def _execute(self, call: Call, repeat: int) -> list[float]:
        core = driver.core()
        infos = call.infos
        used = [infos[name] for name in self._used]
        ordinal = _device_ordinal(used)
        device = core.Device(ordinal)
        device.set_current()  # the legacy default stream is the current context's
        plan = self._plan(ordinal)
        stream = as_stream(int(call.stream) if call.stream is not None else 0)
        for producer in {info.stream for info in used if info.stream is not None}:
            if producer != call.stream:
                stream.wait(as_stream(producer))  # on the GPU: the host never waits
        pointers = {name: infos[name].pointer for name in self._used}
        host = [name for name in self._used if infos[name].device == "cpu"]
        # kernels copy 16 bytes at a time (vector loads, cp.async): a device array
        # starting off that alignment (a view into a larger buffer) runs from an
        # aligned copy, copied back when written
        moved = [
            name
            for name in self._used
            if infos[name].device != "cpu" and infos[name].pointer % DEVICE_ALIGNMENT
        ]
        if not host and not moved and not self.source.temporaries and not self._owned:
            if self._views:
                resolve_views(self.problem, pointers)
            times = _launch(core, stream, plan, pointers, call.scalars, repeat)
            if SYNCHRONIZE:
                _synchronize(stream, self.problem.program.name)
            return times
        with _buffers(device, stream) as allocate:
            for name in host:
                nbytes = self.problem.nbytes(name)
                pointers[name] = allocate(nbytes)
                driver.copy_to_device_async(
                    pointers[name], infos[name].pointer, nbytes, stream.handle
                )
            for name in moved:
                nbytes = self.problem.nbytes(name)
                pointers[name] = allocate(nbytes)
                driver.copy_async(pointers[name], infos[name].pointer, nbytes, stream.handle)
            for name, nbytes in (*self.source.temporaries, *self._owned):
                pointers[name] = allocate(nbytes)
            if self._views:
                resolve_views(self.problem, pointers)
            times = _launch(core, stream, plan, pointers, call.scalars, repeat)
            for name in moved:
                if name in self._written:
                    nbytes = self.problem.nbytes(name)
                    driver.copy_async(infos[name].pointer, pointers[name], nbytes, stream.handle)
            for name in host:
                if name in self._written:
                    driver.copy_to_host_async(
                        infos[name].pointer,
                        pointers[name],
                        self.problem.nbytes(name),
                        stream.handle,
                    )
            if host or SYNCHRONIZE:
                # Host arrays must be complete when the call returns; device arrays
                # follow stream semantics (like torch and CuPy).
                _synchronize(stream, self.problem.program.name)
        return times


def _launch(
    core: Any, stream: Any, plan: tuple, pointers: dict[str, int], scalars: Any, repeat: int
) -> list[float]:
    """Launch (or with ``repeat``, time) every kernel of ``plan`` in order on ``stream``."""
    times = []
    for kernel, config, spec, prepared in plan:
        arrays = tuple(pointers[t] for t in spec.tensors)
        values = tuple(float(scalars[s]) for s in spec.scalars)

        def go(kernel=kernel, config=config, spec=spec, prepared=prepared, arrays=arrays,
               values=values) -> None:  # fmt: skip
            if prepared is None:
                core.launch(stream, config, kernel, *arrays, *values)
            else:
                maps = map_arguments(spec.maps, pointers)
                prepared(arrays, values, maps, int(stream.handle))

        try:
            if repeat:
                times.append(_time(stream, go, repeat))
            else:
                go()
        except BackendError:
            raise
        except Exception as error:  # noqa: BLE001 - cuda.core's CUDAError, reported typed
            raise BackendError(
                f"launching a kernel on stream {int(stream.handle):#x} failed: {error}",
                hint="is the stream on the arrays' GPU, and is its context alive?",
            ) from error
    return times


@contextmanager
def _buffers(device: Any, stream: Any) -> Iterator[Any]:
    """``allocate(nbytes) -> pointer``: device memory ordered on ``stream`` (from the
    graph's memory while the stream is being captured), freed on the stream after
    the block, so the host never waits and a captured graph owns its memory."""
    core = driver.core()
    resource = None
    taken: list[Any] = []

    def allocate(nbytes: int) -> int:
        nonlocal resource
        if resource is None:
            capturing = driver.is_capturing(stream.handle)
            resource = core.GraphMemoryResource(device) if capturing else _pool(device)
        buffer = resource.allocate(max(1, nbytes), stream=stream)
        taken.append(buffer)
        return int(buffer.handle)

    try:
        yield allocate
    finally:
        for buffer in taken:
            buffer.close(stream)


_POOLS: dict[int, Any] = {}


def _pool(device: Any) -> Any:
    """einkern's stream-ordered memory pool on ``device``, created once.  It keeps
    freed memory for the next call instead of returning it to the driver at every
    synchronisation (a pool's default), which would make each call map fresh memory:
    it holds at most the most temporaries and staging memory one call has used."""
    pool = _POOLS.get(device.device_id)
    if pool is None:
        core = driver.core()
        pool = core.DeviceMemoryResource(device, core.DeviceMemoryResourceOptions())
        driver.keep_pool_memory(pool.handle)
        _POOLS[device.device_id] = pool
    return pool


def _synchronize(stream: Any, program: str) -> None:
    try:
        stream.sync()
    except Exception as error:  # noqa: BLE001 - cuda.core's CUDAError, reported typed
        raise BackendError(f"{error} while running program {program}") from error


def _device_ordinal(infos: Any) -> int:
    """The GPU of the device arrays (the binder has checked there is one); 0 when
    every array is in host memory."""
    for info in infos:
        if info.device.startswith("cuda:"):
            return int(info.device.split(":")[1])
    return 0


def _time(stream: Any, go: Callable[[], None], repeat: int) -> float:
    """Median milliseconds of ``go`` (one launch on ``stream``) after a warm-up."""
    options = driver.core().EventOptions(timing_enabled=True)
    go()  # warm-up
    samples = []
    for _ in range(repeat):
        start = stream.record(options=options)
        go()
        end = stream.record(options=options)
        end.sync()
        samples.append(float(end - start))
    return statistics.median(samples)
