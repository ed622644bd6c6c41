"""einkern.blas against SciPy's BLAS (``scipy.linalg.blas``) on random data, fp32 and
fp64: every routine and every variant the brief lists."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import scipy.linalg.blas as blas

from einkern import blas as ek
from einkern.errors import ArgumentError
from einkern.reference import relative_error

TOL = {np.float64: 1e-12, np.float32: 1e-5}
DTYPES = [np.float64, np.float32]


def scipy_fn(name: str, dtype):
    return getattr(blas, ("d" if dtype == np.float64 else "s") + name)


def rand(rng, *shape, dtype=np.float64):
    return rng.uniform(-1, 1, size=shape).astype(dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_axpy(dtype):
    rng = np.random.default_rng(0)
    x, y = rand(rng, 37, dtype=dtype), rand(rng, 37, dtype=dtype)
    expected = scipy_fn("axpy", dtype)(x, y.copy(), a=0.6)
    result = ek.axpy(0.6, x, y)
    assert relative_error(result, expected) <= TOL[dtype]
    assert result is not y


@pytest.mark.parametrize("dtype, trans", list(itertools.product(DTYPES, [False, True])))
def test_gemv(dtype, trans):
    rng = np.random.default_rng(1)
    a = rand(rng, 13, 9, dtype=dtype)
    x = rand(rng, 13 if trans else 9, dtype=dtype)
    y = rand(rng, 9 if trans else 13, dtype=dtype)
    expected = scipy_fn("gemv", dtype)(0.7, a, x, beta=1.5, y=y, trans=int(trans))
    assert relative_error(ek.gemv(0.7, a, x, 1.5, y, trans=trans), expected) <= TOL[dtype]


@pytest.mark.parametrize("dtype, lower", list(itertools.product(DTYPES, [False, True])))
def test_symv_reads_one_triangle(dtype, lower):
    rng = np.random.default_rng(2)
    a = rand(rng, 11, 11, dtype=dtype)
    x, y = rand(rng, 11, dtype=dtype), rand(rng, 11, dtype=dtype)
    expected = scipy_fn("symv", dtype)(1.2, a, x, beta=0.3, y=y, lower=int(lower))
    poisoned = a.copy()
    other = np.triu_indices(11, 1) if lower else np.tril_indices(11, -1)
    poisoned[other] = np.nan  # the triangle that must not be read
    result = ek.symv(1.2, poisoned, x, 0.3, y, lower=lower)
    assert relative_error(result, expected) <= TOL[dtype]


@pytest.mark.parametrize(
    "dtype, trans_a, trans_b", list(itertools.product(DTYPES, [False, True], [False, True]))
)
def test_gemm_all_op_combinations(dtype, trans_a, trans_b):
    rng = np.random.default_rng(3)
    m, n, k = 7, 10, 5
    a = rand(rng, *((k, m) if trans_a else (m, k)), dtype=dtype)
    b = rand(rng, *((n, k) if trans_b else (k, n)), dtype=dtype)
    c = rand(rng, m, n, dtype=dtype)
    expected = scipy_fn("gemm", dtype)(
        0.9, a, b, beta=-0.4, c=c, trans_a=int(trans_a), trans_b=int(trans_b)
    )
    result = ek.gemm(0.9, a, b, -0.4, c, trans_a=trans_a, trans_b=trans_b)
    assert relative_error(result, expected) <= TOL[dtype]


@pytest.mark.parametrize(
    "dtype, lower, trans", list(itertools.product(DTYPES, [False, True], [False, True]))
)
def test_syrk_writes_only_the_requested_triangle(dtype, lower, trans):
    rng = np.random.default_rng(4)
    a = rand(rng, *((6, 9) if trans else (9, 6)), dtype=dtype)
    c = rand(rng, 9, 9, dtype=dtype)
    expected = scipy_fn("syrk", dtype)(1.1, a, beta=0.5, c=c, trans=int(trans), lower=int(lower))
    result = ek.syrk(1.1, a, 0.5, c, trans=trans, lower=lower)
    mine = np.tril_indices(9) if lower else np.triu_indices(9)
    other = np.triu_indices(9, 1) if lower else np.tril_indices(9, -1)
    assert relative_error(result[mine], expected[mine]) <= TOL[dtype]
    assert np.array_equal(result[other], c[other])


TRSM = list(itertools.product(DTYPES, "LR", [False, True], [False, True], [False, True]))


@pytest.mark.parametrize("dtype, side, lower, trans, unit", TRSM)
def test_trsm_every_variant(dtype, side, lower, trans, unit):
    rng = np.random.default_rng(5)
    m, n = 8, 6
    size = m if side == "L" else n
    a = rand(rng, size, size, dtype=dtype) + (2 * size * np.eye(size)).astype(dtype)
    b = rand(rng, m, n, dtype=dtype)
    expected = scipy_fn("trsm", dtype)(
        1.3, a, b, side=int(side == "R"), lower=int(lower), trans_a=int(trans), diag=int(unit)
    )
    result = ek.trsm(1.3, a, b, side=side, lower=lower, trans=trans, unit=unit)
    assert relative_error(result, expected) <= TOL[dtype] * 10


def test_bad_arguments_are_argument_errors():
    with pytest.raises(ArgumentError):
        ek.axpy(1.0, np.ones(3), np.ones(4))
    with pytest.raises(ArgumentError):
        ek.gemm(1.0, np.ones((2, 3)), np.ones((4, 2)))
    with pytest.raises(ArgumentError):
        ek.gemv(1.0, np.ones((2, 3)), np.ones(3, dtype=np.float32))
    with pytest.raises(ArgumentError):
        ek.trsm(1.0, np.eye(3), np.ones((3, 3)), side="X")
