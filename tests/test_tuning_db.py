"""The tuning database (integrity, concurrency, wisdom files) and the compile-time
lookup policies."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from test_tuning_fakes import C, Synthetic, fake_problem, point

import einkern
from einkern.errors import EinkernError, UsageError
from einkern.ir.task import statement_task, tasks_of
from einkern.tuning.canonical import identify, size_distance
from einkern.tuning.db import TuningDatabaseError, TuningDB, TuningRecord, default_path
from einkern.tuning.evaluate import Budget, DbStore, Evaluator
from einkern.tuning.policy import choose_config, choose_configs, normalize_policy
from einkern.tuning.target import ParameterConfig
from einkern.tuning.tuner import TuneOptions, tune_problem
from einkern.tuning.verdict import ROUNDS, Verdict, canonical_text


def record(
    identity,
    config: dict,
    median: float | None,
    status: str = "ok",
    default: bool = False,
    stamp: float = 1.0,
) -> TuningRecord:
    times = (median,) * 5 if median is not None else ()
    return TuningRecord(
        identity,
        json.dumps(config, sort_keys=True, separators=(",", ":")),
        default,
        status,
        "" if status == "ok" else "boom",
        median,
        times,
        0.0 if median is not None else None,
        (),
        stamp,
    )


def fill(db: TuningDB, n: int, best: dict, best_time: float = 1e-3, confirmed: bool = True) -> None:
    """Records of problem size ``n`` and, when ``confirmed``, the verdict of a run in
    which ``best`` beat the default side by side."""
    identity = identify(Synthetic(), statement_task(fake_problem(n), 0))
    default = {"a": 0, "b": 0, "c": 0}
    db.add(record(identity, default, 5e-3, default=True))
    db.add(record(identity, best, best_time))
    db.add(record(identity, {"a": 5, "b": 5, "c": 0}, None, status="crash"))
    if confirmed:
        db.add_verdict(
            Verdict(
                identity.key,
                identity.family,
                canonical_text(best),
                canonical_text(default),
                True,
                5e-3 / best_time,
                "faster",
                (5e-3,) * 3,
                (best_time,) * 3,
                ((5e-3, best_time),),
                2.0,
            )
        )


def snapshot(path: Path) -> tuple[bytes, int]:
    return path.read_bytes(), path.stat().st_mtime_ns


# ---- the file -------------------------------------------------------------------


def test_records_round_trip_and_first_record_wins(tmp_path):
    identity = identify(Synthetic(), statement_task(fake_problem(), 0))
    with TuningDB(tmp_path / "t.sqlite") as db:
        assert db.add(record(identity, {"a": 1, "b": 0, "c": 0}, 2e-3))
        assert not db.add(record(identity, {"a": 1, "b": 0, "c": 0}, 1e-3))  # kept
        assert db.add(record(identity, {"a": 2, "b": 0, "c": 0}, None, status="crash"))
        assert db.add(record(identity, {"a": 2, "b": 0, "c": 0}, 3e-3))  # success replaces
        stored = db.records(identity.key)
    assert [r.median for r in stored] == [2e-3, 3e-3]
    with TuningDB(tmp_path / "t.sqlite") as db:
        assert db.records() == stored
        assert db.best(identity.key).config == {"a": 1, "b": 0, "c": 0}
        assert db.get(identity.key, stored[0].config_key) == stored[0]
    assert (
        sqlite3.connect(tmp_path / "t.sqlite").execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    )


def test_failed_and_wrong_records_are_never_best(tmp_path):
    identity = identify(Synthetic(), statement_task(fake_problem(), 0))
    with TuningDB(tmp_path / "t.sqlite") as db:
        db.add(record(identity, {"a": 1, "b": 1, "c": 1}, 1e-6, status="wrong"))
        assert db.best(identity.key) is None
        db.add(record(identity, {"a": 2, "b": 1, "c": 1}, 1e-3))
        assert db.best(identity.key).config == {"a": 2, "b": 1, "c": 1}


def test_not_sqlite_file_is_refused_and_untouched(tmp_path):
    path = tmp_path / "notes.sqlite"
    path.write_text("these are my notes, not a database\n" * 100)
    before = snapshot(path)
    with pytest.raises(TuningDatabaseError, match="not an SQLite file"):
        TuningDB(path)
    assert snapshot(path) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.sqlite"]


def test_foreign_sqlite_file_is_refused_and_untouched(tmp_path):
    path = tmp_path / "other.sqlite"
    connection = sqlite3.connect(path)
    connection.execute("CREATE TABLE people (name TEXT)")
    connection.execute("INSERT INTO people VALUES ('ada')")
    connection.commit()
    connection.close()
    before = snapshot(path)
    with pytest.raises(TuningDatabaseError, match="another application"):
        TuningDB(path)
    with pytest.raises(EinkernError):
        TuningDB(path, create=False)
    assert snapshot(path) == before


def test_corrupt_database_is_refused_and_untouched(tmp_path):
    path = tmp_path / "t.sqlite"
    with TuningDB(path) as db:
        for n in (16, 32, 64, 128):
            fill(db, n, {"a": 1, "b": 2, "c": 3})
    data = bytearray(path.read_bytes())
    assert len(data) >= 3 * 4096
    data[4096:8192] = os.urandom(4096)  # a page of garbage behind a valid header
    path.write_bytes(bytes(data))
    before = snapshot(path)
    with pytest.raises(TuningDatabaseError, match="corrupt|malformed"):
        TuningDB(path)
    assert snapshot(path) == before


def test_newer_schema_is_refused(tmp_path):
    path = tmp_path / "t.sqlite"
    TuningDB(path).close()
    connection = sqlite3.connect(path)
    connection.execute("PRAGMA user_version = 99")
    connection.close()
    with pytest.raises(TuningDatabaseError, match="newer einkern"):
        TuningDB(path)


def test_read_only_open_never_creates(tmp_path, monkeypatch):
    monkeypatch.setenv("EINKERN_TUNING_DB", str(tmp_path / "env.sqlite"))
    assert default_path() == tmp_path / "env.sqlite"
    with pytest.raises(TuningDatabaseError, match="no tuning database"):
        TuningDB(create=False)
    assert not (tmp_path / "env.sqlite").exists()


WRITER = textwrap.dedent("""
    import json, sys
    sys.path.insert(0, sys.argv[3])
    from test_tuning_fakes import Synthetic, fake_problem
    from einkern.ir.task import statement_task
    from einkern.tuning.canonical import identify
    from einkern.tuning.db import TuningDB, TuningRecord
    identity = identify(Synthetic(), statement_task(fake_problem(int(sys.argv[2])), 0))
    with TuningDB(sys.argv[1]) as db:
        for a in range(150):
            key = json.dumps({"a": a}, separators=(",", ":"))
            db.add(TuningRecord(identity, key, a == 0, "ok", "", 1e-3 + a * 1e-6,
                                (1e-3,), 0.0, (), 1.0))
""")


def test_two_processes_write_one_database(tmp_path):
    path = tmp_path / "shared.sqlite"
    tests = str(Path(__file__).parent)
    writers = [
        subprocess.Popen([sys.executable, "-c", WRITER, str(path), str(n), tests]) for n in (32, 48)
    ]
    assert [w.wait(timeout=120) for w in writers] == [0, 0]
    with TuningDB(path) as db:
        assert len(db.records()) == 300
        assert len({r.identity.key for r in db.records()}) == 2
    assert sqlite3.connect(path).execute("PRAGMA integrity_check").fetchone()[0] == "ok"


def test_prune(tmp_path):
    with TuningDB(tmp_path / "t.sqlite") as db:
        fill(db, 64, {"a": 1, "b": 1, "c": 1})
        identity = identify(Synthetic(), statement_task(fake_problem(64), 0))
        db.add(record(identity, {"a": 2, "b": 2, "c": 2}, 3e-3))
        old = TuningRecord(
            **{
                **record(identity, {"a": 3, "b": 0, "c": 0}, 1e-4).__dict__,
                "identity": identity.__class__(**{**identity.__dict__, "version": "0.0.1"}),
            }
        )
        db.add(old)
        assert db.prune(failed=True) == 1
        assert db.prune(failed=False, stale_version=identity.version) == 1
        assert db.prune(failed=False, keep_best_only=True) == 1  # a=2 goes; best and default stay
        left = {r.config_key for r in db.records()}
    assert left == {'{"a":0,"b":0,"c":0}', '{"a":1,"b":1,"c":1}'}


# ---- identity and lookup ----------------------------------------------------------


def test_identity_keys_and_families():
    target = Synthetic()
    small = identify(target, statement_task(fake_problem(64), 0))
    large = identify(target, statement_task(fake_problem(4000), 0))
    assert small.family == large.family and small.key != large.key
    assert dict(small.extents) == {"i": 64, "j": 64, "k": 64}
    assert small.tensors == ("A[n, n] float64 row", "B[n, n] float64 row", "C[n, n] float64 row")
    assert size_distance(small.extents, large.extents) > size_distance(
        small.extents, identify(target, statement_task(fake_problem(128), 0)).extents
    )
    single = statement_task(fake_problem(), 0).view
    assert single.program.inputs == ("A", "B") and len(single.program.statements) == 1


def test_cached_policy_exact_then_nearest_then_default(tmp_path):
    target = Synthetic()
    path = tmp_path / "t.sqlite"
    with TuningDB(path) as db:
        fill(db, 64, {"a": 1, "b": 1, "c": 1})
        fill(db, 4000, {"a": 4, "b": 4, "c": 2})
        fill(db, 80, {"a": 2, "b": 2, "c": 2}, confirmed=False)  # never beat the default
    assert choose_config(target, statement_task(fake_problem(64), 0), "cached", path) == (
        C(a=1, b=1, c=1),
        "exact record",
    )
    # its own records unconfirmed, size 80 takes the nearest confirmed winner (64)
    assert choose_config(target, statement_task(fake_problem(80), 0), "cached", path) == (
        C(a=1, b=1, c=1),
        "nearest record i=64, j=64, k=64",
    )
    config, source = choose_config(target, statement_task(fake_problem(3000), 0), True, path)
    assert config == C(a=4, b=4, c=2)
    assert source == "nearest record i=4000, j=4000, k=4000"
    assert choose_config(target, statement_task(fake_problem(100), 0), "cached", path)[0] == C(
        a=1, b=1, c=1
    )
    # a recorded configuration invalid for the problem at hand is skipped: (4, 4, 2)
    # breaks a + b + c <= 9, so the next nearest size is used, then the default
    strict = Synthetic(limit=9)
    assert choose_config(strict, statement_task(fake_problem(3000), 0), "cached", path) == (
        C(a=1, b=1, c=1),
        "nearest record i=64, j=64, k=64",
    )
    stricter = Synthetic(limit=2)
    assert choose_config(stricter, statement_task(fake_problem(3000), 0), "cached", path) == (
        C(a=0, b=0, c=0),
        "default mapping",
    )
    assert choose_config(target, statement_task(fake_problem(64), 0), False, path) == (
        C(a=0, b=0, c=0),
        "default mapping",
    )


def test_cached_policy_without_database_uses_the_default(tmp_path):
    missing = tmp_path / "none.sqlite"
    assert choose_config(Synthetic(), statement_task(fake_problem(), 0), "cached", missing) == (
        C(a=0, b=0, c=0),
        "default mapping",
    )
    assert not missing.exists()


def test_model_and_full_policies(tmp_path):
    target = Synthetic()
    problem = fake_problem()
    task = statement_task(problem, 0)
    assert choose_config(target, task, "model") == (C(a=4, b=1, c=3), "model")
    options = TuneOptions(strategy="exhaustive", budget=Budget(evaluations=400), isolate=False)
    path = tmp_path / "t.sqlite"
    [(config, source)] = choose_configs(target, problem, "full", path, options=options)
    assert point(config) == (4, 1, 3) and source == "tuned now (181 variants)"
    assert choose_config(target, task, "cached", path) == (config, "exact record")
    with pytest.raises(UsageError, match="unknown tuning policy"):
        normalize_policy("fast")


def test_resume_from_database_measures_nothing_twice(tmp_path):
    calls = []

    class Counting(Synthetic):
        def measure(self, task, config, *rest):
            calls.append(point(config))
            return super().measure(task, config, *rest)

    target, problem = Counting(), fake_problem()
    options = TuneOptions(strategy="genetic", budget=Budget(evaluations=25), seed=7, isolate=False)
    with TuningDB(tmp_path / "t.sqlite") as db:
        first = tune_problem(target, problem, options, db)[0]
        measured = list(calls)
        again = tune_problem(target, problem, options, db)[0]
        # nothing measured again but the final side-by-side of default and winner
        side_by_side = calls[len(measured) :]
        assert again.resumed == 25 and calls[: len(measured)] == measured
        assert set(side_by_side) == {(0, 0, 0), point(again.best.config)}
        assert len(side_by_side) == 2 * ROUNDS and len(db.verdicts()) == 2
        assert again.best.config_key == first.best.config_key
        assert len(db.records()) == 25
        with Evaluator(target, isolate=False) as evaluator:
            store = DbStore(db, identify(target, statement_task(problem, 0)))
            assert store.get(first.best.config_key).resumed
            assert evaluator.workers >= 2


def test_simulated_target_replays_a_recorded_search(tmp_path):
    from einkern.tuning.evaluate import MemoryStore
    from einkern.tuning.simulate import SimulatedTarget, recorded_task
    from einkern.tuning.target import VariantError
    from einkern.tuning.tuner import tune_task

    target, problem = Synthetic(wrong=((5, 5, 0),)), fake_problem()
    exhaustive = TuneOptions(strategy="exhaustive", budget=Budget(), isolate=False)
    with TuningDB(tmp_path / "t.sqlite") as db:
        tune_problem(target, problem, exhaustive, db)
        recorded = recorded_task(db, "synthetic", statement_task(problem, 0))
        count = len(db.records())
    assert len(recorded.records) == count == 181
    simulated = SimulatedTarget(recorded.records)  # no base target: space from the records
    assert [(p.name, p.values) for p in simulated.parameters(statement_task(problem, 0))] == [
        (name, tuple(range(6))) for name in "abc"
    ]
    assert simulated.default_config(statement_task(problem, 0)) == C(a=0, b=0, c=0)
    with pytest.raises(VariantError) as raised:
        simulated.measure(statement_task(problem, 0), C(a=5, b=5, c=5), None, 10, 0)
    assert raised.value.failure == "invalid"  # never recorded
    options = TuneOptions(strategy="annealing", budget=Budget(evaluations=90), isolate=False)
    with Evaluator(simulated, isolate=False) as evaluator:
        result = tune_task(
            simulated,
            statement_task(problem, 0),
            evaluator,
            options,
            MemoryStore(),
            identity=recorded.identity,
        )
    assert point(result.best.config) == (4, 1, 3)
    with TuningDB(tmp_path / "t.sqlite") as db:
        assert len(db.records()) == count  # a replay writes nothing


def test_records_written_before_tasks_are_found_by_task(tmp_path, monkeypatch):
    """Records that einkern wrote when the key came from (problem, statement number)
    (tests/data/tuning_records_d1db560.json, written by the code at d1db560) have
    the key and family the same statement's one-statement task gives now, and a
    database holding them answers a lookup by task."""
    from einkern.tuning import canonical
    from einkern.tuning.canonical import make_identity
    from einkern.tuning.policy import lookup

    root = Path(__file__).resolve().parent
    written = json.loads((root / "data" / "tuning_records_d1db560.json").read_text())
    monkeypatch.setattr(canonical, "einkern_version", lambda: "0.9.0")
    problem = einkern.make_problem(einkern.load(root.parent / written["program"]), written["sizes"])
    tasks = tasks_of(problem)
    assert len(tasks) == len(written["records"]) == 2
    for task, old in zip(tasks, written["records"], strict=True):
        identity = make_identity("fake", {"device": "test"}, 16, task)
        assert (identity.key, identity.family) == (old["key"], old["family"])
        record = TuningRecord.from_json(old["record"])
        assert record.identity == identity

    class Recorded:  # the target of the records: two parameters, all valid
        backend = "fake"
        config_type = ParameterConfig

        def device_key(self) -> dict[str, str]:
            return {"device": "test"}

        def alignment(self) -> int:
            return 16

        def default_config(self, task):
            return ParameterConfig.from_values({"a": 0, "b": 0})

        def violation(self, task, config):
            return None

    with TuningDB(tmp_path / "old.sqlite") as db:
        old = TuningRecord.from_json(written["records"][1]["record"])
        db.add(old)
        # an old record is used only once a run confirmed it beat the default
        assert lookup(Recorded(), tasks[1], db) is None
        db.add_verdict(
            Verdict(
                old.identity.key,
                old.identity.family,
                old.config_key,
                canonical_text({"a": 0, "b": 0}),
                True,
                1.5,
                "faster",
            )
        )
        assert lookup(Recorded(), tasks[1], db) == (
            ParameterConfig.from_values({"a": 1, "b": 2}),
            "exact record",
        )
        assert lookup(Recorded(), tasks[0], db) is None


def test_a_task_of_two_statements_has_its_own_key():
    """The key of a task of several statements names all of them (and differs from
    each statement's own), so a fused kernel's records never stand for one of its
    statements."""
    from einkern.ir.task import Task
    from einkern.tuning.canonical import make_identity

    problem = einkern.make_problem(
        einkern.load(Path(__file__).resolve().parent.parent / "examples" / "norms.ein"),
        {"nb": 8, "d": 4},
    )
    both = make_identity("fake", {}, 0, Task(problem, (0, 1)))
    first, second = (make_identity("fake", {}, 0, t) for t in tasks_of(problem))
    assert both.statement == f"{first.statement}; {second.statement}"
    assert dict(both.extents) == {"b": 8, "i": 4}
    assert both.tensors == ("v[nb, d] float64 row", "s[nb] float64 row", "w[nb, d] float64 row")
    assert len({both.key, first.key, second.key}) == 3


def test_tuning_target_registry_refuses_a_duplicate_name():
    from einkern.tuning.target import get_target, register_target

    with pytest.raises(ValueError, match="already registered"):
        register_target("cpu", Synthetic)
    assert get_target("cpu").backend == "cpu"
    with pytest.raises(EinkernError, match="cannot be tuned"):
        get_target("nonesuch")


def test_processes_creating_one_database_at_once_all_open_it(tmp_path):
    """Four processes opening one new database at the same moment: each must find
    it ours.  The file's application id and its tables were read in two
    transactions, and a creator committing between them made a reader see tables
    without the id ("an SQLite file of another application"), about one start
    in six."""
    import multiprocessing

    context = multiprocessing.get_context("fork")
    for attempt in range(30):
        path = str(tmp_path / f"race{attempt}.sqlite")
        barrier, results = context.Barrier(4), context.Queue()
        workers = [
            context.Process(target=_open_and_report, args=(path, barrier, results))
            for _ in range(4)
        ]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join()
        outcomes = [results.get() for _ in workers]
        assert outcomes == ["ok"] * 4, (attempt, outcomes)


def _open_and_report(path, barrier, results) -> None:
    from pathlib import Path

    from einkern.tuning.db import TuningDatabaseError, _open

    barrier.wait()
    try:
        _open(Path(path), True).close()
        results.put("ok")
    except TuningDatabaseError as error:
        results.put(str(error))
