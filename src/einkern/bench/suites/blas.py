"""``blas``: the ``einkern.blas`` routines against cuBLAS (GPU) and SciPy's BLAS
(CPU): gemv N and T, symv (lower) at n = 8192 and 16384 in fp32 and fp64, and
axpy on vectors of n² elements (the matrices' size: a vector of 8192 elements is
launch-bound in every library, so no DRAM floor can be approached);
gemm in its four op combinations, syrk (lower) and trsm (left, lower, no
transpose, non-unit; 4096 right-hand sides) at n = 4096 in fp32.  Cases run
routines, not programs (:mod:`einkern.bench.routines`)."""

from __future__ import annotations

from ..case import Case

VECTOR_SIZES = (8192, 16384)
VECTOR_QUICK = (64, 100)
MATRIX_SIZE = 4096
MATRIX_QUICK = 48


def _case(routine: str, group: str, extents: dict[str, int], label: str) -> Case:
    return Case(
        "blas",
        routine.replace(":", "_"),
        group,
        "",
        tuple(extents.items()),
        float(extents["n"]),
        label,
        routine=routine,
    )


class BlasSuite:
    """MAGMA's BLAS set through einkern.blas."""

    name = "blas"
    description = "einkern.blas routines (axpy, gemv, symv, gemm, syrk, trsm) vs cuBLAS / SciPy"

    def cases(self, quick: bool) -> list[Case]:
        cases = []
        for prefix in "sd":
            for n in VECTOR_QUICK if quick else VECTOR_SIZES:
                label = f"n={n}"
                # axpy on as many elements as gemv's matrix: at n elements a
                # vector of 8192 is 64 KiB, launch-bound for every library
                cases.append(_case(f"{prefix}axpy", "axpy", {"n": n * n}, f"n={n}²"))
                for variant in "NT":
                    cases.append(_case(f"{prefix}gemv:{variant}", "gemv", {"n": n}, label))
                cases.append(_case(f"{prefix}symv:L", "symv", {"n": n}, label))
        n = MATRIX_QUICK if quick else MATRIX_SIZE
        for variant in ("NN", "NT", "TN", "TT"):
            cases.append(_case(f"sgemm:{variant}", "sgemm", {"n": n}, f"n={n}"))
        cases.append(_case("ssyrk:L", "ssyrk", {"n": n, "k": n}, f"n=k={n}"))
        cases.append(_case("strsm:LLNN", "strsm", {"n": n, "m": n}, f"n={n}, {n} rhs"))
        return cases
