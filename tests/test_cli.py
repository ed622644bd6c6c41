"""The command line: output, exit codes, and no traceback for user errors."""

from __future__ import annotations

import subprocess
import sys

import pytest

from einkern.cli import main


def run_cli(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_check_prints_statements_extents_flops_and_bytes(capsys):
    code, out, _ = run_cli(capsys, "check", "examples/sd_t_d1_1.ein", "--extent", "T=16")
    assert code == 0
    assert "t3[h3,h2,h1,p6,p5,p4] -= sum[h7]" in out
    assert "T=16" in out
    assert "reduction h7" in out
    assert "537 Mflop" in out  # 2 * 16**7
    assert "min bytes 257 MiB" in out  # 8 * (2*16**6 + 2*16**4) = 257 * 2**20


def test_run_with_check_on_the_cpu(capsys):
    code, out, _ = run_cli(
        capsys,
        "run",
        "examples/riemann.ein",
        "-e",
        "n=5",
        "--backend",
        "cpu",
        "--check",
        "--repeat",
        "2",
    )
    assert code == 0, out
    assert "max relative error" in out and "ok" in out


def test_emit_cpu_source(capsys):
    code, out, _ = run_cli(capsys, "emit", "examples/gemm.ein", "--backend", "cpu", "-e", "m=8")
    assert code == 0
    assert "einkern_run" in out


@pytest.mark.parametrize(
    "argv, text",
    [
        (["check", "missing.ein"], "no such file"),
        (["check", "examples/gemm.ein", "--extent", "q=3"], "no extent 'q'"),
        (["check", "examples/gemm.ein", "--extent", "m=0"], "positive integer"),
        (["check", "examples/gemm.ein", "--frobnicate"], "unrecognized arguments"),
        (["run", "examples/gemm.ein", "--backend", "tpu"], "invalid choice"),
        (["explode"], "invalid choice"),
    ],
)
def test_user_errors_exit_2_without_traceback(capsys, argv, text):
    code, out, err = run_cli(capsys, *argv)
    assert code == 2
    assert text in err
    assert "Traceback" not in err


def test_syntax_error_shows_file_line_column_and_caret(tmp_path, capsys):
    bad = tmp_path / "bad.ein"
    bad.write_text("dims n = 3\ntensor A[n], B[n]\nB[i] = A[i] * * 2\n")
    code, _, err = run_cli(capsys, "check", str(bad))
    assert code == 2
    assert f"{bad}:3:" in err and "^" in err


def test_console_script_runs_in_a_subprocess():
    proc = subprocess.run(
        [sys.executable, "-m", "einkern", "check", "examples/norms.ein"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert "sqrt(sum[i]" in proc.stdout


def test_run_check_exits_1_above_tolerance(capsys, monkeypatch):
    import einkern.testing

    monkeypatch.setattr(einkern.testing, "output_tolerance", lambda problem, name: -1.0)
    code, out, _ = run_cli(
        capsys,
        "run",
        "examples/norms.ein",
        "-e",
        "nb=4",
        "-e",
        "d=3",
        "--backend",
        "cpu",
        "--check",
        "--repeat",
        "1",
    )
    assert code == 1 and "FAILED" in out


def test_run_several_programs(capsys):
    code, out, _ = run_cli(
        capsys,
        "run",
        "examples/norms.ein",
        "examples/riemann.ein",
        "-e",
        "n=3",
        "--backend",
        "cpu",
        "--repeat",
        "1",
    )
    assert code == 2  # riemann has no extent nb: the error names it


def test_emit_cuda_resources_and_explain_without_a_gpu(capsys, tmp_path):
    code, out, _ = run_cli(
        capsys,
        "emit",
        "examples/gemm.ein",
        "--backend",
        "cuda",
        "--resources",
        "--arch",
        "sm_90",
        "--explain",
        "-e",
        "m=256",
        "-e",
        "n=256",
        "-e",
        "k=256",
    )
    assert code == 0
    assert "registers" in out and "spill" in out and "threadIdx.x" in out
    mapping = out.split("mapping file: ")[1].splitlines()[0]
    path = tmp_path / "m.json"
    path.write_text(mapping)
    code, again, _ = run_cli(
        capsys,
        "emit",
        "examples/gemm.ein",
        "--backend",
        "cuda",
        "--mapping",
        str(path),
        "-e",
        "m=256",
        "-e",
        "n=256",
        "-e",
        "k=256",
    )
    assert code == 0 and "__global__" in again
    path.write_text('{"strategy": 1}')
    code, _, err = run_cli(
        capsys, "emit", "examples/gemm.ein", "--backend", "cuda", "--mapping", str(path)
    )
    assert code == 2 and "mapping" in err
