"""Helpers for checking einkern's kernels: random inputs, tolerances, comparison.

The tests, the benchmarks, the tuner's CPU target and the ``einkern run --check``
command all draw their inputs and judge their results here, so every one of
them means the same thing by "random inputs" and "close enough":

* :func:`random_arrays` — values uniform in [0.5, 1.5] (1.5 only by float32
  rounding; never zero: safe for ``sqrt``, ``log`` and division), drawn
  directly in each tensor's dtype and layout (16-bit dtypes: drawn in float32
  and rounded to the type; bfloat16 arrays are torch CPU tensors, NumPy having
  no bfloat16);
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

from collections.abc import Mapping
from typing import Any

import numpy as np

from .arrays import HIGH, LOW, copy_host_array, random_array, random_arrays
from .ir.nodes import Problem
from .reference import evaluate, host_values, relative_error
from .semantics import TOLERANCE, tolerance

__all__ = [
    "HIGH",
    "LOW",
    "TOLERANCE",
    "assert_matches_reference",
    "output_tolerance",
    "random_array",
    "random_arrays",
    "random_scalars",
    "relative_error",
    "tolerance",
]


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
    return problem.program.tolerance(name)


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
        outputs = {name: host_values(value) for name, value in kernel_or_outputs.items()}
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
    work = {name: copy_host_array(array) for name, array in inputs.items()}
    result = kernel(**work, **scalars)
    names = problem.program.outputs
    results = result if isinstance(result, tuple) else (result,)
    if len(results) != len(names):
        raise AssertionError(
            f"the kernel returned {len(results)} arrays for the "
            f"{len(names)} outputs {', '.join(names)}"
        )
    return {name: host_values(value) for name, value in zip(names, results, strict=True)}
