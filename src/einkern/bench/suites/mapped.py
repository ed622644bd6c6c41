"""``mapped``: Fousek's mapped functions I (Listing 4.1) and II (Listing 5.1), each
applied to 31744 data elements (the element count of his experiments) through
einkern's mapped-function importer; fp64."""

from __future__ import annotations

from ..case import Case, make_case

ELEMENTS = 31744
ELEMENTS_QUICK = 100

#: Function I: F = ||A·B·c||₂ · (D·E + D) with 3×3, 5×5 matrices and a 3-vector.
FUNCTION_I = """\
MATRIX3x3 A, B, M1;
MATRIX5x5 D, E, F, M2, M3;
VECTOR3 c, v1;
SCALAR s1;
input A, B, c, D, E;
M1 = mmul33(A, B);
v1 = mvmul33(M1, c);
s1 = venorm3(v1);
M2 = mmul55(D, E);
M3 = madd55(M2, D);
F = smmul55(M3, s1);
return F;
"""

#: Function II: F = A·B + A·C + A·D with 5×5 matrices.
FUNCTION_II = """\
MATRIX5x5 A, B, C, D, M1, M2, M3, M4, F;
input A, B, C, D;
M1 = mmul55(A, B);
M2 = mmul55(A, C);
M3 = mmul55(A, D);
M4 = madd55(M1, M2);
F = madd55(M4, M3);
return F;
"""


class MappedSuite:
    """Fousek's two mapped functions over a batch of elements."""

    name = "mapped"
    description = "Fousek's mapped functions I and II over 31744 elements (mapped importer)"

    def cases(self, quick: bool) -> list[Case]:
        count = ELEMENTS_QUICK if quick else ELEMENTS
        return [
            make_case(
                self.name,
                workload,
                "mapped functions",
                text,
                {"nbatch": count},
                count,
                f"{count} elements",
            )
            for workload, text in (("fousek_I", FUNCTION_I), ("fousek_II", FUNCTION_II))
        ]
