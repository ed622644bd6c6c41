"""The benchmark's cuTENSOR peer without a GPU: index names mapped to the single
characters ``cupyx.cutensor`` modes need, and the direct contraction calls checked
through stand-ins for CuPy and cuTENSOR that compute with NumPy."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

import einkern
from einkern.bench import cutensor as peer
from einkern.bench.cutensor import mode_characters
from einkern.reference import evaluate
from einkern.semantics import TOLERANCE

EXAMPLES = Path(__file__).parent.parent / "examples"


def test_mode_characters_are_distinct_single_characters():
    names = ["h3", "h2", "h1", "p6", "p5", "p4", "h7", "i", "a", "h3"]
    modes = mode_characters(names)
    assert list(modes) == ["h3", "h2", "h1", "p6", "p5", "p4", "h7", "i", "a"]
    assert all(len(c) == 1 for c in modes.values())
    assert len(set(modes.values())) == len(modes)
    assert modes["i"] == "i" and modes["a"] == "a"  # one-character names keep theirs
    assert "i" not in [modes[n] for n in names if len(n) > 1]
    many = mode_characters(f"x{n}" for n in range(80))  # more than the ASCII letters
    assert len(set(many.values())) == 80 and all(len(c) == 1 for c in many.values())


def _fakes():
    """CuPy and cuTENSOR stand-ins: ``create_mode`` converts each mode as cuTENSOR does
    (``ord``: one character), ``contraction`` computes ``c = α·a·b + β·c``."""

    def create_mode(*modes):
        return tuple(chr(ord(m)) for m in modes)

    def contraction(alpha, a, mode_a, b, mode_b, beta, c, mode_c):
        equation = f"{''.join(mode_a)},{''.join(mode_b)}->{''.join(mode_c)}"
        # cuTENSOR reads no C when beta is 0 (c may be uninitialised: NaN * 0 is NaN)
        c[...] = alpha * np.einsum(equation, a, b) + (beta * c if beta else 0.0)
        return c

    cupy = SimpleNamespace(from_dlpack=np.from_dlpack, empty=np.empty)
    return cupy, SimpleNamespace(create_mode=create_mode, contraction=contraction)


@pytest.mark.parametrize("example", ["sd_t_d1_1.ein", "ccsdt_d1.ein", "gemm.ein"])
def test_direct_contractions_with_multi_character_indices(monkeypatch, example):
    monkeypatch.setattr(peer, "_modules", _fakes)
    program = einkern.load(EXAMPLES / example)
    sizes = {e.name: 3 for e in program.extents if not e.name.isdigit()}
    problem = einkern.make_problem(program, sizes)
    inputs = einkern.arrays.random_arrays(problem, seed=1)
    arrays = {name: array.copy(order="K") for name, array in inputs.items()}
    scalars = {s.name: 0.5 for s in program.scalars}
    outputs = peer.CutensorPeer().prepare(None, problem, arrays, scalars)()  # type: ignore[arg-type]
    expected = evaluate(problem, inputs, scalars)
    for name in program.outputs:
        tolerance = TOLERANCE[program.tensor(name).dtype]
        np.testing.assert_allclose(outputs[name], expected[name], rtol=tolerance, atol=tolerance)
