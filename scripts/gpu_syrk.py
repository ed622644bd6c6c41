"""einkern.blas.syrk on the GPU: the whole call and each of its steps, for several
diagonal-block sizes (``block=``), against cuBLAS ssyrk through CuPy.

Lower triangle of ``alpha·A·Aᵀ`` for a row-major ``A`` of ``n``×``k`` (the ``blas``
bench suite's ``ssyrk:L`` case), fp32 by default.  The whole call is timed as the
bench times it (:class:`einkern.bench.cuda_device.CudaEventTimer`: CUDA events
around GPU work only, L2 flushed, median of ``--runs``); the breakdown times one
call's einkern programs (its batched products: one per level, the deepest level's
with the diagonal blocks, as ``syrk_blocking(n, block).calls`` lists them) with
events around each launch, the rest (copies, block writes) being the call's time
less theirs.  Each
result is checked against torch's ``A @ Aᵀ`` on the triangle.  Needs a CUDA
build of torch (CuPy optional):

    python scripts/gpu_syrk.py [--n 4096] [--k 4096] [--blocks 256,512,1024] [--dtype float32]
"""

from __future__ import annotations

import argparse
import statistics
from typing import Any

from einkern import blas
from einkern.bench.cuda_device import CudaEventTimer
from einkern.blas import engines

ALPHA = 1.5


class TimedCuda:
    """The CUDA engine with a pair of CUDA events around every kernel call (while
    :attr:`events` is a list)."""

    name = "timed-cuda"

    def __init__(self) -> None:
        self.inner = engines.Compiled("cuda")
        self.events: list[tuple[str, Any, Any]] | None = None

    def kernel(self, text: str, sizes: engines.Sizes) -> Any:
        compiled = self.inner.kernel(text, sizes)
        label = " ".join(f"{k}={v}" for k, v in sizes)

        def call(**arguments: Any) -> None:
            if self.events is None:
                compiled(**arguments)
                return
            import torch

            start, end = (torch.cuda.Event(enable_timing=True) for _ in range(2))
            start.record()
            compiled(**arguments)
            end.record()
            self.events.append((label, start, end))

        return call


def breakdown(torch: Any, engine: TimedCuda, fn: Any, cover: int) -> list[tuple[str, float]]:
    """Each program's GPU time (ms) in one call, the whole queued behind a spin kernel."""
    engine.events = []
    torch.cuda.synchronize()
    torch.cuda._sleep(cover)
    fn()
    torch.cuda.synchronize()
    rows = [(label, start.elapsed_time(end)) for label, start, end in engine.events]
    engine.events = None
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=4096)
    parser.add_argument("--k", type=int, default=4096)
    parser.add_argument("--blocks", default="256,512,1024")
    parser.add_argument("--dtype", default="float32", choices=("float32", "float64"))
    parser.add_argument("--runs", type=int, default=20)
    args = parser.parse_args()

    import torch

    torch.backends.cuda.matmul.allow_tf32 = False
    engine = TimedCuda()
    dtype = getattr(torch, args.dtype)
    generator = torch.Generator(device="cuda").manual_seed(0)
    a = torch.empty((args.n, args.k), dtype=dtype, device="cuda").uniform_(
        0.5, 1.5, generator=generator
    )
    full = ALPHA * (a.double() @ a.double().T)
    mask = torch.ones((args.n, args.n), dtype=torch.bool, device="cuda").tril()
    timer = CudaEventTimer(torch, 256 << 20)
    flops = args.n * (args.n + 1) * args.k
    print(f"{torch.cuda.get_device_name()}: syrk lower, n={args.n}, k={args.k}, {args.dtype}")

    def report(name: str, fn: Any) -> float:
        result = fn()
        error = float(((result.double() - full).abs() * mask).max() / full.abs().max())
        ms = statistics.median(timer.time(fn, args.runs)) * 1e3
        print(
            f"{name:24s} {ms:8.3f} ms {flops / ms / 1e9:8.1f} TFLOP/s  max rel. error {error:.1e}"
        )
        return ms

    peer = None
    try:
        import cupy
        from cupy import cublas

        ca = cupy.from_dlpack(a)
        out = cupy.zeros((args.n, args.n), dtype=args.dtype, order="F")
        peer = report(
            "cuBLAS syrk (CuPy)",
            lambda: torch.from_dlpack(cublas.syrk("T", ca.T, out, alpha=ALPHA, lower=False).T),
        )
    except Exception as error:  # noqa: BLE001 - the reason is the report
        print(f"cuBLAS syrk (CuPy): unavailable ({type(error).__name__}: {error})")
    for block in (int(b) for b in args.blocks.split(",")):
        plan = blas.syrk_blocking(args.n, block)

        def call(block: int = block) -> Any:
            return blas.syrk(ALPHA, a, lower=True, block=block)

        # torch CUDA tensors run on the engine named "cuda": the timed one, for now
        original = engines.get_engine("cuda")
        engines._INSTANCES["cuda"] = engine
        try:
            ms = report(f"einkern block={block}", call)
            cover = int(0.05 * timer.cycles_per_second())
            steps = breakdown(torch, engine, call, cover)
        finally:
            engines._INSTANCES["cuda"] = original
        ratio = f", {peer / ms:.3f}× cuBLAS" if peer else ""
        calls = ", ".join(f"{q}×{m}" for q, m in plan.calls)
        print(f"  {plan.levels} levels, base {plan.base}, calls (blocks×rows) {calls}{ratio}")
        for label, step_ms in steps:
            print(f"    {label:28s} {step_ms:8.3f} ms")
        print(f"    {'copies and block writes':28s} {ms - sum(t for _, t in steps):8.3f} ms")


if __name__ == "__main__":
    main()
