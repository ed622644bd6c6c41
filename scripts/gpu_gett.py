"""Issue 11's failure-mode shapes on the GPU: einkern's default (the cost model's
choice), the rule table's proposal and the model's next GETT points, against
torch.einsum (and cuTENSOR through cupyx when it loads).

    PYTHONPATH=src python scripts/gpu_gett.py --out DIR [--runs 15] [--points 2]

Every time is the median of ``runs`` CUDA-event timings on device-resident
tensors, the L2 flushed before each (einkern.bench.cuda_device).  The DRAM floor
is the bytes of the tensors read and written once at the copy bandwidth measured
in the same run; the SIMT peak is torch.matmul's (cuBLAS, TF32 off) at n = 8192.
Every einkern result is checked against torch.einsum.  DIR gets results.json and
gett_measurements.jsonl (calibration lines for einkern.gpu.calibration: program,
sizes, config, predicted, measured).  The table is printed last.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import einkern
from einkern.bench.cuda_device import CudaDevice
from einkern.gpu import gett
from einkern.gpu.decision import choose, explain
from einkern.gpu.model import predicted_time
from einkern.gpu.space import config_to_mapping
from einkern.ir.task import statement_task

SIX = {"a": 24, "b": 16, "c": 20, "d": 16, "e": 24, "f": 20, "k": 16}

# name: (einsum text of the product, extents, dtype, layout)
CASES = {
    "six-1": ("abcdef=akbc*dekf", SIX, "float64", "row"),
    "six-2": ("abcdef=kfca*bekd", SIX, "float64", "row"),
    "six-3": ("abcdef=ekac*bfdk", SIX, "float64", "row"),
    "six-col": ("abcdef=akbc*dekf", SIX, "float64", "column"),
    "long-reduction": ("ij=ki*kj", {"i": 32, "j": 32, "k": 100_000}, "float64", "row"),
    "two-contracted": ("abcd=akbl*lckd", dict.fromkeys("abcdkl", 70), "float64", "row"),
    "sgemm-256": ("ij=ik*kj", {"i": 256, "j": 256, "k": 256}, "float32", "row"),
    "sgemm-1024": ("ij=ik*kj", {"i": 1024, "j": 1024, "k": 1024}, "float32", "row"),
    "sgemm-4096": ("ij=ik*kj", {"i": 4096, "j": 4096, "k": 4096}, "float32", "row"),
}


# Held-out fp64 contractions for the tensor-core default (docs/tensor_cores.md):
# shapes the MMA model was not calibrated on (it used DGEMM 2048/4096).
HELD_OUT = {
    "dgemm-1000": ("ij=ik*kj", dict.fromkeys("ijk", 1000), "float64", "row"),
    "dgemm-1536c": ("ij=ik*kj", dict.fromkeys("ijk", 1536), "float64", "column"),
    "dgemm-3000x700": ("ij=ik*kj", {"i": 3000, "j": 2000, "k": 700}, "float64", "row"),
    "batched-512": ("zij=zik*zkj", {"z": 16, "i": 512, "j": 512, "k": 512}, "float64", "row"),
    "abkl,klcd-48": ("abcd=abkl*klcd", dict.fromkeys("abcdkl", 48), "float64", "row"),
    "akbl,cldk-64": ("abcd=akbl*cldk", dict.fromkeys("abcdkl", 64), "float64", "row"),
    "aebf,fced-40c": ("abcd=aebf*fced", dict.fromkeys("abcdef", 40), "float64", "column"),
    "panel-4096x64": ("ij=ik*kj", {"i": 4096, "j": 64, "k": 64}, "float64", "row"),
}


def program_text(spec: str, sizes: dict[str, int], dtype: str, layout: str) -> str:
    output, product = spec.split("=")
    a, b = product.split("*")
    dims = ", ".join(f"{i} = {n}" for i, n in sizes.items())
    return (
        f"dims {dims}\ndtype {dtype}\nlayout {layout}\n"
        f"tensor C[{', '.join(output)}], A[{', '.join(a)}], B[{', '.join(b)}]\n"
        f"C[{','.join(output)}] = A[{','.join(a)}] * B[{','.join(b)}]\n"
    )


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default="gett-out")
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--points", type=int, default=2, help="further GETT points per case")
    parser.add_argument("--held-out", action="store_true", help="also the HELD_OUT fp64 cases")
    parser.add_argument("--only", default="", help="comma-separated case names")
    args = parser.parse_args()
    cases = {**CASES, **(HELD_OUT if args.held_out else {})}
    if args.only:
        cases = {k: v for k, v in cases.items() if k in args.only.split(",")}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    device = CudaDevice()
    torch = device.torch
    started = time.time()
    bandwidth = device.bandwidth(1 << 30)
    peak = {
        "float64": 2 * 8192**3 / device._matmul_time(8192, torch.float64),
        "float32": 2 * 8192**3 / device._matmul_time(8192, torch.float32),
    }
    cutensor = None
    try:
        import cupy
        from cupyx import cutensor as cutensor_module

        cutensor = (cupy, cutensor_module)
    except Exception:  # noqa: BLE001 - optional peer
        cutensor = None
    results = []
    lines = []
    for name, (spec, sizes, dtype, layout) in cases.items():
        text = program_text(spec, sizes, dtype, layout)
        problem = einkern.make_problem(einkern.load(text), {})
        task = statement_task(problem, 0)
        chosen = choose(task).config
        variants = [("default", chosen)]
        rules = explain(task).config
        if rules != chosen:
            variants.append(("rules", rules))
        for number, point in enumerate(gett.best_points(task, count=args.points + 1)):
            if point not in (chosen, rules) and len(variants) < 2 + args.points:
                variants.append((f"gett{number}", point))
        arrays = device.random_inputs(problem, seed=0)
        output = spec.split("=")[0]
        a_idx, b_idx = spec.split("=")[1].split("*")
        expression = f"{a_idx},{b_idx}->{output}"
        reference = torch.einsum(expression, arrays["A"], arrays["B"])
        a_array, b_array = arrays["A"], arrays["B"]
        peer = device.median_time(
            lambda e=expression, x=a_array, y=b_array: torch.einsum(e, x, y), args.runs
        )
        cut = None
        if cutensor is not None:
            try:
                cupy, module = cutensor
                ca, cb = cupy.asarray(arrays["A"]), cupy.asarray(arrays["B"])
                cc = cupy.empty(tuple(sizes[i] for i in output), dtype=ca.dtype)
                modes = (tuple(a_idx), tuple(b_idx), tuple(output))
                cut = device.median_time(
                    lambda m=module, x=ca, y=cb, z=cc, o=modes: m.contraction(
                        1.0, x, o[0], y, o[1], 0.0, z, o[2]
                    ),
                    args.runs,
                )
            except Exception as error:  # noqa: BLE001
                cut = None
                print(f"{name}: cuTENSOR failed: {error}")
        floor_bytes = sum(problem.nbytes(t.name) for t in problem.program.tensors)
        floor = floor_bytes / bandwidth
        flops = 2  # one multiply-add per point of the iteration space
        for index in set(spec.replace("=", "").replace("*", "")):
            flops *= sizes[index]
        compute = flops / peak[dtype]
        for label, config in variants:
            try:
                kernel = einkern.compile(text, backend="cuda", mappings={0: config})
                result = device.empty(problem.shape("C"), dtype, layout)
                kernel(A=arrays["A"], B=arrays["B"], C=result)
                error = device.relative_error(result, reference)
                seconds = device.median_time(
                    lambda k=kernel, r=result, x=a_array, y=b_array: k(A=x, B=y, C=r),
                    args.runs,
                )
            except Exception as failure:  # noqa: BLE001 - report and go on
                print(f"{name} {label}: failed: {failure}")
                continue
            predicted = predicted_time(task, config_to_mapping(task, config))
            row = {
                "case": name,
                "variant": label,
                "family": "mma"
                if config.mma is not None
                else "gett"
                if config.gett is not None
                else "rules",
                "ms": seconds * 1e3,
                "torch_ms": peer * 1e3,
                "cutensor_ms": None if cut is None else cut * 1e3,
                "floor_pct": 100 * floor / seconds,
                "peak_pct": 100 * compute / seconds,
                "predicted_ms": predicted * 1e3,
                "error": error,
            }
            results.append(row)
            lines.append(
                {
                    "case": name,
                    "program": text,
                    "sizes": {},
                    "position": 0,
                    "config": config.to_json(),
                    "predicted": predicted,
                    "measured": seconds,
                }
            )
        if time.time() - started > 250:
            print("time budget spent: stopping early")
            break
    (out / "results.json").write_text(json.dumps(results, indent=1))
    (out / "gett_measurements.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    print(
        f"{device.describe()}; copy {bandwidth / 1e12:.2f} TB/s; cuBLAS peak fp64 "
        f"{peak['float64'] / 1e12:.1f}, fp32 {peak['float32'] / 1e12:.1f} TFLOP/s"
    )
    print(
        f"{'case':15s} {'variant':8s} {'family':6s} {'ms':>9s} {'torch':>9s} {'cuTENSOR':>9s} "
        f"{'%floor':>7s} {'%peak':>6s} {'pred':>8s} {'error':>8s}"
    )
    for r in results:
        cut = f"{r['cutensor_ms']:9.3f}" if r["cutensor_ms"] is not None else f"{'-':>9s}"
        print(
            f"{r['case']:15s} {r['variant']:8s} {r['family']:6s} {r['ms']:9.3f} "
            f"{r['torch_ms']:9.3f} {cut} {r['floor_pct']:7.1f} {r['peak_pct']:6.1f} "
            f"{r['predicted_ms']:8.3f} {r['error']:8.1e}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
