"""Fit the fp64 tile model's constants (``einkern.gpu.mma_model``:
``F64_TILE_EFFICIENCY``, ``ROUND_LATENCY``, ``EPILOGUE_EXPOSURE``) to the
measurements of scripts/gpu_f64_tiles.py, and report how well the model as it
stands and as fitted chooses tiles: per case, the measured time of the tile the
model ranks first over the best measured tile (geometric mean and worst), the
cases within 5 % of the best, and Spearman's rank correlation of predicted with
measured times (mean over cases).  Fits on the rows of ``--fit-seed``, reports
every seed in the files apart.

    PYTHONPATH=src:scripts python scripts/fit_f64_tiles.py f64_s41.jsonl f64_s43.jsonl --fit-seed 41
"""

from __future__ import annotations

import argparse
import json
import math
from dataclasses import dataclass

import numpy as np
from f64_tile_cases import TILES, task_of
from scipy.optimize import minimize
from scipy.stats import spearmanr

from einkern.gpu import mma_model
from einkern.gpu.device import H100
from einkern.gpu.model import DEFAULT_CALIBRATION
from einkern.gpu.terms import Terms


@dataclass(frozen=True)
class Point:
    """One measured (case, tile) and the model's parts that do not depend on the
    fitted constants."""

    seed: int
    case: int
    tile: str
    ms: float
    dram: float
    l2: float
    mmas: float  # seconds of the MMAs at efficiency 1
    rounds: int
    epilogue: float  # seconds of the epilogue traffic at the per-SM bandwidth
    warps: int


def points(rows: list[dict]) -> list[Point]:
    """The model's parts for every timed tile of ``rows``."""
    made = []
    for number, row in enumerate(rows):
        task = task_of(row)
        for name, measured in row["tiles"].items():
            if "ms" not in measured:
                continue
            config = TILES[name]
            dram, l2, arithmetic = mma_model.mma_bounds(task, config, H100)
            busiest = _busiest(task, config)
            resident = mma_model.f64_resident(task, config, H100)
            extra = mma_model._rounds_and_epilogue(task, config, busiest, row["op"] != "=", H100)
            rounds = math.ceil(busiest / resident)
            warps = min(resident, busiest) * config.threads // 32
            exposed = (8 / warps) ** mma_model.EPILOGUE_EXPOSURE
            epilogue = (extra - rounds * mma_model.ROUND_LATENCY) / exposed
            mmas = (arithmetic - extra) * mma_model.F64_TILE_EFFICIENCY[config]
            made.append(Point(row["seed"], number, name, measured["ms"] * 1e-3, dram, l2, mmas,
                              rounds, epilogue, warps))  # fmt: skip
    return made


def _busiest(task, config) -> int:
    """Blocks on the busiest SM."""
    c, _ = mma_model.mma_form(task, config)
    bm, bn = config.block_tile()
    blocks = math.ceil(c.size(c.m) / bm) * math.ceil(c.size(c.n) / bn) * c.size(c.batch)
    return math.ceil(blocks / H100.sm_count)


def predicted(p: Point, efficiency: dict[str, float], latency: float, exposure: float) -> float:
    """The model's seconds for ``p`` under the constants (before the SIMT scale)."""
    arithmetic = p.mmas / efficiency[p.tile] + p.rounds * latency
    arithmetic += p.epilogue * (8 / p.warps) ** exposure
    return DEFAULT_CALIBRATION.combine(Terms(p.dram, p.l2, 0.0, arithmetic, 0.0))


def report(label: str, data: list[Point], times: list[float]) -> None:
    """Regret, hits and rank correlation of ``times`` per seed."""
    for seed in sorted({p.seed for p in data}):
        regrets, rhos = [], []
        for case in sorted({p.case for p in data if p.seed == seed}):
            pairs = [(p.ms, t) for p, t in zip(data, times, strict=True) if p.case == case]
            ms, model = np.array([a for a, _ in pairs]), np.array([b for _, b in pairs])
            regrets.append(ms[np.argmin(model)] / ms.min())
            if len(pairs) > 2:
                rhos.append(spearmanr(ms, model).statistic)
        hits = sum(r <= 1.05 for r in regrets)
        print(f"{label:8s} seed {seed}: chosen / best {math.exp(np.mean(np.log(regrets))):.3f} "
              f"(worst {max(regrets):.2f}), within 5 % {hits}/{len(regrets)}, "
              f"rank correlation {np.nanmean(rhos):.2f}")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("files", nargs="+")
    parser.add_argument("--fit-seed", type=int, default=41)
    args = parser.parse_args()
    rows = [json.loads(line) for f in args.files for line in open(f)]
    data = points(rows)
    names = list(TILES)
    now = {t: mma_model.F64_TILE_EFFICIENCY[c] for t, c in TILES.items()}
    latency, exposure = mma_model.ROUND_LATENCY, mma_model.EPILOGUE_EXPOSURE
    report("model", data, [predicted(p, now, latency, exposure) for p in data])
    fitted = [p for p in data if p.seed == args.fit_seed]

    def loss(x: np.ndarray) -> float:
        eff = dict(zip(names, x[: len(names)], strict=True))
        errors = [math.log(predicted(p, eff, x[-2] * 1e-6, x[-1]) / p.ms) for p in fitted]
        return float(np.mean(np.square(errors)))

    start = np.array([*now.values(), latency * 1e6, exposure])
    best = minimize(loss, start, method="Nelder-Mead", options={"maxiter": 40000, "maxfev": 40000})
    eff = dict(zip(names, best.x[: len(names)], strict=True))
    print("fitted:", {n: round(float(v), 3) for n, v in eff.items()},
          f"ROUND_LATENCY {best.x[-2]:.1f} us, EPILOGUE_EXPOSURE {best.x[-1]:.3f}, "
          f"mean squared log error {best.fun:.4f}")  # fmt: skip
    report("fitted", data, [predicted(p, eff, best.x[-2] * 1e-6, best.x[-1]) for p in data])


if __name__ == "__main__":
    main()
