"""MMA instructions as data (einkern.gpu.mma): every fragment layout covers its
matrix once, the NumPy model multiplies, the conversions round as PTX's do, and
the probe kernel of every shape compiles with NVRTC.  The hardware check is
tests/test_gpu_mma.py."""

from __future__ import annotations

import numpy as np
import pytest
from mma_probe import probe_source

from einkern.gpu.mma import SHAPES, asm_statement, execute, round_bf16, round_tf32, warp_shapes

NAMES = warp_shapes()


@pytest.mark.parametrize("name", NAMES)
def test_every_layout_covers_its_matrix_once(name):
    shape = SHAPES[name]
    for layout, rows, cols in (
        (shape.a, shape.m, shape.k),
        (shape.b, shape.k, shape.n),
        (shape.c, shape.m, shape.n),
    ):
        assert (layout.rows, layout.cols) == (rows, cols)
        assert 32 * layout.count == rows * cols
        cells = {tuple(rc) for lane in layout.table().tolist() for rc in lane}
        assert cells == {(r, c) for r in range(rows) for c in range(cols)}


@pytest.mark.parametrize("name", NAMES)
def test_execute_is_a_matrix_product(name):
    shape = SHAPES[name]
    rng = np.random.default_rng(7)
    a = rng.integers(-4, 5, (shape.m, shape.k)).astype(np.float64)  # exact in every type
    b = rng.integers(-4, 5, (shape.k, shape.n)).astype(np.float64)
    c = rng.integers(-4, 5, (shape.m, shape.n)).astype(np.float64)
    d = execute(shape, shape.a.gather(a), shape.b.gather(b), shape.c.gather(c))
    np.testing.assert_array_equal(shape.c.scatter(d), a @ b + c)


def test_a_wrong_layout_gives_a_wrong_product():
    """The model reads fragments through the layout: fragments gathered by one
    layout and executed as another shape's are not the product."""
    shape, other = SHAPES["m16n8k8_tf32"], SHAPES["m16n8k8_bf16"]
    rng = np.random.default_rng(1)
    a = rng.integers(-4, 5, (16, 8)).astype(np.float64)
    b = rng.integers(-4, 5, (8, 8)).astype(np.float64)
    c = np.zeros((16, 8))
    d = execute(shape, other.a.gather(a), shape.b.gather(b), shape.c.gather(c))
    assert not np.array_equal(shape.c.scatter(d), a @ b)


def test_tf32_rounds_to_nearest_ties_away():
    one = np.float32(1.0)
    ulp = np.float32(2.0**-10)  # tf32 keeps 10 mantissa bits
    assert round_tf32(np.array([one + ulp / 2])) == one + ulp  # a tie goes away from zero
    assert round_tf32(np.array([-(one + ulp / 2)])) == -(one + ulp)
    assert round_tf32(np.array([one + np.float32(2.0**-12)])) == one
    x = np.random.default_rng(0).standard_normal(1000).astype(np.float32)
    r = round_tf32(x)
    assert np.all((r.view(np.uint32) & 0x1FFF) == 0)
    assert np.all(np.abs(r - x) <= np.abs(x) * 2.0**-11)
    assert np.isnan(round_tf32(np.array([np.nan], dtype=np.float32)))[0]


def test_bf16_rounds_as_torch_does():
    torch = pytest.importorskip("torch")
    x = np.random.default_rng(3).standard_normal(4096).astype(np.float32) * 1e3
    ours = round_bf16(x)
    theirs = torch.from_numpy(x).to(torch.bfloat16).to(torch.float32).numpy()
    np.testing.assert_array_equal(ours, theirs)


def test_asm_statement_checks_register_counts():
    shape = SHAPES["m16n8k4_f64"]
    text = asm_statement(
        shape, ["d0", "d1", "d2", "d3"], ["a0", "a1"], ["b0"], ["c0", "c1", "c2", "c3"]
    )
    assert text.startswith('asm volatile("mma.sync.aligned.m16n8k4.row.col.f64.f64.f64.f64')
    assert '"=d"(d0)' in text and '"d"(b0)' in text and "%10" in text
    with pytest.raises(ValueError, match="takes 2, 1, 4 and 4"):
        asm_statement(shape, ["d0"], ["a0"], ["b0"], ["c0"])


@pytest.mark.parametrize("name", NAMES)
def test_probe_compiles(name):
    nvrtc = pytest.importorskip("cuda.bindings.nvrtc")
    from einkern.backends.cuda.nvrtc import compile_cubin

    del nvrtc
    shape = SHAPES[name]
    for arch in (80, 90):
        if arch >= shape.min_arch:
            module = compile_cubin(probe_source(shape), f"sm_{arch}", use_cache=False)
            assert module.cubin
