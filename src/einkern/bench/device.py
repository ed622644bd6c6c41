"""Where a benchmark runs: a :class:`Device` per backend (arrays, timer, ceilings).

A device makes random inputs in each tensor's layout, copies them, measures
its own ceilings (:class:`Calibration`: copy bandwidth and matrix-product
peak per dtype) and times callables with its :class:`Timer`.  The CPU device
is here; the CUDA one (PyTorch arrays, CUDA events, L2 flushing) is in
:mod:`einkern.bench.cuda_device`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from statistics import median
from typing import Any, Protocol

import numpy as np

from ..arrays import copy_host_array, host_values
from ..backends.cpu.blas import SETTLE_S
from ..ir.nodes import Problem
from ..testing import random_array, random_arrays, relative_error


@dataclass(frozen=True)
class Calibration:
    """Ceilings measured in the same run: copy bandwidth in bytes/s (bytes read
    plus bytes written) and matrix-product peak in flop/s per dtype, with how
    each was measured; ``host_*`` are the CPU's, used to guess how long the
    NumPy reference of a case would take."""

    bandwidth: float
    peak: Mapping[str, float]
    method: Mapping[str, str] = field(default_factory=dict)
    host_bandwidth: float = 0.0
    host_peak: float = 0.0
    #: Peak of plain fused multiply-adds (no tensor cores) per dtype in flop/s, where
    #: measured (the CUDA device); the ``contractions`` report's floor uses it.
    simt_peak: Mapping[str, float] = field(default_factory=dict)

    def floor(self, flops: int, nbytes: int, dtype: str) -> float:
        """Fewest seconds a kernel can take: max(bytes / bandwidth, flops / peak)."""
        return max(nbytes / self.bandwidth, flops / self.peak[dtype])

    def simt_floor(self, flops: int, nbytes: int, dtype: str) -> float:
        """max(bytes / bandwidth, flops / SIMT peak), the matrix-product peak where no
        SIMT peak was measured."""
        peak = self.simt_peak.get(dtype) or self.peak[dtype]
        return max(nbytes / self.bandwidth, flops / peak)


class Timer(Protocol):
    """Times ``runs`` calls of a function (already warmed up); seconds per call."""

    def time(self, fn: Callable[[], Any], runs: int) -> list[float]: ...


class Device(Protocol):
    """Arrays, timing and ceilings of one backend."""

    backend: str

    @property
    def timer(self) -> Timer:
        """How this device times a callable."""
        ...

    def describe(self) -> str: ...

    def random_inputs(self, problem: Problem, seed: int) -> dict[str, Any]: ...

    def copy(self, array: Any) -> Any: ...

    def to_host(self, array: Any) -> np.ndarray: ...

    def synchronize(self) -> None: ...

    def calibrate(self, quick: bool) -> Calibration: ...

    def relative_error(self, result: Any, reference: Any) -> float: ...

    def device_reference(
        self, problem: Problem, inputs: Mapping[str, Any], scalars: Mapping[str, float]
    ) -> dict[str, Any] | None:
        """Every output computed in float64 on the device by a peer library, or
        None where the device has no faster way than the NumPy reference."""
        ...


class PerfCounterTimer:
    """Host wall-clock time of each call (``time.perf_counter``), after calling it
    for ``settle_s`` seconds first (see :data:`einkern.backends.cpu.blas.SETTLE_S`)."""

    def __init__(self, settle_s: float = 0.0) -> None:
        self.settle_s = settle_s

    def time(self, fn: Callable[[], Any], runs: int) -> list[float]:
        started = time.perf_counter()
        while time.perf_counter() - started < self.settle_s:
            fn()
        times = []
        for _ in range(runs):
            start = time.perf_counter()
            fn()
            times.append(time.perf_counter() - start)
        return times


def _median_time(fn: Callable[[], Any], runs: int, timer: Timer) -> float:
    fn()
    return median(timer.time(fn, runs))


def host_bandwidth(nbytes: int, runs: int = 5) -> float:
    """Copy bandwidth of this machine's memory through NumPy (read + write bytes/s)."""
    source = np.ones(nbytes // 8)
    target = np.empty_like(source)
    seconds = _median_time(lambda: np.copyto(target, source), runs, PerfCounterTimer())
    return 2 * source.nbytes / seconds


def host_peak(n: int, dtype: str, runs: int = 3) -> float:
    """numpy.matmul rate at n×n×n in flop/s, counting (2n − 1)·n² like einkern."""
    rng = np.random.default_rng(0)
    a = random_array(rng, (n, n), dtype)
    b = random_array(rng, (n, n), dtype)
    out = np.empty((n, n), dtype)
    seconds = _median_time(lambda: np.matmul(a, b, out=out), runs, PerfCounterTimer())
    return (2 * n - 1) * n * n / seconds


class CpuDevice:
    """NumPy arrays on the host, timed with ``time.perf_counter``."""

    backend = "cpu"

    def __init__(self, settle_s: float = SETTLE_S) -> None:
        self.timer: Timer = PerfCounterTimer(settle_s)

    def describe(self) -> str:
        from .environment import cpu_model

        return cpu_model()

    def random_inputs(self, problem: Problem, seed: int) -> dict[str, Any]:
        return random_arrays(problem, seed)

    def copy(self, array: Any) -> Any:
        return copy_host_array(array)

    def to_host(self, array: Any) -> np.ndarray:
        return host_values(array)

    def synchronize(self) -> None:
        return None

    def calibrate(self, quick: bool) -> Calibration:
        size = 1024 if quick else 2048
        nbytes = (64 if quick else 512) << 20
        bandwidth = host_bandwidth(nbytes)
        peak = {dtype: host_peak(size, dtype) for dtype in ("float32", "float64")}
        method = {
            "bandwidth": f"numpy.copyto of {nbytes >> 20} MiB, median of 5 (bytes read + written)",
            "peak": f"numpy.matmul {size}x{size}x{size}, median of 3",
        }
        return Calibration(bandwidth, peak, method, bandwidth, peak["float64"])

    def relative_error(self, result: Any, reference: Any) -> float:
        return relative_error(np.asarray(result), np.asarray(reference))

    def device_reference(self, problem, inputs, scalars) -> None:
        return None
