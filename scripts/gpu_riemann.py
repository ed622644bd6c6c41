"""The Riemann-Christoffel statement on the GPU (issue 14): einkern's default
kernel (the paired-terms kernel where the decision takes it), the statement's
SIMT default without pairing, paired candidates (the model's best and a random
sample of the rest, each with its prediction), torch.einsum and cuTENSOR (two
contractions into R after a CuPy difference of A and its permutation), all in
the same run.

CUDA events, L2 flushed before each call, median of ``--runs``, the same random
inputs for every variant; errors relative to torch.einsum's result; % floor: A
and B read once, R written once, at the copy bandwidth measured in the same run.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path

from gpu_fusion import measure, workspace  # this directory: the fusion script's helpers

import einkern
from einkern.bench.cuda_device import CudaDevice
from einkern.gpu import pair_space
from einkern.gpu.decision import choose, decide
from einkern.gpu.model import predicted_time
from einkern.gpu.space import config_to_mapping
from einkern.ir.task import statement_task

TEXT = (
    "program riemann\ndims n = {n}\ndtype float64\n"
    "tensor A[n, n, n, n], B[n, n, n], R[n, n, n, n]\n"
    "R[i,j,k,l] = A[i,j,k,l] - A[i,l,k,j] + B[m,j,k]*B[i,m,l] - B[m,l,k]*B[i,m,j]\n"
)


def peers(work):
    """torch.einsum and cuTENSOR calls computing R (None where unavailable)."""
    import torch

    found = {}
    a, b = work["A"], work["B"]

    def by_torch():
        return (
            a
            - a.permute(0, 3, 2, 1)
            + torch.einsum("mjk,iml->ijkl", b, b)
            - torch.einsum("mlk,imj->ijkl", b, b)
        )

    found["torch.einsum"] = by_torch
    try:
        import cupy
        from cupyx import cutensor

        ca, cb = cupy.from_dlpack(a), cupy.from_dlpack(b)
        cr = cupy.empty_like(ca)
        modes = {s: cutensor.create_mode(*s) for s in ("mjk", "iml", "mlk", "imj", "ijkl")}

        def by_cutensor():
            cupy.subtract(ca, ca.transpose(0, 3, 2, 1), out=cr)
            cutensor.contraction(1.0, cb, modes["mjk"], cb, modes["iml"], 1.0, cr, modes["ijkl"])
            cutensor.contraction(-1.0, cb, modes["mlk"], cb, modes["imj"], 1.0, cr, modes["ijkl"])
            return torch.from_dlpack(cr)

        by_cutensor()
        found["cuTENSOR"] = by_cutensor
    except Exception as exc:  # noqa: BLE001 - report and go on
        print(f"cuTENSOR unavailable: {type(exc).__name__}: {exc}"[:200], flush=True)
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--n", type=int, nargs="*", default=[24, 32, 48])
    parser.add_argument("--top", type=int, default=8, help="paired candidates: model's best")
    parser.add_argument("--random", type=int, default=12, help="paired candidates: random")
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    device = CudaDevice()
    bandwidth = device.bandwidth()
    print(f"copy bandwidth {bandwidth / 1e12:.3f} TB/s", flush=True)
    rows, summary = [], []
    rng = random.Random(7)
    for n in args.n:
        text = TEXT.format(n=n)
        default = einkern.compile(text, backend="cuda")
        problem = default.problem
        task = statement_task(problem, 0)
        floor = 8 * (2 * n**4 + n**3) / bandwidth
        work = workspace(device, problem)
        calls = peers(work)
        reference = calls["torch.einsum"]()
        chosen = decide(task)
        simt = config_to_mapping(task, choose(task).config)
        ranked = sorted(pair_space.candidates(task), key=lambda m: predicted_time(task, m))
        sample = ranked[: args.top]
        rest = ranked[args.top :]
        sample += rng.sample(rest, min(args.random, len(rest)))
        variants = [("default", None), ("SIMT default", simt)]
        variants += [(f"pair{ranked.index(m)}", m) for m in sample if m != chosen]
        measured = {}
        for name, mapping in variants:
            try:
                kernel = (
                    default
                    if mapping is None
                    else einkern.compile(text, backend="cuda", mappings={0: mapping})
                )
                seconds, error, _ = measure(device, kernel, work, (reference,), args.runs)
            except Exception as exc:  # noqa: BLE001 - report and go on
                print(f"n={n} {name}: failed: {exc}"[:200], flush=True)
                continue
            used = chosen if mapping is None else mapping
            predicted = predicted_time(task, used)
            measured[name] = seconds
            row = {
                "n": n,
                "variant": name,
                "ms": seconds * 1e3,
                "floor_pct": 100 * floor / seconds,
                "predicted_ms": predicted * 1e3,
                "error": error,
                "mapping": json.loads(used.to_json()),
            }
            rows.append(row)
            tiles = " ".join(f"{t.index}{t.tile}/{t.threads}" for t in used.parallel)
            print(
                f"n={n} {name:12} {seconds * 1e3:8.4f} ms {row['floor_pct']:5.1f}% "
                f"pred {predicted * 1e3:8.4f} err {error:.1e} pair={bool(used.pair)} "
                f"staged={bool(used.staged)} {tiles}",
                flush=True,
            )
        for name, call in calls.items():
            measured[name] = device.median_time(call, args.runs)
            error = device.relative_error(call(), reference)
            rows.append({"n": n, "variant": name, "ms": measured[name] * 1e3, "error": error})
            print(f"n={n} {name:12} {measured[name] * 1e3:8.4f} ms err {error:.1e}", flush=True)
        best = min((v, k) for k, v in measured.items() if k.startswith(("pair", "default")))
        summary.append((n, floor, measured, best))
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    print()
    print(
        f"{'n':>3} {'default':>9} {'%floor':>7} {'SIMT':>9} {'best':>9} {'which':>8} "
        f"{'torch':>9} {'cuTENSOR':>9} {'vs best peer':>12}"
    )
    for n, floor, m, (bt, bn) in summary:
        d = m.get("default", float("nan"))
        peer = min(m.get("torch.einsum", float("inf")), m.get("cuTENSOR", float("inf")))
        print(
            f"{n:3} {d * 1e3:9.4f} {100 * floor / d:6.1f}% {m.get('SIMT default', 0) * 1e3:9.4f} "
            f"{bt * 1e3:9.4f} {bn:>8} {m.get('torch.einsum', 0) * 1e3:9.4f} "
            f"{m.get('cuTENSOR', 0) * 1e3:9.4f} {peer / d:11.2f}x"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
