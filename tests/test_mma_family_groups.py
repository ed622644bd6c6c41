"""Terms of a product family that share accumulators (``MmaConfig.group_terms``,
einkern.gpu.mma_family_groups): the groups found for the CCSD(T) families, the
lanes of a group's terms owning the same box elements, kernels against the
NumPy reference in the emulator, planted faults (a wrong accumulator register,
a lost sign) caught, the staging model against the generated copies, and the
decision's choice with its reason."""

from __future__ import annotations

import itertools
from dataclasses import replace

import numpy as np
import pytest
from conftest import problem_of
from test_mma_family import UNIFORM4, _check, _config, _family_task

from einkern.gpu import mma_family
from einkern.gpu.decision import choose
from einkern.gpu.device import H100
from einkern.gpu.mma_config import MmaConfig
from einkern.gpu.mma_family import _Builder, _layouts, family_of, problems
from einkern.gpu.mma_family_groups import Grouping, TermBits, TermView, term_groups
from einkern.gpu.mma_family_model import family_candidates, staging_conflicts, staging_targets
from einkern.gpu.thread_offsets import thread_values
from einkern.ir.task import statement_task

H8P2 = {**{f"h{i}": 8 for i in (1, 2, 3)}, **{f"p{i}": 2 for i in (4, 5, 6)}}


def _grouped(box, **kw) -> MmaConfig:
    return replace(_config(box, **kw), group_terms=True)


def _d1_views() -> list[TermView]:
    """The d1 family's terms as the grouping sees them: t2 holds two p's and h_i,
    v2 the other two h's and p_c."""
    views = []
    for c in ("p6", "p4", "p5"):
        for i in (1, 2, 3):
            a = (*(p for p in ("p4", "p5", "p6") if p != c), f"h{i}")
            b = (*(f"h{j}" for j in (3, 2, 1) if j != i), c)
            views.append(TermView((a, b), (b, a), (1.0, ())))
    return views


ORDER = ("p4", "p5", "p6", "h1", "h2", "h3")


def _d1_groups(box, warps_m, warps_n):
    request = Grouping(
        tuple(_d1_views()), tuple(sorted(box.items())), ORDER, warps_m, warps_n, "m16n8k4_f64"
    )
    return term_groups(request)


@pytest.mark.parametrize(
    ("box", "warps", "groups"),
    [(UNIFORM4, (2, 2), 5), (UNIFORM4, (1, 4), 5), (H8P2, (2, 2), 3), (H8P2, (1, 4), 3)],
)
def test_the_d1_family_groups(box, warps, groups):
    found = _d1_groups(box, *warps)
    assert found is not None and len(found) == groups
    assert sorted(t for g in found for t in g.terms) == list(range(9))


def test_no_groups_without_powers_of_two():
    assert _d1_groups({**UNIFORM4, "h1": 3}, 2, 2) is None
    assert _d1_groups(UNIFORM4, 3, 1) is None


def _elements(bits: TermBits, warps_m: int, warps_n: int) -> dict:
    """(thread, register) → the box element (a frozenset of set bits) of a term's
    view, through the instruction's accumulator layout and the warp layout."""
    lm, ln = warps_m.bit_length() - 1, warps_n.bit_length() - 1
    tiles_m = 2 ** (len(bits.rows) - 4 - lm)
    tiles_n = 2 ** (len(bits.cols) - 3 - ln)
    found = {}
    for warp, lane, tm, tn, i in itertools.product(
        range(warps_m * warps_n), range(32), range(tiles_m), range(tiles_n), range(4)
    ):
        row = (warp % warps_m) * tiles_m * 16 + tm * 16 + lane // 4 + 8 * (i // 2)
        col = (warp // warps_m) * tiles_n * 8 + tn * 8 + 2 * (lane % 4) + i % 2
        element = frozenset(
            [bits.rows[p] for p in range(len(bits.rows)) if row >> p & 1]
            + [bits.cols[p] for p in range(len(bits.cols)) if col >> p & 1]
        )
        register = bits.slots[tm * tiles_n + tn][i]
        found[warp * 32 + lane, register] = element
    return found


@pytest.mark.parametrize(("box", "warps"), [(UNIFORM4, (2, 2)), (H8P2, (1, 4))])
def test_the_terms_of_a_group_own_the_same_elements(box, warps):
    """Every (thread, register) of every term of a group holds the same box
    element, and the group covers the box once."""
    for group in _d1_groups(box, *warps):
        first = _elements(group.bits[0], *warps)
        assert len(set(first.values())) == 4096  # each element once
        for bits in group.bits[1:]:
            assert _elements(bits, *warps) == first


@pytest.mark.parametrize(
    ("family", "tile", "config"),
    [
        ("d1", 4, _grouped(UNIFORM4)),
        ("d2", 6, _grouped(UNIFORM4, stages=3)),  # edges, two k-steps per term
        ("d1", 8, _grouped(H8P2, warps=(1, 4), k_step=8)),  # operands swapped in groups
        ("d2", 9, _grouped(H8P2, stages=3)),  # edges in an 8-wide box
    ],
)
def test_grouped_families_match_the_reference(family, tile, config):
    task = _family_task(family, tile)
    laid, _ = _layouts(family_of(task), config)
    assert sum(t.relay is not None for t in laid) < len(laid)  # terms did share
    report, got, want = _check(task, config)
    assert report.ok, report
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


SCALED = (
    "program t\ndims a, b, c, k\ndtype float64\n"
    "tensor A[a,k,b], B[k,c], C[a,b,c], D[c,k], E[k,a,b], F[a,b,k], G[c,k]\nscalar s\n"
    "C[i,j,m] = s * A[i,x,j] * B[x,m] - s * E[x,i,j] * D[m,x] + 3 * F[i,j,x] * G[m,x]\n"
)


def test_grouped_scaled_terms_and_assignment():
    """`=`, a scalar and constants: terms share only with equal constants and
    scalars (their signs may differ)."""
    task = statement_task(problem_of(SCALED, a=8, b=4, c=8, k=3), 0)
    config = _grouped({"i": 4, "j": 4, "m": 8}, warps=(1, 1))
    assert problems(task, config) == []
    laid, _ = _layouts(family_of(task), config)
    assert sum(t.relay is not None for t in laid) == 2  # the two `s` terms share
    assert any(t.negate for t in laid)
    report, got, want = _check(task, config, seed=2, scalars={"s": 0.75})
    assert report.ok, report
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


def _planted(monkeypatch, change) -> tuple:
    """The d1 family at T = 4 with ``change`` applied to the second laid term."""
    task = _family_task("d1", 4)
    config = _grouped(UNIFORM4)
    laid, trouble = _layouts(family_of(task), config)
    changed = (laid[0], change(laid[1]), *laid[2:])
    monkeypatch.setattr(mma_family, "_layouts", lambda family, cfg: (changed, trouble))
    return _check(task, config)


def test_a_wrong_accumulator_register_is_caught(monkeypatch):
    def swap(term):
        slots = list(term.bits.slots)
        slots[0] = (slots[0][1], slots[0][0], *slots[0][2:])
        return replace(term, bits=replace(term.bits, slots=tuple(slots)))

    report, got, want = _planted(monkeypatch, swap)
    assert not np.allclose(got, want, rtol=1e-12)


def test_a_lost_sign_is_caught(monkeypatch):
    report, got, want = _planted(monkeypatch, lambda term: replace(term, negate=not term.negate))
    assert not np.allclose(got, want, rtol=1e-12)


@pytest.mark.parametrize("config", [_config(UNIFORM4, k_step=8), _grouped(UNIFORM4, k_step=8)])
def test_the_staging_model_reads_the_copies_the_kernel_makes(config):
    """The model's shared indices of every term's copies equal those of the
    generated kernel (evaluated for every thread)."""
    task = _family_task("d1", 16)
    builder = _Builder(task, family_of(task), config, "x")
    values = dict.fromkeys(builder.block_vars, 0)
    for j, term in enumerate(builder.terms):
        for which in "ab":
            copies = [
                thread_values(target, config.threads, values)
                for _, target, _, _ in builder.tile_elements(j, 0, which)
            ]
            width = term.m if which == "a" else term.n
            made = np.concatenate(copies)[: width * config.k_step]
            want = staging_targets(term, which, config.k_step, builder.lda, builder.ldb)
            np.testing.assert_array_equal(made, want)


def test_staging_conflicts_count_bank_clashes():
    """d2's grouped 4^6 box copies as conflict-free as its plain one; d1's
    8^3 2^3 box with shared accumulators clashes (its swapped operands' rows)."""
    d2 = family_of(_family_task("d2", 16))
    plain = _config(UNIFORM4, k_step=8, stages=3)
    assert staging_conflicts(d2, plain) == staging_conflicts(d2, replace(plain, group_terms=True))
    d1 = family_of(_family_task("d1", 16))
    h8 = _config(H8P2, k_step=8, stages=3)
    assert staging_conflicts(d1, replace(h8, group_terms=True)) > 4 * staging_conflicts(d1, h8)


@pytest.mark.parametrize(("family", "tile"), [("d1", 16), ("d2", 24)])
def test_the_decision_shares_accumulators_and_says_why(family, tile):
    task = _family_task(family, tile)
    decision = choose(task, H100)
    assert decision.config.mma is not None and decision.config.mma.group_terms
    steps = dict(decision.steps)
    assert "relayouts per block instead of 9" in steps["shared-accumulators"]
    ranked = family_candidates(task, H100)
    assert any(not c.group_terms for c in ranked)  # the plain twin was weighed


def test_group_terms_round_trips_and_is_described():
    config = _grouped(UNIFORM4, k_step=8, stages=3)
    again = MmaConfig.from_json(config.to_json())
    assert again == config and again.group_terms
    assert "group_terms" not in _config(UNIFORM4).to_json()
    assert "once per group" in config.describe()
    with pytest.raises(TypeError):
        MmaConfig.from_values({"group_terms": 1})


def test_the_tuner_offers_family_points_with_and_without_sharing():
    pytest.importorskip("cuda.bindings.nvrtc")  # the default's register probe compiles
    from einkern.tuning.cuda_target import CudaTarget

    task = _family_task("d1", 16)
    (mma,) = [p for p in CudaTarget().parameters(task) if p.name == "mma"]
    families = [v for v in mma.values if v is not None and v.box]
    assert None in mma.values  # SIMT stays a point
    assert {c.group_terms for c in families} == {False, True}
    assert all(not problems(task, c) for c in families)
