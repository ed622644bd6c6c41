"""Kernels on MMA instructions in the CPU emulator: a GEMM per f64 shape equals
NumPy's product; a kernel loading fragments by a wrong layout does not; the
same kernels compile with NVRTC for every architecture that has the shape."""

from __future__ import annotations

import numpy as np
import pytest
from mma_kernels import gemm_mma

from einkern.backends.emulator import emulate
from einkern.gpu.cuda_printer import print_cuda
from einkern.gpu.mma import SHAPES, Layout

F64 = sorted(name for name, s in SHAPES.items() if s.input_type == "f64")


def _run(kernel, m, n, k, seed=0):
    rng = np.random.default_rng(seed)
    a, b = rng.standard_normal((m, k)), rng.standard_normal((k, n))
    c = np.full((m, n), np.nan)
    report = emulate([kernel], {"A": a, "B": b, "C": c}, {})
    assert report.ok, report
    return a, b, c


@pytest.mark.parametrize("name", F64)
def test_emulated_mma_gemm_matches_numpy(name):
    shape = SHAPES[name]
    m, n, k = 4 * shape.m, 2 * shape.n, 3 * shape.k
    a, b, c = _run(gemm_mma(name, m, n, k), m, n, k)
    np.testing.assert_allclose(c, a @ b, rtol=1e-12, atol=1e-12)


def test_a_wrong_fragment_layout_fails_in_the_emulator():
    name = "m16n8k8_f64"
    wrong = Layout(16, 8, 4, lambda g, q, i: (g + 8 * (1 - (i & 1)), q + 4 * (i >> 1)))
    a, b, c = _run(gemm_mma(name, 32, 16, 16, a_layout=wrong), 32, 16, 16)
    assert not np.allclose(c, a @ b)


@pytest.mark.parametrize("name", F64)
def test_mma_kernels_compile(name):
    pytest.importorskip("cuda.bindings.nvrtc")
    from einkern.backends.cuda.nvrtc import compile_cubin

    source = print_cuda(gemm_mma(name, 64, 32, 32))
    assert "mma.sync.aligned" in source
    for arch in (80, 90):
        if arch >= SHAPES[name].min_arch:
            module = compile_cubin(source, f"sm_{arch}", use_cache=False)
            assert all(r.spill_stores == 0 for r in module.resources)
