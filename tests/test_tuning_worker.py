"""Measuring in a worker process: crashes, segfaults and hangs are recorded and the
run goes on with a fresh worker."""

from __future__ import annotations

from test_tuning_fakes import C, Synthetic, fake_problem, point

from einkern.ir.task import statement_task
from einkern.tuning.evaluate import Budget, Evaluator, MemoryStore
from einkern.tuning.search import canonical
from einkern.tuning.tuner import TuneOptions, tune_task
from einkern.tuning.worker import Job, ProcessMeasurer


def test_crashing_variants_are_recorded_and_the_run_continues():
    target = Synthetic(
        exits=((0, 0, 1),), segfaults=((0, 0, 2),), hangs=((0, 0, 3),), raises=((0, 0, 4),)
    )
    problem = fake_problem()
    store = MemoryStore()
    options = TuneOptions(strategy="exhaustive", budget=Budget(evaluations=8))
    with Evaluator(target, workers=2, isolate=True, timeout=1.0) as evaluator:
        result = tune_task(target, statement_task(problem, 0), evaluator, options, store)
    status = {point(o.config): o for o in store.outcomes.values()}
    assert result.evaluations == 8
    assert status[(0, 0, 1)].status == "crash"
    assert "exited with status 3" in status[(0, 0, 1)].reason
    assert status[(0, 0, 2)].status == "crash"
    assert "SIGSEGV" in status[(0, 0, 2)].reason
    assert status[(0, 0, 3)].status == "timeout"
    assert status[(0, 0, 4)].status == "crash"
    assert "device fault" in status[(0, 0, 4)].reason
    assert all(status[p].ok for p in [(0, 0, 0), (0, 0, 5), (0, 1, 0), (0, 1, 1)])
    assert dict(result.failures) == {"crash": 3, "timeout": 1}
    assert point(result.best.config) == (0, 1, 1)


def test_worker_is_reused_between_variants():
    target = Synthetic()
    problem = fake_problem()
    measurer = ProcessMeasurer()
    try:
        for c in range(3):
            config = C(a=1, b=1, c=c)
            job = Job(target, statement_task(problem, 0), config, canonical(config), 10, 0)
            assert measurer.measure(job, 30.0).timing is not None
        assert measurer.restarts == 0
        dead = C(a=0, b=0, c=1)
        killer = Job(
            Synthetic(exits=((0, 0, 1),)), statement_task(problem, 0), dead, canonical(dead), 10, 0
        )
        assert measurer.measure(killer, 30.0).failure == "crash"
        config = C(a=2, b=2, c=2)
        job = Job(target, statement_task(problem, 0), config, canonical(config), 10, 0)
        assert measurer.measure(job, 30.0).timing is not None  # a fresh worker
    finally:
        measurer.close()


def test_unpicklable_handle_is_a_failure_not_an_exception():
    problem = fake_problem()
    measurer = ProcessMeasurer()
    try:
        config = C(a=1, b=1, c=1)
        job = Job(Synthetic(), statement_task(problem, 0), config, lambda: None, 10, 0)
        measured = measurer.measure(job, 30.0)
        assert measured.failure == "crash" and "cannot send" in measured.reason
    finally:
        measurer.close()
