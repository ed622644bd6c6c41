"""bf16/f16 tensor-core tiles on the GPU (warpgroup MMA from swizzled tiles, or
mma.sync from 16-bit shared tiles by ldmatrix; 16-byte cp.async): each
configuration of ``CONFIGS`` on GEMM and contraction shapes, against torch
(cuBLAS / torch.einsum) in the same run.  CUDA events after warm-up, L2
flushed (256 MiB written) before every call, median of 20 runs, random inputs
in [0.5, 1.5); error: max |C - C_fp64| / max |C_fp64|.

    PYTHONPATH=src python scripts/gpu_half_tiles.py [--default] [NAME-SUBSTRING ...]

``--default``: einkern's default (``einkern.compile``, no mapping) only.
"""

from __future__ import annotations

import sys

import f64_tile_cases
import torch
from mma_contractions import checked, timed  # L2 flushed, median

import einkern
from einkern.backends.cuda import driver
from einkern.gpu.mma_lower import MmaConfig, lower_mma, problems
from einkern.ir.bind import make_problem
from einkern.ir.task import statement_task

RUNS = 20


def tile(wm, wn, tm, tn, k, stages, copy="async"):
    return MmaConfig("m16n8k16_bf16", wm, wn, tm, tn, k, stages=stages, copy=copy)


def warpgroups(warps, tiles_n, stages=4):
    return MmaConfig("wgmma_k16_bf16", warps, 1, 1, tiles_n, 64, stages=stages, copy="async")


CONFIGS = {
    "wgmma 128x256 s4": warpgroups(8, 32),
    "wgmma 256x128 s4": warpgroups(16, 16),
    "wgmma 128x128 s4": warpgroups(8, 16),
    "wgmma 64x128 s4": warpgroups(4, 16),
    "wgmma 128x256 s3": warpgroups(8, 32, 3),
    "128x128 w2x4 t4x4 k32 s3": tile(2, 4, 4, 4, 32, 3),
    "128x128 w2x2 t4x8 k32 s4": tile(2, 2, 4, 8, 32, 4),
    "128x256 w2x4 t4x8 k32 s3": tile(2, 4, 4, 8, 32, 3),
    "128x256 w2x4 t4x8 k32 s4": tile(2, 4, 4, 8, 32, 4),
    "256x128 w4x2 t4x8 k32 s3": tile(4, 2, 4, 8, 32, 3),
    "256x128 w4x2 t4x8 k32 s4": tile(4, 2, 4, 8, 32, 4),
    "128x256 w2x4 t4x8 k64 s3": tile(2, 4, 4, 8, 64, 3),
    "128x128 w2x4 t4x4 k64 s3": tile(2, 4, 4, 4, 64, 3),
    "64x128 w2x2 t2x8 k32 s4": tile(2, 2, 2, 8, 32, 4),
    "128x128 w2x4 t4x4 k32 reg2": tile(2, 4, 4, 4, 32, 2, "registers"),
    "128x128 w2x4 t4x4 k32 reg1": tile(2, 4, 4, 4, 32, 1, "registers"),
    "64x128 w2x2 t2x8 k32 reg1": tile(2, 2, 2, 8, 32, 1, "registers"),
    "128x128 w4x4 t2x4 k32 reg1": tile(4, 4, 2, 4, 32, 1, "registers"),
}

CASES = [
    ("gemm 4096", "ij,jk->ik", dict.fromkeys("ijk", 4096), "row"),
    ("gemm 8192", "ij,jk->ik", dict.fromkeys("ijk", 8192), "row"),
    ("gemm 4096 column", "ij,jk->ik", dict.fromkeys("ijk", 4096), "column"),
    ("gemm 2048", "ij,jk->ik", dict.fromkeys("ijk", 2048), "row"),
    ("abkl,klcd->abcd 64", "abkl,klcd->abcd", dict.fromkeys("abcdkl", 64), "row"),
    ("akbl,cldk->abcd 64", "akbl,cldk->abcd", dict.fromkeys("abcdkl", 64), "row"),
    ("aebf,fced->abcd 48", "aebf,fced->abcd", dict.fromkeys("abcdef", 48), "row"),
    ("batched zik,zkj->zij 16x1024", "zik,zkj->zij", dict(z=16, i=1024, j=1024, k=1024), "row"),
    ("abcf,fde->abcde 32x24", "abcf,fde->abcde", dict(a=32, b=32, c=32, d=24, e=24, f=256), "row"),
]


def program_text(
    spec: str, sizes: dict[str, int], dtype: str, layout: str, result: str = "float32"
) -> str:
    """The one-product program of einsum ``spec`` (inputs ``dtype``, output
    ``result``); ``sizes`` are bound at make_problem (dims ``e<letter>``)."""
    return f64_tile_cases.program_text(spec, layout, "=", dtype, result)


def operands(spec, sizes, dtype, layout):
    ins, _ = spec.split("->")
    made = []
    for t in ins.split(","):
        shape = [sizes[c] for c in t]
        if layout == "column":
            x = (
                (torch.rand(*shape[::-1], device="cuda") + 0.5)
                .to(dtype)
                .permute(*range(len(shape) - 1, -1, -1))
            )
        else:
            x = (torch.rand(*shape, device="cuda") + 0.5).to(dtype)
        made.append(x)
    return made


def main() -> None:
    only = [a for a in sys.argv[1:] if a != "--default"]
    only_default = "--default" in sys.argv[1:]
    driver.initialize()
    arch = driver.device_properties().arch
    print(torch.cuda.get_device_name(), "torch", torch.__version__, flush=True)
    summary = []
    for name, spec, sizes, layout in CASES:
        if only and not any(o in name for o in only):
            continue
        for dtype, kind in ((torch.bfloat16, "bf16"), (torch.float16, "f16")):
            if kind == "f16" and not name.startswith("gemm 8192"):
                continue
            ins, out = spec.split("->")
            ops = operands(spec, sizes, dtype, layout)
            flops = 2.0
            for c in set(ins.replace(",", "")):
                flops *= sizes[c]
            exact = torch.einsum(spec, *(o.double() for o in ops))
            t_torch = timed(lambda s=spec, o=ops: torch.einsum(s, *o), RUNS)
            theirs = torch.einsum(spec, *ops).double()
            err_torch = float((theirs - exact).abs().max() / exact.abs().max())
            print(f"{name} {kind}: torch {t_torch:.3f} ms {flops / t_torch / 1e9:.1f} TF/s "
                  f"err {err_torch:.1e}", flush=True)  # fmt: skip
            text = program_text(spec, sizes, {"bf16": "bfloat16", "f16": "float16"}[kind], layout)
            problem = make_problem(einkern.load(text), {f"e{c}": v for c, v in sizes.items()})
            task = statement_task(problem, 0)
            result = torch.empty(exact.shape, dtype=torch.float32, device="cuda")
            if layout == "column":
                result = result.t().contiguous().t() if result.dim() == 2 else result
            best = None
            extents = {f"e{c}": v for c, v in sizes.items()}
            kernel = einkern.compile(text, backend="cuda", **extents)
            default = timed(lambda k=kernel, o=ops, r=result: k(A=o[0], B=o[1], C=r), RUNS)
            err = float((result.double() - exact).abs().max() / exact.abs().max())
            source = kernel.source()
            used = "wgmma" if "wgmma." in source else "mma" if "mma.sync" in source else "simt"
            launches = len(source.split("__global__")) - 1
            print(
                f"    {'einkern default':26s} {default:8.3f} ms {flops / default / 1e9:6.1f} TF/s "
                f"{t_torch / default:5.2f}x torch  {used}, {launches} kernel(s), err {err:.1e}",
                flush=True,
            )
            summary.append((name, kind, "einkern default", default, t_torch, flops))
            for cname, base in CONFIGS.items():
                if only_default:
                    break
                shape = base.shape.replace("bf16", kind)
                config = MmaConfig.from_values({**base.values(), "shape": shape})
                trouble = problems(task, config)
                if trouble:
                    print(f"    {cname:26s} refused: {trouble[0]}")
                    continue
                try:
                    kernel = lower_mma(task, config, "half_probe")
                    pointers = [ops[0].data_ptr(), ops[1].data_ptr(), result.data_ptr()]
                    run, regs, spills, err = checked(kernel, arch, pointers, result, exact)
                    t = timed(run, RUNS)
                    print(
                        f"    {cname:26s} {t:8.3f} ms {flops / t / 1e9:6.1f} TF/s "
                        f"{t_torch / t:5.2f}x torch  regs {regs} spills {spills} err {err:.1e}",
                        flush=True,
                    )
                    if err < 1e-3 and (best is None or t < best[1]):
                        best = (cname, t)
                except Exception as error:  # noqa: BLE001 - a probe reports and goes on
                    print(f"    {cname:26s} failed: {str(error)[:200]}", flush=True)
            if best:
                summary.append((name, kind, best[0], best[1], t_torch, flops))
    print("\nbest per case:")
    for name, kind, cname, t, t_torch, flops in summary:
        print(
            f"{name:22s} {kind:4s} {cname:26s} {t:8.3f} ms {flops / t / 1e9:6.1f} TF/s "
            f"torch {t_torch:8.3f} ms {flops / t_torch / 1e9:6.1f}  {t_torch / t:5.2f}x"
        )


if __name__ == "__main__":
    main()
