"""Block numbering (``Mapping.grid_order``): the output's memory order, except that
the grid indices the largest input lacks go first when that input is large
(rule ``reuse-first-grid``), and the cost model's sector waste for accesses
whose neighbouring blocks complete the sectors."""

from __future__ import annotations

from dataclasses import replace

import pytest
from test_gett import check, program, task_of

from einkern.gpu import model, space
from einkern.gpu.config import CudaConfig, GettTiling, StagingConfig
from einkern.gpu.decision import decide
from einkern.gpu.mapping import ParallelTile
from einkern.gpu.space import config_to_mapping

#: Seed 47's ``mgaeqx,gxaeqn->axmn`` (column-major here as there): A (92 MiB)
#: lacks n, so blocks along n read the same tile of A.
LARGE = ("axmn", "mgaeqx", "gxaeqn", {"a": 159, "x": 150, "m": 42, "n": 14, "q": 2, "g": 3, "e": 2})


def _problem(case, layout="column", dtype="float64"):
    output, a, b, sizes = case
    return program(output, a, b, sizes, dtype=dtype, layout=layout)


def _gett_point(x: str, tiling: GettTiling, boundary: str) -> CudaConfig:
    """A GETT point as ``gett.candidates`` makes them (staged in the compute
    layout, prefetched, the chunk loop unrolled)."""
    return CudaConfig(
        x=x,
        staging=StagingConfig("all", 1, True, 0, "compute"),
        unroll=-1,
        boundary=boundary,
        gett=tiling,
    )


def test_blocks_that_share_a_tile_of_the_largest_input_run_first() -> None:
    """The point the decision chose before the capped batch heads (thirty-sixth
    session; the default now covers all of n in a block): n on the grid."""
    task = task_of(_problem(LARGE))
    point = _gett_point("a", GettTiling((("a", 32, 1), ("m", 7, 6)), (("g", 3),)), "guard")
    mapping = config_to_mapping(task, point)
    assert mapping.grid_order[0] == "n"
    assert any(r.startswith("reuse-first-grid:") for r in mapping.reasons)


def test_small_inputs_keep_the_output_order() -> None:
    """Below REUSE_FIRST_BYTES nothing moves: the output's memory order."""
    sizes = dict(LARGE[3], a=15, x=10)  # A of 0.6 MiB
    task = task_of(_problem((*LARGE[:3], sizes)))
    order, why = space._grid_order(task, decide(task).parallel)
    assert why is None
    assert order[:2] == ("a", "x")


def test_equally_large_inputs_keep_the_output_order(monkeypatch) -> None:
    """A square GEMM: both inputs lack one output index and are equally large."""
    monkeypatch.setattr(space, "REUSE_FIRST_BYTES", 0)
    task = task_of(program("ij", "ik", "kj", {"i": 96, "j": 96, "k": 96}))
    order, why = space._grid_order(task, (ParallelTile("i", 32, 32), ParallelTile("j", 32, 8)))
    assert (order, why) == (("j", "i"), None)  # row-major: j is C's contiguous index


@pytest.mark.parametrize("layout", ["row", "column"])
def test_a_moved_grid_order_matches_the_reference(monkeypatch, layout) -> None:
    """The rule forced on a small problem with ragged tiles: the emulator's
    result still matches NumPy (every block still finds its coordinates)."""
    monkeypatch.setattr(space, "REUSE_FIRST_BYTES", 0)
    sizes = {"a": 9, "x": 5, "m": 7, "n": 6, "q": 2, "g": 3, "e": 2}
    problem = _problem((*LARGE[:3], sizes), layout=layout)
    task = task_of(problem)
    config = _gett_point("a", GettTiling((("a", 4, 1), ("m", 2, 2)), (("g", 3),)), "guard")
    mapping = config_to_mapping(task, config)
    assert mapping.grid_order[0] == "n"
    check(problem, config)


def test_sectors_completed_by_the_next_block_are_not_wasted_in_dram() -> None:
    """Seed 47's ``awdfbq,dqia->fqwbi``: a tile of f (2 of C's contiguous index,
    whole), of w and b (whole) and of i (half) leaves q to the grid, first; the next block along q
    writes the rest of each sector of C, so the model charges C once in DRAM.
    Moved off the front of the grid, the same tile wastes three quarters of
    each sector."""
    sizes = {"q": 141025, "f": 2, "w": 3, "b": 3, "i": 20, "d": 5, "a": 4}
    problem = program("fqwbi", "awdfbq", "dqia", sizes, dtype="float32", layout="column")
    task = task_of(problem)
    tiling = GettTiling((("f", 2, 1), ("w", 3, 1), ("b", 1, 3), ("i", 10, 1)), (("a", 4), ("d", 5)))
    config = _gett_point("f", tiling, "exact")
    mapping = config_to_mapping(task, config)
    output = task.statement.output
    assert mapping.grid_order[:2] == ("f", "q")  # f: one block (its whole extent)
    assert model.completed_by_neighbours(task, mapping, output)
    moved = replace(mapping, grid_order=("i", "q", "f", "w", "b"))
    assert not model.completed_by_neighbours(task, moved, output)
    assert model.cost_terms(task, moved).dram > 2 * model.cost_terms(task, mapping).dram
