"""Fit the fp64 tile model's constants (``einkern.gpu.mma_model``:
``F64_TILE_EFFICIENCY``, ``ROUND_LATENCY``, ``EPILOGUE_EXPOSURE``,
``LONE_BLOCK_EXPONENT``, ``COPY_SECTORS_PER_CYCLE``) to the
measurements of scripts/gpu_f64_tiles.py, and report how well the model as it
stands and as fitted chooses tiles: per case, the measured time of the tile the
model ranks first over the best measured tile (geometric mean and worst), the
cases within 5 % of the best, and Spearman's rank correlation of predicted with
measured times (mean over cases).  Fits on the rows of ``--fit-seed``, reports
every seed in the files apart.  With the rules' proposal timed (``rules``), it
also reports the family decision (tensor cores against the rules' SIMT
proposal) under several margins: the chosen kernel's time over the best.

    PYTHONPATH=src:scripts python scripts/fit_f64_tiles.py f64_s41.jsonl f64_s43.jsonl --fit-seed 41
"""

from __future__ import annotations

import argparse
import json
import math
from dataclasses import dataclass

import numpy as np
from f64_tile_cases import SMALL_TILES, TILES, task_of
from scipy.optimize import minimize
from scipy.stats import spearmanr

from einkern.gpu import mma_model
from einkern.gpu.config import CudaConfig
from einkern.gpu.decision import _predict, explain
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
    parts: mma_model.F64Parts
    copies: float  # seconds of the tile copies at one sector per cycle


def points(rows: list[dict]) -> list[Point]:
    """The model's parts for every timed tile of ``rows``."""
    made = []
    for number, row in enumerate(rows):
        task = task_of(row)
        for name, measured in row["tiles"].items():
            if "ms" not in measured:
                continue
            config = TILES[name]
            dram, l2, _ = mma_model.mma_bounds(task, config, H100)
            parts = mma_model.f64_parts(task, mma_model.mma_form(task, config)[0], config, H100)
            copies = mma_model.copy_seconds(task, config, H100) * mma_model.COPY_SECTORS_PER_CYCLE
            made.append(
                Point(row["seed"], number, name, measured["ms"] * 1e-3, dram, l2, parts, copies)
            )
    return made


def predicted(p: Point, x: dict[str, float]) -> float:
    """The model's seconds for ``p`` under the constants ``x`` (tile names to
    rates, ``latency``, ``exposure``, ``lone``, ``sectors``; before the SIMT scale)."""
    arithmetic = mma_model.f64_arithmetic(
        p.parts, x[p.tile], x["latency"], x["exposure"], x["lone"]
    )
    copies = p.copies / x["sectors"]  # 0 when the rate is infinite
    return DEFAULT_CALIBRATION.combine(Terms(p.dram, p.l2, copies, arithmetic, 0.0))


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


def margins(rows: list[dict], shares: tuple[float, ...] = (0.8, 0.9, 0.95, 1.0)) -> None:
    """Per seed and margin: the measured time of what the decision would choose
    (the best-predicted tile when predicted below ``share`` times the rules'
    proposal, else the proposal) over the best measured kernel."""
    cases = []  # (seed, rules' prediction, best tile's prediction, its time, rules' time, best)
    for row in (r for r in rows if "rules" in r):
        task = task_of(row)
        timed = {n: t["ms"] for n, t in row["tiles"].items() if "ms" in t}
        if not timed:
            continue
        predicted = {n: _predict(task, CudaConfig(x="", mma=TILES[n]), H100) for n in timed}
        tile = min(predicted, key=predicted.__getitem__)
        rules = _predict(task, explain(task).config, H100)
        best = min(row["rules"], *timed.values())
        cases.append((row["seed"], rules, predicted[tile], timed[tile], row["rules"], best))
    for share in shares:
        for seed in sorted({case[0] for case in cases}):
            chosen = [
                (tile_ms if mma < share * rules else rules_ms) / best
                for s, rules, mma, tile_ms, rules_ms, best in cases
                if s == seed
            ]
            tiles = sum(mma < share * rules for s, rules, mma, *_ in cases if s == seed)
            print(f"margin {share:.2f} seed {seed}: chosen / best "
                  f"{math.exp(np.mean(np.log(chosen))):.3f} (worst {max(chosen):.2f}), "
                  f"tensor cores in {tiles}/{len(chosen)}")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("files", nargs="+")
    parser.add_argument("--fit-seed", type=int, default=41)
    parser.add_argument(
        "--small",
        action="store_true",
        help="SMALL_TILES too (from their rates, 1.0 for candidates), and only theirs fitted",
    )
    args = parser.parse_args()
    if args.small:
        TILES.update(SMALL_TILES)
    rows = [json.loads(line) for f in args.files for line in open(f)]
    for row in rows:  # variants of a tile (NAME/u of gpu_f64_tiles.py) are A/B data only
        row["tiles"] = {n: t for n, t in row["tiles"].items() if n in TILES}
    data = points(rows)
    now = {t: mma_model.F64_TILE_EFFICIENCY.get(c, 1.0) for t, c in TILES.items()}
    now.update(latency=mma_model.ROUND_LATENCY, exposure=mma_model.EPILOGUE_EXPOSURE,
               lone=mma_model.LONE_BLOCK_EXPONENT,
               sectors=mma_model.COPY_SECTORS_PER_CYCLE)  # fmt: skip
    report("model", data, [predicted(p, now) for p in data])
    fitted = [p for p in data if p.seed == args.fit_seed]
    # the tiles' rates and the round and epilogue terms without the copies' term,
    # then the copies' rate alone: fitted together, the two bounds trade places
    if args.small:  # the other constants as the large tiles' fit left them
        found = _fit(fitted, now, list(SMALL_TILES))
    else:
        found = _fit(fitted, {**now, "sectors": math.inf}, [n for n in now if n != "sectors"])
        found = _fit(fitted, {**found, "sectors": now["sectors"]}, ["sectors"])
    shown = {n: round(float(v * 1e6 if n == "latency" else v), 3) for n, v in found.items()}
    print(f"fitted (latency in µs): {shown}")
    report("fitted", data, [predicted(p, found) for p in data])
    margins(rows)


def _fit(data: list[Point], start: dict[str, float], free: list[str]) -> dict[str, float]:
    """``start`` with the constants ``free`` fitted to ``data`` (Nelder-Mead on the
    mean squared log error)."""
    scale = np.array([1e-6 if n == "latency" else 1.0 for n in free])  # latency in µs

    def constants(x: np.ndarray) -> dict[str, float]:
        return {**start, **dict(zip(free, np.abs(x) * scale, strict=True))}

    def loss(x: np.ndarray) -> float:
        x_ = constants(x)
        return float(np.mean([math.log(predicted(p, x_) / p.ms) ** 2 for p in data]))

    first = np.array([start[n] for n in free]) / scale
    best = minimize(loss, first, method="Nelder-Mead", options={"maxiter": 40000, "maxfev": 40000})
    return constants(best.x)


if __name__ == "__main__":
    main()
