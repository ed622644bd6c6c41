"""local_grad3 as one shared-input kernel on the GPU (issue 14): every candidate of
:func:`einkern.gpu.shared_input.ranked_candidates` against the planner's choice,
the previous combined launch of sibling blocks, one kernel per statement, and
torch.einsum / cuTENSOR (one call per statement), in the same run.

CUDA events, L2 flushed before each call, median of ``--runs``, the same random
inputs for every variant; errors are relative to the default (fused) kernel;
% floor: the fused floor (u, D, Dt read once, the three outputs written once)
at the copy bandwidth measured in the same run.  The last table gives, per
shape, the measured rank of the model's choice among the candidates and the
rank correlation of predicted with measured candidate times.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import einkern
from einkern.backends.cuda.generate import resolve_mappings
from einkern.bench.cuda_device import CudaDevice
from einkern.gpu.shared_input import ranked_candidates

sys.path.insert(0, str(Path(__file__).parent))
from gpu_fusion import PEERS, _peer_call, measure, workspace  # noqa: E402

PROGRAM = "examples/local_grad3.ein"


def _spearman(a: list[float], b: list[float]) -> float:
    def ranks(v):
        order = sorted(range(len(v)), key=v.__getitem__)
        r = [0] * len(v)
        for position, i in enumerate(order):
            r[i] = position
        return r

    ra, rb = ranks(a), ranks(b)
    n = len(a)
    if n < 2:
        return float("nan")
    d2 = sum((x - y) ** 2 for x, y in zip(ra, rb, strict=True))
    return 1 - 6 * d2 / (n * (n * n - 1))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--p", type=int, nargs="*", default=[8, 10, 12])
    parser.add_argument("--nelt", type=int, nargs="*", default=[32768, 1000])
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    device = CudaDevice()
    bandwidth = device.bandwidth()
    print(f"copy bandwidth {bandwidth / 1e12:.3f} TB/s", flush=True)
    rows = []
    summary = []
    for p in args.p:
        for nelt in args.nelt:
            extents = {"p": p, "nelt": nelt}
            default = einkern.compile(PROGRAM, backend="cuda", **extents)
            problem = default.problem
            positions = tuple(range(len(problem.program.statements)))
            ranked = ranked_candidates(problem, positions)
            defaults = resolve_mappings(problem)  # per statement: the old sibling launch
            variants = [("default", default, None)]
            variants.append(
                (
                    "siblings",
                    einkern.compile(PROGRAM, backend="cuda", mappings=defaults, **extents),
                    None,
                )
            )
            variants.append(
                ("unfused", einkern.compile(PROGRAM, backend="cuda", fuse=False, **extents), None)
            )
            for name, peer in PEERS.items():
                variants.append((name, default, peer))
            for number, (_, mappings) in enumerate(ranked):
                given = dict(zip(positions, mappings, strict=True))
                variants.append(
                    (
                        f"cand{number}",
                        einkern.compile(PROGRAM, backend="cuda", mappings=given, **extents),
                        None,
                    )
                )
            work = workspace(device, problem)
            floor = default.fused_min_bytes / bandwidth
            reference = None
            measured = {}
            for name, kernel, peer in variants:
                run = kernel
                if peer is not None:
                    why = peer.available()
                    if why is not None:
                        print(f"p={p} nelt={nelt} {name}: not run: {why}"[:160], flush=True)
                        continue
                    run = _peer_call(peer, problem)
                seconds, error, result = measure(device, run, work, reference, args.runs)
                reference = result if reference is None else reference
                measured[name] = seconds
                row = {
                    "p": p,
                    "nelt": nelt,
                    "variant": name,
                    "ms": seconds * 1e3,
                    "floor_pct": 100 * floor / seconds,
                    "error": error,
                    "kernels": kernel.kernels if peer is None else 0,
                }
                if name.startswith("cand"):
                    number = int(name[4:])
                    row["predicted_ms"] = ranked[number][0] * 1e3
                    row["tiles"] = ", ".join(
                        f"{t.index}:{t.tile}/{t.threads}" for t in ranked[number][1][0].parallel
                    )
                rows.append(row)
                print(
                    f"p={p:2} nelt={nelt:6} {name:13} {row['kernels']:2} kernel(s) "
                    f"{seconds * 1e3:8.4f} ms {row['floor_pct']:5.1f}% floor err {error:.1e} "
                    f"{row.get('tiles', '')}",
                    flush=True,
                )
            cands = [measured[f"cand{i}"] for i in range(len(ranked)) if f"cand{i}" in measured]
            preds = [ranked[i][0] for i in range(len(cands))]
            best_peer = min((measured[n] for n in PEERS if n in measured), default=float("nan"))
            summary.append(
                (
                    p,
                    nelt,
                    measured["default"],
                    100 * floor / measured["default"],
                    measured["siblings"],
                    measured["unfused"],
                    best_peer,
                    min(cands) if cands else float("nan"),
                    1 + sorted(cands).index(cands[0]) if cands else 0,
                    len(cands),
                    _spearman(preds, cands),
                )
            )
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    print()
    print(
        f"{'p':>3} {'nelt':>6} {'default ms':>10} {'% floor':>8} {'siblings':>9} {'unfused':>9} "
        f"{'best peer':>9} {'vs peer':>8} {'best cand':>9} {'rank':>7} {'rho':>6}"
    )
    for p, nelt, d, pct, sib, unf, peer, best, rank, n, rho in summary:
        print(
            f"{p:3} {nelt:6} {d * 1e3:10.4f} {pct:7.1f}% {sib * 1e3:9.4f} {unf * 1e3:9.4f} "
            f"{peer * 1e3:9.4f} {peer / d:7.2f}x {best * 1e3:9.4f} {rank:3}/{n:<3} {rho:6.2f}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
