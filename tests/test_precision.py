"""``precision=`` (compile, einsum, the CLI): float32 contractions on tf32 or
3xTF32 tensor cores where the model says they win; fp32 stays today's SIMT
kernels; the tolerance follows the precision.  ``-m gpu``: on the GPU."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from conftest import problem_of

import einkern
from einkern.api import with_precision
from einkern.backends.verify import emulate_problem
from einkern.errors import ArgumentError
from einkern.gpu.config import CudaConfig
from einkern.gpu.decision import choose
from einkern.gpu.mma_model import TF32_TILES, mma_candidates
from einkern.gpu.space import config_to_mapping
from einkern.ir.bind import make_problem
from einkern.ir.task import statement_task
from einkern.reference import evaluate, relative_error
from einkern.semantics import TF32_TOLERANCE, tolerance
from einkern.testing import output_tolerance, random_arrays, random_scalars

GEMM = "dims n = {n}\ndtype float32\ntensor A[n,n], B[n,n], C[n,n]\nC[i,j] = A[i,k] * B[k,j]\n"


def _task(n: int, precision: str):
    program = with_precision(einkern.load(GEMM.format(n=n)), precision)
    return statement_task(make_problem(program, {}), 0)


@pytest.mark.parametrize("bad", ["bf16", "FP32", None, 32])
def test_unknown_precisions_are_typed_errors(bad):
    with pytest.raises(ArgumentError, match="precision must be one of"):
        einkern.compile(GEMM.format(n=8), backend="cpu", precision=bad)
    with pytest.raises(ArgumentError):
        einkern.einsum("ij,jk->ik", np.ones((2, 2)), np.ones((2, 2)), backend="cpu", precision=bad)


def test_fp32_keeps_the_simt_kernels_and_tf32_allows_tensor_cores():
    assert choose(_task(1024, "fp32")).config.mma is None
    tf32 = choose(_task(1024, "tf32")).config.mma
    # on sm_90 (the H100 limits) the warpgroup tiles; mma.sync tf32 elsewhere
    assert tf32 is not None and tf32.shape == "wgmma_k8_tf32" and not tf32.split
    # 3xTF32 on the warpgroup MMA (H100: SGEMM 4096 at ~70 TFLOP/s against ~48 for
    # fp32); on sm_80 the mma.sync one runs at a third of its tf32 rate, below the
    # SIMT units' fp32, so it is allowed there but not chosen
    split = choose(_task(2048, "3xtf32")).config.mma
    assert split is not None and split.shape == "wgmma_k8_tf32" and split.split
    assert not any(
        t.shape.startswith("wgmma") for t in mma_candidates(_task(2048, "3xtf32"), arch="sm_80")
    )


def test_the_tolerance_follows_the_precision():
    assert tolerance("float32", "tf32") == TF32_TOLERANCE
    assert tolerance("float32", "3xtf32") == tolerance("float32") == 1e-5
    assert tolerance("float64", "tf32") == 1e-12  # float64 is never computed in tf32
    assert output_tolerance(_task(8, "tf32").problem, "C") == TF32_TOLERANCE


@pytest.mark.parametrize("split", [False, True])
@pytest.mark.parametrize("tile", range(len(TF32_TILES)))
def test_tf32_tiles_through_the_runtime_plan(tile, split):
    """The decision's tf32 tiles on extents they do not divide, emulated: tf32 is
    visibly coarser than fp32 and within its tolerance; 3xTF32 is within fp32's."""
    text = (
        "dims m = 70, n = 45, k = 40\ndtype float32\ntensor A[k,m], B[k,n], C[m,n]\n"
        "scalar alpha\nC[i,j] += alpha * A[l,i] * B[l,j]\n"
    )
    precision = "3xtf32" if split else "tf32"
    problem = make_problem(with_precision(einkern.load(text), precision), {})
    task = statement_task(problem, 0)
    config = CudaConfig(x="", mma=dataclasses.replace(TF32_TILES[tile], split=split))
    arrays = random_arrays(problem, 11)
    scalars = random_scalars(problem, 11)
    got, errors, bad = emulate_problem(
        problem, {0: config_to_mapping(task, config)}, arrays, scalars
    )
    wide = {k: v.astype(np.float64) for k, v in arrays.items()}
    want = evaluate(problem, wide, scalars)["C"]
    error = relative_error(got["C"].astype(np.float64), want)
    assert bad == 0 and not errors
    if split:
        assert error <= 1e-5
    else:
        assert 1e-5 < error <= TF32_TOLERANCE


def test_the_cpu_backend_computes_in_fp32_whatever_the_precision():
    kernel = einkern.compile(GEMM.format(n=48), backend="cpu", precision="tf32")
    problem = kernel.problem
    arrays = random_arrays(problem, 2)
    want = evaluate(problem, {k: v.astype(np.float64) for k, v in arrays.items()}, {})["C"]
    out = np.zeros_like(arrays["C"])
    kernel(A=arrays["A"], B=arrays["B"], C=out)
    assert relative_error(out.astype(np.float64), want) <= 1e-5


def test_einsum_passes_the_precision_to_its_kernels():
    a = np.ones((4, 3), dtype=np.float32)
    plan = einkern.einsum_plan("ij,jk->ik", a, a.T.copy(), backend="cpu", precision="3xtf32")
    assert all(step.kernel.problem.program.precision == "3xtf32" for step in plan.steps)


def test_the_cli_takes_a_precision(tmp_path, capsys):
    from einkern.cli import main

    path = tmp_path / "sgemm.ein"
    path.write_text(GEMM.format(n=1024))
    assert main(["emit", str(path), "-b", "cuda", "--explain", "--precision", "tf32"]) == 0
    assert "wgmma_k8_tf32 tensor cores" in capsys.readouterr().out
    assert main(["emit", str(path), "-b", "cuda", "--precision", "bf16"]) == 2
    assert "invalid choice" in capsys.readouterr().err


@pytest.mark.gpu
@pytest.mark.parametrize(("precision", "n"), [("tf32", 1024), ("3xtf32", 512)])
def test_reduced_precision_kernels_on_the_gpu(precision, n):
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    split = CudaConfig(x="", mma=dataclasses.replace(TF32_TILES[2], split=True))
    mappings = {0: split.to_json()} if precision == "3xtf32" else None
    kernel = einkern.compile(
        GEMM.format(n=n), backend="cuda", precision=precision, mappings=mappings
    )
    assert "tf32" in kernel.source()
    problem = kernel.problem
    arrays = random_arrays(problem, 9)
    want = evaluate(problem, {k: v.astype(np.float64) for k, v in arrays.items()}, {})["C"]
    device = {k: torch.from_numpy(v).cuda() for k, v in arrays.items()}
    kernel(**device)
    torch.cuda.synchronize()
    error = relative_error(device["C"].cpu().numpy().astype(np.float64), want)
    assert error <= output_tolerance(problem, "C")
    if precision == "tf32":
        assert error > 1e-6  # really computed in tf32


def test_problem_of_keeps_fp32():
    assert problem_of(GEMM.format(n=4)).program.precision == "fp32"
