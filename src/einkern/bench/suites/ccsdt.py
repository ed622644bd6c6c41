"""``ccsdt``: the 27 NWChem CCSD(T) triples kernels (sd_t_s1_*, sd_t_d1_*, sd_t_d2_*).

The kernels come from ``bench/data/ccsdt_kernels.json`` (a copy of the
project's workload file): Fortran column-major, fp64, every extent equal to
the tile size.  Each kernel is benchmarked alone, and each family of nine as
ONE statement: the nine kernels update the same t3 with differently permuted
outputs, so renaming each kernel's indices to the output order of the first
turns the nine signed products into one right-hand side that updates t3 once.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources

from ..case import Case, make_case

TILES = (16, 24)
TILES_QUICK = (4,)
FAMILIES = ("s1", "d1", "d2")


@dataclass(frozen=True)
class TriplesKernel:
    """One kernel: ``out[out_indices] op a[a_indices] * b[b_indices]``."""

    name: str
    family: str
    op: str
    out: str
    out_indices: tuple[str, ...]
    a: str
    a_indices: tuple[str, ...]
    b: str
    b_indices: tuple[str, ...]

    @property
    def sign(self) -> int:
        return 1 if self.op == "+=" else -1

    def term(self, rename: dict[str, str] | None = None) -> str:
        """The product ``a[...] * b[...]`` with indices renamed by ``rename``."""
        rename = rename or {}

        def access(name: str, indices: tuple[str, ...]) -> str:
            return f"{name}[{','.join(rename.get(i, i) for i in indices)}]"

        return f"{access(self.a, self.a_indices)} * {access(self.b, self.b_indices)}"


def _operand(text: str) -> str:
    """``"t3 (triplesx)"`` → ``"t3"``."""
    return text.split()[0]


@lru_cache(maxsize=1)
def load_kernels() -> tuple[TriplesKernel, ...]:
    """The 27 kernels of the workload file, in its order."""
    text = resources.files("einkern.bench").joinpath("data/ccsdt_kernels.json").read_text()
    kernels = []
    for entry in json.loads(text)["kernels"]:
        expr, operands = entry["expr"], entry["operands"]
        kernels.append(
            TriplesKernel(
                entry["name"],
                entry["family"],
                entry["op"],
                _operand(operands["out"]),
                tuple(expr["out"]),
                _operand(operands["a"]),
                tuple(expr["a"]),
                _operand(operands["b"]),
                tuple(expr["b"]),
            )
        )
    return tuple(kernels)


def _header(name: str, tile: int, kernels: list[TriplesKernel]) -> str:
    first = kernels[0]
    ranks = {
        first.out: len(first.out_indices),
        first.a: len(first.a_indices),
        first.b: len(first.b_indices),
    }
    tensors = ", ".join(f"{t}[{', '.join(['T'] * rank)}]" for t, rank in ranks.items())
    return f"program {name}\ndims T = {tile}\ndtype float64\nlayout column\ntensor {tensors}\n"


def kernel_program(kernel: TriplesKernel, tile: int) -> str:
    """.ein text of one kernel (column-major, fp64, every extent = ``tile``)."""
    statement = f"{kernel.out}[{','.join(kernel.out_indices)}] {kernel.op} {kernel.term()}\n"
    return (
        f"# NWChem CCSD(T) triples kernel {kernel.name}\n"
        + _header(kernel.name, tile, [kernel])
        + statement
    )


def family_statement(kernels: list[TriplesKernel]) -> str:
    """The nine kernels of a family as one statement in the output order of the first.

    Kernel k writes ``t3[out_k]``; renaming ``out_k[p] → out_1[p]`` for every
    position p makes it write ``t3[out_1]``, so all terms share one output.
    Signs are taken relative to the first kernel's ``+=``/``-=``."""
    first = kernels[0]
    text = ""
    for position, kernel in enumerate(kernels):
        if kernel.out != first.out or len(kernel.out_indices) != len(first.out_indices):
            raise ValueError(f"{kernel.name} does not update {first.out} like {first.name}")
        rename = dict(zip(kernel.out_indices, first.out_indices, strict=True))
        clash = set(kernel.a_indices + kernel.b_indices) - set(kernel.out_indices)
        if clash & set(first.out_indices):
            raise ValueError(f"{kernel.name}: summed index {sorted(clash)} is also an output")
        sign = "+" if kernel.sign == first.sign else "-"
        text += kernel.term(rename) if position == 0 else f" {sign}\n    {kernel.term(rename)}"
    return f"{first.out}[{','.join(first.out_indices)}] {first.op} {text}\n"


def family_program(family: str, tile: int) -> str:
    """.ein text of a whole family as one multi-term statement."""
    kernels = [k for k in load_kernels() if k.family == family]
    return (
        f"# NWChem CCSD(T) triples: the nine sd_t_{family} kernels as one statement\n"
        + _header(f"sd_t_{family}_all", tile, kernels)
        + family_statement(kernels)
    )


class CcsdtSuite:
    """The 27 triples kernels alone, and each family of nine as one statement."""

    name = "ccsdt"
    description = "NWChem CCSD(T) triples kernels (s1, d1, d2), alone and as fused families"

    def cases(self, quick: bool) -> list[Case]:
        cases = []
        for tile in TILES_QUICK if quick else TILES:
            for family in FAMILIES:
                group = f"ccsdt {family} T={tile}"
                for kernel in (k for k in load_kernels() if k.family == family):
                    cases.append(
                        make_case(
                            self.name,
                            kernel.name,
                            group,
                            kernel_program(kernel, tile),
                            {"T": tile},
                            tile,
                            f"T={tile}",
                        )
                    )
                cases.append(
                    make_case(
                        self.name,
                        f"sd_t_{family}_all",
                        group,
                        family_program(family, tile),
                        {"T": tile},
                        tile,
                        f"T={tile}",
                        note="nine kernels as one statement",
                    )
                )
        return cases
