"""``riemann``: the Riemann-Christoffel tensor of Treduda section 4.2 (two
permuted reads of A and two contractions of B in one statement), fp64."""

from __future__ import annotations

from ..case import Case, make_case

SIZES = (24, 32, 48)
SIZES_QUICK = (6, 8)

PROGRAM = """\
# Riemann-Christoffel tensor (Treduda section 4.2)
program riemann
dims n = {n}
dtype float64
tensor A[n, n, n, n], B[n, n, n], R[n, n, n, n]
R[i,j,k,l] = A[i,j,k,l] - A[i,l,k,j] + B[m,j,k]*B[i,m,l] - B[m,l,k]*B[i,m,j]
"""


class RiemannSuite:
    """The Riemann-Christoffel statement at n = 24, 32, 48."""

    name = "riemann"
    description = "Riemann-Christoffel tensor (Treduda 4.2), n = 24, 32, 48"

    def cases(self, quick: bool) -> list[Case]:
        return [
            make_case(self.name, "riemann", "riemann", PROGRAM.format(n=n), {"n": n}, n, f"n={n}")
            for n in (SIZES_QUICK if quick else SIZES)
        ]
