"""einkern.einsum against numpy.einsum on random data (CPU backend): pairwise plans
along opt_einsum's path, NumPy's conventions (ellipsis, broadcasting, diagonals,
implicit output, mixed dtypes, out=, optimize=), tune=, the plan cache, errors."""

from __future__ import annotations

import importlib
import string

import numpy as np
import pytest

import einkern
from einkern.backends.cpu import CpuBackend
from einkern.einsum import _parse_spec, einsum_plan
from einkern.errors import ArgumentError, DtypeError, EinkernError, LayoutError, ParseError

pytestmark = pytest.mark.skipif(not CpuBackend().available(), reason="no C compiler")

TOLERANCE = {np.dtype(np.float64): 1e-12, np.dtype(np.float32): 1e-5}


@pytest.fixture(autouse=True)
def cache_dir(tmp_path_factory, monkeypatch):
    """Compiled kernels go to one directory per test session."""
    monkeypatch.setenv("EINKERN_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "kernels"))


def arrays(seed: int, *shapes, dtype=np.float64):
    rng = np.random.default_rng(seed)
    return [rng.uniform(-1, 1, shape).astype(dtype) for shape in shapes]


def test_a_0_d_result_is_a_numpy_scalar_as_numpy_gives():
    A = arrays(13, (3, 3))[0]
    result = einkern.einsum("ii", A, backend="cpu")
    assert type(result) is type(np.einsum("ii", A)) is np.float64
    assert abs(result - np.trace(A)) <= 1e-12 * abs(np.trace(A))
    out = np.zeros(())
    assert einkern.einsum("ij,ij->", A, A, out=out, backend="cpu") is out


def assert_matches(result, expected, tolerance=None):
    """Same shape and dtype as NumPy's result; relative error (max abs difference over
    max abs value) within the dtype's tolerance (or ``tolerance``), against float64."""
    assert result.shape == expected.shape and result.dtype == expected.dtype
    exact = np.asarray(expected, dtype=np.float64)
    scale = max(float(np.max(np.abs(exact), initial=0.0)), 1e-300)
    error = float(np.max(np.abs(result.astype(np.float64) - exact), initial=0.0)) / scale
    assert error <= (tolerance or TOLERANCE[expected.dtype]), error


CASES = [
    ("ik,kj->ij", [(6, 4), (4, 5)]),
    ("ik,kj", [(6, 4), (4, 5)]),
    ("ij,jk,kl->il", [(5, 6), (6, 7), (7, 3)]),
    ("ab,bc,cd,de->ae", [(3, 4), (4, 5), (5, 2), (2, 6)]),
    ("ij,j,jk->ik", [(4, 5), (5,), (5, 3)]),
    ("i,i", [(7,), (7,)]),
    ("i,j", [(3,), (4,)]),
    ("ii", [(5, 5)]),
    ("ii->i", [(5, 5)]),
    ("iij->j", [(3, 3, 4)]),
    ("ij->ji", [(3, 4)]),
    ("Ba,aA", [(2, 3), (3, 4)]),
    ("...ii->...i", [(2, 3, 3)]),
    ("...ij,...jk->...ik", [(2, 1, 3, 4), (5, 4, 2)]),
    ("...i,...i->...", [(2, 3, 4), (3, 4)]),
    ("i...,i...", [(3, 2, 4), (3, 2, 4)]),
    ("i...->", [(2, 3)]),
    ("ij...,jk...->ik", [(2, 3, 4), (3, 2, 4)]),
    ("ij,ij->ij", [(3, 1), (3, 4)]),
    ("i,i", [(3,), (1,)]),
    (",ij->ij", [(), (2, 3)]),
    ("ij,jk,kl,lm,mi->", [(3, 4), (4, 5), (5, 3), (3, 2), (2, 3)]),
    ("abc,cd,bde->ae", [(3, 4, 5), (5, 2), (4, 2, 3)]),
]


@pytest.mark.parametrize("optimize", [True, False])
@pytest.mark.parametrize("spec, shapes", CASES)
def test_matches_numpy_einsum(spec, shapes, optimize):
    operands = arrays(1, *shapes)
    expected = np.einsum(spec, *operands, optimize=True)
    assert_matches(einkern.einsum(spec, *operands, optimize=optimize, backend="cpu"), expected)


def random_case(rng: np.random.Generator):
    """Random subscripts over up to 6 indices (extents 1-4) and 1-4 operands, with
    repeated indices, broadcast size-1 dimensions, ellipses over up to 2 leading
    dimensions, and an explicit or implicit output."""
    letters = string.ascii_letters[rng.integers(0, 40) :][:6]
    sizes = {c: int(rng.integers(1, 5)) for c in letters}
    batch = [int(rng.integers(1, 4)) for _ in range(int(rng.integers(0, 3)))]
    terms, shapes = [], []
    for _ in range(int(rng.integers(1, 5))):
        term = "".join(rng.choice(list(letters), size=int(rng.integers(0, 4))))
        shape = [sizes[c] if rng.random() < 0.9 or len(set(term)) < len(term) else 1 for c in term]
        if batch and rng.random() < 0.6:
            covered = batch[len(batch) - int(rng.integers(0, len(batch) + 1)) :]
            shape = [n if rng.random() < 0.8 else 1 for n in covered] + shape
            term = "..." + term
        terms.append(term)
        shapes.append(tuple(shape))
    used = sorted(set("".join(terms).replace(".", "")))
    out = "".join(rng.permutation(used)[: int(rng.integers(0, len(used) + 1))])
    if any("..." in t for t in terms) and rng.random() < 0.7:
        out = "..." + out
    spec = ",".join(terms) + ("" if rng.random() < 0.3 else "->" + out)
    return spec, shapes


@pytest.mark.parametrize("seed", range(8))
def test_random_float32_subscripts_match_numpy(seed):
    rng = np.random.default_rng(100 + seed)
    spec, shapes = random_case(rng)
    operands = arrays(seed, *shapes, dtype=np.float32)
    exact = np.einsum(spec, *(o.astype(np.float64) for o in operands), optimize=True)
    assert_matches(
        einkern.einsum(spec, *operands, backend="cpu"), np.asarray(exact).astype(np.float32)
    )


@pytest.mark.parametrize("seed", range(24))
def test_random_subscripts_match_numpy(seed):
    rng = np.random.default_rng(seed)
    spec, shapes = random_case(rng)
    operands = arrays(seed, *shapes)
    expected = np.einsum(spec, *operands, optimize=True)
    assert_matches(einkern.einsum(spec, *operands, backend="cpu"), expected)


def test_a_chain_is_contracted_pairwise():
    n = 96
    A, B, C = arrays(2, (n, n), (n, n), (n, n))
    plan = einsum_plan("ij,jk,kl->il", A, B, C, backend="cpu")
    assert [len(step.positions) for step in plan.steps] == [2, 2]
    assert [step.subscripts for step in plan.steps] == ["ij,jk->ik", "kl,ik->il"]
    assert plan.flops == 2 * (2 * n**3 - n**2)  # two matrix products: n**3 products, fewer sums
    single = einsum_plan("ij,jk,kl->il", A, B, C, backend="cpu", optimize=False)
    assert len(single.steps) == 1 and single.flops >= n * plan.flops // 4
    assert "opt_einsum" in plan.how and "optimize=False" in single.how
    assert_matches(einkern.einsum("ij,jk,kl->il", A, B, C, backend="cpu"), A @ B @ C)
    assert_matches(plan(A, B, C), A @ B @ C)  # a plan runs by itself too
    with pytest.raises(ArgumentError, match="takes 3 operand"):
        plan(A, B)
    with pytest.raises(ArgumentError, match="shape"):
        plan(A, B, C[:, :5].copy())
    assert einkern.einsum_plan is einsum_plan


def test_strategies_paths_and_memory_limit():
    A, B, C = arrays(3, (4, 5), (5, 6), (6, 3))
    expected = A @ B @ C
    for optimize in (
        "greedy",
        "optimal",
        "dp",
        [(1, 2), (0, 1)],
        np.einsum_path("ij,jk,kl->il", A, B, C)[0],
    ):
        plan = einsum_plan("ij,jk,kl->il", A, B, C, backend="cpu", optimize=optimize)
        assert len(plan.steps) == 2
        assert_matches(
            einkern.einsum("ij,jk,kl->il", A, B, C, optimize=optimize, backend="cpu"), expected
        )
    assert (
        einsum_plan("ij,jk,kl->il", A, B, C, backend="cpu", optimize=[(1, 2), (0, 1)])
        .steps[0]
        .subscripts
        == "jk,kl->jl"
    )
    tight = einsum_plan("ij,jk,kl->il", A, B, C, backend="cpu", memory_limit=1)
    assert len(tight.steps) == 1 and "one step" in tight.how
    assert_matches(einkern.einsum("ij,jk,kl->il", A, B, C, memory_limit=1, backend="cpu"), expected)


def test_mixed_dtypes_promote_as_numpy_does():
    A, B, C = arrays(4, (4, 5), (5, 6), (6, 3))
    A32, B32 = A.astype(np.float32), B.astype(np.float32)
    assert_matches(einkern.einsum("ij,jk", A32, B, backend="cpu"), np.einsum("ij,jk", A32, B))
    assert_matches(einkern.einsum("ij,jk", A32, B32, backend="cpu"), np.einsum("ij,jk", A32, B32))
    path = [(0, 1), (0, 1)]
    result = einkern.einsum("ij,jk,kl->il", A32, B32, C, optimize=path, backend="cpu")
    # float64 like NumPy's, through a float32 intermediate: float32's tolerance
    assert_matches(result, np.einsum("ij,jk,kl->il", A32, B32, C, optimize=True), 1e-5)
    plan = einsum_plan("ij,jk,kl->il", A32, B32, C, optimize=path, backend="cpu")
    dtypes = [step.kernel.program.tensor("out").dtype for step in plan.steps]
    assert dtypes == ["float32", "float64"]  # the float32 pair's intermediate stays float32


@pytest.mark.parametrize("order", ["C", "F"])
def test_out_receives_the_result(order):
    A, B, C = arrays(5, (4, 5), (5, 6), (6, 3))
    for operands, spec in (((A, B), "ij,jk->ik"), ((A, B, C), "ij,jk,kl->il")):
        out = np.zeros((4, operands[-1].shape[1]), order=order)
        result = einkern.einsum(spec, *operands, out=out, backend="cpu")
        assert result is out
        assert_matches(out, np.einsum(spec, *operands, optimize=True))
    wide = np.zeros((4, 6))
    einkern.einsum("ij,jk->ik", A.astype(np.float32), B.astype(np.float32), out=wide, backend="cpu")
    np.testing.assert_allclose(wide, A @ B, rtol=1e-5)


@pytest.mark.parametrize(
    "out, error, text",
    [
        (np.zeros((4, 5)), ArgumentError, "shape"),
        (np.zeros((4, 6), np.float32), DtypeError, "float32"),
        (np.zeros((4, 12))[:, ::2], LayoutError, "dense"),
        (np.zeros((4, 6), np.int64), DtypeError, "int64"),
        ([[0.0]], ArgumentError, "cannot use a list as out="),
    ],
)
def test_bad_out_is_a_typed_error(out, error, text):
    A, B = arrays(6, (4, 5), (5, 6))
    with pytest.raises(error, match=text):
        einkern.einsum("ij,jk->ik", A, B, out=out, backend="cpu")


def test_read_only_and_overlapping_out_are_refused_on_the_cached_path_too():
    A, B = arrays(7, (4, 4), (4, 4))
    frozen = np.zeros((4, 4))
    frozen.flags.writeable = False
    for _ in range(2):  # the second call takes the cached plan
        with pytest.raises(ArgumentError, match="read-only"):
            einkern.einsum("ij,jk->ik", A, B, out=frozen, backend="cpu")
        einkern.einsum("ij,jk->ik", A, B, out=np.zeros((4, 4)), backend="cpu")
        with pytest.raises(ArgumentError, match="same memory"):
            einkern.einsum("ij,jk->ik", A, B, out=A, backend="cpu")


def test_cached_calls_go_straight_to_the_plan(monkeypatch):
    module = importlib.import_module("einkern.einsum")  # einkern.einsum is the function
    A, B, C = arrays(8, (3, 4), (4, 5), (5, 2))
    first = einkern.einsum("ij,jk,kl->il", A, B, C, backend="cpu")
    plan = einsum_plan("ij,jk,kl->il", A, B, C, backend="cpu")

    def refuse(*args, **kwargs):
        raise AssertionError("prepared again")

    monkeypatch.setattr(module, "_prepare", refuse)
    A2, B2, C2 = arrays(9, (3, 4), (4, 5), (5, 2))
    assert einsum_plan("ij,jk,kl->il", A2, B2, C2, backend="cpu") is plan
    assert_matches(einkern.einsum("ij,jk,kl->il", A2, B2, C2, backend="cpu"), A2 @ B2 @ C2)
    np.testing.assert_allclose(first, A @ B @ C, rtol=1e-12)
    with pytest.raises(AssertionError, match="prepared again"):  # other strides: a new plan
        einkern.einsum("ij,jk,kl->il", np.asfortranarray(A2), B2, C2, backend="cpu")


def test_tune_chooses_each_kernels_configuration(tmp_path):
    A, B, C = arrays(10, (8, 8), (8, 8), (8, 8))
    plan = einsum_plan("ij,jk,kl->il", A, B, C, backend="cpu", tune="model")
    assert plan.tuning_sources == ("model", "model")
    assert_matches(einkern.einsum("ij,jk,kl->il", A, B, C, tune="model", backend="cpu"), A @ B @ C)
    db = tmp_path / "tuning.sqlite"
    cached = einsum_plan("ij,jk->ik", A, B, backend="cpu", tune="cached", tuning_db=db)
    assert cached.tuning_sources == ("default mapping",) and not db.exists()
    tuned = einsum_plan("ij,jk->ik", A, B, backend="cpu", tune="full", tuning_db=db)
    (source,) = tuned.tuning_sources
    assert db.exists() and "variants" in source  # tuned now, recorded in the database
    again = einsum_plan("ij,jk->ik", B, C, backend="cpu", tune=True, tuning_db=db)
    # the record is used when a variant beat the default in that run (the honest tuner)
    expected = "exact record" if source.startswith("tuned now") else "default mapping"
    assert again.tuning_sources[0].startswith(expected)
    assert_matches(einkern.einsum("ij,jk->ik", B, C, tune=True, tuning_db=db, backend="cpu"), B @ C)


@pytest.mark.parametrize(
    "spec, shapes, error, text",
    [
        ("i..,i", [(2,), (2,)], ParseError, "ellipsis"),
        ("i......", [(2, 2)], ParseError, "ellipsis"),
        ("i...,i...->", [(2,), (2,)], ArgumentError, None),
        ("ijk...", [(2, 2)], ArgumentError, "2 dimension"),
        ("ij", [(2, 2, 2)], ArgumentError, "3 dimension"),
        ("ij,ij->ij", [(3, 2), (3, 4)], ArgumentError, "size 2 in one operand and 4"),
        ("ii", [(2, 3)], ArgumentError, "repeats index 'i'"),
        ("...i,...i", [(2, 3), (4, 3)], ArgumentError, "a dimension that '...' covers"),
        ("ij->ii", [(2, 2)], ArgumentError, "repeated"),
        ("ij->k", [(2, 2)], ArgumentError, "appears in no operand"),
        ("ij,jk", [(2, 2)], ArgumentError, "2 operand"),
        ("i$", [(2, 2)], ParseError, "unexpected character"),
        ("i->j->k", [(2,)], ParseError, "more than one"),
    ],
)
def test_bad_subscripts_are_typed_errors(spec, shapes, error, text):
    operands = [np.ones(shape) for shape in shapes]
    if text is None:  # valid after all: the ellipsis covers no dimension
        einkern.einsum(spec, *operands, backend="cpu")
        return
    with pytest.raises(error, match=text) as caught:
        einkern.einsum(spec, *operands, backend="cpu")
    if error is ParseError:
        assert caught.value.span is not None


@pytest.mark.parametrize(
    "operands, options, error, text",
    [
        ([np.ones((2, 2), np.int64)], {}, DtypeError, "int64"),
        ([np.ones((2, 2), np.complex128)], {}, DtypeError, r"complex128(.|\n)*\.real, \.imag"),
        ([np.ones((4, 4))[:, ::2]], {}, LayoutError, "dense"),
        ([3.0], {}, ArgumentError, "cannot use a float"),
        ([np.ones((2, 0))], {}, ArgumentError, "size 1 or more"),
        ([np.ones((2, 2))] * 2, {"optimize": "fastest"}, ArgumentError, "optimize"),
        ([np.ones((2, 2))] * 2, {"optimize": [(0, 5)]}, ArgumentError, "distinct operands"),
        ([np.ones((2, 2))] * 2, {"optimize": [(0, 0)]}, ArgumentError, "distinct operands"),
        ([np.ones((2, 2))] * 2, {"optimize": 3.5}, ArgumentError, "optimize"),
        ([np.ones((2, 2))] * 2, {"optimize": []}, ArgumentError, "empty"),
        ([np.ones((2, 2))] * 2, {"optimize": ["einsum_path"]}, ArgumentError, "empty"),
        ([np.ones((2, 2))], {"tune": "sometimes"}, EinkernError, "tuning policy"),
        ([np.ones((2, 2))], {"tune": ["cached"]}, ArgumentError, "options must be"),
        ([np.ones((2, 2))] * 3, {"memory_limit": [1]}, ArgumentError, "options must be"),
        ([np.ones((2, 2))] * 3, {"memory_limit": "foo"}, ArgumentError, "memory_limit"),
    ],
)
def test_bad_operands_and_options_are_typed_errors(operands, options, error, text):
    spec = ",".join(["ij"] * len(operands)) + "->i"
    with pytest.raises(error, match=text):
        einkern.einsum(spec, *operands, backend="cpu", **options)


def test_a_path_that_leaves_operands_is_refused():
    A, B, C = arrays(11, (2, 2), (2, 2), (2, 2))
    with pytest.raises(ArgumentError, match="uncontracted"):
        einkern.einsum("ij,jk,kl->il", A, B, C, optimize=[(0, 1)], backend="cpu")


def test_parse_spec_expands_ellipses_and_the_implicit_output():
    assert _parse_spec("...ij,...jk", 2, [3, 4]) == (["bij", "abjk"], "abik")
    assert _parse_spec("i...->...", 1, [3]) == (["iab"], "ab")
    assert _parse_spec("i...,j", 2) == (["i", "j"], "ij")  # ranks unknown: no dimension
    assert _parse_spec("ba,ac", 2) == (["ba", "ac"], "bc")
    with pytest.raises(ArgumentError, match="letters"):
        _parse_spec("".join(string.ascii_letters[:50]) + "...", 1, [53])


@pytest.mark.parametrize(
    "spec, shapes",
    [
        ("ij,jk,kl->il", [(9, 7), (7, 5), (5, 6)]),
        ("ij,ij->ij", [(5, 1), (5, 6)]),
        ("...ij,...jk->...ik", [(2, 1, 3, 4), (5, 4, 2)]),
        ("iij->j", [(4, 4, 5)]),
        ("i,i", [(9,), (1,)]),
    ],
)
def test_plans_kernels_match_the_reference_under_cuda_mappings(spec, shapes):
    """Each step's program under its default CUDA mapping, emulated on the CPU."""
    from einkern.backends.verify import verify
    from einkern.gpu.decision import decide
    from einkern.ir.task import statement_task

    plan = einsum_plan(spec, *arrays(12, *shapes), backend="cpu")
    for step in plan.steps:
        problem = step.kernel.problem
        result = verify(problem, {0: decide(statement_task(problem, 0))}, seed=4)
        assert result.ok(1e-12), (step.subscripts, result)


def test_threads_share_the_plan_cache(monkeypatch):
    from concurrent.futures import ThreadPoolExecutor

    module = importlib.import_module("einkern.einsum")
    monkeypatch.setattr(module, "CACHE_SIZE", 3)  # evictions while other threads add

    def work(n: int) -> bool:
        A, B = arrays(n, (n, 3), (3, n))
        return all(
            np.allclose(einkern.einsum("ij,jk", A, B, backend="cpu"), A @ B, rtol=1e-12)
            for _ in range(20)
        )

    with ThreadPoolExecutor(4) as pool:
        assert all(pool.map(work, range(2, 10)))
    assert len(module._PLANS) <= 3
