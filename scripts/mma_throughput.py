"""Peak throughput of every mma.sync shape of einkern.gpu.mma on this GPU.

Each warp keeps its fragments in registers and runs ``ACC`` independent
accumulator chains of ``ITERS`` instructions (enough to hide the latency);
enough blocks fill every SM several times.  Prints TFLOP/s per shape (the
tensor-core issue chooses the f64 shape from these figures)."""

from __future__ import annotations

import statistics

from einkern.backends.cuda import driver
from einkern.backends.cuda.nvrtc import compile_cubin
from einkern.gpu.mma import SHAPES, MmaShape, asm_statement, registers

ACC = 4
ITERS = 4096
WARPS = 4

REG = {"f64": "double", "f32": "float", "tf32": "unsigned", "bf16": "unsigned", "f16": "unsigned"}


def source(shape: MmaShape) -> str:
    na, nb, nc = registers(shape)
    rin, racc = REG[shape.input_type], REG[shape.accumulator]
    lines = [
        f'extern "C" __global__ void bench({racc} *out, double iterations)',
        "{",
        "    int n = (int)iterations;",
        f"    {rin} a[{na}], b[{nb}];",
        f"    {racc} c[{ACC}][{nc}];",
    ]
    init = "(threadIdx.x + {j})" if rin == "unsigned" else "(threadIdx.x * 1e-3 + {j})"
    lines += [f"    a[{j}] = {init.format(j=j)};" for j in range(na)]
    lines += [f"    b[{j}] = {init.format(j=j + 7)};" for j in range(nb)]
    lines += [f"    c[{s}][{j}] = 0;" for s in range(ACC) for j in range(nc)]
    lines.append("    for (int it = 0; it < n; ++it) {")
    for s in range(ACC):
        regs = [f"c[{s}][{j}]" for j in range(nc)]
        a = [f"a[{j}]" for j in range(na)]
        b = [f"b[{j}]" for j in range(nb)]
        lines.append("        " + asm_statement(shape, regs, a, b, regs))
    lines.append("    }")
    total = " + ".join(f"c[{s}][{j}]" for s in range(ACC) for j in range(nc))
    lines.append(f"    out[blockIdx.x * blockDim.x + threadIdx.x] = {total};")
    lines.append("}")
    return "\n".join(lines) + "\n"


def main() -> None:
    driver.initialize()
    driver.activate(0)
    props = driver.device_properties()
    arch = int(props.arch.removeprefix("sm_").rstrip("a"))
    blocks = props.multiprocessors * 8
    threads = 32 * WARPS
    out = driver.alloc(blocks * threads * 8)
    print(
        f"{props.name}: {props.multiprocessors} SMs; {blocks} blocks x {WARPS} warps, "
        f"{ACC} chains x {ITERS} instructions per warp"
    )
    for name, shape in SHAPES.items():
        if arch < shape.min_arch or shape.group > 1:  # wgmma: scripts/wgmma_probe.py
            continue
        module = driver.load_module(compile_cubin(source(shape), props.arch).cubin, ["bench"])
        kernel = module.functions["bench"]
        timer = driver.EventTimer()
        times = []
        for repeat in range(7):
            timer.start()
            driver.launch(kernel, (blocks, 1, 1), (threads, 1, 1), [out], [float(ITERS)])
            ms = timer.stop()
            if repeat:
                times.append(ms)
        timer.close()
        flops = blocks * WARPS * ACC * ITERS * shape.flops
        ms = statistics.median(times)
        print(f"{name:14s} {shape.ptx:52s} {flops / ms / 1e9:8.1f} TFLOP/s  ({ms:.3f} ms)")
    driver.free(out)


if __name__ == "__main__":
    main()
