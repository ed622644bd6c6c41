"""Helpers for checking einkern's kernels: random inputs, tolerances, comparison.

The tests, the benchmarks, the tuner's CPU target and the ``einkern run --check``
command all draw their inputs and judge their results here, so every one of
them means the same thing by "random inputs" and "close enough":

* :func:`random_arrays` — values uniform in [0.5, 1.5] (1.5 only by float32
  rounding; never zero: safe for ``sqrt``, ``log`` and division), drawn
  directly in each tensor's dtype and layout;
* :func:`random_scalars` — each scalar's declared default, else a value uniform
  in [0.5, 1.5) (the one formula for random scalars);
* :data:`TOLERANCE`, :func:`tolerance` and :func:`output_tolerance` — the
  accepted relative error of a result, from :mod:`einkern.semantics`;
* :func:`relative_error` — max |result - reference| / max |reference|;
* :func:`assert_matches_reference` — run a kernel (or take its outputs) and
  compare every output with the NumPy reference.

>>> import einkern, einkern.testing
>>> kernel = einkern.compile('''
... dims n = 8
... tensor A[n], B[n]
... B[i] = 2 * A[i]
... ''', backend="cpu")
>>> errors = einkern.testing.assert_matches_reference(kernel)
>>> errors["B"] <= einkern.testing.tolerance("float64")
True

This module belongs to the backends layer: it imports the language, the IR
and the reference, never the tuner, the API, the benchmarks or the CLI.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

from .errors import AllocationError
from .ir.nodes import Problem
from .reference import evaluate, relative_error
from .semantics import ITEMSIZE, NUMPY_DTYPE, TOLERANCE, tolerance

__all__ = [
    "TOLERANCE",
    "assert_matches_reference",
    "output_tolerance",
    "random_array",
    "random_arrays",
    "random_scalars",
    "relative_error",
    "tolerance",
]

#: The interval random inputs are drawn from: never zero, safe for sqrt and log.
LOW, HIGH = 0.5, 1.5


def random_array(
    rng: np.random.Generator, shape: tuple[int, ...], dtype: str, layout: str = "row"
) -> np.ndarray:
    """An array of ``shape`` uniform in [0.5, 1.5], drawn in ``dtype`` itself (no
    float64 intermediate) and dense in ``layout`` (column: first index stride 1).

    Raises :class:`~einkern.errors.AllocationError`, naming the bytes asked
    for, when the memory cannot be had."""
    shape = tuple(int(size) for size in shape)
    column = layout == "column" and len(shape) > 1
    try:
        if column:  # row-major of the reversed shape, transposed: column-major
            data = rng.random(shape[::-1], dtype=NUMPY_DTYPE[dtype]).T
        else:
            data = rng.random(shape, dtype=NUMPY_DTYPE[dtype])
    except MemoryError:
        count = int(np.prod(shape, dtype=np.int64))
        raise AllocationError(
            f"cannot allocate a random {dtype} array of shape {shape}: "
            f"{count * ITEMSIZE[dtype]} bytes ({count * ITEMSIZE[dtype] / 2**30:.3g} GiB) "
            "asked for",
            hint="choose smaller extents",
        ) from None
    data += LOW  # in place, in the array's own dtype (float32 may round up to 1.5)
    return data


def random_arrays(
    problem: Problem, seed: int = 0, names: Iterable[str] | None = None
) -> dict[str, np.ndarray]:
    """Fresh random values (uniform in [0.5, 1.5]) for the tensors ``names`` of
    ``problem`` (all of them when None), each in its declared dtype and layout."""
    rng = np.random.default_rng(seed)
    program = problem.program
    arrays = {}
    for name in names if names is not None else (t.name for t in program.tensors):
        tensor = program.tensor(name)
        arrays[name] = random_array(rng, problem.shape(name), tensor.dtype, tensor.layout)
    return arrays


def random_scalars(
    problem: Problem, seed: int = 0, given: Mapping[str, float] | None = None
) -> dict[str, float]:
    """A value for every scalar of ``problem``: ``given`` first, else its declared
    default, else uniform in [0.5, 1.5).  One value is drawn (from a generator
    seeded ``seed + 1``, apart from the arrays') for each scalar without a
    default, whatever ``given`` holds, so the others keep their values."""
    rng = np.random.default_rng(seed + 1)
    given = given or {}
    values = {}
    for scalar in problem.program.scalars:
        value = float(rng.uniform(LOW, HIGH)) if scalar.default is None else scalar.default
        values[scalar.name] = float(given.get(scalar.name, value))
    return values


def output_tolerance(problem: Problem, name: str) -> float:
    """Accepted relative error of output ``name`` of ``problem`` (its dtype's, under
    the program's precision)."""
    return tolerance(problem.program.tensor(name).dtype, problem.program.precision)


def assert_matches_reference(
    kernel_or_outputs: Any,
    problem: Problem | None = None,
    inputs: Mapping[str, np.ndarray] | None = None,
    scalars: Mapping[str, float] | None = None,
    *,
    seed: int = 0,
) -> dict[str, float]:
    """Check a kernel's results against the NumPy reference; return each output's
    relative error, or raise ``AssertionError`` naming every output above its
    dtype's tolerance.

    ``kernel_or_outputs`` is either a compiled kernel (anything with a
    ``.problem`` that is called with the arrays and scalars by name, such as
    :class:`einkern.Kernel`) or a mapping of output names to the arrays a kernel
    produced.  A kernel is run on copies of ``inputs`` (random ones from
    ``seed`` when None); given outputs need the ``problem`` and the ``inputs``
    they were computed from.  Scalars default to :func:`random_scalars`."""
    if isinstance(kernel_or_outputs, Mapping):
        if problem is None or inputs is None:
            raise TypeError("given outputs, pass the problem and the inputs they came from")
        outputs = {name: np.asarray(value) for name, value in kernel_or_outputs.items()}
        scalars = random_scalars(problem, seed, scalars)
    else:
        kernel = kernel_or_outputs
        problem = problem if problem is not None else kernel.problem
        if inputs is None:
            inputs = random_arrays(problem, seed, problem.program.inputs)
        scalars = random_scalars(problem, seed, scalars)
        outputs = _run(kernel, problem, inputs, scalars)
    reference = evaluate(problem, inputs, scalars)
    errors = {name: relative_error(outputs[name], reference[name]) for name in outputs}
    failed = [
        f"{name}: relative error {error:.3e} > {output_tolerance(problem, name):.0e}"
        for name, error in errors.items()
        if not error <= output_tolerance(problem, name)
    ]
    if failed:
        raise AssertionError(
            f"{problem.program.name} differs from the reference: " + "; ".join(failed)
        )
    return errors


def _run(
    kernel: Any, problem: Problem, inputs: Mapping[str, np.ndarray], scalars: Mapping[str, float]
) -> dict[str, np.ndarray]:
    """Call ``kernel`` on copies of ``inputs``; its outputs by name."""
    work = {name: np.array(array, copy=True, order="K") for name, array in inputs.items()}
    result = kernel(**work, **scalars)
    names = problem.program.outputs
    results = result if isinstance(result, tuple) else (result,)
    if len(results) != len(names):
        raise AssertionError(
            f"the kernel returned {len(results)} arrays for the "
            f"{len(names)} outputs {', '.join(names)}"
        )
    return {name: np.asarray(value) for name, value in zip(names, results, strict=True)}
