"""``nekbone``: local_grad3, the derivative of u along each of the three directions
of every spectral element (three statements, each reads u and writes one output),
fp64, polynomial order p = 8, 10, 12 on 1000 and 32768 elements."""

from __future__ import annotations

from ..case import Case, make_case

ORDERS = (8, 10, 12)
ELEMENTS = (1000, 32768)

PROGRAM = """\
# nekbone local_grad3: derivatives of u along the three directions of each element
program local_grad3
dims p = {p}, nelt = {nelt}
dtype float64
tensor u[nelt, p, p, p], D[p, p], Dt[p, p]
tensor ur[nelt, p, p, p], us[nelt, p, p, p], ut[nelt, p, p, p]
ur[e,i,j,k] = D[k,m] * u[e,i,j,m]
us[e,i,j,k] = Dt[m,j] * u[e,i,m,k]
ut[e,i,j,k] = Dt[m,i] * u[e,m,j,k]
"""


class NekboneSuite:
    """local_grad3 over polynomial orders and element counts."""

    name = "nekbone"
    description = "nekbone local_grad3 (three statements), p = 8, 10, 12; 1000 and 32768 elements"

    def cases(self, quick: bool) -> list[Case]:
        grid = [(4, 50)] if quick else [(p, n) for n in ELEMENTS for p in ORDERS]
        return [
            make_case(
                self.name,
                "local_grad3",
                f"local_grad3 nelt={nelt}",
                PROGRAM.format(p=p, nelt=nelt),
                {"p": p, "nelt": nelt},
                p,
                f"p={p}",
            )
            for p, nelt in grid
        ]
