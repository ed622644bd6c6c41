"""einkern.blas on GPU arrays: every routine and variant on torch CUDA tensors (and
CuPy arrays where installed), fp32 and fp64, against SciPy on the host; the
results are tensors on the same device, computed without host copies.  Selected
only with ``pytest -m gpu`` (collected, not run, elsewhere)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import scipy.linalg.blas as blas

from einkern import blas as ek
from einkern.reference import relative_error

pytestmark = pytest.mark.gpu

TOL = {np.float64: 1e-12, np.float32: 1e-5}
DTYPES = [np.float64, np.float32]


@pytest.fixture(scope="module")
def torch():
    torch = pytest.importorskip("torch")
    assert torch.cuda.is_available(), "these tests need a CUDA build of torch and a GPU"
    return torch


def rand(rng, *shape, dtype=np.float64):
    return rng.uniform(-1, 1, size=shape).astype(dtype)


def scipy_fn(name, dtype):
    return getattr(blas, ("d" if dtype == np.float64 else "s") + name)


def on_gpu(torch, *arrays):
    return [torch.from_numpy(np.ascontiguousarray(a)).cuda() for a in arrays]


def host(torch, result):
    assert isinstance(result, torch.Tensor) and result.is_cuda
    return result.cpu().numpy()


@pytest.mark.parametrize("dtype", DTYPES)
def test_level_1_and_2(torch, dtype):
    rng = np.random.default_rng(0)
    a, x, y = (
        rand(rng, 300, 200, dtype=dtype),
        rand(rng, 200, dtype=dtype),
        rand(rng, 300, dtype=dtype),
    )
    ga, gx, gy = on_gpu(torch, a, x, y)
    assert (
        relative_error(host(torch, ek.axpy(0.5, gy, gy.flip(0).contiguous())), 0.5 * y + y[::-1])
        <= TOL[dtype]
    )
    got = ek.gemv(0.7, ga, gx, 1.5, gy)
    assert (
        relative_error(host(torch, got), scipy_fn("gemv", dtype)(0.7, a, x, 1.5, y)) <= TOL[dtype]
    )
    got = ek.gemv(0.7, ga, gy, trans=True)
    assert (
        relative_error(host(torch, got), scipy_fn("gemv", dtype)(0.7, a, y, trans=1)) <= TOL[dtype]
    )
    s = rand(rng, 257, 257, dtype=dtype)
    v = rand(rng, 257, dtype=dtype)
    for lower in (False, True):
        poisoned = s.copy()
        poisoned[np.triu_indices(257, 1) if lower else np.tril_indices(257, -1)] = np.nan
        gs, gv = on_gpu(torch, poisoned, v)
        expected = scipy_fn("symv", dtype)(1.2, s, v, beta=0.3, y=v, lower=int(lower))
        assert (
            relative_error(host(torch, ek.symv(1.2, gs, gv, 0.3, gv, lower=lower)), expected)
            <= TOL[dtype]
        )


@pytest.mark.parametrize(
    "dtype, trans_a, trans_b", list(itertools.product(DTYPES, [False, True], [False, True]))
)
def test_gemm(torch, dtype, trans_a, trans_b):
    rng = np.random.default_rng(1)
    m, n, k = 257, 130, 191
    a = rand(rng, *((k, m) if trans_a else (m, k)), dtype=dtype)
    b = rand(rng, *((n, k) if trans_b else (k, n)), dtype=dtype)
    c = rand(rng, m, n, dtype=dtype)
    expected = scipy_fn("gemm", dtype)(
        0.9, a, b, beta=-0.4, c=c, trans_a=int(trans_a), trans_b=int(trans_b)
    )
    ga, gb, gc = on_gpu(torch, a, b, c)
    got = ek.gemm(0.9, ga, gb, -0.4, gc, trans_a=trans_a, trans_b=trans_b)
    assert relative_error(host(torch, got), expected) <= TOL[dtype]


def test_gemm_on_transposed_views_needs_no_copy(torch):
    """A transposed torch view is read as its transpose with the op flipped."""
    rng = np.random.default_rng(2)
    a, b = rand(rng, 64, 96, dtype=np.float32), rand(rng, 80, 96, dtype=np.float32)
    ga, gb = on_gpu(torch, a, b)
    got = ek.gemm(1.0, ga, gb.T)
    assert relative_error(host(torch, got), a @ b.T) <= 1e-5


@pytest.mark.parametrize(
    "dtype, lower, trans", list(itertools.product(DTYPES, [False, True], [False, True]))
)
def test_syrk(torch, dtype, lower, trans):
    rng = np.random.default_rng(3)
    a = rand(rng, *((70, 300) if trans else (300, 70)), dtype=dtype)
    c = rand(rng, 300, 300, dtype=dtype)
    expected = scipy_fn("syrk", dtype)(1.1, a, beta=0.5, c=c, trans=int(trans), lower=int(lower))
    ga, gc = on_gpu(torch, a, c)
    got = host(torch, ek.syrk(1.1, ga, 0.5, gc, trans=trans, lower=lower, block=128))
    mine = np.tril_indices(300) if lower else np.triu_indices(300)
    other = np.triu_indices(300, 1) if lower else np.tril_indices(300, -1)
    assert relative_error(got[mine], expected[mine]) <= TOL[dtype]
    assert np.array_equal(got[other], c[other])


TRSM = list(itertools.product(DTYPES, "LR", [False, True], [False, True], [False, True]))


@pytest.mark.parametrize("dtype, side, lower, trans, unit", TRSM)
def test_trsm(torch, dtype, side, lower, trans, unit):
    """300 rows: two blocks of 128 and a rest of 44, the recursion's updates between."""
    rng = np.random.default_rng(4)
    m, n = (300, 70) if side == "L" else (70, 300)
    size = m if side == "L" else n
    a = rand(rng, size, size, dtype=dtype) + (2 * size * np.eye(size)).astype(dtype)
    poisoned = a.copy()
    poisoned[np.triu_indices(size, 1) if lower else np.tril_indices(size, -1)] = np.nan
    b = rand(rng, m, n, dtype=dtype)
    expected = scipy_fn("trsm", dtype)(
        1.3, a, b, side=int(side == "R"), lower=int(lower), trans_a=int(trans), diag=int(unit)
    )
    ga, gb = on_gpu(torch, poisoned, b)
    got = ek.trsm(1.3, ga, gb, side=side, lower=lower, trans=trans, unit=unit)
    assert relative_error(host(torch, got), expected) <= TOL[dtype] * 10


def test_results_stay_on_the_stream_and_device(torch):
    """The call launches on torch's current stream; the inputs are not modified."""
    rng = np.random.default_rng(5)
    a = rand(rng, 512, 512, dtype=np.float32)
    ga, gb = on_gpu(torch, a, a.T.copy())
    before = ga.clone()
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        got = ek.gemm(2.0, ga, gb)
    stream.synchronize()
    assert got.device == ga.device and torch.equal(ga, before)
    assert relative_error(host(torch, got), 2.0 * a @ a.T) <= 1e-5


def test_cupy_arrays_give_cupy_arrays():
    cupy = pytest.importorskip("cupy")
    rng = np.random.default_rng(6)
    a, b = rand(rng, 100, 100), rand(rng, 100, 30)
    low = np.tril(a) + 200 * np.eye(100)
    got = ek.trsm(1.0, cupy.asarray(low), cupy.asarray(b), lower=True)
    assert isinstance(got, cupy.ndarray)
    assert relative_error(cupy.asnumpy(got), blas.dtrsm(1.0, low, b, lower=1)) <= 1e-11
    assert (
        relative_error(cupy.asnumpy(ek.gemm(1.0, cupy.asarray(a), cupy.asarray(b))), a @ b) <= 1e-12
    )
    # syrk's strided block views and triangle writes on CuPy arrays (100 rows in
    # blocks of at most 16: three levels, padded to 104); C's other triangle NaN
    for lower in (False, True):
        other = np.triu_indices(100, 1) if lower else np.tril_indices(100, -1)
        poisoned = a.copy()
        poisoned[other] = np.nan
        got = ek.syrk(0.6, cupy.asarray(b), 0.3, cupy.asarray(poisoned), lower=lower, block=16)
        assert isinstance(got, cupy.ndarray)
        expected = blas.dsyrk(0.6, b, beta=0.3, c=a, lower=int(lower))
        mine = np.tril_indices(100) if lower else np.triu_indices(100)
        assert relative_error(cupy.asnumpy(got)[mine], expected[mine]) <= 1e-12
        assert np.isnan(cupy.asnumpy(got)[other]).all()


def test_quick_blas_suite_runs_on_the_gpu(tmp_path):
    """`einkern bench blas --quick --backend cuda`: every einkern row correct."""
    import argparse
    import json

    from einkern.cli.bench import add_bench_parser, command_bench

    parser = argparse.ArgumentParser()
    add_bench_parser(parser.add_subparsers(dest="command"))
    args = parser.parse_args(
        ["bench", "blas", "--quick", "--backend", "cuda", "--out", str(tmp_path)]
    )
    assert command_bench(args) == 0
    rows = json.loads((tmp_path / "results.json").read_text())["measurements"]
    mine = [r for r in rows if r["implementation"] == "einkern"]
    assert mine and all(r["status"] == "ok" and r["error_ok"] for r in mine), mine
