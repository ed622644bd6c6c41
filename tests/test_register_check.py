"""The decision's register check (``decision.register_check``): the best points
are compiled and re-ranked with their real register counts."""

from __future__ import annotations

import pytest
from test_rewrite import problem_of

from einkern.backends.cuda.probe import register_probe
from einkern.gpu import decision
from einkern.gpu.device import H100
from einkern.gpu.mapping import Mapping
from einkern.gpu.model import estimated_registers, predicted_time
from einkern.gpu.space import config_to_mapping
from einkern.ir.task import Task, statement_task

SGEMM = """dims n={n}
tensor A[n,n], B[n,n], C[n,n] float32
C[i,j] = A[i,l] * B[l,j]
"""


def sgemm(n: int) -> Task:
    return statement_task(problem_of(SGEMM.format(n=n)), 0)


class Probe:
    """A stand-in compiler: the estimate, except ``registers`` for the mappings
    ``heavy`` says are heavy; records what it was asked."""

    def __init__(self, heavy=lambda mapping: False, registers: int = 255) -> None:
        self.heavy, self.registers, self.asked = heavy, registers, []

    def __call__(self, task: Task, mapping: Mapping) -> int | None:
        self.asked.append(mapping)
        return self.registers if self.heavy(mapping) else estimated_registers(task, mapping)


def test_a_point_heavier_than_estimated_loses_its_place() -> None:
    task = sgemm(1024)
    plain = decision.choose(task, H100)
    first = config_to_mapping(task, plain.config)
    # the model's choice really takes 255 registers: one block of 256 threads per
    # SM at most, half the occupancy the estimate gives it
    probe = Probe(lambda m: m.parallel == first.parallel and m.k_step == first.k_step)
    checked = decision.choose(task, H100, probe)
    assert checked.config != plain.config
    assert probe.asked[0].parallel == first.parallel  # the best point was compiled first
    assert len(probe.asked) <= decision.REGISTER_CHECKS
    note = dict(checked.steps)["register-check"]
    assert "255 registers (estimated" in note and "; chosen: " in note
    # the new choice is predicted MARGIN times faster than the demoted point
    chosen = config_to_mapping(task, checked.config)
    assert predicted_time(task, chosen, H100) < decision.MARGIN * predicted_time(
        task, first, H100, registers=255
    )


def _ranked(task: Task) -> list:
    """The model's 12 best GETT points of ``task``, as the decision ranks them."""
    from einkern.gpu import gett

    points = gett.candidates(task, H100)
    timed = sorted(
        (predicted_time(task, config_to_mapping(task, c), H100), n, c) for n, c in enumerate(points)
    )
    return timed[:12]


def test_the_chosen_point_takes_the_first_points_place_and_time() -> None:
    task = sgemm(1024)
    ranked = _ranked(task)
    first = config_to_mapping(task, ranked[0][2])
    result = decision.register_check(task, ranked, H100, Probe(lambda m: m == first))
    assert result is not None
    order, note = result
    # the first's place and estimated time, another configuration; none lost
    assert order[0][0] == ranked[0][0] and order[0][2] != ranked[0][2]
    assert sorted(n for _, n, _ in order) == sorted(n for _, n, _ in ranked)
    assert "; chosen: " in note


def test_near_ties_keep_the_models_order() -> None:
    task = sgemm(1024)
    ranked = _ranked(task)
    first = config_to_mapping(task, ranked[0][2])
    second = ranked[1][0]
    # a register count that makes the first slower than the second once compiled,
    # but not 1 / MARGIN times slower
    between = [
        r
        for r in range(16, 256)
        if second < predicted_time(task, first, H100, registers=r) < second / decision.MARGIN
    ]
    assert between, "no register count puts the first point within the margin"
    probe = Probe(lambda m: m == first, registers=between[0])
    result = decision.register_check(task, ranked, H100, probe)
    assert result is not None and result[0] == ranked
    assert result[1].endswith("the model's first point kept")
    assert len(probe.asked) == 2  # the first, then the second, now ahead


def test_estimates_that_hold_change_nothing() -> None:
    task = sgemm(1024)
    probe = Probe()
    checked = decision.choose(task, H100, probe)
    assert checked.config == decision.choose(task, H100).config
    assert len(probe.asked) == 1  # the best point: the compile confirmed the order
    assert dict(checked.steps)["register-check"].endswith("the model's first point kept")


def test_small_problems_are_not_compiled() -> None:
    task = sgemm(64)  # predicted in a few microseconds
    probe = Probe(lambda m: True)
    checked = decision.choose(task, H100, probe)
    assert probe.asked == [] and "register-check" not in dict(checked.steps)


def test_every_compile_heavier_stops_at_the_limit() -> None:
    task = sgemm(1024)
    probe = Probe(lambda m: True, registers=200)
    decision.choose(task, H100, probe)
    assert len(probe.asked) == decision.REGISTER_CHECKS


def test_nvrtc_probe_reads_the_compiled_kernels_registers() -> None:
    from einkern.backends.cuda.resources import kernel_resources

    probe = register_probe(H100)
    if probe is None:
        pytest.fail("NVRTC is part of the test environment (CI compile-checks sm_90)")
    task = sgemm(1024)
    mapping = config_to_mapping(task, decision.choose(task, H100).config)
    registers = probe(task, mapping)
    compiled = kernel_resources(task.problem, "sm_90", {0: mapping})[0]
    assert registers == compiled.registers and 16 <= registers <= 255
