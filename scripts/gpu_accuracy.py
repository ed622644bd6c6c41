"""GPU time and error of float32 reductions under each accumulation (plain, blocked,
wide), for choosing the accurate-sums rule's defaults (docs/accuracy.md).

    python scripts/gpu_accuracy.py [--runs 30] [--out DIR]

For each case the decision's mapping is taken and only ``accumulate`` changed;
each variant is timed with CUDA events, L2 flushed before every run
(einkern.bench.cuda_device.CudaEventTimer), median of ``runs`` after a warm-up;
its error is max |result - reference| / max |reference| against torch.einsum in
float64 on the same float32 inputs.  "blocked" only changes staged mappings (it
splits at k-step chunks); on an unstaged one it is plain.  Prints a table and
writes it, with the mappings, as JSON under ``--out``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import time
from pathlib import Path

import einkern
from einkern.bench.cuda_device import CudaDevice
from einkern.gpu.decision import decide
from einkern.ir.task import statement_task

MODES = ("plain", "blocked", "wide")

#: name -> (program text, einsum subscripts of the statement in operand order)
CASES = {
    "sgemm 1024": (
        "dims m = 1024, n = 1024, k = 1024\ntensor A[m, k], B[k, n], C[m, n]\n"
        "C[i,j] = A[i,l] * B[l,j]",
        "il,lj->ij",
    ),
    "sgemm 4096": (
        "dims m = 4096, n = 4096, k = 4096\ntensor A[m, k], B[k, n], C[m, n]\n"
        "C[i,j] = A[i,l] * B[l,j]",
        "il,lj->ij",
    ),
    "gemv 64 x 2^20 (row)": (
        "dims m = 64, n = 1048576\ntensor A[m, n], x[n], y[m]\ny[i] = A[i,k] * x[k]",
        "ik,k->i",
    ),
    "A^T x, 2^20 x 64": (
        "dims m = 64, n = 1048576\ntensor A[n, m], x[n], y[m]\ny[i] = A[k,i] * x[k]",
        "ki,k->i",
    ),
    "small output, k = 2^20": (
        "dims m = 32, k = 1048576\ntensor A[m, k], B[k, m], C[m, m]\nC[i,j] = A[i,l] * B[l,j]",
        "il,lj->ij",
    ),
    "einsum abcd,cdef->abef 32": (
        "dims n = 32\ntensor A[n, n, n, n], B[n, n, n, n], C[n, n, n, n]\n"
        "C[a,b,e,f] = A[a,b,c,d] * B[c,d,e,f]",
        "abcd,cdef->abef",
    ),
    "einsum sd_t_d1_1 fp32 T=16": (
        "dims T = 16\ntensor t3[T, T, T, T, T, T], t2[T, T, T, T], v2[T, T, T, T]\n"
        "t3[h3,h2,h1,p6,p5,p4] -= t2[h7,p4,p5,h1] * v2[h3,h2,p6,h7]",
        None,
    ),
}


def run_case(device: CudaDevice, name: str, text: str, subscripts: str | None, runs: int):
    torch = device.torch
    program = einkern.load(f"program p\ndtype float32\n{text}")
    problem = einkern.make_problem(program, {})
    task = statement_task(problem, 0)
    base = decide(task)
    arrays = device.random_inputs(problem, seed=0)
    statement = problem.program.statements[0]
    for tensor in problem.program.tensors:
        if tensor.name not in arrays:
            arrays[tensor.name] = device.empty(
                problem.shape(tensor.name), tensor.dtype, tensor.layout
            )
    reference = None
    if subscripts is not None and statement.op == "=":
        operands = [arrays[a.tensor].double() for a in statement.reads()]
        reference = torch.einsum(subscripts, *operands)
    rows = []
    for mode in MODES:
        mapping = dataclasses.replace(base, accumulate=mode)
        kernel = einkern.compile(program, backend="cuda", mappings={0: mapping})
        kernel(**arrays)  # warm-up (and the result for the error)
        torch.cuda.synchronize()
        result = arrays[statement.output.tensor]
        error = float(device.relative_error(result, reference)) if reference is not None else None
        times = device.timer.time(lambda kernel=kernel: kernel(**arrays), runs)
        rows.append(
            {
                "case": name,
                "mode": mode,
                "chosen": mode == base.accumulate,
                "strategy": base.strategy,
                "median_us": statistics.median(times) * 1e6,
                "error": error,
                "mapping": json.loads(mapping.to_json()),
            }
        )
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--out", default=".")
    parser.add_argument("--only", default="", help="substring of the case names to run")
    parser.add_argument(
        "--budget", type=float, default=200, help="seconds; later cases are skipped past it"
    )
    args = parser.parse_args()
    device = CudaDevice()
    print(device.describe(), flush=True)
    rows = []
    started = time.monotonic()
    for name, (text, subscripts) in CASES.items():
        if args.only and args.only not in name:
            continue
        if time.monotonic() - started > args.budget:
            print(f"{name}: skipped (past the {args.budget:.0f} s budget)", flush=True)
            continue
        try:
            found = run_case(device, name, text, subscripts, args.runs)
        except Exception as error:  # noqa: BLE001 - report it and go on with the others
            print(f"{name}: {type(error).__name__}: {error}", flush=True)
            continue
        rows += found
        for row in found:
            print(json.dumps({k: v for k, v in row.items() if k != "mapping"}), flush=True)
    Path(args.out).mkdir(parents=True, exist_ok=True)
    (Path(args.out) / "gpu_accuracy.json").write_text(json.dumps(rows, indent=1))
    print(
        "\n| case | strategy | rule's choice | plain us | blocked us | wide us |"
        " plain err | blocked err | wide err |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for name in dict.fromkeys(row["case"] for row in rows):
        mine = {row["mode"]: row for row in rows if row["case"] == name}
        chosen = next(mode for mode, row in mine.items() if row["chosen"])
        errors = [mine[m]["error"] for m in MODES]
        print(
            f"| {name} | {mine['plain']['strategy']} | {chosen} | "
            + " | ".join(f"{mine[m]['median_us']:.1f}" for m in MODES)
            + " | "
            + " | ".join("-" if e is None else f"{e:.1e}" for e in errors)
            + " |"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
