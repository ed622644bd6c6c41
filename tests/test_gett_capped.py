"""GETT tiles with a capped batch head (``gett._capped``): where a batch index is
the output's contiguous index, the block takes 16 or 32 of it and the rest of
its tile from the next indices, so that a block covers whole small products."""

from __future__ import annotations

import random

import pytest
from test_gett import caught_with_coordinate_off_by_one, check, program, seed_of, task_of

from einkern.gpu import gett
from einkern.gpu.decision import choose
from einkern.gpu.space import violation

#: Seed 47's ``mgaeqx,gxaeqn->axmn`` (column-major): 23850 products (batch a, x)
#: of 42 × 14 × 12; the output's contiguous index is the batch index a.
SEED47 = (
    "axmn",
    "mgaeqx",
    "gxaeqn",
    {"a": 159, "x": 150, "m": 42, "n": 14, "q": 2, "g": 3, "e": 2},
)


def _capped_points(task) -> list:
    """Points whose head tile is capped below its extent with more indices in
    the tile: the head's tile is one of HEAD_CAPS and some other index has a
    tile too."""
    size = {i: task.problem.index_size(task.statement, i) for i in task.statement.indices}
    found = []
    for point in gett.candidates(task):
        assert point.gett is not None
        tiles = {index: threads * regs for index, threads, regs in point.gett.tiles}
        head = point.gett.tiles[0][0]
        if tiles[head] in gett.HEAD_CAPS and size[head] > tiles[head] and len(tiles) >= 3:
            found.append(point)
    return found


def test_a_batch_of_small_products_gets_blocks_of_whole_products() -> None:
    output, a, b, sizes = SEED47
    task = task_of(program(output, a, b, sizes, layout="column"))
    points = _capped_points(task)
    assert points and all(violation(task, p) is None for p in points)
    whole = [p for p in points if p.gett and {"a", "m", "n"} <= {t[0] for t in p.gett.tiles}]
    assert whole, "no block covers a few of the batch and parts of both M and N"
    # the model prefers them: the default is one (0.19 ms against 0.77 measured)
    assert choose(task).config in points


def test_no_capped_tiles_without_a_batch_in_the_first_group(monkeypatch) -> None:
    gemm = task_of(program("ij", "ik", "kj", {"i": 300, "j": 200, "k": 64}))
    batched = task_of(program(*SEED47[:3], SEED47[3], layout="column"))
    with_gemm, with_batched = gett.tilings(gemm), gett.tilings(batched)
    monkeypatch.setattr(gett, "HEAD_CAPS", ())
    plain_gemm, plain_batched = gett.tilings(gemm), gett.tilings(batched)
    assert with_gemm == plain_gemm  # nothing added where no batch index is tiled
    assert set(plain_batched) < set(with_batched)


@pytest.mark.parametrize("layout", ["column", "row"])
def test_capped_points_match_the_reference(layout) -> None:
    """A sample of capped points on a small batch of products, the head's extent
    ragged against both caps (37)."""
    sizes = {"a": 37, "x": 3, "m": 5, "n": 3, "q": 2, "g": 3, "e": 1}
    output = "axmn" if layout == "column" else "nmxa"  # a contiguous in C either way
    problem = program(output, "mgaeqx", "gxaeqn", sizes, layout=layout)
    task = task_of(problem)
    points = _capped_points(task)
    assert len(points) >= 4
    rng = random.Random(seed_of("capped", layout))
    for point in rng.sample(points, 4):
        check(problem, point)


def test_a_wrong_head_coordinate_in_a_capped_tile_is_caught(monkeypatch) -> None:
    """The emulator catches a capped block whose threads take the head's
    coordinate one off (a planted fault)."""
    sizes = {"a": 37, "x": 3, "m": 5, "n": 3, "q": 2, "g": 3, "e": 1}
    problem = program("axmn", "mgaeqx", "gxaeqn", sizes, layout="column")
    point = _capped_points(task_of(problem))[0]
    check(problem, point)
    assert caught_with_coordinate_off_by_one(monkeypatch, problem, point, "a")
