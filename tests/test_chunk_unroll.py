"""The chunk loops of a staged reduction: an index of k-step 1 takes no loop, and
the loops are unrolled from the innermost out while the product of their
k-steps fits the mapping's budget (``staging._unrolls``)."""

from __future__ import annotations

import re

from test_gett import check, program, task_of

from einkern.backends.cuda.generate import generate
from einkern.gpu.config import CudaConfig, GettTiling, StagingConfig
from einkern.gpu.space import config_to_mapping, violation
from einkern.gpu.staging import Chunks, _unrolls


def chunks(steps: dict[str, int], sizes: dict[str, int]) -> Chunks:
    counts = {k: -(-sizes[k] // steps[k]) for k in steps}
    return Chunks(tuple(steps), dict(sizes), dict(steps), counts)


def test_loops_unroll_from_the_innermost_out_within_the_budget():
    # reduction order s, p, v (v innermost); v has k-step 1: no loop
    c = chunks({"s": 15, "p": 2, "v": 1}, {"s": 15, "p": 9, "v": 6})
    assert _unrolls(64, c, ["s", "p"]) == {"s": -1, "p": -1}
    # 4 * 32 > 64: only the innermost loop, fully (32 <= 64)
    c = chunks({"a": 4, "b": 32}, {"a": 8, "b": 64})
    assert _unrolls(64, c, ["a", "b"]) == {"a": 0, "b": -1}
    # an innermost loop longer than the budget: unrolled budget times
    c = chunks({"a": 2, "b": 128}, {"a": 4, "b": 256})
    assert _unrolls(64, c, ["a", "b"]) == {"a": 0, "b": 64}
    # a budget of 1 unrolls nothing
    assert _unrolls(1, c, ["a", "b"]) == {"a": 0, "b": 0}


def spvn_config() -> tuple:
    """``spvn,pswv->nw`` (seed 47's c47_114, fp32, column-major, smaller): the
    default point's k-steps s:15, p:2 with v innermost at step 1."""
    sizes = {"n": 40, "w": 24, "v": 3, "p": 9, "s": 15}
    problem = program("nw", "spvn", "pswv", sizes, "float32", layout="column")
    config = CudaConfig(
        x="n",
        assign="chunked",
        staging=StagingConfig("all", 1, True, 0, "compute"),
        unroll=-1,
        boundary="guard",
        gett=GettTiling((("n", 4, 8), ("w", 4, 2)), (("s", 15), ("p", 2))),
    )
    return problem, config


def test_the_stepped_loops_are_unrolled_and_a_step_of_one_has_no_loop():
    problem, config = spvn_config()
    task = task_of(problem)
    assert violation(task, config) is None
    mapping = config_to_mapping(task, config)
    assert list(mapping.reduction_order) == ["s", "p", "v"]
    text = generate(problem, {0: mapping}).text
    assert "kk_v" not in text  # k-step 1: no loop
    for index in ("s", "p"):  # both loops carry the pragma (only p's did before)
        assert re.search(rf"#pragma unroll\n\s*for \(int kk_{index} = 0;", text), index


def test_unrolled_chunks_match_the_reference_in_the_emulator():
    problem, config = spvn_config()
    check(problem, config)
    check(program("ij", "ikl", "klj", {"i": 9, "j": 7, "k": 5, "l": 6}, "float64"))
