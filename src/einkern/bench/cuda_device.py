"""The CUDA benchmark device: PyTorch tensors on the GPU, CUDA events, L2 flushing.

Inputs are drawn on the GPU (uniform in [0.5, 1.5), never zeros) in each
tensor's layout, so nothing is copied from the host and einkern runs on
device arrays.  Before every timed call a buffer of at least twice the L2
size is overwritten, so every run starts from a cold cache.  Ceilings are
measured here too: a device-to-device copy of 1 GiB (bytes read plus
written) and cuBLAS through ``torch.matmul`` at n = 8192 in fp32 (TF32
disabled) and fp64.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Mapping
from statistics import median
from typing import Any

import numpy as np

from ..errors import AllocationError, UsageError
from ..ir.nodes import Problem
from ..semantics import ITEMSIZE
from .device import Calibration, host_bandwidth, host_peak
from .lowering import lower, module_ops


def _torch():
    try:
        import torch
    except ImportError as error:
        raise UsageError(
            f"the cuda benchmark needs PyTorch for device arrays and CUDA events ({error})",
            hint="install torch, or run `einkern bench --backend cpu`",
        ) from None
    if not torch.cuda.is_available():
        raise UsageError("PyTorch sees no CUDA device", hint="run with --backend cpu")
    return torch


def to_torch(array: Any) -> Any:
    """A torch view of a CUDA array of any DLPack library (CuPy, ...), no copy."""
    torch = _torch()
    if isinstance(array, torch.Tensor):
        return array
    return torch.from_dlpack(array)


class CudaEventTimer:
    """GPU time of each call between two CUDA events on the current stream, with
    the L2 cache flushed (a buffer ≥ 2× its size overwritten) before every call.

    The host's time to issue a call (argument checks, launches: tens to hundreds
    of µs in Python, for einkern and the peers alike) is kept out of the events:
    before each timed call the stream gets a spin kernel (``torch.cuda._sleep``)
    longer than twice the measured host time of one call, so the whole call is
    queued before the start event fires and the events see GPU work only.
    ``scripts/call_overhead.py`` measures the host time separately."""

    def __init__(self, torch: Any, flush_bytes: int):
        self.torch = torch
        self.flush_buffer = torch.empty(flush_bytes // 4, dtype=torch.int32, device="cuda")
        self._cycles_per_s: float | None = None

    def cycles_per_second(self) -> float:
        """The spin kernel's cycles per second (measured once)."""
        if self._cycles_per_s is None:
            torch = self.torch
            start, end = (torch.cuda.Event(enable_timing=True) for _ in range(2))
            torch.cuda._sleep(1000)
            start.record()
            torch.cuda._sleep(2_000_000)
            end.record()
            torch.cuda.synchronize()
            self._cycles_per_s = 2_000_000 / max(start.elapsed_time(end) / 1e3, 1e-9)
        return self._cycles_per_s

    def host_seconds(self, fn: Callable[[], Any]) -> float:
        """Wall time of issuing one call (without waiting for the GPU)."""
        self.torch.cuda.synchronize()
        started = time.perf_counter()
        fn()
        host = time.perf_counter() - started
        self.torch.cuda.synchronize()
        return host

    def time(self, fn: Callable[[], Any], runs: int) -> list[float]:
        torch = self.torch
        cover = int(min(2 * self.host_seconds(fn) + 50e-6, 0.1) * self.cycles_per_second())
        events = [
            (torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
            for _ in range(runs)
        ]
        for start, end in events:
            self.flush_buffer.fill_(1)
            torch.cuda._sleep(cover)
            start.record()
            fn()
            end.record()
        torch.cuda.synchronize()
        return [start.elapsed_time(end) / 1e3 for start, end in events]


class CudaDevice:
    """PyTorch CUDA tensors, CUDA-event timing with L2 flushing."""

    backend = "cuda"

    def __init__(self) -> None:
        torch = _torch()
        self.torch = torch
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
        properties = torch.cuda.get_device_properties(0)
        self.properties = properties
        self.l2_bytes = int(getattr(properties, "L2_cache_size", 0) or (64 << 20))
        self.flush_bytes = max(2 * self.l2_bytes, 128 << 20)
        self.timer = CudaEventTimer(torch, self.flush_bytes)
        self.dtypes = {
            "float32": torch.float32,
            "float64": torch.float64,
            "bfloat16": torch.bfloat16,
            "float16": torch.float16,
        }

    def describe(self) -> str:
        p = self.properties
        return (
            f"{p.name}, {p.multi_processor_count} SMs, {p.total_memory / 2**30:.0f} GiB, "
            f"L2 {self.l2_bytes / 2**20:.0f} MiB (flushed with {self.flush_bytes >> 20} MiB)"
        )

    # -- arrays -----------------------------------------------------------------

    def empty(self, shape: tuple[int, ...], dtype: str, layout: str) -> Any:
        """An uninitialised tensor of ``shape`` in ``layout`` (column: first index stride 1);
        :class:`~einkern.errors.AllocationError`, naming the bytes, when the GPU's
        memory cannot hold it."""
        torch = self.torch
        column = layout == "column" and len(shape) > 1
        try:
            if column:
                order = tuple(range(len(shape) - 1, -1, -1))
                storage = torch.empty(
                    tuple(reversed(shape)), dtype=self.dtypes[dtype], device="cuda"
                )
                return storage.permute(order)
            return torch.empty(shape, dtype=self.dtypes[dtype], device="cuda")
        except torch.cuda.OutOfMemoryError:
            nbytes = int(np.prod(shape, dtype=np.int64)) * ITEMSIZE[dtype]
            raise AllocationError(
                f"cannot allocate a {dtype} tensor of shape {tuple(shape)} on the GPU: "
                f"{nbytes} bytes asked for",
                hint="choose smaller extents",
            ) from None

    def random_inputs(self, problem: Problem, seed: int) -> dict[str, Any]:
        generator = self.torch.Generator(device="cuda")
        generator.manual_seed(seed)
        arrays = {}
        for name in problem.program.inputs:
            tensor = problem.program.tensor(name)
            array = self.empty(problem.shape(name), tensor.dtype, tensor.layout)
            array.uniform_(0.5, 1.5, generator=generator)
            arrays[name] = array
        return arrays

    def copy(self, array: Any) -> Any:
        return array.clone()  # preserve_format keeps the strides of a dense tensor

    def to_host(self, array: Any) -> np.ndarray:
        return to_torch(array).cpu().numpy()

    def synchronize(self) -> None:
        self.torch.cuda.synchronize()

    # -- ceilings -----------------------------------------------------------------

    def calibrate(self, quick: bool) -> Calibration:
        torch = self.torch
        nbytes = (256 if quick else 1024) << 20
        bandwidth = self.bandwidth(nbytes)
        n = 4096 if quick else 8192
        peak = {
            name: (2 * n - 1) * n * n / self._matmul_time(n, dtype)
            for name, dtype in self.dtypes.items()
        }
        torch.cuda.empty_cache()
        simt = {}
        for name in self.dtypes:
            try:
                simt[name] = simt_peak(name, self.properties.multi_processor_count)
            except Exception as error:  # noqa: BLE001 - the floor falls back to cuBLAS's
                print(f"SIMT {name} peak not measured: {error}", file=sys.stderr)
        method = {
            "bandwidth": f"torch copy_ of {nbytes >> 20} MiB device to device, median of 10 "
            "(bytes read + written)",
            "peak": f"cuBLAS via torch.matmul {n}x{n}x{n}, TF32 disabled, median of 10",
            "host": "numpy.copyto of 256 MiB and numpy.matmul 2048^3 (fp64), to size the "
            "NumPy reference",
            "simt_peak": "einkern's FMA-chain kernel (8 independent chains per thread, "
            f"{SIMT_ITERATIONS} steps, 16 blocks of 256 threads per SM), median of 10",
        }
        return Calibration(
            bandwidth,
            peak,
            method,
            host_bandwidth(256 << 20),
            host_peak(2048, "float64"),
            simt,
        )

    def bandwidth(self, nbytes: int = 1 << 30) -> float:
        """Bytes read + written per second by a device-to-device copy of ``nbytes``,
        median of 10 (L2 flushed before each)."""
        source = self.torch.ones(nbytes // 4, dtype=self.torch.float32, device="cuda")
        target = self.torch.empty_like(source)
        return 2 * nbytes / self.median_time(lambda: target.copy_(source), 10)

    def _matmul_time(self, n: int, dtype: Any) -> float:
        torch = self.torch
        a = torch.rand(n, n, dtype=dtype, device="cuda") + 0.5
        b = torch.rand(n, n, dtype=dtype, device="cuda") + 0.5
        out = torch.empty(n, n, dtype=dtype, device="cuda")
        return self.median_time(lambda: torch.matmul(a, b, out=out), 10)

    def median_time(self, fn: Callable[[], Any], runs: int) -> float:
        """Median seconds of ``runs`` calls of ``fn`` after one warm-up call."""
        fn()
        return median(self.timer.time(fn, runs))

    # -- checking -----------------------------------------------------------------

    def relative_error(self, result: Any, reference: Any) -> float:
        """max |result − reference| / max |reference|, on the GPU when the
        reference is a GPU tensor; NaN or inf in the result gives inf."""
        torch = self.torch
        result = to_torch(result) if not isinstance(result, np.ndarray) else result
        if isinstance(reference, np.ndarray):
            result = result.cpu().numpy() if isinstance(result, torch.Tensor) else result
            from ..testing import relative_error

            return relative_error(np.asarray(result), reference)
        result = result.to(torch.float64)
        reference = reference.to(torch.float64)
        if not bool(torch.isfinite(result).all()):
            return float("inf")
        scale = float(reference.abs().max()) if reference.numel() else 0.0
        diff = float((result - reference).abs().max()) if reference.numel() else 0.0
        return diff / scale if scale > 0 else diff

    def device_reference(
        self, problem: Problem, inputs: Mapping[str, Any], scalars: Mapping[str, float]
    ) -> dict[str, Any]:
        """Every output in float64 through ``torch.einsum`` on the GPU."""
        torch = self.torch
        values = {name: array.to(torch.float64, copy=True) for name, array in inputs.items()}
        run = lower(problem, module_ops("torch float64", torch))
        run(values, scalars)
        return {name: values[name] for name in problem.program.outputs}


#: FMA steps per chain of the SIMT peak kernel.
SIMT_ITERATIONS = 4096


def simt_source(dtype: str) -> str:
    """CUDA C of a kernel doing only independent fused multiply-adds in ``dtype``:
    eight chains per thread, ``SIMT_ITERATIONS`` steps each (2 flops per step);
    the result is stored only when it equals an impossible value, so nothing is
    optimised away and nothing is written."""
    ctype = "double" if dtype == "float64" else "float"
    chains = range(8)
    start = "".join(f"    {ctype} a{c} = x + {c} * threadIdx.x;\n" for c in chains)
    steps = "".join(f"        a{c} = fma(a{c}, b, x);\n" for c in chains)
    total = " + ".join(f"a{c}" for c in chains)
    return (
        f'extern "C" __global__ void ek_simt_{dtype}({ctype}* out, double seed) {{\n'
        f"    const {ctype} x = ({ctype})seed;\n"
        f"    const {ctype} b = ({ctype})(1.0 - seed * 1e-9);\n"
        f"{start}"
        f"    #pragma unroll 16\n"
        f"    for (int i = 0; i < {SIMT_ITERATIONS}; ++i) {{\n{steps}    }}\n"
        f"    if ({total} == ({ctype})-1.0) out[threadIdx.x] = {total};\n"
        "}\n"
    )


def simt_peak(dtype: str, sm_count: int, runs: int = 10) -> float:
    """Flop/s of :func:`simt_source`'s kernel on GPU 0 (16 blocks of 256 threads per
    SM), median of ``runs`` launches after one warm-up, timed with CUDA events."""
    from ..backends.cuda import driver
    from ..backends.cuda.limits import device_limits
    from ..backends.cuda.nvrtc import compile_cubin

    name = f"ek_simt_{dtype}"
    driver.activate(0)
    module = driver.load_module(
        compile_cubin(simt_source(dtype), device_limits().arch).cubin, [name]
    )
    grid, block = (16 * sm_count, 1, 1), (256, 1, 1)
    out = driver.alloc(8 * 256)
    timer = driver.EventTimer()
    try:

        def run() -> None:
            driver.launch(module.functions[name], grid, block, [out], [1e-3], 0, name)

        run()
        driver.synchronize(name)
        times = []
        for _ in range(runs):
            timer.start(0)
            run()
            times.append(timer.stop(0) * 1e-3)
    finally:
        timer.close()
        driver.free(out)
    flops = 2 * 8 * SIMT_ITERATIONS * grid[0] * block[0]
    return flops / median(times)
