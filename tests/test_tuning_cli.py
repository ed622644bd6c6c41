"""``einkern tune`` / ``einkern db`` end to end on the CPU backend (small GEMMs),
including a killed-and-resumed run and two tuners sharing one database."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from einkern.backends.cpu import CpuBackend
from einkern.cli import main
from einkern.tuning.db import TuningDB

pytestmark = pytest.mark.skipif(not CpuBackend().available(), reason="no C compiler")

GEMM = str(Path(__file__).parent.parent / "examples" / "gemm.ein")
SMALL = ["-e", "m=12", "-e", "n=12", "-e", "k=12"]


@pytest.fixture(autouse=True)
def environment(monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "2")


@pytest.fixture(scope="module")
def kernels(einkern_cache) -> Path:
    """The session's kernel cache (conftest), which subprocesses are given too."""
    return einkern_cache


@pytest.fixture(scope="module")
def tuned(kernels, tmp_path_factory) -> tuple[Path, str]:
    """A database from one exhaustive run of 10 variants, and what the run printed."""
    path = tmp_path_factory.mktemp("tuned") / "gemm.sqlite"
    completed = subprocess.run(
        [
            sys.executable,
            "-m",
            "einkern",
            "tune",
            GEMM,
            *SMALL,
            "--backend",
            "cpu",
            "--db",
            str(path),
            "--strategy",
            "exhaustive",
            "--budget",
            "10",
            "--explain",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        env=_env(kernels),
    )
    assert completed.returncode == 0, completed.stderr
    return path, completed.stdout


def _env(kernels: Path) -> dict[str, str]:
    return {**os.environ, "EINKERN_CACHE_DIR": str(kernels), "OMP_NUM_THREADS": "2"}


def records(path: Path) -> dict[str, float]:
    """config → timestamp, read without creating anything (empty while being created)."""
    if not path.exists():
        return {}
    connection = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=30)
    try:
        return dict(connection.execute("SELECT config, timestamp FROM records"))
    except sqlite3.OperationalError:
        return {}
    finally:
        connection.close()


def test_tune_prints_a_summary_and_records_every_variant(tuned):
    path, output = tuned
    assert "sgemm: tuning" in output and "C[i,j] = sum[l]((A[i,l] * B[l,j]))" in output
    assert "10/" in output and "speedup" in output
    assert "S0 best configuration: {" in output
    best = json.loads(output.split("S0 best configuration: ")[1].splitlines()[0])
    with TuningDB(path, create=False) as db:
        stored = db.records()
        assert len(stored) == 10
        assert db.best(stored[0].identity.key).config == best
        assert sum(r.default for r in stored) == 1


def test_rerun_resumes_everything(tuned, capsys):
    path, _ = tuned
    before = records(path)
    assert (
        main(
            [
                "tune",
                GEMM,
                *SMALL,
                "--backend",
                "cpu",
                "--db",
                str(path),
                "--strategy",
                "exhaustive",
                "--budget",
                "10",
            ]
        )
        == 0
    )
    assert "(10 resumed)" in capsys.readouterr().out
    assert records(path) == before


def test_db_show_export_import_prune(tuned, tmp_path, capsys):
    path, _ = tuned
    assert main(["db", "show", str(path)]) == 0
    shown = capsys.readouterr().out
    assert "1 problems, 10 records" in shown and "i=12, j=12, l=12" in shown
    assert main(["db", "show", "--db", str(path), "--records"]) == 0
    assert capsys.readouterr().out.count('"tile_i"') == 10
    wisdom = tmp_path / "wisdom.json"
    assert main(["db", "export", str(wisdom), "--db", str(path)]) == 0
    data = json.loads(wisdom.read_text())
    assert data["format"] == "einkern-wisdom" and len(data["records"]) == 10
    copy = tmp_path / "copy.sqlite"
    assert main(["db", "import", str(wisdom), "--db", str(copy)]) == 0
    assert "imported 10 of 10" in capsys.readouterr().out
    with TuningDB(path, create=False) as original, TuningDB(copy, create=False) as imported:
        assert imported.records() == original.records()
        assert imported.verdicts() == original.verdicts() and len(data["verdicts"]) >= 1
    assert main(["db", "import", str(wisdom), "--db", str(copy)]) == 0
    assert "imported 0 of 10" in capsys.readouterr().out
    assert main(["db", "prune", str(copy), "--keep-best"]) == 0
    with TuningDB(copy, create=False) as pruned:
        assert 1 <= len(pruned.records()) <= 2


def test_simulate_replays_the_database(tuned, capsys):
    path, output = tuned
    args = ["tune", GEMM, *SMALL, "--backend", "cpu", "--simulate", str(path)]
    assert main([*args, "--strategy", "exhaustive", "--budget", "10", "--explain"]) == 0
    replay = capsys.readouterr().out
    assert "(simulated)" in replay and "best recorded" in replay
    best = output.split("S0 best configuration: ")[1].splitlines()[0]
    assert f"S0 best configuration: {best}" in replay
    assert main([*args, "--strategy", "random", "--budget", "14", "--seed", "3"]) == 0
    assert "invalid" in capsys.readouterr().out  # variants never recorded count as failures
    assert main([*args, "--strategy", "model", "--budget", "4"]) == 0


def test_usage_errors(tmp_path, capsys):
    assert main(["tune", str(tmp_path / "none.ein")]) == 2
    assert "no such file" in capsys.readouterr().err
    assert main(["tune", GEMM, "--budget", "3", "--time", "2"]) == 2
    assert main(["tune", GEMM, "--strategy", "hill-climbing"]) == 2
    assert main(["tune", GEMM, "--budget", "0"]) == 2
    assert main(["tune", GEMM, *SMALL, "--backend", "cpu", "--statement", "4"]) == 2
    assert "no statement 4" in capsys.readouterr().err
    assert main(["db", "show", str(tmp_path / "none.sqlite")]) == 2
    assert "no tuning database" in capsys.readouterr().err
    foreign = tmp_path / "foreign.sqlite"
    foreign.write_bytes(b"not a database")
    assert main(["tune", GEMM, *SMALL, "--backend", "cpu", "--db", str(foreign)]) == 2
    assert "not an einkern tuning database" in capsys.readouterr().err
    assert foreign.read_bytes() == b"not a database"
    bad = tmp_path / "bad.json"
    bad.write_text('{"format": "something else"}')
    assert main(["db", "import", str(bad), "--db", str(tmp_path / "x.sqlite")]) == 2
    assert "not an einkern wisdom file" in capsys.readouterr().err


def _tune_command(path: Path, budget: int, seed: int = 0) -> list[str]:
    return [
        sys.executable,
        "-m",
        "einkern",
        "tune",
        GEMM,
        *SMALL,
        "--backend",
        "cpu",
        "--db",
        str(path),
        "--strategy",
        "exhaustive",
        "--budget",
        str(budget),
        "--workers",
        "2",
        "--seed",
        str(seed),
    ]


def test_killed_tuner_resumes_without_measuring_again(tmp_path, kernels):
    path = tmp_path / "killed.sqlite"
    command = _tune_command(path, 24)
    process = subprocess.Popen(
        command,
        env=_env(kernels),
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    deadline = time.monotonic() + 120
    while len(records(path)) < 4 and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    os.killpg(process.pid, signal.SIGKILL)
    process.wait(timeout=30)
    before = records(path)
    assert 4 <= len(before) < 24, process.stderr.read()
    rerun = subprocess.run(command, env=_env(kernels), capture_output=True, text=True, timeout=300)
    assert rerun.returncode == 0, rerun.stderr
    assert f"({len(before)} resumed)" in rerun.stdout
    after = records(path)
    assert len(after) == 24
    assert all(after[config] == stamp for config, stamp in before.items())  # not re-measured


def test_two_tuners_share_one_database(tmp_path, kernels):
    path = tmp_path / "shared.sqlite"
    processes = [
        subprocess.Popen(
            _tune_command(path, 8, seed),
            env=_env(kernels),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for seed in (0, 1)
    ]
    outputs = [p.communicate(timeout=300) for p in processes]
    assert [p.returncode for p in processes] == [0, 0], [err for _, err in outputs]
    assert all("speedup" in out for out, _ in outputs)
    connection = sqlite3.connect(path)
    assert connection.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    connection.close()
    with TuningDB(path, create=False) as db:
        stored = db.records()
    assert len(stored) == len({r.config_key for r in stored}) == 8
