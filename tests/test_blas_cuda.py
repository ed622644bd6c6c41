"""einkern.blas's CUDA kernels without a GPU: every routine run through an engine
that emulates the CUDA backend (tensor programs under their fused plan and default
mappings, affine programs as their affine kernels, all in the CPU emulator with
every access bounds-checked), compared with SciPy; and every kernel compiled by
NVRTC for sm_90."""

from __future__ import annotations

import functools
import itertools

import numpy as np
import pytest
import scipy.linalg.blas as blas

from einkern import blas as ek
from einkern.blas import engines
from einkern.reference import relative_error

NAME = "emulated-cuda"
SOURCES: dict[tuple, str] = {}  # (text, sizes) -> CUDA source, for the NVRTC test


def _emulate(text: str, sizes: engines.Sizes, **arguments) -> None:
    from einkern.backends.emulator import emulate
    from einkern.backends.verify import emulate_problem

    arrays = {k: v for k, v in arguments.items() if isinstance(v, np.ndarray)}
    scalars = {k: float(v) for k, v in arguments.items() if not isinstance(v, np.ndarray)}
    program = engines.raised(text)
    if not isinstance(program, str):
        from einkern.api import fusion_plan
        from einkern.backends.cuda import CudaBackend
        from einkern.backends.cuda.generate import resolve_mappings
        from einkern.ir.bind import make_problem

        fused = fusion_plan(make_problem(program, dict(sizes)), "cuda").fused
        mappings = resolve_mappings(fused)
        SOURCES[(text, sizes)] = CudaBackend().emit(fused, mappings)
        result, errors, bad = emulate_problem(fused, mappings, arrays, scalars)
        assert bad == 0, errors
        for name in fused.program.outputs:
            arrays[name][...] = result[name]
        return
    from einkern.gpu.affine import affine_kernels, distinct_kernels
    from einkern.gpu.cuda_printer import print_cuda_module
    from einkern.ir.affine import make_affine_problem

    problem = make_affine_problem(engines.parsed_function(text), dict(sizes))
    launches = affine_kernels(problem)
    SOURCES[(text, sizes)] = print_cuda_module(distinct_kernels(launches))
    work = {f"t_{n}": np.ascontiguousarray(a).copy() for n, a in arrays.items()}
    named = {f"s_{n}": v for n, v in scalars.items()}
    for launch in launches:
        report = emulate([launch.kernel], work, {**named, **dict(launch.values)})
        assert report.ok, str(report)
    for name in problem.outputs:
        arrays[name][...] = work[f"t_{name}"]


class Emulated:
    name = NAME

    def kernel(self, text, sizes):
        return functools.partial(_emulate, text, sizes)


if NAME not in engines._ENGINES:
    engines.register_engine(NAME, Emulated)


def rand(rng, *shape, dtype=np.float64):
    return rng.uniform(-1, 1, size=shape).astype(dtype)


def scipy_fn(name, dtype):
    return getattr(blas, ("d" if dtype == np.float64 else "s") + name)


TOL = {np.float64: 1e-12, np.float32: 1e-5}
DTYPES = [np.float64, np.float32]


@pytest.mark.parametrize("dtype", DTYPES)
def test_level_1_and_2_in_the_emulator(dtype):
    rng = np.random.default_rng(0)
    a, x, y = rand(rng, 37, 21, dtype=dtype), rand(rng, 21, dtype=dtype), rand(rng, 37, dtype=dtype)
    got = ek.axpy(0.5, y, y[::-1].copy(), backend=NAME)
    assert relative_error(got, 0.5 * y + y[::-1]) <= TOL[dtype]
    for trans, (v, w) in ((False, (x, y)), (True, (y, x))):
        expected = scipy_fn("gemv", dtype)(0.7, a, v, beta=1.5, y=w, trans=int(trans))
        got = ek.gemv(0.7, a, v, 1.5, w, trans=trans, backend=NAME)
        assert relative_error(got, expected) <= TOL[dtype]
    s = rand(rng, 21, 21, dtype=dtype)
    for lower in (False, True):
        poisoned = s.copy()
        poisoned[np.triu_indices(21, 1) if lower else np.tril_indices(21, -1)] = np.nan
        expected = scipy_fn("symv", dtype)(1.2, s, x, beta=0.3, y=x, lower=int(lower))
        got = ek.symv(1.2, poisoned, x, 0.3, x, lower=lower, backend=NAME)
        assert relative_error(got, expected) <= TOL[dtype]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("lower", [False, True])
def test_symv_reduction_tiles_in_the_emulator(dtype, lower):
    """Several tile rows and a diagonal the tiles do not divide; the other
    triangle holds NaN, so reading it would show."""
    rng = np.random.default_rng(5)
    n = 147
    s, x, y = rand(rng, n, n, dtype=dtype), rand(rng, n, dtype=dtype), rand(rng, n, dtype=dtype)
    poisoned = s.copy()
    poisoned[np.triu_indices(n, 1) if lower else np.tril_indices(n, -1)] = np.nan
    expected = scipy_fn("symv", dtype)(0.8, s, x, beta=-0.6, y=y, lower=int(lower))
    got = ek.symv(0.8, poisoned, x, -0.6, y, lower=lower, backend=NAME)
    assert relative_error(got, expected) <= TOL[dtype]


@pytest.mark.parametrize("trans_a, trans_b", list(itertools.product([False, True], repeat=2)))
def test_gemm_in_the_emulator(trans_a, trans_b):
    rng = np.random.default_rng(1)
    m, n, k = 19, 23, 17
    a = rand(rng, *((k, m) if trans_a else (m, k)), dtype=np.float32)
    b = rand(rng, *((n, k) if trans_b else (k, n)), dtype=np.float32)
    c = rand(rng, m, n, dtype=np.float32)
    expected = blas.sgemm(0.9, a, b, beta=-0.4, c=c, trans_a=int(trans_a), trans_b=int(trans_b))
    got = ek.gemm(0.9, a, b, -0.4, c, trans_a=trans_a, trans_b=trans_b, backend=NAME)
    assert relative_error(got, expected) <= 1e-5


@pytest.mark.parametrize("lower, trans", [(False, False), (True, False), (True, True)])
def test_syrk_in_the_emulator(lower, trans):
    """13 rows in blocks of at most 3 (padded to 16): two calls of off-diagonal
    blocks, then the deepest level's four with the eight diagonal blocks in one
    call; C's other triangle NaN, kept.  Then at most 4 rows (one call above the
    merged one) and 7 rows in blocks of 4 (only the merged call), fp32, no C."""
    rng = np.random.default_rng(2)
    a, c = rand(rng, *((6, 13) if trans else (13, 6))), rand(rng, 13, 13)
    mine = np.tril_indices(13) if lower else np.triu_indices(13)
    other = np.triu_indices(13, 1) if lower else np.tril_indices(13, -1)
    expected = blas.dsyrk(1.1, a, beta=0.5, c=c, trans=int(trans), lower=int(lower))
    poisoned = c.copy()
    poisoned[other] = np.nan
    got = ek.syrk(1.1, a, 0.5, poisoned, trans=trans, lower=lower, block=3, backend=NAME)
    assert relative_error(got[mine], expected[mine]) <= 1e-12
    assert np.isnan(got[other]).all()
    assert ek.syrk_blocking(13, 3).calls == ((1, 8), (2, 4), (12, 2))
    for rows in (13, 7):
        single = (a[:, :rows] if trans else a[:rows]).astype(np.float32)  # fp32, no C
        got = ek.syrk(0.9, single, trans=trans, lower=lower, block=4, backend=NAME)
        expected = blas.ssyrk(0.9, single, trans=int(trans), lower=int(lower))
        mine = np.tril_indices(rows) if lower else np.triu_indices(rows)
        other = np.triu_indices(rows, 1) if lower else np.tril_indices(rows, -1)
        assert relative_error(got[mine], expected[mine]) <= 1e-5, rows
        assert not got[other].any(), rows
    assert ek.syrk_blocking(7, 4).calls == ((3, 4),)


@pytest.mark.parametrize(
    "side, lower, trans, unit",
    list(itertools.product("LR", [False, True], [False, True], [False]))
    + [("L", True, False, True), ("R", False, True, True)],
)
def test_trsm_in_the_emulator(side, lower, trans, unit):
    rng = np.random.default_rng(3)
    m, n = 11, 9
    size = m if side == "L" else n
    a = rand(rng, size, size) + 2 * size * np.eye(size)
    poisoned = a.copy()
    poisoned[np.triu_indices(size, 1) if lower else np.tril_indices(size, -1)] = np.nan
    b = rand(rng, m, n)
    expected = blas.dtrsm(
        1.3, a, b, side=int(side == "R"), lower=int(lower), trans_a=int(trans), diag=int(unit)
    )
    got = ek.trsm(
        1.3, poisoned, b, side=side, lower=lower, trans=trans, unit=unit, block=4, backend=NAME
    )
    assert relative_error(got, expected) <= 1e-11


def test_every_kernel_compiles_with_nvrtc_for_sm_90():
    """The CUDA source of every program the tests above emulated."""
    from einkern.backends.cuda.nvrtc import compile_cubin

    if not SOURCES:
        test_trsm_in_the_emulator("L", True, True, False)
        test_level_1_and_2_in_the_emulator(np.float32)
        test_syrk_in_the_emulator(True, False)
    sources = list(dict.fromkeys(SOURCES.values()))
    assert len(sources) >= 6 and all("__global__" in s for s in sources)
    for source in sources:
        assert compile_cubin(source, "sm_90", use_cache=False).cubin
