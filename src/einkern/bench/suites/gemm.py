"""``gemm``: matrix products C = op(A)·op(B) as .ein programs.

* square n = 256 … 8192 (powers of two and the awkward 1000, 3000, 4095), fp32
  and fp64 (MAGMA's Figures 4.18/4.19 plot square SGEMM/DGEMM the same way);
* the four op(A)/op(B) combinations at one size, a transpose being a stored
  ``[k, m]`` matrix read as ``A[l, i]``;
* a tall-skinny (8192×64)·(64×8192) product;
* the two DGEMM shapes of a block LU factorisation of a 6144² matrix (MAGMA
  Figure 4.20): N×BS times BS×(N−BS), and N×BS times BS×BS, for BS = 64 and
  128, column-major as in LAPACK, at trailing sizes N up to 6144.
"""

from __future__ import annotations

from ..case import Case, make_case

SQUARE = (256, 512, 1000, 1024, 2048, 3000, 4095, 4096, 8192)
SQUARE_QUICK = (64, 100)
PREFIX = {"float32": "s", "float64": "d"}


def gemm_program(
    name: str,
    m: int,
    n: int,
    k: int,
    dtype: str,
    op_a: str = "N",
    op_b: str = "N",
    layout: str = "row",
) -> str:
    """.ein text of ``C[m,n] = op(A)·op(B)``; op ``T`` stores the matrix transposed."""
    a_shape, a_access = ("k, m", "A[l,i]") if op_a == "T" else ("m, k", "A[i,l]")
    b_shape, b_access = ("n, k", "B[j,l]") if op_b == "T" else ("k, n", "B[l,j]")
    return (
        f"# C = op(A) op(B) with op(A) = {op_a}, op(B) = {op_b}\n"
        f"program {name}\n"
        f"dims m = {m}, n = {n}, k = {k}\n"
        f"dtype {dtype}\n"
        f"layout {layout}\n"
        f"tensor A[{a_shape}], B[{b_shape}], C[m, n]\n"
        f"C[i,j] = {a_access} * {b_access}\n"
    )


def _case(
    workload: str,
    group: str,
    m: int,
    n: int,
    k: int,
    dtype: str,
    size: float,
    label: str,
    op_a: str = "N",
    op_b: str = "N",
    layout: str = "row",
) -> Case:
    program = gemm_program(workload, m, n, k, dtype, op_a, op_b, layout)
    return make_case("gemm", workload, group, program, {"m": m, "n": n, "k": k}, size, label)


class GemmSuite:
    """Square, transposed, tall-skinny and block-LU matrix products."""

    name = "gemm"
    description = "C = op(A) op(B): square fp32/fp64, op combinations, tall-skinny, block LU"

    def cases(self, quick: bool) -> list[Case]:
        square = SQUARE_QUICK if quick else SQUARE
        op_size = 64 if quick else 4096
        tall, thin = (256, 16) if quick else (8192, 64)
        lu_sizes = (128, 256) if quick else (2048, 4096, 6144)
        blocks = (16, 32) if quick else (64, 128)
        cases: list[Case] = []
        largest: list[Case] = []
        for dtype in ("float32", "float64"):
            workload = f"{PREFIX[dtype]}gemm"
            for n in square:
                case = _case(workload, f"{workload} square", n, n, n, dtype, n, f"n={n}")
                (largest if n == max(square) and not quick else cases).append(case)
        for op_a in "NT":
            for op_b in "NT":
                workload = f"sgemm_{op_a}{op_b}"
                cases.append(
                    _case(
                        workload,
                        "sgemm op(A) op(B)",
                        op_size,
                        op_size,
                        op_size,
                        "float32",
                        op_size,
                        f"n={op_size}",
                        op_a,
                        op_b,
                    )
                )
        for dtype in ("float32", "float64"):
            workload = f"{PREFIX[dtype]}gemm_tall_skinny"
            cases.append(
                _case(
                    workload, "tall-skinny", tall, tall, thin, dtype, tall, f"{tall}x{thin}x{tall}"
                )
            )
        for bs in blocks:
            for n in lu_sizes:
                cases.append(
                    _case(
                        f"dgemm_lu_update_bs{bs}",
                        f"block LU BS={bs}",
                        n,
                        n - bs,
                        bs,
                        "float64",
                        n,
                        f"N={n}",
                        layout="column",
                    )
                )
                cases.append(
                    _case(
                        f"dgemm_lu_panel_bs{bs}",
                        f"block LU BS={bs}",
                        n,
                        bs,
                        bs,
                        "float64",
                        n,
                        f"N={n}",
                        layout="column",
                    )
                )
        return cases + largest  # the slowest last: a suite time limit cuts them first
