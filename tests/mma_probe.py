"""A one-warp CUDA kernel that checks an MMA fragment layout on the hardware:
it loads A, B and C into fragments by the layout's table, executes the
instruction and stores D by the table (tests/test_mma.py compiles it,
tests/test_gpu_mma.py runs it)."""

from __future__ import annotations

import numpy as np

from einkern.gpu.mma import Layout, MmaShape, asm_statement, registers

MEMORY_TYPE = {"f64": "double", "f32": "float", "tf32": "float", "bf16": "unsigned short"}
MEMORY_TYPE["f16"] = "unsigned short"


def probe_source(shape: MmaShape, a: Layout | None = None) -> str:
    """CUDA C of ``extern "C" __global__ void probe(A, B, C, D)`` for ``shape``
    (``a``: a different layout for A, to plant a fault)."""
    a = a or shape.a
    na, nb, nc = registers(shape)
    tin, tacc = MEMORY_TYPE[shape.input_type], MEMORY_TYPE[shape.accumulator]
    reg = {"f64": "double", "tf32": "unsigned", "bf16": "unsigned", "f16": "unsigned"}
    rtype = reg[shape.input_type]
    lines = [
        a.c_array("ekA", "static __device__"),
        shape.b.c_array("ekB", "static __device__"),
        shape.c.c_array("ekC", "static __device__"),
        f'extern "C" __global__ void probe(const {tin} *A, const {tin} *B, const {tacc} *C,'
        f" {tacc} *D)",
        "{",
        "    int lane = threadIdx.x;",
        f"    {rtype} a[{na}], b[{nb}];",
        f"    {tacc} c[{nc}], d[{nc}];",
    ]
    for name, width, count in (("a", shape.k, na), ("b", shape.n, nb)):
        table = "ek" + name.upper()
        source = name.upper()
        for j in range(count):
            if shape.input_type == "f64":
                lines.append(
                    f"    {name}[{j}] = {source}[{table}[lane][{j}][0] * {width}"
                    f" + {table}[lane][{j}][1]];"
                )
            elif shape.input_type == "tf32":
                lines.append(
                    f'    asm("cvt.rna.tf32.f32 %0, %1;" : "=r"({name}[{j}]) : '
                    f'"f"({source}[{table}[lane][{j}][0] * {width} + {table}[lane][{j}][1]]));'
                )
            else:  # two 16-bit values per register, the lower-numbered element low
                lo, hi = 2 * j, 2 * j + 1
                lines.append(
                    f"    {name}[{j}] = (unsigned){source}[{table}[lane][{lo}][0] * {width}"
                    f" + {table}[lane][{lo}][1]] | ((unsigned){source}[{table}[lane][{hi}][0]"
                    f" * {width} + {table}[lane][{hi}][1]] << 16);"
                )
    for j in range(nc):
        lines.append(f"    c[{j}] = C[ekC[lane][{j}][0] * {shape.n} + ekC[lane][{j}][1]];")
    lines.append(
        "    "
        + asm_statement(
            shape,
            [f"d[{j}]" for j in range(nc)],
            [f"a[{j}]" for j in range(na)],
            [f"b[{j}]" for j in range(nb)],
            [f"c[{j}]" for j in range(nc)],
        )
    )
    for j in range(nc):
        lines.append(f"    D[ekC[lane][{j}][0] * {shape.n} + ekC[lane][{j}][1]] = d[{j}];")
    lines.append("}")
    return "\n".join(lines) + "\n"


def probe_inputs(shape: MmaShape, seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Random A (m×k), B (k×n), C (m×n) as the probe reads them (bf16/f16 as
    their 16-bit patterns), row-major."""
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((shape.m, shape.k))
    b = rng.standard_normal((shape.k, shape.n))
    c = rng.standard_normal((shape.m, shape.n))
    if shape.accumulator == "f32":
        c = c.astype(np.float32)
    if shape.input_type == "f64":
        return a, b, c
    if shape.input_type == "tf32":
        return a.astype(np.float32), b.astype(np.float32), c
    if shape.input_type == "f16":
        return a.astype(np.float16).view(np.uint16), b.astype(np.float16).view(np.uint16), c
    from einkern.gpu.mma import round_bf16

    def bits(x: np.ndarray) -> np.ndarray:
        return (round_bf16(x.astype(np.float32)).view(np.uint32) >> 16).astype(np.uint16)

    return bits(a), bits(b), c


def values(shape: MmaShape, x: np.ndarray) -> np.ndarray:
    """What the probe's inputs stand for, as float32/float64 (bf16/f16 decoded)."""
    if shape.input_type == "f16":
        return x.view(np.float16).astype(np.float32)
    if shape.input_type == "bf16":
        return (x.astype(np.uint32) << 16).view(np.float32)
    return x


def expected(shape: MmaShape, a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
    """D by the NumPy model (gpu.mma.execute) from the probe's inputs."""
    from einkern.gpu.mma import execute

    fa = shape.a.gather(values(shape, a))
    fb = shape.b.gather(values(shape, b))
    fc = shape.c.gather(c)
    return shape.c.scatter(execute(shape, fa, fb, fc))
