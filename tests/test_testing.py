"""einkern.testing: random inputs, tolerances and the comparison with the reference."""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest
from conftest import EXAMPLES, problem_of

from einkern.errors import AllocationError, EinkernError
from einkern.testing import (
    TOLERANCE,
    assert_matches_reference,
    output_tolerance,
    random_array,
    random_arrays,
    random_scalars,
    relative_error,
    tolerance,
)

PROGRAM = """
dims n = 6, m = 4
tensor A[n, m] float32 column
tensor B[n, m] float32
tensor C[n, m] float64
scalar alpha, beta = 2
C[i, j] = alpha * A[i, j] + beta * B[i, j]
"""


def test_random_arrays_are_drawn_in_each_tensors_dtype_and_layout():
    problem = problem_of(PROGRAM)
    arrays = random_arrays(problem, seed=5)
    assert {name: a.dtype.name for name, a in arrays.items()} == {
        "A": "float32",
        "B": "float32",
        "C": "float64",
    }
    assert arrays["A"].flags.f_contiguous and not arrays["A"].flags.c_contiguous
    assert arrays["B"].flags.c_contiguous
    for array in arrays.values():
        assert array.shape == (6, 4) and 0.5 <= array.min() and array.max() <= 1.5
    again = random_arrays(problem, seed=5, names=["A"])
    assert list(again) == ["A"] and np.array_equal(again["A"], arrays["A"])
    assert not np.array_equal(random_arrays(problem, seed=6)["A"], arrays["A"])


def test_a_float32_array_never_passes_through_float64():
    rng = np.random.default_rng(0)
    shape = (1024, 1024)  # 4 MiB in float32, 8 MiB in float64
    tracemalloc.start()
    try:
        array = random_array(rng, shape, "float32", "column")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert array.dtype == np.float32 and array.flags.f_contiguous
    assert peak < 1.5 * array.nbytes, peak


def test_an_allocation_failure_says_how_many_bytes_were_asked_for():
    rng = np.random.default_rng(0)
    with pytest.raises(AllocationError, match="9007199254740992 bytes") as caught:
        random_array(rng, (1 << 20, 1 << 20, 1 << 10), "float64")
    assert isinstance(caught.value, EinkernError) and caught.value.hint


def test_random_scalars_one_formula():
    problem = problem_of(PROGRAM)
    drawn = random_scalars(problem, seed=3)
    assert drawn["beta"] == 2.0 and 0.5 <= drawn["alpha"] < 1.5
    assert random_scalars(problem, seed=3) == drawn
    assert random_scalars(problem, seed=4)["alpha"] != drawn["alpha"]
    assert random_scalars(problem, seed=3, given={"beta": 5}) == {**drawn, "beta": 5.0}
    assert random_scalars(problem, seed=3, given={"alpha": 7})["alpha"] == 7.0


def test_tolerances_come_from_the_table_of_meaning():
    problem = problem_of(PROGRAM)
    assert tolerance("float32") == TOLERANCE["float32"] == 1e-5
    assert output_tolerance(problem, "C") == TOLERANCE["float64"] == 1e-12
    assert relative_error(np.array([1.0, 2.0]), np.array([1.0, 4.0])) == 0.5
    assert relative_error(np.array([np.nan]), np.array([1.0])) == float("inf")


class _Doubling:
    """A stand-in kernel computing C = 2 A (right when ``wrong`` is 0)."""

    def __init__(self, wrong: float = 0.0):
        self.problem = problem_of("dims n = 5\ntensor A[n], C[n]\nC[i] = 2 * A[i]")
        self.wrong = wrong

    def __call__(self, A, C=None):
        return 2 * A + self.wrong


def test_assert_matches_reference_runs_a_kernel():
    errors = assert_matches_reference(_Doubling(), seed=2)
    assert list(errors) == ["C"] and errors["C"] == 0.0
    with pytest.raises(AssertionError, match=r"C: relative error .* > 1e-12"):
        assert_matches_reference(_Doubling(wrong=1e-6))


def test_assert_matches_reference_takes_outputs():
    kernel = _Doubling()
    inputs = random_arrays(kernel.problem, 1, ["A"])
    assert assert_matches_reference({"C": 2 * inputs["A"]}, kernel.problem, inputs) == {"C": 0.0}
    with pytest.raises(AssertionError, match="differs from the reference"):
        assert_matches_reference({"C": 3 * inputs["A"]}, kernel.problem, inputs)
    with pytest.raises(TypeError):
        assert_matches_reference({"C": inputs["A"]})


def test_assert_matches_reference_with_a_compiled_cpu_kernel():
    import einkern

    kernel = einkern.compile(PROGRAM.replace("C[n, m] float64", "C[n, m] float32"), backend="cpu")
    errors = assert_matches_reference(kernel, seed=9)
    assert 0 < errors["C"] <= 1e-5


def test_assert_matches_reference_with_an_in_place_update():
    import einkern

    kernel = einkern.compile(EXAMPLES / "sd_t_d1_1.ein", T=4, backend="cpu")
    assert "t3" in kernel.problem.program.inputs  # -=: read and written
    assert assert_matches_reference(kernel, seed=1)["t3"] <= 1e-12
