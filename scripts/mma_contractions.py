"""fp64 tensor-core kernels (einkern.gpu.mma_lower) on the GPU: a few tile
configurations per contraction against torch.einsum and einkern's default
(SIMT) kernel, CUDA events after warm-up, L2 flushed, median of 15."""

from __future__ import annotations

import statistics
import sys

import torch

import einkern
from einkern.backends.cuda import driver
from einkern.backends.cuda.nvrtc import compile_cubin
from einkern.backends.cuda.tensor_maps import kernel_map_arguments
from einkern.gpu.cuda_printer import launch_shape, print_cuda
from einkern.gpu.mma_lower import MmaConfig, lower_mma
from einkern.ir.bind import make_problem
from einkern.ir.task import statement_task

FLUSH = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")


def timed(fn, repeats=15):
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(repeats):
        FLUSH.zero_()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def launcher(kernel, arch: str, pointers: list[int], label: str):
    """(run, registers, spilled stores) of ``kernel`` compiled for ``arch``: ``run()``
    launches it on ``pointers`` (no scalars) with its dynamic shared memory."""
    module = compile_cubin(print_cuda(kernel), arch)
    registers = max(r.registers for r in module.resources)
    spills = sum(r.spill_stores for r in module.resources)
    function = driver.load_module(module.cubin, [kernel.name]).functions[kernel.name]
    shape = launch_shape(kernel)
    maps = kernel_map_arguments(kernel, pointers)  # TMA-staged kernels

    def run():
        driver.launch(
            function,
            shape.grid,
            shape.block,
            pointers,
            (),
            0,
            label,
            shape.dynamic_shared_bytes,
            maps,
        )

    return run, registers, spills


def checked(kernel, arch: str, pointers: list[int], result, exact):
    """(run, registers, spilled stores, error) of :func:`launcher`'s kernel:
    ``result`` (its output, among ``pointers``) poisoned with NaN, the kernel run
    once, error = max |result - exact| / max |exact|."""
    run, registers, spills = launcher(kernel, arch, pointers, kernel.name)
    result.fill_(float("nan"))
    run()
    torch.cuda.synchronize()
    error = float((result.double() - exact).abs().max() / exact.abs().max())
    return run, registers, spills, error


CONFIGS = {
    "128x128k16s1": MmaConfig("m16n8k4_f64", 4, 4, 2, 4, 16, stages=1),
    "64x128k16s1": MmaConfig("m16n8k4_f64", 2, 4, 2, 4, 16, stages=1),
    "128x128k16a3": MmaConfig("m16n8k4_f64", 4, 4, 2, 4, 16, stages=3, copy="async"),
    "128x128k16a2": MmaConfig("m16n8k4_f64", 4, 4, 2, 4, 16, stages=2, copy="async"),
    "128x128k16w8a3": MmaConfig("m16n8k4_f64", 2, 4, 4, 4, 16, stages=3, copy="async"),
    "128x128k8w8a4": MmaConfig("m16n8k4_f64", 2, 4, 4, 4, 8, stages=4, copy="async"),
    "128x64k16w4a3": MmaConfig("m16n8k4_f64", 2, 2, 4, 4, 16, stages=3, copy="async"),
    "64x128k16a3": MmaConfig("m16n8k4_f64", 2, 4, 2, 4, 16, stages=3, copy="async"),
    "128x128k32w8a3": MmaConfig("m16n8k4_f64", 2, 4, 4, 4, 32, stages=3, copy="async"),
    "64x64k16w4a4": MmaConfig("m16n8k4_f64", 2, 2, 2, 4, 16, stages=4, copy="async"),
}

CASES = [
    ("dgemm 4096", "ij,jk->ik", dict.fromkeys("ijk", 4096)),
    ("dgemm 1024", "ij,jk->ik", dict.fromkeys("ijk", 1024)),
    ("compute abkl,klcd->abcd 64", "abkl,klcd->abcd", dict.fromkeys("abcdkl", 64)),
    ("compute akbl,cldk->abcd 64", "akbl,cldk->abcd", dict.fromkeys("abcdkl", 64)),
    ("6idx aebf,cedg->abcdfg 16", "abce,edfg->abcdfg", dict.fromkeys("abcdefg", 16)),
]


def program_text(spec: str, sizes: dict[str, int]) -> str:
    ins, out = spec.split("->")
    a, b = ins.split(",")
    dims = sorted(set(spec) - set(",->"))
    lines = [
        "program probe",
        "dims " + ", ".join(f"e{c}" for c in dims),
        "dtype float64",
        f"tensor A[{','.join('e' + c for c in a)}], B[{','.join('e' + c for c in b)}], "
        f"C[{','.join('e' + c for c in out)}]",
        f"C[{','.join(out)}] = A[{','.join(a)}] * B[{','.join(b)}]",
    ]
    return "\n".join(lines) + "\n"


def main() -> None:
    only = sys.argv[1:]
    driver.initialize()
    arch = driver.device_properties().arch
    for name, spec, sizes in CASES:
        if only and not any(o in name for o in only):
            continue
        ins, out = spec.split("->")
        ops = [
            torch.randn(*[sizes[c] for c in t], dtype=torch.float64, device="cuda")
            for t in ins.split(",")
        ]
        flops = 2.0
        for c in set(ins.replace(",", "")):
            flops *= sizes[c]
        ref = torch.einsum(spec, *ops)
        t_torch = timed(lambda spec=spec, ops=ops: torch.einsum(spec, *ops))
        t_ek = timed(lambda spec=spec, ops=ops: einkern.einsum(spec, *ops, backend="cuda"))
        line = [
            f"{name:30s} torch {t_torch:8.3f} ms ({flops / t_torch / 1e9:5.1f} TF/s)",
            f"einkern-simt {t_ek:8.3f} ms ({flops / t_ek / 1e9:5.1f})",
        ]
        problem = make_problem(
            einkern.load(program_text(spec, sizes)), {f"e{c}": v for c, v in sizes.items()}
        )
        task = statement_task(problem, 0)
        result = torch.empty_like(ref)
        best = None
        for cname, config in CONFIGS.items():
            try:
                kernel = lower_mma(task, config, "mma_probe")
                pointers = [ops[0].data_ptr(), ops[1].data_ptr(), result.data_ptr()]
                run, regs, spills, err = checked(kernel, arch, pointers, result, ref)
                t = timed(run)
                print(
                    f"    {cname:12s} {t:8.3f} ms {flops / t / 1e9:6.1f} TF/s  "
                    f"regs {regs} spills {spills} err {err:.1e}",
                    flush=True,
                )
                if err < 1e-12 and (best is None or t < best[1]):
                    best = (cname, t)
            except Exception as error:  # noqa: BLE001 - a probe reports and goes on
                print(
                    f"    {cname:12s} FAILED {type(error).__name__}: {str(error)[:300]}", flush=True
                )
        if best:
            line.append(
                f"mma best {best[0]} {best[1]:8.3f} ms ({flops / best[1] / 1e9:5.1f}) "
                f"= {t_torch / best[1]:.2f}x torch"
            )
        print("  ".join(line), flush=True)


if __name__ == "__main__":
    main()
