"""GPU measurements for the program rewrites (issue 11, items 2 and 5; run by
scripts/gpu_rewrite.sh): einkern's transpose kernel against a copy, a long
reduction with and without split-K, TTGT against the direct kernel, each against
torch.einsum (or torch's permute-copy); every einkern result checked against
torch.  Times: CUDA events, L2 flushed, median.  Prints one table last."""

from __future__ import annotations

import json
import os
import statistics
import sys
from functools import partial

import torch

import einkern
from einkern.api import Kernel
from einkern.backends import get_backend
from einkern.bench.cuda_device import CudaEventTimer
from einkern.ir.bind import make_problem
from einkern.ir.rewrite_plan import RewritePlan
from einkern.ir.rewrite_ttgt import ttgt

OUT = os.environ.get("OUT", "/tmp/out")
RUNS = 10
torch.backends.cuda.matmul.allow_tf32 = False
TIMER = CudaEventTimer(torch, 256 << 20)
DT = {"float32": torch.float32, "float64": torch.float64}
ROWS: list[dict] = []


def median(fn) -> float:
    fn()
    torch.cuda.synchronize()
    return statistics.median(TIMER.time(fn, RUNS))


def dense(shape, dtype, layout="row"):
    t = torch.rand(*(shape if layout == "row" else shape[::-1]), dtype=DT[dtype], device="cuda")
    return t if layout == "row" else t.permute(*range(len(shape) - 1, -1, -1))


def row(case, what, seconds, nbytes, flops=0, reference=None, error=None):
    ROWS.append(
        dict(
            case=case,
            what=what,
            ms=seconds * 1e3,
            gbs=nbytes / seconds / 1e9,
            gflops=flops / seconds / 1e9,
            vs=None if reference is None else reference / seconds,
            error=error,
        )
    )
    print(json.dumps(ROWS[-1]), flush=True)


def relerr(a, b) -> float:
    return float((a.double() - b.double()).abs().max() / b.double().abs().max())


def transposes() -> None:
    cases = [
        (
            "2d 8192² ji",
            "dims n=8192, m=8192\ntensor A[n,m], B[m,n] {d}\nB[j,i] = A[i,j]\n",
            (8192, 8192),
            (1, 0),
        ),
        (
            "3d 512²·64 cba",
            "dims a=512, b=512, c=64\ntensor A[a,b,c], B[c,b,a] {d}\nB[c,b,a] = A[a,b,c]\n",
            (512, 512, 64),
            (2, 1, 0),
        ),
        (
            "4d 64⁴ dcab",
            "dims n=64\ntensor A[n,n,n,n], B[n,n,n,n] {d}\nB[d,c,a,b] = A[a,b,c,d]\n",
            (64,) * 4,
            (3, 2, 0, 1),
        ),
        (
            "6d 16⁶ fedcba",
            "dims n=16\ntensor A[n,n,n,n,n,n], B[n,n,n,n,n,n] {d}\n"
            "B[f,e,d,c,b,a] = A[a,b,c,d,e,f]\n",
            (16,) * 6,
            (5, 4, 3, 2, 1, 0),
        ),
    ]
    for dtype in ("float32", "float64"):
        for name, text, shape, perm in cases:
            kernel = einkern.compile(text.format(d=dtype), backend="cuda")
            a = dense(shape, dtype)
            b = torch.empty(tuple(shape[p] for p in perm), dtype=DT[dtype], device="cuda")
            nbytes = 2 * a.numel() * a.element_size()
            copy = torch.empty_like(a)
            t_copy = median(partial(copy.copy_, a))
            t_torch = median(partial(torch.Tensor.copy_, b, a.permute(*perm)))
            t_ek = median(partial(kernel, a, B=b))
            err = relerr(b, a.permute(*perm))
            case = f"transpose {name} {dtype}"
            row(case, "copy (torch)", t_copy, nbytes)
            row(case, "torch permute", t_torch, nbytes, reference=t_copy)
            row(case, "einkern", t_ek, nbytes, reference=t_copy, error=err)


def long_reduction() -> None:
    for dtype, k in (("float64", 400_000), ("float32", 800_000)):
        text = (
            f"dims m=64, n=64, k={k}\ntensor A[m,k], B[k,n], C[m,n] {dtype}\n"
            "C[i,j] = A[i,k]*B[k,j]\n"
        )
        a, b = dense((64, k), dtype), dense((k, 64), dtype)
        expected = torch.einsum("ik,kj->ij", a, b)
        nbytes = (a.numel() + b.numel()) * a.element_size()
        flops = 2 * 64 * 64 * k
        t_torch = median(partial(torch.einsum, "ik,kj->ij", a, b))
        case = f"split-K 64x64 k={k} {dtype}"
        row(case, "torch.einsum", t_torch, nbytes, flops)
        for label, rewrite in (("einkern direct", False), ("einkern split-K", True)):
            kernel = einkern.compile(text, backend="cuda", rewrite=rewrite)
            out = torch.empty(64, 64, dtype=DT[dtype], device="cuda")
            t = median(partial(kernel, a, b, C=out))
            note = "; ".join(kernel.rewrites.notes)
            row(case, label, t, nbytes, flops, reference=t_torch, error=relerr(out, expected))
            with open(f"{OUT}/rewrite_notes.txt", "a") as notes:
                notes.write(f"{case} {label}: {note}\n")


def forced(problem, rewrite) -> Kernel:
    plan = RewritePlan(problem, rewrite.problem, (rewrite,), (rewrite.reason,))
    return Kernel(problem, get_backend("cuda"), plan=plan)


def ttgt_cases() -> None:
    cases = [
        (
            "abcd=aebf·fced n=48",
            "dims n=48\ntensor A[n,n,n,n], B[n,n,n,n], C[n,n,n,n]\n"
            "C[a,b,c,d] = A[a,e,b,f]*B[f,c,e,d]\n",
            "aebf,fced->abcd",
        ),
        (
            "sd_t_d2_5 (ccsdt_d2 S4) T=16",
            "dims T=16\nlayout column\ntensor t3[T,T,T,T,T,T], t2[T,T,T,T], v2[T,T,T,T]\n"
            "t3[h2,h1,h3,p6,p4,p5] += t2[p7,p4,h1,h2] * v2[p7,h3,p6,p5]\n",
            None,
        ),
    ]
    for name, text, subscripts in cases:
        problem = make_problem(einkern.load(text), {})
        program = problem.program
        arrays = {}
        for tensor in program.tensors:
            arrays[tensor.name] = dense(problem.shape(tensor.name), "float64", tensor.layout)
        flops = 2 * 48**6 if subscripts else 2 * 16**7
        nbytes = sum(t.numel() * 8 for t in arrays.values())
        kernels = {
            "einkern direct": einkern.compile(text, backend="cuda", rewrite=False),
            "einkern TTGT": forced(problem, ttgt(problem, 0)),
            "einkern default": einkern.compile(text, backend="cuda"),
        }
        out_name = program.statements[0].output.tensor
        results = {}
        for label, kernel in kernels.items():
            work = {k: v.clone() for k, v in arrays.items()}
            kernel(**work)
            results[label] = work[out_name].clone()
            t = median(partial(kernel, **work))
            row(
                f"ttgt {name}",
                label,
                t,
                nbytes,
                flops,
                error=relerr(results[label], results["einkern direct"]),
            )
        if subscripts:
            a, b = arrays["A"], arrays["B"]
            t = median(partial(torch.einsum, subscripts, a, b))
            row(f"ttgt {name}", "torch.einsum", t, nbytes, flops)


def main() -> int:
    os.makedirs(OUT, exist_ok=True)
    for part in (transposes, long_reduction, ttgt_cases):
        try:
            part()
        except Exception as error:  # noqa: BLE001 - report and go on with the next part
            print(f"{part.__name__} failed: {type(error).__name__}: {error}", flush=True)
    with open(f"{OUT}/gpu_rewrite.json", "w") as file:
        json.dump(ROWS, file, indent=1)
    print(f"\n{'case':42} {'what':18} {'ms':>9} {'GB/s':>8} {'GFLOP/s':>9} {'vs ref':>7} error")
    for r in ROWS:
        vs = "" if r["vs"] is None else f"{r['vs']:.2f}"
        err = "" if r["error"] is None else f"{r['error']:.1e}"
        print(
            f"{r['case'][:42]:42} {r['what']:18} {r['ms']:9.3f} {r['gbs']:8.0f} "
            f"{r['gflops']:9.0f} {vs:>7} {err}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
