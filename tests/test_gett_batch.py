"""GETT points whose block tile spans batch indices (a batch of small products in
one block): they exist where M and N are too small to fill a block (or one of
them is empty), run correctly in the emulator (ragged edges included), must be
predicted :data:`~einkern.gpu.decision.BATCH_JOIN_MARGIN` faster than the other
points, and a wrong batch coordinate is caught."""

from __future__ import annotations

import random

import pytest
from test_gett import caught_with_coordinate_off_by_one, check, program, seed_of, task_of

from einkern.gpu import decision, gett
from einkern.gpu.decision import BATCH_JOIN_MARGIN, choose
from einkern.gpu.space import roles, violation

#: Seed 47's ``lcxg,htgl->lxthc`` (batch l, contiguous in B), its batch shortened:
#: M = c·x and N = t·h hold 4 and 6 outputs, so no tile without l fills a warp.
SMALL_GROUPS = ("lxthc", "lcxg", "htgl", {"l": 301, "c": 2, "x": 2, "h": 2, "t": 3, "g": 8})
#: Seed 2's ``lei,ei->li`` (column-major; here row-major ``il``): no N group at all
#: (B holds only the batch and the sum).
NO_N_GROUP = ("il", "lei", "ei", {"l": 5, "e": 5, "i": 613})


def _batch_tiled(task, point) -> bool:
    return point.gett is not None and any(
        index in roles(task).batch and threads * regs > 1
        for index, threads, regs in point.gett.tiles
    )


@pytest.mark.parametrize("case", [SMALL_GROUPS, NO_N_GROUP], ids=["small", "no-n"])
def test_a_batch_of_small_products_gets_points_with_the_batch_in_the_tile(case) -> None:
    output, a, b, sizes = case
    task = task_of(program(output, a, b, sizes))
    points = gett.candidates(task)
    assert points, "no GETT point for a batch of small products"
    assert all(_batch_tiled(task, p) and gett.joins_batch(task, p) for p in points)
    assert all(violation(task, p) is None for p in points)
    chosen = choose(task).config
    assert chosen.gett is not None and gett.joins_batch(task, chosen)


@pytest.mark.parametrize("case", [SMALL_GROUPS, NO_N_GROUP], ids=["small", "no-n"])
@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_the_default_of_a_batch_of_small_products_matches_the_reference(case, dtype) -> None:
    output, a, b, sizes = case
    check(program(output, a, b, sizes, dtype=dtype))


@pytest.mark.parametrize("layout", ["row", "column"])
def test_points_with_batch_indices_in_the_tile_match_the_reference(layout) -> None:
    """A sample of the batch-tiled points of a contraction with M, N, K and two
    batch indices, ragged extents."""
    sizes = {"b": 7, "m": 5, "n": 3, "k": 6, "z": 5}
    output = "bzmn" if layout == "row" else "nmzb"  # N's index contiguous in C
    problem = program(output, "bkmz", "zbnk", sizes, layout=layout)
    task = task_of(problem)
    points = [p for p in gett.candidates(task) if gett.joins_batch(task, p)]
    spanned = {
        index
        for p in points
        if p.gett
        for index, t, g in p.gett.tiles
        if index in "bz" and t * g > 1
    }
    assert len(points) > 10 and spanned == {"b", "z"}
    rng = random.Random(seed_of("batch-joined", layout))
    for point in rng.sample(points, 6):
        check(problem, point)


def test_a_wrong_batch_coordinate_in_the_tile_is_caught(monkeypatch) -> None:
    """The verification path catches a block whose threads take the batch index's
    coordinate one off (a planted fault in the thread coordinate of ``l``)."""
    output, a, b, sizes = SMALL_GROUPS
    problem = program(output, a, b, {**sizes, "l": 37})
    task = task_of(problem)
    point = choose(task).config
    assert point.gett is not None and any(t[0] == "l" and t[1] > 1 for t in point.gett.tiles)
    check(problem, point)
    assert caught_with_coordinate_off_by_one(monkeypatch, problem, point, "l")


def test_a_batch_tiled_point_must_be_predicted_the_margin_faster(monkeypatch) -> None:
    """With the other points available, a batch-tiled point predicted just under
    the margin faster is not chosen, and one predicted more than it faster is."""
    sizes = {"b": 40, "m": 24, "n": 24, "k": 16}
    task = task_of(program("bmn", "bmk", "bkn", sizes))
    points = gett.candidates(task)
    assert any(gett.joins_batch(task, p) for p in points)
    assert any(not gett.joins_batch(task, p) for p in points)
    real = decision._predict

    for factor, joined in ((0.95 / BATCH_JOIN_MARGIN, True), (1.05 / BATCH_JOIN_MARGIN, False)):

        def predict(task_, config, limits, factor=factor):
            seconds = real(task_, config, limits)
            if config.gett is None:
                return 1.0  # only GETT points compete
            return 1e-3 * (factor if gett.joins_batch(task_, config) else 1.0) + seconds * 1e-9

        monkeypatch.setattr(decision, "_predict", predict)
        made = choose(task)
        assert gett.joins_batch(task, made.config) is joined, factor
        if not joined:
            assert "spans a batch index was predicted" in dict(made.steps)["model-choice"]
