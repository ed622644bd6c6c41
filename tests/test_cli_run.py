"""`einkern run`: its progress line, and the device-resident timing of the CUDA
backend (its logic run here on a device made of NumPy arrays)."""

from __future__ import annotations

import io
import time

import numpy as np
import pytest

import einkern
from einkern.cli import app, main
from einkern.cli.common import format_bytes
from einkern.cli.progress import ProgressLine
from einkern.cli.timing import (
    Copies,
    Timing,
    describe_copies,
    host_tensors,
    time_device_resident,
    time_on_host,
)
from einkern.testing import output_tolerance, random_arrays, random_scalars, relative_error


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class TtyStream(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_line_is_silent_when_stderr_is_not_a_terminal():
    stream = io.StringIO()
    with ProgressLine(stream=stream, delay=0.0, interval=0.01) as progress:
        assert not progress.enabled and progress._thread is None
        progress.set("compiling")
        time.sleep(0.05)
    assert stream.getvalue() == ""


def test_progress_line_appears_after_the_delay_and_is_erased():
    stream, clock = TtyStream(), FakeClock()
    progress = ProgressLine(stream=stream, delay=1.5, interval=3600, clock=clock)
    assert progress.enabled
    progress.set("einkern run gemm.ein: compiling 1 statement")
    assert stream.getvalue() == ""  # short work: nothing shown
    clock.now += 2.0
    progress.draw()
    assert stream.getvalue() == "\reinkern run gemm.ein: compiling 1 statement (2 s)"
    progress.clear()
    shown = len("einkern run gemm.ein: compiling 1 statement (2 s)")
    assert stream.getvalue().endswith("\r" + " " * shown + "\r")
    before = stream.getvalue()
    progress.draw()  # cleared: nothing until the next step is named
    assert stream.getvalue() == before
    progress.set("a longer step name")
    progress.set("x")  # a shorter line blanks the longer one's last characters
    assert stream.getvalue().endswith("\rx (2 s)" + " " * len("a longer step name"[1:]))
    progress.close()


def test_progress_line_redraws_from_its_thread_and_stops_on_close():
    stream = TtyStream()
    progress = ProgressLine(stream=stream, delay=0.0, interval=0.01)
    progress.set("running")
    deadline = time.monotonic() + 10  # generous: the machine may be busy
    while stream.getvalue().count("\rrunning") < 3 and time.monotonic() < deadline:
        time.sleep(0.01)
    progress.close()
    assert progress._thread is None
    assert stream.getvalue().count("\rrunning (") >= 3  # one from set(), the rest redraws
    assert stream.getvalue().endswith("\r")  # erased


def test_run_prints_nothing_on_stderr_when_captured(capsys):
    code = main(["run", "examples/riemann.ein", "-e", "n=4", "--backend", "cpu", "--repeat", "1"])
    out, err = capsys.readouterr()
    assert code == 0 and "riemann on cpu: median" in out
    assert err == ""


class NumpyDevice:
    """A DeviceMemory whose "device" arrays are NumPy copies; counts its calls."""

    def __init__(self) -> None:
        self.uploads = 0
        self.downloads = 0
        self.calls = 0
        self.released = False

    def upload(self, array):
        self.uploads += 1
        return array.copy(order="K")

    def empty_like(self, array):
        return np.full_like(array, np.nan, order="K")

    def download(self, source, destination):
        self.downloads += 1
        destination[...] = source

    def elapsed(self, fn):
        self.calls += 1
        fn()
        return 1e-3 * self.calls

    def release(self):
        self.released = True


def _problem_and_inputs(path: str, **extents):
    kernel = einkern.compile(path, backend="cpu", **extents)
    problem = kernel.problem
    arrays = random_arrays(problem, 5, problem.program.inputs)
    scalars = random_scalars(problem, 5)
    return kernel, problem, arrays, scalars


@pytest.mark.parametrize(
    "path, extents",
    [
        ("examples/sd_t_d1_1.ein", {"T": 4}),  # -=: t3 read and written
        ("examples/local_grad3.ein", {"p": 3, "nelt": 5}),  # three outputs only written
        ("examples/gemm_alpha_beta.ein", {"m": 6, "n": 5, "k": 4}),  # scalars, C read
    ],
)
def test_device_resident_timing_checks_the_warm_up_and_copies_inputs_once(path, extents):
    kernel, problem, arrays, scalars = _problem_and_inputs(path, **extents)
    before = {name: array.copy() for name, array in arrays.items()}
    device = NumpyDevice()
    timing = time_device_resident(kernel, arrays, scalars, 4, device)
    assert timing.seconds == (2e-3, 3e-3, 4e-3, 5e-3)  # the warm-up (1e-3) is not timed
    assert device.calls == 5 and device.released
    assert device.uploads == len(problem.program.inputs)  # once, not per run
    assert device.downloads == len(problem.program.outputs)
    assert timing.to_device == Copies(
        len(arrays), sum(a.nbytes for a in arrays.values()), timing.to_device.seconds
    )
    assert timing.to_host is not None
    assert timing.to_host.nbytes == sum(problem.nbytes(n) for n in problem.program.outputs)
    reference = einkern.evaluate(problem, arrays, scalars)
    for name in problem.program.outputs:
        error = relative_error(timing.outputs[name], reference[name])
        assert error <= output_tolerance(problem, name), (name, error)
    for name, array in arrays.items():  # the host inputs are left as they were
        np.testing.assert_array_equal(array, before[name])


def test_device_resident_timing_releases_memory_when_a_call_fails():
    kernel, _, arrays, scalars = _problem_and_inputs("examples/riemann.ein", n=3)
    device = NumpyDevice()

    def failing(fn):
        raise einkern.errors.BackendError("launch failed")

    device.elapsed = failing  # type: ignore[method-assign]
    with pytest.raises(einkern.errors.BackendError):
        time_device_resident(kernel, arrays, scalars, 2, device)
    assert device.released


def test_host_timing_keeps_the_inputs_and_returns_the_warm_up_outputs():
    kernel, problem, arrays, scalars = _problem_and_inputs("examples/sd_t_d1_1.ein", T=4)
    before = arrays["t3"].copy()
    runs: list[int] = []
    timing = time_on_host(kernel, arrays, scalars, 3, step=runs.append)
    assert runs == [0, 1, 2, 3] and len(timing.seconds) == 3
    assert timing.to_device is None and timing.to_host is None
    np.testing.assert_array_equal(arrays["t3"], before)
    reference = einkern.evaluate(problem, arrays, scalars)
    assert relative_error(timing.outputs["t3"], reference["t3"]) <= 1e-12


def test_host_tensors_adds_written_tensors_in_their_layout():
    kernel, problem, arrays, _ = _problem_and_inputs("examples/local_grad3.ein", p=2, nelt=3)
    host = host_tensors(problem, arrays)
    assert set(host) == {t.name for t in problem.program.tensors}
    assert host["ur"].shape == (3, 2, 2, 2) and host["ur"].flags.c_contiguous
    assert host["u"] is arrays["u"]


def test_format_bytes_uses_binary_units():
    assert format_bytes(0) == "0 B"
    assert format_bytes(1023) == "1023 B"
    assert format_bytes(1536) == "1.5 KiB"
    assert format_bytes(453 * 2**20) == "453 MiB"
    assert format_bytes(3 * 2**30) == "3 GiB"
    assert format_bytes(5 * 2**40) == "5 TiB"
    assert format_bytes(3 * 2**60) == "3 EiB"
    assert format_bytes(10**400) == "1.00e+400 B"  # any size, no OverflowError


def test_run_on_cuda_says_what_was_timed_and_reports_copies_apart(capsys, monkeypatch):
    """The output of a device-resident timing (faked: no GPU here)."""

    def fake_time_kernel(kernel, arrays, scalars, repeat, step):
        outputs = {"R": einkern.evaluate(kernel.problem, arrays, scalars)["R"]}
        return Timing(
            (2e-3, 4e-3, 3e-3),
            outputs,
            "CUDA events around each call, arrays resident on the GPU",
            Copies(2, 3 * 2**20, 0.0125),
            Copies(1, 2**20, 0.0005),
        )

    monkeypatch.setattr(app, "_time_kernel", fake_time_kernel)
    code = main(["run", "examples/riemann.ein", "-e", "n=4", "-b", "cpu", "--check"])
    out, err = capsys.readouterr()
    assert code == 0 and err == ""
    lines = out.splitlines()
    assert lines[0].startswith("riemann on cpu: kernel median 3.000 ms over 3 runs")
    assert lines[1] == (
        "  timed with CUDA events around each call, arrays resident on the GPU, "
        "after a warm-up call"
    )
    assert lines[2] == (
        "  copies to the GPU: 2 arrays, 3 MiB, 12.500 ms (host clock; not in the kernel time)"
    )
    assert lines[3] == (
        "  copies to the host: 1 array, 1 MiB, 0.500 ms (host clock; not in the kernel time)"
    )
    assert lines[4].startswith("check R: max relative error") and lines[4].endswith("ok")
    assert describe_copies(Timing((1.0,), {}, "host clock")) == []


class FakeDriver:
    """The driver calls CudaMemory makes, recorded; ``alloc`` fails past ``limit``."""

    class EventTimer:
        def __init__(self) -> None:
            self.closed = False

        def start(self, stream=0):
            assert stream == 0

        def stop(self, stream=0):
            return 2.5  # milliseconds

        def close(self):
            self.closed = True

    def __init__(self, limit: int = 1 << 40) -> None:
        self.limit = limit
        self.calls: list[tuple] = []
        self.next = 0x1000

    def activate(self, ordinal):
        self.calls.append(("activate", ordinal))

    def alloc(self, nbytes):
        if nbytes > self.limit:
            raise einkern.errors.BackendError("cuMemAlloc failed: CUDA_ERROR_OUT_OF_MEMORY")
        pointer, self.next = self.next, self.next + nbytes
        self.calls.append(("alloc", nbytes))
        return pointer

    def free(self, pointer):
        self.calls.append(("free", pointer))

    def copy_to_device(self, destination, source, nbytes):
        self.calls.append(("to_device", destination, nbytes))

    def copy_to_host(self, destination, source, nbytes):
        self.calls.append(("to_host", source, nbytes))

    def synchronize(self, what="the kernels"):
        self.calls.append(("synchronize",))


def test_cuda_memory_describes_its_arrays_and_frees_them():
    from einkern.cli.timing import CudaMemory

    driver = FakeDriver()
    memory = CudaMemory(driver)
    host = np.asfortranarray(np.ones((3, 4)))
    device = memory.upload(host)
    interface = device.__cuda_array_interface__
    assert interface == {
        "version": 3,
        "shape": (3, 4),
        "typestr": "<f8",
        "strides": (8, 24),  # bytes, column-major
        "data": (0x1000, False),
        "stream": None,
    }
    empty = memory.empty_like(np.zeros((2,), dtype=np.float32))
    assert empty.__cuda_array_interface__["data"] == (0x1000 + 96, False)
    out = np.empty_like(host, order="K")
    memory.download(device, out)
    assert memory.elapsed(lambda: None) == pytest.approx(2.5e-3)
    timer = memory.timer
    memory.release()
    assert driver.calls == [
        ("activate", 0),
        ("alloc", 96),
        ("to_device", 0x1000, 96),
        ("alloc", 8),
        ("to_host", 0x1000, 96),
        ("synchronize",),
        ("free", 0x1000),
        ("free", 0x1000 + 96),
    ]
    assert timer.closed
    with pytest.raises(ValueError, match="contiguous"):
        memory.upload(np.ones((4, 4))[:, ::2])


def test_cuda_memory_out_of_memory_names_the_size():
    from einkern.cli.timing import CudaMemory

    memory = CudaMemory(FakeDriver(limit=1 << 20))
    with pytest.raises(einkern.errors.AllocationError, match=r"cannot allocate 8 MiB on the GPU"):
        memory.upload(np.ones((1024, 1024)))
