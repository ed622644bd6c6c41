"""The instruction mix of the main loop of each CUDA kernel einkern generates for
a program, from its SASS: no GPU needed (NVRTC compiles, ``nvdisasm``
disassembles).

    python scripts/sass_mix.py PROGRAM [-e NAME=VALUE ...] [--arch sm_90]
                               [--no-rewrite] [--nvdisasm PATH]

For each kernel: registers and spills, then its hottest loop (the backward
branch whose body holds the most MMA or FMA instructions): how many
instructions per iteration, how many of them MMAs or FMAs, and the most
frequent opcodes.  A tensor-core loop with many more than ~5 instructions per
MMA, or a SIMT loop well under ~2/3 FMAs, spends its issue slots on something
else (docs/tensor_cores.md "Shared k decodes" found index arithmetic so).

``nvdisasm`` comes with the CUDA toolkit, or from PyPI
(``pip install nvidia-cuda-nvdisasm``: ``nvidia/cu13/bin/nvdisasm`` in
site-packages, which this script finds by itself; make it executable).
"""

from __future__ import annotations

import argparse
import collections
import re
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path

import einkern
from einkern.api import cuda_nests, fusion_plan, rewrites_after_fusion
from einkern.backends import get_backend
from einkern.backends.cuda.generate import generate
from einkern.backends.cuda.nvrtc import compile_cubin
from einkern.ir.bind import make_problem

LINE = re.compile(r"\s*/\*([0-9a-f]{4,})\*/\s+(.*?);")
LABEL = re.compile(r"\s*\.(L_x_\d+):")
FUNCTION = re.compile(r"//-+ \.text\.(\S+)")
HEAVY = ("MMA", "FMA")  # opcode endings counted as the loop's work


def find_nvdisasm(given: str | None) -> str:
    """``given``, else ``nvdisasm`` on PATH, else the PyPI wheel's copy."""
    candidates = [given] if given else []
    candidates.append(shutil.which("nvdisasm") or "")
    for version in ("cu13", "cu12"):
        candidates.append(f"{sysconfig.get_paths()['purelib']}/nvidia/{version}/bin/nvdisasm")
    for path in candidates:
        if path and Path(path).is_file():
            return path
    sys.exit("no nvdisasm: install the CUDA toolkit or `pip install nvidia-cuda-nvdisasm`")


def functions(listing: str) -> dict[str, tuple[list[str], dict[str, int]]]:
    """Per function of an ``nvdisasm -c`` listing: its instructions and labels."""
    found: dict[str, tuple[list[str], dict[str, int]]] = {}
    insts: list[str] = []
    labels: dict[str, int] = {}
    for line in listing.splitlines():
        if match := FUNCTION.match(line):
            insts, labels = [], {}
            found[match.group(1)] = (insts, labels)
        elif match := LABEL.match(line):
            labels[match.group(1)] = len(insts)
        elif match := LINE.match(line):
            insts.append(match.group(2).strip())
    return found


def opcode(inst: str) -> str:
    """The opcode of an instruction, without predicate and modifiers."""
    return re.sub(r"^@!?U?P\w+\s+", "", inst).split()[0].split(".")[0]


def heavy(counts: collections.Counter) -> int:
    """The MMA and FMA instructions among opcode ``counts``."""
    return sum(n for op, n in counts.items() if op.endswith(HEAVY))


def hottest_loop(insts: list[str], labels: dict[str, int]) -> collections.Counter | None:
    """Opcode counts of the loop body with the most MMA/FMA instructions."""
    best, most = None, 0
    for end, inst in enumerate(insts):
        match = re.search(r"BRA\s+`?\(?\.?(L_x_\d+)", inst)
        start = labels.get(match.group(1), end + 1) if match else end + 1
        if start > end:
            continue
        counts = collections.Counter(opcode(i) for i in insts[start : end + 1])
        if heavy(counts) > most:
            best, most = counts, heavy(counts)
    return best


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("program")
    parser.add_argument("-e", "--extent", action="append", default=[], metavar="NAME=VALUE")
    parser.add_argument("--arch", default="sm_90")
    parser.add_argument("--no-rewrite", action="store_true", help="one kernel per statement")
    parser.add_argument("--nvdisasm", default=None)
    args = parser.parse_args()
    extents = {k: int(v) for k, v in (e.split("=", 1) for e in args.extent)}
    plan = fusion_plan(make_problem(einkern.load(args.program), extents), "cuda")
    problem = rewrites_after_fusion(plan, "cuda", not args.no_rewrite).problem
    generated = generate(problem, None, **cuda_nests(plan, get_backend("cuda")))
    module = compile_cubin(generated.text, args.arch)
    with tempfile.NamedTemporaryFile(suffix=".cubin") as cubin:
        cubin.write(module.cubin)
        cubin.flush()
        listing = subprocess.run(
            [find_nvdisasm(args.nvdisasm), "-c", cubin.name],
            check=True,
            capture_output=True,
            text=True,
        ).stdout
    code = functions(listing)
    for resources in module.resources:
        print(resources)
        insts, labels = code.get(resources.name, ([], {}))
        loop = hottest_loop(insts, labels)
        if loop is None:
            print("    no loop with MMA or FMA instructions")
            continue
        total, work = sum(loop.values()), heavy(loop)
        top = ", ".join(f"{op} {n}" for op, n in loop.most_common(10))
        print(
            f"    hottest loop: {total} instructions, {work} MMA/FMA "
            f"({total / work:.1f} per MMA/FMA): {top}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
