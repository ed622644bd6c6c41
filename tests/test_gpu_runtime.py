"""The CUDA runtime boundary on a GPU: launches on the caller's stream with no host
wait, ``torch.compile``, CUDA-graph capture and CuPy streams.  Selected only with
``pytest -m gpu`` (collected, not run, elsewhere)."""

from __future__ import annotations

import random
from dataclasses import replace

import numpy as np
import pytest

import einkern
from einkern.errors import ArgumentError

pytestmark = pytest.mark.gpu

GEMM = """
dims n
tensor A[n, n], B[n, n], C[n, n]
C[i,j] = A[i,k] * B[k,j]
"""
#: ~0.1-0.2 s of GPU time at 1-2 GHz: far longer than einkern's call overhead.
SLEEP_CYCLES = 200_000_000


@pytest.fixture(scope="module")
def torch():
    torch = pytest.importorskip("torch")
    assert torch.cuda.is_available(), "these tests need a CUDA build of torch and a GPU"
    return torch


@pytest.fixture(scope="module")
def gemm():
    kernel = einkern.compile(GEMM, backend="cuda", n=256)
    assert kernel.backend.name == "cuda"
    return kernel


def operands(torch, seed: int, n: int = 256):
    generator = torch.Generator(device="cuda").manual_seed(seed)
    return tuple(
        torch.rand(n, n, dtype=torch.float64, device="cuda", generator=generator) for _ in range(2)
    )


def assert_close(torch, got, want, tolerance=1e-12):
    error = float((got - want).abs().max() / want.abs().max())
    assert error <= tolerance, f"relative error {error:.2e}"


def test_side_stream_orders_producer_einkern_and_consumer(torch, gemm):
    """Producer → einkern → consumer, all queued on a torch side stream S.

    Today's launch (before this change) waited on the host for the producer's
    stream and launched on the legacy default stream.  This test defeats both:

    * A long producer (``torch.cuda._sleep``, then the write of A) is queued on
      S.  The einkern call must return while S is still busy (no host wait);
      the old code synchronised S on the host, so S was idle on return.
    * Another long sleep is queued on the legacy default stream first.  The old
      launch queued the einkern kernel behind it, while the consumer (``D = C *
      1`` on S, queued right after the call) ran at once on S — torch's side
      streams do not synchronise with the legacy stream — and read C before
      einkern wrote it (C starts as NaN).  Launched on S, einkern runs after the
      producer and before the consumer, whatever the default stream does.
    """
    a_values, b = operands(torch, 1)
    expected = a_values @ b
    gemm(a_values, b)  # warm-up: module loaded, memory pool ready
    side = torch.cuda.Stream()
    a = torch.empty_like(a_values)
    c = torch.full_like(a_values, float("nan"))
    torch.cuda.synchronize()
    torch.cuda._sleep(SLEEP_CYCLES)  # the legacy default stream: busy
    with torch.cuda.stream(side):
        torch.cuda._sleep(SLEEP_CYCLES)  # a long producer …
        a.copy_(a_values)  # … that writes A
        assert gemm(a, b, C=c) is c
        returned_while_busy = not side.query()
        d = c * 1.0  # the consumer
    torch.cuda.synchronize()
    assert returned_while_busy, "the call waited on the host for the producer"
    assert_close(torch, d, expected)


def test_explicit_stream_argument_kinds(torch, gemm):
    """``stream=`` as a torch stream, a raw handle and a cuda.core stream."""
    from cuda.core import Device

    a, b = operands(torch, 2)
    expected = a @ b
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    core_stream = Device(0).create_stream()
    core_stream.wait(side)
    for stream in (side, side.cuda_stream, core_stream):
        c = torch.full_like(a, float("nan"))
        torch.cuda.synchronize()
        gemm(a, b, C=c, stream=stream)
        torch.cuda.synchronize()
        core_stream.sync()
        assert_close(torch, c, expected)
    with pytest.raises(ArgumentError, match="must be a CUDA stream"):
        gemm(a, b, stream="s")


def test_host_arrays_on_a_side_stream_are_complete_on_return(torch, gemm):
    rng = np.random.default_rng(3)
    a, b = rng.uniform(0.5, 1.5, (256, 256)), rng.uniform(0.5, 1.5, (256, 256))
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        torch.cuda._sleep(SLEEP_CYCLES)
        c = gemm(a, b, stream=side)
    assert isinstance(c, np.ndarray)
    np.testing.assert_allclose(c, a @ b, rtol=1e-12)


@pytest.mark.parametrize("compiler", ["aot_eager", "inductor"])
def test_inside_torch_compile_on_cuda_tensors(torch, gemm, compiler):
    import einkern.torch as ek_torch

    op = ek_torch.op(gemm)
    a, b = operands(torch, 4)

    def f(x, y):
        return op(x * 2, y) + 1

    compiled = torch.compile(f, backend=compiler, fullgraph=True)
    assert_close(torch, compiled(a, b), (a * 2) @ b + 1)
    a2, b2 = operands(torch, 5)
    assert_close(torch, compiled(a2, b2), (a2 * 2) @ b2 + 1)


def test_inside_torch_compile_with_cuda_graphs(torch, gemm):
    """``mode="reduce-overhead"``: inductor records the compiled function, einkern's
    launch included, into a CUDA graph and replays it on later calls."""
    import einkern.torch as ek_torch

    op = ek_torch.op(gemm)
    compiled = torch.compile(lambda x, y: op(x * 2, y) + 1, mode="reduce-overhead", fullgraph=True)
    for seed in (15, 16, 17, 18):  # warm-up, recording, then replays
        a, b = operands(torch, seed)
        result = compiled(a, b).clone()  # a replay reuses the graph's output memory
        assert_close(torch, result, (a * 2) @ b + 1)


def _capture(torch, call, warmups: int = 2):
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(warmups):
            call()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        result = call()
    return graph, result


@pytest.mark.parametrize("through", ["kernel", "torch-op"])
def test_inside_a_captured_cuda_graph(torch, gemm, through):
    import einkern.torch as ek_torch

    op = ek_torch.op(gemm) if through == "torch-op" else gemm
    static_a, static_b = operands(torch, 6)
    graph, static_c = _capture(torch, lambda: op(static_a, static_b))
    for seed in (7, 8):
        new_a, new_b = operands(torch, seed)
        static_a.copy_(new_a)
        static_b.copy_(new_b)
        graph.replay()
        torch.cuda.synchronize()
        assert_close(torch, static_c, new_a @ new_b)


def test_padding_temporaries_inside_a_captured_graph(torch):
    """The ``pad`` boundary policy's temporaries are allocated from the graph's
    memory during capture (an eager allocation there would fail the capture)."""
    from test_gpu_emulation import random_mappings

    problem = einkern.make_problem(einkern.load(GEMM), {"n": 203})
    mappings = {
        p: replace(m, boundary="pad")
        for p, m in random_mappings(problem, random.Random(11)).items()
    }
    kernel = einkern.Kernel(problem, einkern.api.get_backend("cuda"), mappings=mappings)
    assert kernel.executable.source.temporaries
    a, b = operands(torch, 9, 203)
    c = torch.empty_like(a)
    graph, _ = _capture(torch, lambda: kernel(a, b, C=c))
    new_a, new_b = operands(torch, 10, 203)
    a.copy_(new_a)
    b.copy_(new_b)
    graph.replay()
    torch.cuda.synchronize()
    assert_close(torch, c, new_a @ new_b)


def test_cupy_current_stream_and_explicit_stream(gemm):
    cupy = pytest.importorskip("cupy")
    rng = np.random.default_rng(12)
    a_host, b_host = rng.uniform(0.5, 1.5, (256, 256)), rng.uniform(0.5, 1.5, (256, 256))
    expected = a_host @ b_host
    stream = cupy.cuda.Stream(non_blocking=True)
    with stream:
        a = cupy.asarray(a_host)
        b = cupy.asarray(b_host)
        for _ in range(20):  # keep the stream busy before the call
            a = a * 1.0
        c = cupy.full((256, 256), cupy.nan)
        gemm(a, b, C=c)  # on CuPy's current stream
        d = c * 1.0
    stream.synchronize()
    np.testing.assert_allclose(cupy.asnumpy(d), expected, rtol=1e-12)
    other = cupy.cuda.Stream(non_blocking=True)
    e = cupy.full((256, 256), cupy.nan)
    gemm(a, b, C=e, stream=other)
    other.synchronize()
    np.testing.assert_allclose(cupy.asnumpy(e), expected, rtol=1e-12)


def test_profile_checked_on_the_call_stream(torch, gemm):
    a, b = operands(torch, 13)
    times = gemm.executable.profile_checked(gemm.bind(a, b), repeat=3)
    assert len(times) == len(gemm.executable.source.kernels) and all(t > 0 for t in times)


class InterfaceOnly:
    """Exposes only the ``__cuda_array_interface__`` of a torch tensor (torch's is
    version 2, without a stream); ``stream``: restated as version 3 naming that
    stream as the producer's."""

    def __init__(self, tensor, stream=None):
        self.tensor = tensor
        interface = tensor.__cuda_array_interface__
        if stream is not None:
            interface = {**interface, "version": 3, "stream": stream.cuda_stream}
        self.__cuda_array_interface__ = interface


def test_cuda_array_interface_arrays_wait_for_their_producer_stream(torch, gemm):
    """An array whose interface names a busy producer stream: the launch stream
    (torch's default one here) waits for it on the GPU, not on the host."""
    a, b = operands(torch, 14)
    expected = a @ b
    # every kernel of the test once before the producer's sleep is queued: the
    # first launch of a kernel loads its module (CUDA's lazy loading), which waits
    # for the device on the host — for the sleep, on a worker where torch had not
    # yet run that multiply or fill
    side = torch.cuda.Stream()
    gemm(InterfaceOnly(a * 1.0, side), b, C=torch.full_like(a, float("nan")))
    torch.cuda.synchronize()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        torch.cuda._sleep(SLEEP_CYCLES)
        produced = a * 1.0  # written on `side` after the sleep
        wrapped = InterfaceOnly(produced, side)
    info = gemm.backend.describe(wrapped)
    assert info.shape == (256, 256) and info.strides == (256, 1) and info.dtype == "float64"
    assert info.device == "cuda:0" and info.pointer == produced.data_ptr()
    c = torch.full_like(a, float("nan"))
    gemm(wrapped, b, C=c)
    assert not side.query(), "the call waited on the host for the producer"
    torch.cuda.synchronize()
    assert_close(torch, c, expected)
    column = InterfaceOnly(torch.zeros(4, 6, dtype=torch.float32, device="cuda").t())
    assert column.__cuda_array_interface__["version"] == 2
    info = gemm.backend.describe(column)
    assert info.shape == (6, 4) and info.strides == (1, 6) and info.dtype == "float32"
    assert info.library == "test_gpu_runtime"
