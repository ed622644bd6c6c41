"""symv's reduction-tile kernel under compute-sanitizer: lower and upper, float32
and float64, at a size the tiles do not divide; the result is checked against
NumPy.  Run as ``compute-sanitizer --tool memcheck python3 scripts/sanitize_symv.py``
(and ``--tool racecheck``) on a GPU machine."""

from __future__ import annotations

import numpy as np
import torch

from einkern import blas


def main() -> None:
    rng = np.random.default_rng(0)
    n = 301
    for dtype in (np.float32, np.float64):
        for lower in (True, False):
            a = rng.uniform(-1, 1, (n, n)).astype(dtype)
            a = a + a.T
            x = rng.uniform(-1, 1, n).astype(dtype)
            stored = np.tril(a) if lower else np.triu(a)
            got = blas.symv(0.5, torch.from_numpy(stored).cuda(), torch.from_numpy(x).cuda(),
                            lower=lower)  # fmt: skip
            error = np.abs(got.cpu().numpy() - 0.5 * a @ x).max() / np.abs(0.5 * a @ x).max()
            print(f"symv {np.dtype(dtype).name} lower={lower}: max relative error {error:.1e}")
            assert error < (1e-5 if dtype == np.float32 else 1e-12)


if __name__ == "__main__":
    main()
