"""Tensor-core product-family kernels (einkern.gpu.mma_family): the merged CCSD(T)
families and generated sums of contractions run in the CPU emulator against the
NumPy reference; a dropped barrier is caught; the padded box layout removes the
relayout's bank conflicts; configurations round-trip through JSON."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from conftest import problem_of

import einkern
from einkern.backends.emulator import count_barriers, drop_barrier, emulate
from einkern.bench.suites.ccsdt import family_program
from einkern.gpu import kir
from einkern.gpu.device import H100
from einkern.gpu.mma_config import MmaConfig
from einkern.gpu.mma_family import (
    _layouts,
    box_order,
    family_of,
    lower_family,
    problems,
    tile_layout,
)
from einkern.gpu.mma_family_layout import relayout_coordinates, wavefronts
from einkern.gpu.mma_family_model import family_candidates
from einkern.ir.bind import make_problem
from einkern.ir.task import statement_task
from einkern.reference import evaluate
from einkern.testing import random_arrays


def _config(box: dict[str, int], warps=(2, 2), k_step=4, stages=2) -> MmaConfig:
    return MmaConfig(
        "m16n8k4_f64", *warps, 1, 1, k_step, 0, stages, "async", box=tuple(box.items())
    )


UNIFORM4 = {i: 4 for i in ("h1", "h2", "h3", "p4", "p5", "p6")}


def _family_task(family: str, tile: int):
    return statement_task(make_problem(einkern.load(family_program(family, tile)), {}), 0)


def _check(task, config, seed=1, kernel=None, scalars=None):
    """(emulator report, result, reference) of the family kernel of ``config``
    (or ``kernel``) on random arrays and ``scalars``."""
    problem = task.problem
    kernel = kernel or lower_family(task, config)
    arrays = random_arrays(problem, seed)
    want = evaluate(problem, arrays, scalars or {})
    given = {f"p_{n}": v.copy(order="K") for n, v in arrays.items()}
    report = emulate([kernel], given, {f"s_{n}": v for n, v in (scalars or {}).items()})
    out = problem.program.statements[0].output.tensor
    return report, given[f"p_{out}"], want[out]


@pytest.mark.parametrize(
    ("family", "tile", "config"),
    [
        ("d1", 4, _config(UNIFORM4)),  # one block, one k-step per term
        ("d2", 6, _config(UNIFORM4, stages=3)),  # edges, two k-steps per term
        ("d2", 5, _config({**UNIFORM4, "h1": 2, "p4": 8}, k_step=8)),  # K padded
    ],
)
def test_ccsdt_families_match_the_reference(family, tile, config):
    task = _family_task(family, tile)
    report, got, want = _check(task, config)
    assert report.ok, report
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


def test_scaled_terms_and_assignment():
    """A generated family: `=`, a scalar and a constant on the terms, K over two
    indices, an operand whose rows are its second factor."""
    problem = problem_of(
        "program t\ndims a, b, c, k, l\ndtype float64\n"
        "tensor A[a,k,b,l], B[l,c,k], C[a,b,c], D[c,k,l], E[l,a,b,k]\nscalar s\n"
        "C[i,j,m] = s * A[i,x,j,y] * B[y,m,x] - 2 * D[m,x,y] * E[y,i,j,x]\n",
        a=8,
        b=4,
        c=8,
        k=3,
        l=2,
    )
    task = statement_task(problem, 0)
    config = _config({"i": 4, "j": 4, "m": 8}, warps=(1, 1))
    assert problems(task, config) == []
    arrays = random_arrays(problem, 2)
    scalars = {"s": 0.75}
    want = evaluate(problem, arrays, scalars)["C"]
    given = {f"p_{n}": v.copy(order="K") for n, v in arrays.items()}
    report = emulate([lower_family(task, config)], given, {"s_s": 0.75})
    assert report.ok, report
    np.testing.assert_allclose(given["p_C"], want, rtol=1e-12, atol=1e-12)


POINTWISE = (
    "program t\ndims a, b, c, k, l\ndtype float64\n"
    "tensor A[a,k,b,l], B[l,c,k], C[a,b,c], D[c,a], E[b], F[a,b,c]\nscalar s\n"
    "C[i,j,m] {op} A[i,x,j,y] * B[y,m,x] + 0.5 * s * D[m,i] * E[j] - F[i,j,m]\n"
)


@pytest.mark.parametrize("op", ["=", "+=", "-="])
@pytest.mark.parametrize("registers", [True, False])
def test_pointwise_terms_join_a_family(op, registers, monkeypatch):
    """Terms without a sum (a scaled product of two tensors at output coordinates,
    a single tensor) join the contraction's family: summed in registers at the
    end, or (``registers`` False: the fallback) added by a loop at the start;
    extents the box does not divide (edges) and each operator."""
    import einkern.gpu.mma_family_pointwise as pointwise

    if not registers:
        monkeypatch.setattr(pointwise, "POINTWISE_REGISTERS", 0)
    problem = problem_of(POINTWISE.format(op=op), a=9, b=4, c=6, k=3, l=2)
    task = statement_task(problem, 0)
    fam = family_of(task)
    assert len(fam.terms) == 1 and [len(p.factors) for p in fam.pointwise] == [2, 1]
    config = _config({"i": 4, "j": 4, "m": 8}, warps=(1, 1))
    assert problems(task, config) == []
    kernel = lower_family(task, config)
    loops = [s for s in kir.walk(kernel.body) if isinstance(s, kir.For)]
    assert bool(loops) != registers
    unordered = [p.name for p in kernel.params if not p.restrict]
    assert unordered == ["p_D", "p_E", "p_F"]  # read by the pointwise terms only
    report, got, want = _check(task, None, 3, kernel, {"s": 0.75})
    assert report.ok, report
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


def test_a_wrong_pointwise_sign_is_caught(monkeypatch):
    """The reference check sees a planted fault in the pointwise terms: one
    term's sign flipped."""
    import einkern.gpu.mma_family as mma_family

    problem = problem_of(POINTWISE.format(op="+="), a=8, b=4, c=8, k=3, l=2)
    task = statement_task(problem, 0)
    fam = family_of(task)
    flipped = replace(fam, pointwise=(replace(fam.pointwise[0], sign=-fam.pointwise[0].sign),))
    monkeypatch.setattr(mma_family, "family_of", lambda _task: flipped)
    kernel = lower_family(task, _config({"i": 4, "j": 4, "m": 8}, warps=(1, 1)))
    report, got, want = _check(task, None, 4, kernel, {"s": 0.75})
    assert report.ok
    assert not np.allclose(got, want, rtol=1e-6)


def test_the_27_triples_statements_are_one_family_kernel():
    """The merged 27 CCSD(T) statements (9 singles: pointwise; 18 doubles) at a
    size with edges match the reference through the emulator."""
    from einkern.backends.cuda.fusion import merged_task

    problem = make_problem(einkern.load("examples/ccsdt_triples.ein"), {"T": 5})
    positions = (0, 4, 8, 9, 13, 18, 22)  # singles, d1 and d2 statements of each kind
    task = merged_task(problem, positions)
    fam = family_of(task)
    assert (len(fam.terms), len(fam.pointwise)) == (4, 3)
    report, got, want = _check(task, _config(UNIFORM4), 5)
    assert report.ok, report
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("barrier", [0, 1, 9])
def test_a_dropped_barrier_is_caught(barrier):
    """Without the barrier after the box is filled and the first copies land (0),
    the one that publishes the next term's copies (1), or the one before the box
    is stored (9), the emulator's result is wrong (or an access flagged)."""
    task = _family_task("d1", 4)
    kernel = lower_family(task, _config(UNIFORM4))
    assert count_barriers(kernel) == 10  # one per term's step, one before the store
    report, got, want = _check(task, None, kernel=drop_barrier(kernel, barrier))
    assert not report.ok or not np.allclose(got, want, rtol=1e-12)


def test_padded_layout_removes_relayout_conflicts():
    """The dense box takes several times the conflict-free wavefronts on the
    CCSD(T) families; the padded layout reaches (d1) or nears (d2) two per access."""
    for family, limit in (("d1", 1.0), ("d2", 1.5)):
        task = _family_task(family, 16)
        config = _config(UNIFORM4, k_step=8, stages=3)
        fam = family_of(task)
        order = box_order(fam)
        laid = _layouts(fam, config)[0]
        coordinates = relayout_coordinates(order, tuple(sorted(UNIFORM4.items())), laid, config)
        dense = wavefronts(coordinates, (1024, 256, 64, 16, 4, 1))
        strides, size, padded = tile_layout(fam, config)
        ideal = 2 * len(coordinates)
        assert dense >= 4 * ideal
        assert padded <= limit * ideal
        assert size >= 4**6 and len(set(strides)) == 6


def test_refusals():
    gemm = problem_of(
        "program t\ndims m\ndtype float64\ntensor A[m,m], B[m,m], C[m,m]\n"
        "C[i,j] = A[i,k] * B[k,j]\n",
        m=16,
    )
    assert "one term" in problems(statement_task(gemm, 0), _config({"m": 4}))[0]
    task = _family_task("d1", 16)
    wide = _config(UNIFORM4, warps=(1, 2))  # 4 x 4 tiles per warp: 64 accumulators
    assert any("accumulator registers" in p for p in problems(task, wide))
    odd = _config(UNIFORM4, warps=(8, 1))  # 64 x 64 GEMMs on 8 x 1 warps of 16 x 8
    assert any("does not divide" in p for p in problems(task, odd))
    s1 = statement_task(make_problem(einkern.load(family_program("s1", 8)), {}), 0)
    assert family_candidates(s1, H100) == []  # pointwise terms only: no K to contract


def test_config_json_round_trip_and_description():
    config = _config(UNIFORM4, k_step=8, stages=3)
    again = MmaConfig.from_json(config.to_json())
    assert again == config and again.box == config.box
    assert "product family" in config.describe() and "4h1" in config.describe()
    with pytest.raises(TypeError):
        MmaConfig.from_values({"box": [["h1", 0]]})


def test_the_decision_ranks_family_points_by_the_model():
    task = _family_task("d2", 24)
    ranked = family_candidates(task, H100)
    assert ranked and all(not problems(task, c) for c in ranked)
    (best,) = family_candidates(task, H100, 1)  # the optimistic model's best, searched
    assert best in ranked


def test_family_kernels_compile_without_spills():
    """The decision's configurations compile with NVRTC for sm_90 and spill
    nothing (each thread-dependent index written as a per-term base plus a
    constant; as separate division chains they spilled 500-800 bytes per thread
    and the spills' L2 traffic cost a third of the time: docs/tensor_cores.md)."""
    pytest.importorskip("cuda.bindings.nvrtc")
    from einkern.backends.cuda.fusion import merged_task
    from einkern.backends.cuda.nvrtc import compile_cubin
    from einkern.gpu.cuda_printer import print_cuda

    triples = einkern.load("examples/ccsdt_triples.ein")
    tasks = [(family, _family_task(family, 24)) for family in ("d1", "d2")]
    for tile in (16, 24):  # the 27 statements: pointwise loads at the end
        task = merged_task(make_problem(triples, {"T": tile}), tuple(range(27)))
        tasks.append((f"27 T={tile}", task))
    for family, task in tasks:
        for config in family_candidates(task, H100, 1):
            module = compile_cubin(print_cuda(lower_family(task, config)))
            (found,) = module.resources
            assert found.spill_stores == 0 and found.stack_frame == 0, (family, found)


def test_thread_offsets_are_constant_only_where_they_are():
    """Indices written against a base are the same on every thread; a planted
    non-constant difference (a thread-dependent stride) is refused."""
    from einkern.gpu import exprs as E
    from einkern.gpu import kir
    from einkern.gpu.thread_offsets import constant_offset, thread_values

    t = kir.ThreadIdx()
    base = E.add(kir.Var("o0"), E.add(E.mul(E.div(t, 8), E.const(20)), E.mod(t, 8)))
    shifted = E.add(
        kir.Var("o0"), E.add(E.mul(E.div(E.add(t, E.const(128)), 8), E.const(20)), E.mod(t, 8))
    )
    assert constant_offset(shifted, base, 128, ["o0"]) == 16 * 20
    wrapped = E.add(kir.Var("o0"), E.mod(E.add(t, E.const(4)), 8))  # wraps: not a constant
    assert constant_offset(wrapped, E.add(kir.Var("o0"), E.mod(t, 8)), 128, ["o0"]) is None
    nonlinear = E.mod(E.add(kir.Var("o0"), t), 8)  # the block's value inside a remainder
    assert constant_offset(E.add(nonlinear, E.const(0)), E.mod(t, 8), 128, ["o0"]) is None
    assert list(thread_values(E.div(E.sub(t, E.const(5)), 2), 4, {})) == [-2, -2, -1, -1]
    for task_family, tile in (("d1", 6), ("d2", 5)):
        kernel = lower_family(_family_task(task_family, tile), _config(UNIFORM4))
        assigned = {s.name for s in kir.walk(kernel.body) if isinstance(s, kir.Assign)}
        assert {"ga0", "sa0", "gb0", "sb0", "t0"} <= assigned
