"""Rewritten programs on a GPU (docs/rewrites.md): split-K, TTGT and products split
pairwise run with their temporaries and views on the CUDA backend, from device
and host arrays, on a side stream and inside a captured CUDA graph.  Selected only
with ``pytest -m gpu`` (collected, not run, elsewhere)."""

from __future__ import annotations

import numpy as np
import pytest

import einkern
from einkern.api import Kernel
from einkern.backends import get_backend
from einkern.ir.bind import make_problem
from einkern.ir.rewrite import split_products
from einkern.ir.rewrite_k import split_k
from einkern.ir.rewrite_plan import RewritePlan
from einkern.ir.rewrite_ttgt import ttgt
from einkern.testing import assert_matches_reference

pytestmark = pytest.mark.gpu

LONG = "dims m=64, n=64, k={k}\ntensor A[m,k], B[k,m], C[m,m]\nC[i,j] += A[i,k]*B[k,j]\n"
PERMUTED = (
    "dims a=24, b=20, c=16, d=22, e=18\nlayout column\n"
    "tensor A[a,e,b,d], B[d,c,e], C[c,b,a]\nC[c,b,a] -= A[a,e,b,d]*B[d,c,e]\n"
)
CHAIN = "dims n=96\ntensor A[n,n], B[n,n], C[n,n], D[n,n]\nD[i,l] = A[i,j]*B[j,k]*C[k,l]\n"


@pytest.fixture(scope="module")
def torch():
    torch = pytest.importorskip("torch")
    assert torch.cuda.is_available(), "these tests need a CUDA build of torch and a GPU"
    return torch


def forced(text: str, rewrite) -> Kernel:
    problem = make_problem(einkern.load(text), {})
    done = rewrite(problem)
    plan = RewritePlan(problem, done.problem, (done,), (done.reason,))
    return Kernel(problem, get_backend("cuda"), plan=plan)


@pytest.mark.parametrize(
    ("text", "rewrite"),
    [
        (LONG.format(k=40_000), lambda p: split_k(p, 0, 16)),
        (LONG.format(k=40_003), lambda p: split_k(p, 0, 16)),  # padded copies
        (PERMUTED, lambda p: ttgt(p, 0)),
        (CHAIN, lambda p: split_products(p, 0)),
    ],
)
def test_rewritten_kernels_on_host_arrays(text, rewrite) -> None:
    kernel = forced(text, rewrite)
    assert kernel.compiled.program.temporaries
    assert_matches_reference(kernel)


def test_default_plan_splits_a_long_reduction(torch) -> None:
    kernel = einkern.compile(LONG.format(k=200_000), backend="cuda")
    assert [r.name for r in kernel.rewrites.rewrites] == ["split_k"]
    a = torch.rand(64, 200_000, dtype=torch.float64, device="cuda")
    b = torch.rand(200_000, 64, dtype=torch.float64, device="cuda")
    c = torch.rand(64, 64, dtype=torch.float64, device="cuda")
    want = c + a @ b
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        kernel(a, b, c)
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    assert float((c - want).abs().max() / want.abs().max()) <= 1e-12


def test_rewrite_temporaries_inside_a_captured_graph(torch) -> None:
    kernel = forced(PERMUTED, lambda p: ttgt(p, 0))
    rng = np.random.default_rng(0)
    host = {n: np.asfortranarray(rng.random(kernel.problem.shape(n))) for n in ("A", "B", "C")}
    expected = einkern.evaluate(kernel.problem, host, {})["C"]
    device = {n: torch.from_numpy(a).cuda() for n, a in host.items()}
    static = {
        n: torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device="cuda")
        for n, t in device.items()
    }
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for name in static:
            static[name].copy_(device[name])
        kernel(**static)  # warm-up (the copy of C is refreshed below)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        kernel(**static)
    for name in static:
        static[name].copy_(device[name])
    graph.replay()
    torch.cuda.synchronize()
    got = static["C"].cpu().numpy()
    assert float(np.abs(got - expected).max() / np.abs(expected).max()) <= 1e-12


def test_a_long_dot_product_is_split() -> None:
    kernel = einkern.compile(
        "dims k=1000000\ntensor x[k], y[k], d[]\nd[] = x[k]*y[k]\n", backend="cuda"
    )
    assert [r.name for r in kernel.rewrites.rewrites] == ["split_k"]
    assert_matches_reference(kernel)
