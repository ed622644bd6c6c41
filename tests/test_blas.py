"""einkern.blas against SciPy's BLAS (``scipy.linalg.blas``) on random data, fp32 and
fp64: every routine and every variant, on NumPy arrays and torch CPU tensors, with
strided and transposed views; trsm's and syrk's recursions at sizes that
exercise them."""

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


def triangular(rng, size, dtype, lower):
    """A well-conditioned triangular matrix whose other triangle is NaN (never read)."""
    a = rand(rng, size, size, dtype=dtype) + (2 * size * np.eye(size)).astype(dtype)
    other = np.triu_indices(size, 1) if lower else np.tril_indices(size, -1)
    poisoned = a.copy()
    poisoned[other] = np.nan
    return a, poisoned


@pytest.mark.parametrize("dtype, side, lower, trans, unit", TRSM)
def test_trsm_every_variant(dtype, side, lower, trans, unit):
    """One diagonal block (8 x 6), and the recursion (blocks of 3 rows: 11 x 13)."""
    rng = np.random.default_rng(5)
    for (m, n), block in (((8, 6), None), ((11, 13), 3)):
        size = m if side == "L" else n
        a, poisoned = triangular(rng, size, dtype, lower)
        b = rand(rng, m, n, dtype=dtype)
        expected = scipy_fn("trsm", dtype)(
            1.3, a, b, side=int(side == "R"), lower=int(lower), trans_a=int(trans), diag=int(unit)
        )
        result = ek.trsm(
            1.3, poisoned, b, side=side, lower=lower, trans=trans, unit=unit, block=block
        )
        assert relative_error(result, expected) <= TOL[dtype] * 10, (m, n, block)


def test_trsm_blocks_of_every_size_agree():
    """The recursion's split (at block boundaries, a last block shorter) for several
    block sizes gives the same solution."""
    rng = np.random.default_rng(6)
    a, poisoned = triangular(rng, 23, np.float64, True)
    b = rand(rng, 23, 5)
    expected = blas.dtrsm(0.7, a, b, lower=1)
    for block in (1, 2, 5, 8, 22, 23, 64):
        result = ek.trsm(0.7, poisoned, b, lower=True, block=block)
        assert relative_error(result, expected) <= 1e-11, block


SYRK_SIZES = [(10, 4), (13, 2), (16, 2), (17, 3), (23, 1), (64, 8)]


@pytest.mark.parametrize(
    "dtype, lower, trans", list(itertools.product(DTYPES, [False, True], [False, True]))
)
def test_syrk_recursion(dtype, lower, trans):
    """Several levels of halving at small blocks, n a power of two or not (padded
    with zero rows), C's other triangle NaN (never read into the result) and kept."""
    rng = np.random.default_rng(7)
    for n, block in SYRK_SIZES:
        k = 5
        a = rand(rng, *((k, n) if trans else (n, k)), dtype=dtype)
        c = rand(rng, n, n, dtype=dtype)
        mine = np.tril_indices(n) if lower else np.triu_indices(n)
        other = np.triu_indices(n, 1) if lower else np.tril_indices(n, -1)
        expected = scipy_fn("syrk", dtype)(
            0.8, a, beta=1.5, c=c, trans=int(trans), lower=int(lower)
        )
        poisoned = c.copy()
        poisoned[other] = np.nan
        result = ek.syrk(0.8, a, 1.5, poisoned, trans=trans, lower=lower, block=block)
        assert relative_error(result[mine], expected[mine]) <= TOL[dtype], (n, block)
        assert np.isnan(result[other]).all(), (n, block)
        alone = ek.syrk(0.8, a, trans=trans, lower=lower, block=block)  # no C: zeros
        product = 0.8 * (a.T @ a if trans else a @ a.T)
        assert relative_error(alone[mine], product[mine]) <= TOL[dtype], (n, block)
        assert not alone[other].any()


def test_syrk_blocking():
    """The fewest halvings to blocks of at most ``block`` rows; the rows padded to
    ``base·2^levels``, fewer than ``2^levels`` more; the deepest level's
    off-diagonal blocks share the diagonal blocks' call."""
    assert ek.SYRK_BLOCK == 1024
    assert ek.syrk_blocking(4096) == ek.SyrkBlocking(4096, 2, 1024)
    assert ek.syrk_blocking(4096).level(0) == (1, 2048)
    assert ek.syrk_blocking(4096).calls == ((1, 2048), (6, 1024))
    assert ek.syrk_blocking(4096, 512).level(2) == (4, 512)
    assert ek.syrk_blocking(4096, 512).calls == ((1, 2048), (2, 1024), (12, 512))
    assert ek.syrk_blocking(4095).padded == 4096
    assert ek.syrk_blocking(300, 128) == ek.SyrkBlocking(300, 2, 75)
    assert ek.syrk_blocking(17, 3) == ek.SyrkBlocking(17, 3, 3)
    assert ek.syrk_blocking(1024).levels == 0 and ek.syrk_blocking(1024).calls == ((1, 1024),)
    assert ek.syrk_blocking(2048).calls == ((3, 1024),)
    for n, block in SYRK_SIZES:
        plan = ek.syrk_blocking(n, block)
        assert plan.base <= block and n <= plan.padded < n + (1 << plan.levels)
        assert len(plan.calls) == max(plan.levels, 1)
    with pytest.raises(ArgumentError):
        ek.syrk_blocking(10, 0)


class Recording:
    """The CPU engine, recording the ``(q, m)`` of every syrk_blocks call."""

    name = "recording-cpu"
    calls: list[tuple[int, int]] = []

    def kernel(self, text, sizes):
        from einkern.blas import engines

        inner = engines.get_engine("cpu").kernel(text, sizes)

        def call(**arguments):
            if text.lstrip().startswith("void syrk_blocks"):
                Recording.calls.append((dict(sizes)["q"], dict(sizes)["m"]))
            inner(**arguments)

        return call


@pytest.mark.parametrize("lower", [False, True])
def test_syrk_merges_the_deepest_level_with_the_diagonal_blocks(lower):
    """The calls are the plan's: one per level above the deepest, then one for the
    deepest level's off-diagonal blocks and every diagonal block (odd n, several
    levels, one level, none), with and without C."""
    from einkern.blas import engines

    if Recording.name not in engines._ENGINES:
        engines.register_engine(Recording.name, Recording)
    rng = np.random.default_rng(11)
    for n, block in ((29, 4), (13, 3), (7, 4), (5, 8)):
        plan = ek.syrk_blocking(n, block)
        a, c = rand(rng, n, 6), rand(rng, n, n)
        mine = np.tril_indices(n) if lower else np.triu_indices(n)
        for beta, given in ((0.0, None), (0.7, c)):
            Recording.calls.clear()
            got = ek.syrk(1.3, a, beta, given, lower=lower, block=block, backend=Recording.name)
            assert tuple(Recording.calls) == plan.calls, (n, block)
            expected = blas.dsyrk(1.3, a, beta=beta, c=c, lower=int(lower))
            assert relative_error(got[mine], expected[mine]) <= 1e-12, (n, block, beta)
    assert ek.syrk_blocking(29, 4).calls == ((1, 16), (2, 8), (12, 4))


def test_transposed_and_strided_views():
    """Fortran-ordered matrices are read as their transposes (ops flipped), other
    strided views are copied: the results are SciPy's either way."""
    rng = np.random.default_rng(8)
    a = rand(rng, 9, 9)
    f = np.asfortranarray(a)
    x, y = rand(rng, 9), rand(rng, 18)[::2]  # y strided
    assert relative_error(ek.gemv(1.1, f, x, 0.5, y), blas.dgemv(1.1, a, x, 0.5, y)) <= 1e-12
    assert relative_error(ek.gemm(1.0, f, a[:, ::-1]), a @ a[:, ::-1]) <= 1e-12
    low = np.tril(a) + 20 * np.eye(9)
    for lower in (False, True):
        expected = blas.dsymv(0.9, a, x, lower=int(lower))
        assert relative_error(ek.symv(0.9, f, x, lower=lower), expected) <= 1e-12
        # the other triangle is zero in both
        expected = blas.dsyrk(1.0, a, trans=1, lower=int(lower))
        assert relative_error(ek.syrk(1.0, f, trans=True, lower=lower), expected) <= 1e-12
    expected = blas.dtrsm(1.0, low, a, lower=1, side=1)
    assert (
        relative_error(ek.trsm(1.0, np.asfortranarray(low), a, lower=True, side="R"), expected)
        <= 1e-12
    )


def test_torch_cpu_tensors_give_torch_tensors():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(9)
    a, b, c = (rand(rng, 6, 6, dtype=np.float32) for _ in range(3))
    ta, tb, tc = (torch.from_numpy(m) for m in (a, b, c))
    result = ek.gemm(1.5, ta, tb.T, 0.5, tc)  # a transposed view: read without a copy
    assert isinstance(result, torch.Tensor) and result.dtype == torch.float32
    assert relative_error(result.numpy(), 1.5 * a @ b.T + 0.5 * c) <= 1e-5
    low, _ = triangular(rng, 6, np.float64, True)
    solved = ek.trsm(1.0, torch.from_numpy(low), torch.from_numpy(b.astype(np.float64)), lower=True)
    assert isinstance(solved, torch.Tensor) and solved.dtype == torch.float64
    assert (
        relative_error(solved.numpy(), blas.dtrsm(1.0, low, b.astype(np.float64), lower=1)) <= 1e-12
    )
    z = ek.axpy(2.0, torch.ones(5), torch.arange(5.0))
    assert torch.equal(z, torch.arange(5.0) + 2)
    # syrk's strided block views and triangle writes on torch tensors: 11 rows in
    # blocks of at most 3 (two levels and the diagonal blocks, padded to 12)
    x, s = rand(rng, 4, 11), rand(rng, 11, 11)
    for lower in (False, True):
        other = np.triu_indices(11, 1) if lower else np.tril_indices(11, -1)
        poisoned = s.copy()
        poisoned[other] = np.nan
        tx = torch.from_numpy(x.T.copy()).T  # a transposed view: trans flipped, no copy
        got = ek.syrk(0.7, tx, 0.4, torch.from_numpy(poisoned), trans=True, lower=lower, block=3)
        assert isinstance(got, torch.Tensor) and got.dtype == torch.float64
        expected = blas.dsyrk(0.7, x, beta=0.4, c=s, trans=1, lower=int(lower))
        mine = np.tril_indices(11) if lower else np.triu_indices(11)
        assert relative_error(got.numpy()[mine], expected[mine]) <= 1e-12
        assert np.isnan(got.numpy()[other]).all()


def test_bad_arguments_are_argument_errors():
    with pytest.raises(ArgumentError):
        ek.axpy(1.0, np.ones(3), np.ones(4))
    with pytest.raises(ArgumentError):
        ek.gemm(1.0, np.ones((2, 3)), np.ones((4, 2)))
    with pytest.raises(ArgumentError):
        ek.gemv(1.0, np.ones((2, 3)), np.ones(3, dtype=np.float32))
    with pytest.raises(ArgumentError):
        ek.trsm(1.0, np.eye(3), np.ones((3, 3)), side="X")
    with pytest.raises(ArgumentError, match="one library"):
        ek.axpy(1.0, np.ones(3), __import__("torch").ones(3, dtype=__import__("torch").float64))
    with pytest.raises(ArgumentError, match="float32 or float64"):
        ek.axpy(1.0, np.ones(3, dtype=np.int64), np.ones(3, dtype=np.int64))
    with pytest.raises(ArgumentError):
        ek.trsm(1.0, np.eye(3), np.ones((3, 3)), block=0)
    with pytest.raises(ArgumentError):
        ek.syrk(1.0, np.eye(3), block=0)
    with pytest.raises(ArgumentError):
        ek.syrk(1.0, np.eye(3), 1.0, np.eye(4))


def test_routines_take_the_tensor_program_path_where_they_are_products():
    """gemv, axpy, syrk's batched blocks (all levels) and trsm's products raise to
    Einstein statements; symv and trsm's diagonal-block inverses are loop nests
    over triangles."""
    from einkern.blas import engines

    kinds = {}
    original = engines._compiled

    def spy(text, sizes, backend):
        kinds[text.split("(")[0].split()[-1]] = not isinstance(engines.raised(text), str)
        return original(text, sizes, backend)

    engines._compiled = spy
    try:
        rng = np.random.default_rng(10)
        a, b = rand(rng, 7, 7) + 14 * np.eye(7), rand(rng, 7, 7)
        ek.axpy(1.0, a[0], b[0])
        ek.gemv(1.0, a, b[0], 1.0, b[1])
        ek.symv(1.0, a, b[0])
        ek.syrk(1.0, a, block=3)
        ek.trsm(1.0, a, b, block=3)
    finally:
        engines._compiled = original
    assert kinds == {
        "axpy": True,
        "gemv": True,
        "symv": False,
        "syrk_blocks": True,
        "scale": True,
        "inverse": False,
        "leaf": True,
        "update": True,
    }
