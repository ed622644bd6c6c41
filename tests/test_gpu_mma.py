"""Every MMA fragment layout of einkern.gpu.mma checked on the GPU: a probe
kernel loads fragments by the layout, executes the instruction and stores D by
the layout; D must equal the NumPy model.  A planted wrong layout must fail.
Selected only with ``pytest -m gpu``."""

from __future__ import annotations

import numpy as np
import pytest
from mma_probe import expected, probe_inputs, probe_source

from einkern.gpu.mma import SHAPES, Layout, warp_shapes

pytestmark = pytest.mark.gpu


def run_probe(source: str, a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
    from einkern.backends.cuda import driver
    from einkern.backends.cuda.nvrtc import compile_cubin

    driver.initialize()
    arch = driver.device_properties().arch
    module = driver.load_module(compile_cubin(source, arch, use_cache=False).cubin, ["probe"])
    d = np.zeros_like(c)
    pointers = []
    try:
        for host in (a, b, c, d):
            pointer = driver.alloc(host.nbytes)
            pointers.append(pointer)
            driver.copy_to_device(pointer, host.ctypes.data, host.nbytes)
        driver.launch(module.functions["probe"], (1, 1, 1), (32, 1, 1), pointers, ())
        driver.synchronize("the MMA probe")
        driver.copy_to_host(d.ctypes.data, pointers[3], d.nbytes)
    finally:
        for pointer in pointers:
            driver.free(pointer)
    return d


def _arch() -> int:
    from einkern.backends.cuda import driver

    driver.initialize()
    props = driver.device_properties()
    return int(props.arch.removeprefix("sm_").rstrip("a"))


@pytest.mark.parametrize("name", warp_shapes())
def test_layout_agrees_with_the_hardware(name):
    shape = SHAPES[name]
    if _arch() < shape.min_arch:
        pytest.skip(f"{name} needs sm_{shape.min_arch}")
    a, b, c = probe_inputs(shape, seed=11)
    d = run_probe(probe_source(shape), a, b, c)
    want = expected(shape, a, b, c)
    scale = np.abs(want).max()
    tolerance = 1e-14 if shape.accumulator == "f64" else 1e-6
    assert np.abs(d - want).max() <= tolerance * scale, (d, want)


def test_a_planted_wrong_layout_fails_on_the_hardware():
    shape = SHAPES["m16n8k8_f64"]
    # A's rows swapped between the two halves of the fragment: still a cover of A.
    wrong = Layout(16, 8, 4, lambda g, q, i: (g + 8 * (1 - (i & 1)), q + 4 * (i >> 1)))
    a, b, c = probe_inputs(shape, seed=12)
    d = run_probe(probe_source(shape, a=wrong), a, b, c)
    assert np.abs(d - expected(shape, a, b, c)).max() > 1e-3


@pytest.mark.parametrize("name", sorted(n for n, s in SHAPES.items() if s.input_type == "f64"))
def test_mma_gemm_kernel_on_the_gpu(name):
    """The kernel-IR GEMM the emulator runs in CI gives NumPy's product on the GPU."""
    from mma_kernels import gemm_mma

    from einkern.backends.cuda import driver
    from einkern.backends.cuda.nvrtc import compile_cubin
    from einkern.gpu.cuda_printer import launch_shape, print_cuda

    shape = SHAPES[name]
    if _arch() < shape.min_arch:
        pytest.skip(f"{name} needs sm_{shape.min_arch}")
    m, n, k = 8 * shape.m, 4 * shape.n, 16 * shape.k
    kernel = gemm_mma(name, m, n, k)
    arch = driver.device_properties().arch
    module = driver.load_module(compile_cubin(print_cuda(kernel), arch).cubin, [kernel.name])
    rng = np.random.default_rng(5)
    a, b = rng.standard_normal((m, k)), rng.standard_normal((k, n))
    c = np.full((m, n), np.nan)
    launch = launch_shape(kernel)
    pointers = []
    try:
        for host in (a, b, c):
            pointer = driver.alloc(host.nbytes)
            pointers.append(pointer)
            driver.copy_to_device(pointer, host.ctypes.data, host.nbytes)
        driver.launch(module.functions[kernel.name], launch.grid, launch.block, pointers, ())
        driver.synchronize("the MMA GEMM")
        driver.copy_to_host(c.ctypes.data, pointers[2], c.nbytes)
    finally:
        for pointer in pointers:
            driver.free(pointer)
    np.testing.assert_allclose(c, a @ b, rtol=1e-12, atol=1e-12)
