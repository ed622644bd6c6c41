"""Producer–consumer chains as one kernel on the GPU (issue 14): Fousek's mapped
functions I and II as the planner compiles them (one block-local chain kernel),
every chain candidate of :func:`einkern.gpu.chain.ranked_chains` (up to
``--candidates``), and one kernel per statement, in the same run.

CUDA events, L2 flushed before each call, median of ``--runs``, the same random
inputs for every variant; errors are relative to the unfused kernels; % floor:
the fused floor (inputs read once, outputs written once) at the copy bandwidth
measured in the same run.  The last table gives the model's choice, the fastest
candidate, the unfused time, and the rank correlation of predicted with
measured candidate times.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import einkern
from einkern.bench.cuda_device import CudaDevice
from einkern.gpu.chain import ranked_chains

sys.path.insert(0, str(Path(__file__).parent))
from gpu_fusion import measure, workspace  # noqa: E402
from gpu_shared_input import _spearman  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--nbatch", type=int, nargs="*", default=[31744])
    parser.add_argument("--candidates", type=int, default=24)
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    device = CudaDevice()
    bandwidth = device.bandwidth()
    print(f"copy bandwidth {bandwidth / 1e12:.3f} TB/s", flush=True)
    rows, summary = [], []
    for name in ("fousek_function1", "fousek_function2"):
        program = f"examples/{name}.mapped"
        for nbatch in args.nbatch:
            default = einkern.compile(program, backend="cuda", nbatch=nbatch)
            problem = default.problem
            positions = tuple(range(len(problem.program.statements)))
            ranked = ranked_chains(problem, positions)
            step = max(1, len(ranked) // args.candidates)
            picked = list(range(0, len(ranked), step))[: args.candidates]
            variants = [
                ("unfused", einkern.compile(program, backend="cuda", fuse=False, nbatch=nbatch)),
                ("default", default),
            ]
            for number in picked:
                given = dict(zip(positions, ranked[number][1], strict=True))
                kernel = einkern.compile(program, backend="cuda", mappings=given, nbatch=nbatch)
                variants.append((f"cand{number}", kernel))
            work = workspace(device, problem)
            floor = default.fused_min_bytes / bandwidth
            reference = None
            measured = {}
            for label, kernel in variants:
                seconds, error, result = measure(device, kernel, work, reference, args.runs)
                reference = result if reference is None else reference
                measured[label] = seconds
                row = {
                    "program": name,
                    "nbatch": nbatch,
                    "variant": label,
                    "kernels": kernel.kernels,
                    "ms": seconds * 1e3,
                    "floor_pct": 100 * floor / seconds,
                    "error": error,
                }
                if label.startswith("cand"):
                    number = int(label[4:])
                    mappings = ranked[number][1]
                    row["predicted_ms"] = ranked[number][0] * 1e3
                    row["tiles"] = ", ".join(
                        f"{t.index}:{t.tile}/{t.threads}" for t in mappings[0].parallel
                    )
                    row["threads"] = max(m.threads for m in mappings)
                rows.append(row)
                print(
                    f"{name} {nbatch} {label:8} {kernel.kernels} kernel(s) {seconds * 1e3:8.4f} ms "
                    f"{row['floor_pct']:5.1f}% floor err {error:.1e} {row.get('tiles', '')} "
                    f"{row.get('threads', '')}",
                    flush=True,
                )
            cands = [f"cand{n}" for n in picked if f"cand{n}" in measured]
            times = [measured[c] for c in cands]
            preds = [ranked[int(c[4:])][0] for c in cands]
            best = min(times) if times else float("nan")
            summary.append(
                (
                    name,
                    nbatch,
                    measured["default"],
                    100 * floor / measured["default"],
                    measured["unfused"],
                    best,
                    100 * floor / best,
                    _spearman(preds, times),
                )
            )
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    print()
    print(
        f"{'program':17} {'nbatch':>6} {'default':>9} {'% floor':>8} {'unfused':>9} "
        f"{'vs unf':>7} {'best cand':>9} {'% floor':>8} {'rho':>6}"
    )
    for name, nbatch, d, pct, unf, best, bpct, rho in summary:
        print(
            f"{name:17} {nbatch:6} {d * 1e3:9.4f} {pct:7.1f}% {unf * 1e3:9.4f} "
            f"{unf / d:6.2f}x {best * 1e3:9.4f} {bpct:7.1f}% {rho:6.2f}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
