"""scripts/main.sh (README command 1) installs the CUDA wheels only where a GPU is
usable or EINKERN_CUDA=1 asks for them (checked with EINKERN_DRY_RUN=1, which
prints the commands instead of running them)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parent.parent / "scripts" / "main.sh"


def plan(tmp_path: Path, nvidia_smi: str | None, **env: str) -> tuple[list[str], str]:
    """The commands main.sh would run, and what it says on stderr, with a fake
    ``nvidia-smi`` (a shell body) or none on PATH."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    if nvidia_smi is not None:
        fake = bin_dir / "nvidia-smi"
        fake.write_text("#!/bin/sh\n" + nvidia_smi + "\n")
        fake.chmod(0o755)
    environment = {
        "PATH": f"{bin_dir}:/usr/bin:/bin",
        "HOME": os.environ.get("HOME", str(tmp_path)),
        "EINKERN_DRY_RUN": "1",
        **env,
    }
    result = subprocess.run(
        ["sh", str(SCRIPT), "--repeat", "5"],
        env=environment,
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    return result.stdout.splitlines(), result.stderr


GPU_LIST = 'echo "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-0000)"'
NO_DRIVER = 'echo "NVIDIA-SMI has failed because it couldn\'t communicate with the driver"; exit 9'


@pytest.mark.parametrize(
    "nvidia_smi, env, cuda",
    [
        (None, {}, False),  # no nvidia-smi at all
        (NO_DRIVER, {}, False),  # the tool without a working driver
        ('echo "No devices found."', {}, False),
        (GPU_LIST, {}, True),
        (None, {"EINKERN_CUDA": "1"}, True),  # asked for
        (GPU_LIST, {"EINKERN_CUDA": "0"}, False),  # declined
    ],
)
def test_cuda_wheels_only_where_a_gpu_is_usable_or_asked_for(tmp_path, nvidia_smi, env, cuda):
    commands, said = plan(tmp_path, nvidia_smi, **env)
    assert commands[0] == "python3 -m venv .venv"
    install = ".venv/bin/pip install -q -e " + (".[cuda]" if cuda else ".")
    assert commands[1] == install
    assert ("with the CUDA backend" in said) == cuda
    run = commands[2].split()
    assert run[:2] == [".venv/bin/einkern", "run"]
    assert "examples/local_grad3.ein" in run and "examples/fousek_function1.mapped" in run
    c_examples = {f"examples/{p.name}" for p in (SCRIPT.parent.parent / "examples").glob("*.c")}
    assert "examples/threemm.c" in c_examples and c_examples <= set(run)  # the loop nests too
    assert run[-4:] == ["--repeat", "3", "--repeat", "5"]  # the caller's arguments last
    assert "--check" in run


def test_the_main_jobs_examples_stay_small_at_their_default_sizes():
    """Command 1 runs every example at its default sizes within ~2 GB of memory: the
    tensors of each example take at most 256 MiB (the run holds them about three
    times over: inputs, outputs, reference).  The large sizes live in the
    benchmark suites, which give their extents explicitly."""
    import einkern

    examples = Path(__file__).resolve().parent.parent / "examples"
    paths = [p for p in sorted(examples.iterdir()) if p.suffix in (".ein", ".tensor", ".mapped")]
    assert len(paths) >= 14
    for path in paths:
        problem = einkern.make_problem(einkern.load(path), {})
        total = sum(problem.nbytes(t.name) for t in problem.program.tensors)
        assert total <= 256 * 2**20, (path.name, total)
