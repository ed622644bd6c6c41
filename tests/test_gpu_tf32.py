"""tf32 and 3xTF32 warpgroup-MMA kernels (``wgmma_k8_tf32``) on the GPU: every
tile the tuner offers under ``precision="tf32"`` and ``"3xtf32"``, on operands
K-major (shared-memory A), with A not K-major (A from registers), exchanged (B
not K-major), batched and with index groups, at edges; each called twice on
fresh arrays (3xTF32 within fp32's tolerance).  3xTF32's error on a long
reduction is within twice torch's fp32 one (cuBLAS, TF32 off)."""

from __future__ import annotations

import pytest

import einkern
from einkern.api import with_precision
from einkern.gpu.mma_model import mma_candidates
from einkern.ir.bind import make_problem
from einkern.ir.task import statement_task
from einkern.testing import assert_matches_reference

pytestmark = pytest.mark.gpu

PROGRAMS = {
    "nt 1000": "dims m = 1000, n = 1032, k = 520\ntensor A[m,k], B[n,k], C[m,n]\n"
    "C[i,j] = A[i,k] * B[j,k]\n",
    "nn 1000 (exchanged)": "dims m = 1000, n = 1024, k = 776\ntensor A[m,k], B[k,n], C[m,n]\n"
    "C[i,j] = A[i,k] * B[k,j]\n",
    "tn (A from registers)": "dims m = 512, n = 392, k = 600\ntensor A[k,m], B[n,k], C[m,n]\n"
    "C[i,j] += A[k,i] * B[j,k]\n",
    "column 520": "layout column\ndims m = 520, n = 640, k = 512\n"
    "tensor A[m,k], B[k,n], C[m,n]\nC[i,j] = A[i,k] * B[k,j]\n",
    "batched": "dims b = 3, m = 200, n = 256, k = 512\ntensor A[b,m,k], B[b,k,n], C[b,m,n]\n"
    "C[b,i,j] = A[b,i,k] * B[b,k,j]\n",
    "index groups": "dims a = 40, b = 16, c = 24, d = 64, k = 6, l = 64\n"
    "tensor A[a,k,b,l], B[c,d,k,l], C[a,b,c,d]\nC[a,b,c,d] = A[a,k,b,l] * B[c,d,k,l]\n",
}


def tf32(text: str) -> str:
    return "dtype float32\n" + text


@pytest.mark.parametrize("precision", ["tf32", "3xtf32"])
@pytest.mark.parametrize("case", sorted(PROGRAMS))
def test_every_tf32_warpgroup_tile_matches_the_reference(case, precision):
    text = tf32(PROGRAMS[case])
    problem = make_problem(with_precision(einkern.load(text), precision), {})
    tiles = [
        t
        for t in mma_candidates(statement_task(problem, 0), tuning=True)
        if t.shape.startswith("wgmma")
    ]
    assert tiles
    for tile in tiles:
        mappings = {0: {"x": "", "mma": tile.values()}}
        kernel = einkern.compile(text, backend="cuda", mappings=mappings, precision=precision)
        assert "wgmma.mma_async.sync.aligned" in kernel.source() and ".tf32.tf32" in kernel.source()
        assert_matches_reference(kernel, seed=12)
        assert_matches_reference(kernel, seed=13)


def test_3xtf32_is_as_accurate_as_cublas_fp32():
    torch = pytest.importorskip("torch")
    n = 4096
    text = tf32(f"dims m = {n}, n = {n}, k = {n}\ntensor A[m,k], B[k,n], C[m,n]\n")
    kernel = einkern.compile(text + "C[i,j] = A[i,k] * B[k,j]\n", backend="cuda",
                             precision="3xtf32")  # fmt: skip
    assert "wgmma.mma_async" in kernel.source()
    torch.backends.cuda.matmul.allow_tf32 = False
    generator = torch.Generator(device="cuda").manual_seed(4)
    for a, b in (
        [torch.rand(n, n, device="cuda", generator=generator) + 0.5 for _ in range(2)],
        [torch.randn(n, n, device="cuda", generator=generator) for _ in range(2)],
    ):
        exact = a.double() @ b.double()
        c = torch.empty(n, n, device="cuda")
        kernel(A=a, B=b, C=c)
        ours, cublas = (float((x.double() - exact).abs().max()) for x in (c, a @ b))
        assert ours <= 2 * cublas, (ours, cublas)
