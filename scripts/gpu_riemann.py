"""The Riemann-Christoffel statement on the GPU (issue 14): einkern's default
kernel, its parts alone (the two permuted reads of A; the two contractions of
B), a random sample of the tuner's space and the cost model's best points of
a larger sample, and torch.einsum, in the same run.

CUDA events, L2 flushed before each call, median of ``--runs``, the same random
inputs for every variant; errors relative to the default kernel; % floor: A and
B read once, R written once, at the copy bandwidth measured in the same run.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path

import einkern
from einkern.bench.cuda_device import CudaDevice
from einkern.gpu.config import CudaConfig
from einkern.gpu.decision import default_config
from einkern.gpu.model import predicted_time
from einkern.gpu.space import config_to_mapping, parameters, violation
from einkern.ir.task import statement_task

sys.path.insert(0, str(Path(__file__).parent))
from gpu_fusion import outputs, workspace  # noqa: E402

HEAD = (
    "program riemann\ndims n = {n}\ndtype float64\n"
    "tensor A[n, n, n, n], B[n, n, n], R[n, n, n, n]\n"
)
FULL = "R[i,j,k,l] = A[i,j,k,l] - A[i,l,k,j] + B[m,j,k]*B[i,m,l] - B[m,l,k]*B[i,m,j]\n"
PARTS = {
    "A part only": "R[i,j,k,l] = A[i,j,k,l] - A[i,l,k,j]\n",
    "B part only": "R[i,j,k,l] = B[m,j,k]*B[i,m,l] - B[m,l,k]*B[i,m,j]\n",
}


def sample(task, count: int, rng: random.Random) -> list[CudaConfig]:
    space = parameters(task)
    found, tries = [], 0
    while len(found) < count and tries < 50 * count:
        tries += 1
        values = {name: rng.choice(list(options)) for name, options in space.items()}
        try:
            config = CudaConfig(**values)
        except (TypeError, ValueError):
            continue
        if violation(task, config) is None and config not in found:
            found.append(config)
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--n", type=int, nargs="*", default=[24, 32, 48])
    parser.add_argument("--random", type=int, default=40)
    parser.add_argument("--model-top", type=int, default=10)
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    device = CudaDevice()
    bandwidth = device.bandwidth()
    print(f"copy bandwidth {bandwidth / 1e12:.3f} TB/s", flush=True)
    rows, summary = [], []
    rng = random.Random(7)
    for n in args.n:
        text = HEAD.format(n=n) + FULL
        default = einkern.compile(text, backend="cuda")
        problem = default.problem
        task = statement_task(problem, 0)
        base = default_config(task)[0]
        pool = sample(task, 1500, rng)
        scored = sorted(pool, key=lambda c: predicted_time(task, config_to_mapping(task, c)))
        chosen = [("default", base)]
        chosen += [(f"model{i}", c) for i, c in enumerate(scored[: args.model_top])]
        chosen += [(f"rand{i}", c) for i, c in enumerate(rng.sample(pool, args.random))]
        work = workspace(device, problem)
        floor = 8 * (2 * n**4 + n**3) / bandwidth
        reference = outputs(device, default, work)
        measured = {}
        variants = [(name, HEAD.format(n=n) + part, None) for name, part in PARTS.items()]
        variants += [(name, text, c) for name, c in chosen]
        for name, program, config in variants:
            try:
                mappings = None if config is None else {0: config_to_mapping(task, config)}
                kernel = einkern.compile(program, backend="cuda", mappings=mappings)
                w = work if program == text else workspace(device, kernel.problem)
                result = outputs(device, kernel, w)
                error = device.relative_error(result[0], reference[0]) if program == text else 0.0
                seconds = device.median_time(lambda k=kernel, w=w: k(**w), args.runs)
            except Exception as exc:  # noqa: BLE001 - report and go on
                print(f"n={n} {name}: failed: {exc}"[:200], flush=True)
                continue
            predicted = (
                predicted_time(task, config_to_mapping(task, config)) if config else float("nan")
            )
            measured[name] = seconds
            row = {
                "n": n,
                "variant": name,
                "ms": seconds * 1e3,
                "floor_pct": 100 * floor / seconds,
                "predicted_ms": predicted * 1e3,
                "error": error,
                "config": None if config is None else config.to_json(),
            }
            rows.append(row)
            print(
                f"n={n} {name:12} {seconds * 1e3:8.4f} ms {row['floor_pct']:5.1f}% "
                f"pred {predicted * 1e3:8.4f} err {error:.1e} "
                f"{json.dumps(row['config'])[:150]}",
                flush=True,
            )
        try:
            import torch

            def peer(a=work["A"], b=work["B"]):
                return (
                    a
                    - a.permute(0, 3, 2, 1)
                    + torch.einsum("mjk,iml->ijkl", b, b)
                    - torch.einsum("mlk,imj->ijkl", b, b)
                )

            measured["torch"] = device.median_time(peer, args.runs)
        except Exception as exc:  # noqa: BLE001
            print(f"torch peer failed: {exc}", flush=True)
        best = min(
            (v, k) for k, v in measured.items() if k.startswith(("model", "rand", "default"))
        )
        parts = (measured.get("A part only"), measured.get("B part only"))
        summary.append((n, measured.get("default"), floor, best, measured.get("torch"), *parts))
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    print()
    print(
        f"{'n':>3} {'default':>9} {'%floor':>7} {'best':>9} {'which':>8} {'%floor':>7} "
        f"{'torch':>9} {'A only':>9} {'B only':>9}"
    )
    for n, d, floor, (bt, bn), t, ao, bo in summary:
        print(
            f"{n:3} {d * 1e3:9.4f} {100 * floor / d:6.1f}% {bt * 1e3:9.4f} {bn:>8} "
            f"{100 * floor / bt:6.1f}% "
            f"{(t or 0) * 1e3:9.4f} {(ao or 0) * 1e3:9.4f} {(bo or 0) * 1e3:9.4f}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
