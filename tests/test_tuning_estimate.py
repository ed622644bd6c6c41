"""The sampled size estimate of spaces too large to count."""

from __future__ import annotations

from einkern.tuning.search import SearchSpace
from einkern.tuning.target import Parameter


def test_estimated_size_brackets_the_true_count():
    parameters = (Parameter("a", tuple(range(40))), Parameter("b", tuple(range(50))))
    space = SearchSpace(parameters, lambda c: None if (c["a"] + c["b"]) % 4 == 0 else "odd")
    true = sum(1 for a in range(40) for b in range(50) if (a + b) % 4 == 0)
    estimate, spread = space.estimated_size(samples=4000, seed=3)
    assert space.size() == true
    assert spread > 0 and abs(estimate - true) <= 2 * spread
    assert space.estimated_size(samples=500, seed=1) == space.estimated_size(samples=500, seed=1)
