"""Variants of the BLAS routines' mappings on a GPU, each against its peer in the
same run (CUDA events on GPU work only, L2 flushed, median), every result
checked against torch:

* ``symv``: tiles per block of the reduction tiles
  (``einkern.gpu.affine_reduce.TILES_PER_BLOCK``);
* ``axpy``: bytes of each operand in flight per thread
  (``einkern.gpu.rules.BYTES_IN_FLIGHT``);
* ``gemv``: the default mapping of the loop nest and edits of it (``plain``
  accumulation, other reduction-lane points);
* ``gemm``: the NT product's default mapping and edits of it (padding of the
  staged tiles, k-step 16), the model's best point (``tune="model"``), and NN.

    python scripts/gpu_blas_variants.py [--only symv,axpy,gemv,gemm] [--runs 30]
"""

from __future__ import annotations

import argparse
import copy
import json
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

import einkern
from einkern import blas
from einkern.bench.cuda_device import CudaEventTimer
from einkern.blas import engines
from einkern.errors import EinkernError
from einkern.gpu import affine_reduce, rules

ROWS: list[tuple[str, str, float, float]] = []  # (case, variant, ms, % of floor)


class Bench:
    def __init__(self, runs: int):
        self.timer = CudaEventTimer(torch, 256 << 20)
        self.runs = runs
        big = torch.empty(1 << 30, dtype=torch.uint8, device="cuda")
        self.bandwidth = 2 * big.numel() / self.median(big.clone)
        print(f"copy bandwidth {self.bandwidth / 1e9:.0f} GB/s", flush=True)

    def median(self, fn: Callable[[], Any]) -> float:
        return statistics.median(self.timer.time(fn, self.runs))

    def record(self, case: str, variant: str, fn: Callable[[], Any], floor_bytes: float) -> float:
        seconds = self.median(fn)
        share = 100 * floor_bytes / self.bandwidth / seconds
        ROWS.append((case, variant, seconds * 1e3, share))
        print(f"{case:28} {variant:34} {seconds * 1e3:9.4f} ms {share:6.1f}%", flush=True)
        return seconds


def check(got: Any, expected: Any, what: str, tolerance: float) -> None:
    error = float((got - expected).abs().max() / expected.abs().max())
    if not error <= tolerance:
        raise SystemExit(f"{what}: error {error:.2e} over {tolerance:.0e}")


def symv(bench: Bench, sizes: list[int], runs: list[int], shapes: list[tuple[int, int]]) -> None:
    """``shapes``: (rows, columns) per thread of the reduction tiles."""
    import cupy

    from einkern.bench.routines import ALPHA, _cupy_symv

    for n in sizes:
        for dtype in (torch.float32, torch.float64):
            a = torch.rand((n, n), dtype=dtype, device="cuda") - 0.5
            x = torch.rand(n, dtype=dtype, device="cuda") - 0.5
            expected = (torch.tril(a) + torch.tril(a, -1).T) @ x
            stored = torch.tril(a)
            floor = (n * (n + 1) // 2 + 2 * n) * a.element_size()
            case = f"{str(dtype)[6:]}symv L n={n}"
            # row-major lower storage is column-major upper storage for cuBLAS
            peer = _cupy_symv(
                cupy.from_dlpack(stored), cupy.from_dlpack(x), str(dtype)[6:], lower=True
            )
            check(torch.from_dlpack(peer()["result"]), ALPHA * expected, f"{case} cuBLAS", 1e-3)
            bench.record(case, "cuBLAS (ctypes)", peer, floor)
            same = torch.rand(floor // 4, device="cuda")
            bench.record(case, "torch.sum of the floor's bytes", same.sum, floor)
            for rows, width in shapes:
                for run in runs:
                    affine_reduce.TILES_PER_BLOCK = run
                    affine_reduce.ROWS_PER_THREAD = rows
                    affine_reduce.TILE_ROWS = affine_reduce.WARPS * rows
                    affine_reduce.COLUMNS_PER_THREAD = width
                    engines._compiled.cache_clear()
                    got = blas.symv(1.0, stored, x, lower=True)
                    check(got, expected, case, 1e-4 if dtype == torch.float32 else 1e-10)
                    bench.record(
                        case,
                        f"{rows} rows x {width} columns per thread, {run} tiles/block",
                        lambda s=stored, v=x: blas.symv(1.0, s, v, lower=True),
                        floor,
                    )
    affine_reduce.TILES_PER_BLOCK, affine_reduce.ROWS_PER_THREAD = 1, 8
    affine_reduce.TILE_ROWS, affine_reduce.COLUMNS_PER_THREAD = 64, 2


def axpy(bench: Bench, sizes: list[int], widths: list[int]) -> None:
    for n in sizes:
        for dtype in (torch.float32, torch.float64):
            x = torch.rand(n * n, dtype=dtype, device="cuda")
            y = torch.rand(n * n, dtype=dtype, device="cuda")
            case = f"{str(dtype)[6:]}axpy n={n}²"
            floor = 3 * x.numel() * x.element_size()
            bench.record(case, "torch add", lambda x=x, y=y: torch.add(y, x, alpha=1.5), floor)
            for width in widths:
                rules.BYTES_IN_FLIGHT = width
                engines._compiled.cache_clear()
                check(blas.axpy(1.5, x, y), torch.add(y, x, alpha=1.5), case, 1e-6)
                bench.record(
                    case, f"{width} B/operand/thread", lambda x=x, y=y: blas.axpy(1.5, x, y), floor
                )
    rules.BYTES_IN_FLIGHT = 8


def default_mapping(path: Path, sizes: dict[str, int]) -> dict:
    """The first statement's default mapping, from ``einkern emit --explain``."""
    command = [sys.executable, "-m", "einkern", "emit", str(path), "-b", "cuda", "--explain"]
    for name, value in sizes.items():
        command += ["-e", f"{name}={value}"]
    text = subprocess.run(command, capture_output=True, text=True, check=True).stdout
    for line in text.splitlines():
        if "mapping file: " in line:
            return json.loads(line.split("mapping file: ", 1)[1])
    raise SystemExit(f"no mapping in the explanation of {path}")


def variants_of(
    bench: Bench,
    case: str,
    path: Path,
    sizes: dict[str, int],
    arrays: dict[str, Any],
    expected: Any,
    floor: float,
    edits: dict[str, Callable[[dict], dict | None]],
    tolerance: float,
) -> None:
    base = default_mapping(path, sizes)
    print(f"{case}: default {json.dumps(base)}", flush=True)
    for label, edit in edits.items():
        mapping = edit(copy.deepcopy(base))
        if mapping is None:
            continue
        try:
            if mapping == "model":
                kernel = einkern.compile(path, backend="cuda", tune="model", **sizes)
            else:
                kernel = einkern.compile(path, backend="cuda", mappings={0: mapping}, **sizes)
        except EinkernError as error:
            print(f"{case} {label}: {error}", flush=True)
            continue
        got = kernel(**arrays)
        check(got, expected, f"{case} {label}", tolerance)
        bench.record(case, label, lambda k=kernel: k(**arrays), floor)


def _set(**fields: Any) -> Callable[[dict], dict]:
    def edit(m: dict) -> dict:
        m.update(fields)
        return m

    return edit


def gemv(bench: Bench, sizes: list[int], work: Path) -> None:
    for n in sizes:
        for dtype, ctype in ((torch.float32, "float"), (torch.float64, "double")):
            vector = 16 // (4 if ctype == "float" else 8)
            for trans in (False, True):
                element = "A[j][i]" if trans else "A[i][j]"
                path = work / f"gemv_{ctype}_{'T' if trans else 'N'}.c"
                path.write_text(
                    f"void gemv(int m, {ctype} alpha, {ctype} A[m][m], {ctype} x[m], "
                    f"{ctype} z[m]) {{\n"
                    "  for (int i = 0; i < m; i++) {\n    z[i] = 0;\n"
                    f"    for (int j = 0; j < m; j++) z[i] += alpha * {element} * x[j];\n  }}\n}}\n"
                )
                a = torch.rand((n, n), dtype=dtype, device="cuda") - 0.5
                x = torch.rand(n, dtype=dtype, device="cuda") - 0.5
                expected = 1.5 * ((a.T if trans else a).double() @ x.double()).to(dtype)
                floor = (n * n + 2 * n) * a.element_size()
                case = f"{ctype[0]}gemv {'T' if trans else 'N'} n={n}"
                bench.record(
                    case, "cuBLAS (torch)", lambda a=(a.T if trans else a), x=x: a @ x, floor
                )
                if not trans:
                    same = torch.rand(floor // 4, device="cuda")
                    bench.record(case, "torch.sum of the floor's bytes", same.sum, floor)
                lanes: dict[str, Any] = {"default": lambda m: m}
                if not trans:
                    for tile, threads, run, acc in (
                        (4, 32, vector, 1),
                        (4, 32, vector, 2),
                        (16, 32, vector, 1),
                        (16, 32, vector, 2),
                        (16, 32, vector, 4),
                        (2, 64, 1, 1),
                    ):
                        point = {
                            "strategy": "direct",
                            "parallel": [
                                {
                                    "index": "i",
                                    "tile": tile,
                                    "threads": min(tile, 8),
                                    "cyclic": True,
                                    "chunk": 1,
                                }
                            ],
                            "grid_order": ["i"],
                            "reduction_order": ["j"],
                            "vector_width": vector,
                            "boundary": "exact",
                            "reduction_threads": [["j", threads]],
                            "reduction_fastest": True,
                            "reduction_chunk": run,
                            "accumulators": acc,
                        }
                        label = f"{tile} outputs, {threads} lanes, run {run}, acc {acc}"
                        lanes[label] = lambda m, p=point: {
                            **p,
                            "accumulate": m.get("accumulate", "plain"),
                        }
                variants_of(
                    bench,
                    case,
                    path,
                    {"m": n},
                    {"A": a, "x": x, "alpha": 1.5},
                    expected,
                    floor,
                    lanes,
                    1e-4 if ctype == "float" else 1e-10,
                )


def gemm(bench: Bench, n: int, work: Path) -> None:
    torch.backends.cuda.matmul.allow_tf32 = False
    for name in ("NN", "NT", "TN", "TT"):
        a_decl, a_elem = ("A[k][m]", "A[p][i]") if name[0] == "T" else ("A[m][k]", "A[i][p]")
        b_decl, b_elem = ("B[n][k]", "B[j][p]") if name[1] == "T" else ("B[k][n]", "B[p][j]")
        path = work / f"gemm_{name}.c"
        path.write_text(
            f"void gemm(int m, int n, int k, float alpha, float {a_decl}, float {b_decl}, "
            "float D[m][n]) {\n  for (int i = 0; i < m; i++) {\n"
            "    for (int j = 0; j < n; j++) D[i][j] = 0;\n"
            "    for (int p = 0; p < k; p++)\n      for (int j = 0; j < n; j++)\n"
            f"        D[i][j] += alpha * {a_elem} * {b_elem};\n  }}\n}}\n"
        )
        a = torch.rand((n, n), device="cuda") - 0.5
        b = torch.rand((n, n), device="cuda") - 0.5
        op_a = a.T if name[0] == "T" else a
        op_b = b.T if name[1] == "T" else b
        expected = op_a @ op_b
        floor = 3 * n * n * 4
        case = f"sgemm {name} n={n}"
        bench.record(case, "cuBLAS (torch)", lambda a=op_a, b=op_b: a @ b, floor)

        def staged(step: int, padding: int) -> Callable[[dict], dict]:
            def edit(m: dict) -> dict:
                for tile in m["staged"]:
                    tile["padding"] = padding
                m["k_step"] = [[m["k_step"][0][0], step]]
                m["unroll"] = 8 * step
                return m

            return edit

        edits: dict[str, Any] = {
            "default": lambda m: m,
            "k-step 8, padding 4": staged(8, 4),
            "k-step 16, padding 0": staged(16, 0),
            "k-step 16, padding 4": staged(16, 4),
            "k-step 16, padding 8": staged(16, 8),
        }
        variants_of(
            bench,
            case,
            path,
            {"m": n, "n": n, "k": n},
            {"A": a, "B": b, "alpha": 1.0},
            expected,
            floor,
            edits,
            1e-3,
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--only", default="symv,axpy,gemv,gemm")
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--tiles", default="1")
    parser.add_argument("--bytes", default="4,8,16,32")
    args = parser.parse_args()
    bench = Bench(args.runs)
    only = set(args.only.split(","))
    with tempfile.TemporaryDirectory() as scratch:
        work = Path(scratch)
        for part, run in (
            (
                "symv",
                lambda: symv(
                    bench,
                    [8192, 16384],
                    [int(v) for v in args.tiles.split(",")],
                    [(8, 2)],
                ),
            ),
            ("axpy", lambda: axpy(bench, [8192, 16384], [int(v) for v in args.bytes.split(",")])),
            ("gemv", lambda: gemv(bench, [8192, 16384], work)),
            ("gemm", lambda: gemm(bench, 4096, work)),
        ):
            if part in only:
                try:
                    run()
                except Exception as error:  # keep the other parts' figures
                    print(f"{part} failed: {type(error).__name__}: {error}", flush=True)
    print("\n| case | variant | ms | % of floor |\n|---|---|---|---|")
    for case, variant, ms, share in ROWS:
        print(f"| {case} | {variant} | {ms:.4f} | {share:.1f} |")


if __name__ == "__main__":
    main()
