"""Issue 3 figures on a GPU: default mapping and a small hand sweep against the peers.

Run on a CUDA machine:  python scripts/bench_mappings.py [--quick] [--only NAME ...]
Prints one table (Markdown) last; writes JSON next to it when --out is given.
Timing: CUDA events around each launch, L2 flushed before every timed run by
zeroing a buffer of 4× the L2 size, median of many runs after warm-up, fresh
random inputs in [0.5, 1.5) per case.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path

import torch

import einkern
from einkern.gpu.config import StagingConfig
from einkern.gpu.decision import default_config
from einkern.gpu.mapping import Mapping
from einkern.gpu.space import config_to_mapping
from einkern.ir.task import statement_task

ROOT = Path(__file__).resolve().parent.parent
WORKLOAD = ROOT / "src" / "einkern" / "bench" / "data" / "ccsdt_kernels.json"


def timer(fn, flush, repeats: int) -> tuple[float, float]:
    """Median and interquartile spread (ms) of fn() with a flushed L2 before each run,
    after at least 3 calls and 50 ms of warm-up (clocks up, caches and modules loaded)."""
    began, calls = time.perf_counter(), 0
    while calls < 3 or time.perf_counter() - began < 0.05:
        fn()
        torch.cuda.synchronize()
        calls += 1
    times = []
    for _ in range(repeats):
        flush()
        # keep the GPU busy while the host prepares the call (einkern's Python call
        # path takes ~35 µs): the events then time the GPU's work, not host latency
        torch.cuda._sleep(1_000_000)
        start = torch.cuda.Event(enable_timing=True)
        stop = torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        stop.record()
        stop.synchronize()
        times.append(start.elapsed_time(stop))
    times.sort()
    q1, q3 = times[len(times) // 4], times[(3 * len(times)) // 4]
    return statistics.median(times), q3 - q1


def rand(shape, dtype, column=False):
    if column:
        data = torch.rand(tuple(reversed(shape)), dtype=dtype, device="cuda") + 0.5
        return data.permute(*reversed(range(len(shape))))
    return torch.rand(tuple(shape), dtype=dtype, device="cuda") + 0.5


def rel_error(a, b) -> float:
    a = a.double()
    b = b.double()
    return float((a - b).abs().max() / b.abs().max())


class Env:
    def __init__(self, repeats: int):
        self.repeats = repeats
        props = torch.cuda.get_device_properties(0)
        self.l2 = props.L2_cache_size
        self.cache = torch.empty(4 * self.l2 // 4, dtype=torch.float32, device="cuda")
        self.device = props.name
        x = torch.rand(1 << 28, dtype=torch.float32, device="cuda")
        y = torch.empty_like(x)
        began = time.perf_counter()  # half a second of work: clocks up from idle
        while time.perf_counter() - began < 0.5:
            y.copy_(x)
            torch.cuda.synchronize()
        ms, _ = timer(lambda: y.copy_(x), self.flush, 20)
        self.bandwidth = 2 * x.numel() * 4 / (ms * 1e-3)

    def flush(self):
        self.cache.zero_()


def kernel(text: str, extents: dict, config=None):
    mappings = None if config is None else {0: config}
    return einkern.compile(text, backend="cuda", mappings=mappings, **extents)


GEMM = """
dims m, n, k
dtype float32
tensor A[m, k], B[k, n], C[m, n]
C[i,j] = A[i,l] * B[l,j]
"""


def gemm_rows(env: Env, sizes, sweep: bool):
    rows = []
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    for n in sizes:
        A, B = rand((n, n), torch.float32), rand((n, n), torch.float32)
        ref = torch.matmul(A.double(), B.double())
        cublas, _ = timer(lambda A=A, B=B: torch.matmul(A, B), env.flush, env.repeats)
        flops = 2.0 * n**3
        k = kernel(GEMM, {"m": n, "n": n, "k": n})
        problem = k.problem
        base, _ = default_config(statement_task(problem, 0))
        configs = [("default", None)]
        if sweep:
            for name, change in SGEMM_SWEEP:
                configs.append((name, {**base.to_json(), **change}))
            configs.append(("default, timed again (noise)", base.to_json()))
        for name, config in configs:
            try:
                kk = k if config is None else kernel(GEMM, {"m": n, "n": n, "k": n}, config)
                C = kk(A, B)
                err = rel_error(C, ref)
                ms, spread = timer(
                    lambda kk=kk, A=A, B=B, C=C: kk(A, B, C=C), env.flush, env.repeats
                )
                rows.append(
                    {
                        "case": f"sgemm n={n}",
                        "variant": name,
                        "ms": ms,
                        "spread": spread,
                        "tflops": flops / ms / 1e9,
                        "vs_peer": cublas / ms,
                        "peer": "cuBLAS",
                        "error": err,
                    }
                )
            except Exception as exc:  # noqa: BLE001 - a failing variant is a row
                rows.append({"case": f"sgemm n={n}", "variant": name, "failed": str(exc)[:200]})
        rows.append(
            {
                "case": f"sgemm n={n}",
                "variant": "cuBLAS (torch.matmul, TF32 off)",
                "ms": cublas,
                "tflops": flops / cublas / 1e9,
            }
        )
    return rows


#: Changes to the default configuration (x cyclic in runs of 4, k-step 8, prefetch).
SGEMM_SWEEP = [
    (
        "x cyclic by element, k16 (the previous default)",
        {"assign": "mixed", "staging": ["all", 16, True, 0, "compute"]},
    ),
    ("x cyclic by element, k8", {"assign": "mixed"}),
    ("chunked k16", {"staging": ["all", 16, True, 0, "compute"]}),
    ("chunked k32", {"staging": ["all", 32, True, 0, "compute"]}),
    ("chunked k8 no prefetch", {"staging": ["all", 8, False, 0, "compute"]}),
    ("chunked k8 pad1", {"staging": ["all", 8, True, 1, "compute"]}),
    ("adjacent k8", {"assign": "adjacent"}),
    ("redirect", {"boundary": "redirect"}),
    ("guard", {"boundary": "guard"}),
    ("padded (copies timed)", {"boundary": "pad"}),
]


def variant_rows(
    env: Env,
    case: str,
    text: str,
    extents: dict,
    inputs: dict,
    outputs,
    reference: dict,
    floor_ms: float,
    sweep,
    peers: dict,
    flops: float,
):
    """Time the default mapping and each sweep entry (config overrides for every
    statement) of one program; rows report the fraction of the floor and the peers."""
    rows = []
    base = einkern.compile(text, backend="cuda", **extents)
    configs = [("default", None)]
    for name, change in [*sweep, ("default, timed again (noise)", {})]:
        per_statement = {}
        for position in range(len(base.problem.program.statements)):
            if "parallel" in change:  # a whole Mapping (JSON form) for every statement
                per_statement[position] = Mapping.from_json(json.dumps(change))
                continue
            config, _ = default_config(statement_task(base.problem, position))
            per_statement[position] = {**config.to_json(), **change}
        configs.append((name, per_statement))
    for name, mappings in configs:
        try:
            kk = (
                base
                if mappings is None
                else einkern.compile(text, backend="cuda", mappings=mappings, **extents)
            )
            work = {k: v.clone() for k, v in inputs.items()}
            kk(**work)
            err = max(rel_error(work[o], reference[o]) for o in outputs)
            work = {k: v.clone() for k, v in inputs.items()}
            ms, spread = timer(lambda kk=kk, work=work: kk(**work), env.flush, env.repeats)
            row = {
                "case": case,
                "variant": name,
                "ms": ms,
                "spread": spread,
                "floor": floor_ms / ms,
                "error": err,
                "tflops": flops / ms / 1e9,
            }
            for peer, peer_ms in peers.items():
                row[f"vs {peer}"] = peer_ms / ms
            row["vs_peer"] = min(peers.values()) / ms if peers else 1.0
            row["peer"] = min(peers, key=peers.get) if peers else ""
            rows.append(row)
        except Exception as exc:  # noqa: BLE001 - a failing variant is a row
            rows.append({"case": case, "variant": name, "failed": str(exc)[:300]})
    for peer, peer_ms in peers.items():
        rows.append(
            {
                "case": case,
                "variant": peer,
                "ms": peer_ms,
                "floor": floor_ms / peer_ms,
                "tflops": flops / peer_ms / 1e9,
            }
        )
    return rows


#: The best sd_t_d1_1 configuration of `tuning_study.py race` (model strategy), H200.
D1_TUNED = {
    "x": "h3",
    "y": "h2",
    "block": [0, 8],
    "regs": [1, 2, 4],
    "assign": "adjacent",
    "staging": ["A", 32, True, 0, "compute"],
    "unroll": 1,
    "boundary": "exact",
}


def d1_rows(env: Env, T: int):
    text = (ROOT / "examples" / "sd_t_d1_1.ein").read_text()
    t3 = rand((T,) * 6, torch.float64, column=True)
    t2 = rand((T,) * 4, torch.float64, column=True)
    v2 = rand((T,) * 4, torch.float64, column=True)
    ref = t3.clone() - torch.einsum("gfea,cbdg->cbadef", t2, v2)
    work = t3.clone()
    peer, _ = timer(
        lambda: work.sub_(torch.einsum("gfea,cbdg->cbadef", t2, v2)), env.flush, env.repeats
    )
    floor = 2 * t3.numel() * 8 / env.bandwidth * 1e3
    sweep = [
        (
            "h3 x h1 16x16 z4 no unroll",
            {"x": "h3", "y": "h1", "block": [16, 16], "regs": [1, 1, 4], "unroll": 1},
        ),
        ("h3 x h1 16x16 z2", {"x": "h3", "y": "h1", "block": [16, 16], "regs": [1, 1, 2]}),
        ("h3 x h1 16x16 z8", {"x": "h3", "y": "h1", "block": [16, 16], "regs": [1, 1, 8]}),
        ("h3 x h1 16x8 r2 z4", {"x": "h3", "y": "h1", "block": [16, 8], "regs": [1, 2, 4]}),
        ("h3 x h1 16x4 r4 z2", {"x": "h3", "y": "h1", "block": [16, 4], "regs": [1, 4, 2]}),
        (
            "h3 x h1 16x16 z4 staged",
            {
                "x": "h3",
                "y": "h1",
                "block": [16, 16],
                "regs": [1, 1, 4],
                "staging": ["all", 16, False, 1, "natural"],
            },
        ),
        ("h3 x h1 16x8 z4", {"x": "h3", "y": "h1", "block": [16, 8], "regs": [1, 1, 4]}),
        # the best of `tuning_study.py race` (model strategy) on an H200
        ("h3 x h2 16x8 r2 z4, t2 staged, prefetch (tuner's best)", {**D1_TUNED, "preload": False}),
        ("default, output not preloaded", {"preload": False}),
        (
            "h3 x h1 16x16 z4 no unroll, output preloaded",
            {
                "x": "h3",
                "y": "h1",
                "block": [16, 16],
                "regs": [1, 1, 4],
                "unroll": 1,
                "preload": True,
            },
        ),
        ("tuner's best, output preloaded", {**D1_TUNED, "preload": True}),
    ]
    return variant_rows(
        env,
        f"sd_t_d1_1 T={T} fp64",
        text,
        {"T": T},
        {"t3": t3, "t2": t2, "v2": v2},
        ["t3"],
        {"t3": ref},
        floor,
        sweep,
        {"torch.einsum": peer},
        2.0 * T**7,
    )


def nekbone_rows(env: Env, p: int, nelt: int):
    text = (ROOT / "examples" / "local_grad3.ein").read_text()
    u = rand((nelt, p, p, p), torch.float64)
    D = rand((p, p), torch.float64)
    Dt = rand((p, p), torch.float64)
    ref = {
        "ur": torch.einsum("km,eijm->eijk", D, u),
        "us": torch.einsum("mj,eimk->eijk", Dt, u),
        "ut": torch.einsum("mi,emjk->eijk", Dt, u),
    }
    peer, _ = timer(
        lambda: (
            torch.einsum("km,eijm->eijk", D, u),
            torch.einsum("mj,eimk->eijk", Dt, u),
            torch.einsum("mi,emjk->eijk", Dt, u),
        ),
        env.flush,
        env.repeats,
    )
    floor = 6 * u.numel() * 8 / env.bandwidth * 1e3
    outs = {name: torch.empty_like(u) for name in ref}
    sweep = [
        (
            "p x p faces z4 no unroll",
            {"x": "k", "y": "j", "block": [0, 0], "regs": [1, 1, 4], "unroll": 1},
        ),
        ("p x p faces z2", {"x": "k", "y": "j", "block": [0, 0], "regs": [1, 1, 2]}),
        ("p x p faces z8", {"x": "k", "y": "j", "block": [0, 0], "regs": [1, 1, 8]}),
        (
            "p x p faces z4 stage A",
            {
                "x": "k",
                "y": "j",
                "block": [0, 0],
                "regs": [1, 1, 4],
                "staging": ["A", 16, False, 0, "compute"],
            },
        ),
        (
            "p x p faces z8 stage A",
            {
                "x": "k",
                "y": "j",
                "block": [0, 0],
                "regs": [1, 1, 8],
                "staging": ["A", 16, False, 0, "compute"],
            },
        ),
        ("p x 4 z4", {"x": "k", "y": "j", "block": [0, 4], "regs": [1, 1, 4], "boundary": "guard"}),
        # u staged: ncu showed the L1/L2 load pipeline, not DRAM, busiest (us: DRAM
        # 43 % of peak, memory pipes 74 %, L1 hit 69 %, L2 hit 56 %, H200)
        (
            "p x p faces z4 stage B (u)",
            {
                "x": "k",
                "y": "j",
                "block": [0, 0],
                "regs": [1, 1, 4],
                "staging": ["B", 16, False, 0, "natural"],
            },
        ),
        (
            "p x p faces z4 stage B (u) pad 1",
            {
                "x": "k",
                "y": "j",
                "block": [0, 0],
                "regs": [1, 1, 4],
                "staging": ["B", 16, False, 1, "natural"],
            },
        ),
        (
            "p x p faces z4 stage all",
            {
                "x": "k",
                "y": "j",
                "block": [0, 0],
                "regs": [1, 1, 4],
                "staging": ["all", 16, False, 1, "natural"],
            },
        ),
        (
            "p x p faces z2 stage all",
            {
                "x": "k",
                "y": "j",
                "block": [0, 0],
                "regs": [1, 1, 2],
                "staging": ["all", 16, False, 1, "natural"],
            },
        ),
    ] + [
        (
            f"p x p faces z4 stage all, pad {pad}, {layout}" + (", prefetch" if fetch else ""),
            {
                "x": "k",
                "y": "j",
                "block": [0, 0],
                "regs": [1, 1, 4],
                "staging": ["all", 16, fetch, pad, layout],
            },
        )
        for pad, layout, fetch in (
            (0, "natural", False),
            (1, "compute", False),
            (0, "compute", False),
            (1, "natural", True),
        )
    ]
    return variant_rows(
        env,
        f"local_grad3 p={p} nelt={nelt} fp64",
        text,
        {"p": p, "nelt": nelt},
        {"u": u, "D": D, "Dt": Dt, **outs},
        list(ref),
        ref,
        floor,
        sweep,
        {"torch.einsum x3": peer},
        3 * 2.0 * nelt * p**4,
    )


def family_text(family: str) -> tuple[str, list]:
    """The nine kernels of a CCSD(T) family as one multi-term statement on t3."""
    data = json.loads(WORKLOAD.read_text())
    kernels = [k for k in data["kernels"] if k["family"] == family]
    canonical = kernels[0]["expr"]["out"]
    terms = []
    for kernel in kernels:
        rename = dict(zip(kernel["expr"]["out"], canonical, strict=True))
        a = [rename.get(i, i) for i in kernel["expr"]["a"]]
        b = [rename.get(i, i) for i in kernel["expr"]["b"]]
        sign = "+" if kernel["op"] == "+=" else "-"
        names = (kernel["operands"]["a"].split()[0], kernel["operands"]["b"].split()[0])
        terms.append((sign, names, a, b))
    rhs = " ".join(f"{s} {na}[{','.join(a)}] * {nb}[{','.join(b)}]" for s, (na, nb), a, b in terms)
    first = "t2" if family != "s1" else "t1"
    shape_a = ", ".join(["T"] * len(terms[0][2]))
    text = f"""program ccsdt_{family}_family
dims T = 16
layout column
tensor t3[T, T, T, T, T, T], {first}[{shape_a}], v2[T, T, T, T]
t3[{",".join(canonical)}] += {rhs.lstrip("+ ")}
"""
    return text, terms


def family_rows(env: Env, family: str, T: int):
    text, terms = family_text(family)
    letters = {}

    def letter(index):
        return letters.setdefault(index, "abcdefghijklmnopqrstuvwxyz"[len(letters)])

    canonical = json.loads(WORKLOAD.read_text())["kernels"]
    canonical = [k for k in canonical if k["family"] == family][0]["expr"]["out"]
    t3 = rand((T,) * 6, torch.float64, column=True)
    a_name = "t2" if family != "s1" else "t1"
    ta = rand((T,) * len(terms[0][2]), torch.float64, column=True)
    v2 = rand((T,) * 4, torch.float64, column=True)
    specs = []
    for sign, _, a, b in terms:
        spec = (
            f"{''.join(letter(i) for i in a)},{''.join(letter(i) for i in b)}->"
            f"{''.join(letter(i) for i in canonical)}"
        )
        specs.append((sign, spec))
    ref = t3.clone()
    for sign, spec in specs:
        term = torch.einsum(spec, ta, v2)
        ref = ref + term if sign == "+" else ref - term
    work = t3.clone()

    def nine_updates():
        for sign, spec in specs:
            term = torch.einsum(spec, ta, v2)
            work.add_(term) if sign == "+" else work.sub_(term)

    peer, _ = timer(nine_updates, env.flush, env.repeats)
    floor = 2 * t3.numel() * 8 / env.bandwidth * 1e3
    flops = 9 * 2.0 * T ** (7 if family != "s1" else 6)
    sweep = [("default, output not preloaded", {"preload": False})]
    if family == "d1":
        sweep += [
            ("z2", {"regs": [1, 1, 2]}),
            ("16x4 r4 z4", {"block": [16, 4], "regs": [1, 4, 4]}),
        ]
    if T == 16:  # register tiles over five indices: every term's operands get reuse
        if family == "d1":
            sweep += [
                (name, family_mapping(threads, regs, unroll))
                for name, threads, regs, unroll in FAMILY_TILES[:2]
            ]
        sweep += [
            (
                f"{FAMILY_TILES[tiles][0]}, staged, k-step {k_step}"
                + (f", {blocks} blocks/SM" if blocks else "")
                + (", output preloaded" if preload else ""),
                family_staged_mapping(text, k_step, tiles, blocks, preload),
            )
            for tiles, k_step, blocks, preload in FAMILY_STAGED
        ]
    return variant_rows(
        env,
        f"{family} family (9 terms) T={T} fp64",
        text,
        {"T": T},
        {"t3": t3, a_name: ta, "v2": v2},
        ["t3"],
        {"t3": ref},
        floor,
        sweep,
        {"9x torch.einsum": peer},
        flops,
    )


#: (name, threads per index, register elements per index, unroll) of family mappings.
FAMILY_TILES = [
    (
        "h3 x h2/8, regs h2 h1 p6 p5 p4 = 2 (32 acc)",
        {"h3": 16, "h2": 8},
        {"h2": 2, "h1": 2, "p6": 2, "p5": 2, "p4": 2},
        1,
    ),
    ("same, unrolled", {"h3": 16, "h2": 8}, {"h2": 2, "h1": 2, "p6": 2, "p5": 2, "p4": 2}, 64),
    (
        "h3 x h2, regs h1 p6 p5 p4 = 2 (16 acc)",
        {"h3": 16, "h2": 16},
        {"h1": 2, "p6": 2, "p5": 2, "p4": 2},
        1,
    ),
    ("same, unrolled", {"h3": 16, "h2": 16}, {"h1": 2, "p6": 2, "p5": 2, "p4": 2}, 64),
    ("h3 x h2, regs p6 p5 p4 = 2 (8 acc)", {"h3": 16, "h2": 16}, {"p6": 2, "p5": 2, "p4": 2}, 64),
    (
        "h3 x h2/4, regs h2 4, h1 p4 2 (16 acc)",
        {"h3": 16, "h2": 4},
        {"h2": 4, "h1": 2, "p4": 2},
        64,
    ),
    # block tiles of 4 along every index: half the staged bytes per output of 16x16x2^4
    (
        "4^6 block, h3 x h2 x h1 x p6 x p5 x p4 threads 4x2x2x2x2x2, regs 2 but h3 (32 acc)",
        {"h3": 4, "h2": 2, "h1": 2, "p6": 2, "p5": 2, "p4": 2},
        {"h2": 2, "h1": 2, "p6": 2, "p5": 2, "p4": 2},
        1,
    ),
    (
        "8x4^5 block, 256 threads 8x2x2x2x2x2, regs 2 but h3 (32 acc)",
        {"h3": 8, "h2": 2, "h1": 2, "p6": 2, "p5": 2, "p4": 2},
        {"h2": 2, "h1": 2, "p6": 2, "p5": 2, "p4": 2},
        1,
    ),
    (
        "8x4x4x4x2x2 block, threads 8x2x2x2x1x1, regs 2 but h3 (32 acc)",
        {"h3": 8, "h2": 2, "h1": 2, "p6": 2},
        {"h2": 2, "h1": 2, "p6": 2, "p5": 2, "p4": 2},
        1,
    ),
]


#: (FAMILY_TILES entry, k-step, min blocks per SM, output preloaded) of the staged
#: family mappings.
FAMILY_STAGED = [
    (0, 4, 0, False),
    (0, 4, 0, True),
    (0, 4, 3, False),
    (0, 8, 0, False),
    (6, 4, 0, False),
    (6, 4, 0, True),
    (6, 4, 4, False),
    (6, 8, 0, False),
    (6, 8, 3, False),
    (6, 16, 0, False),
    (7, 4, 0, False),
    (7, 8, 0, True),
    (8, 4, 0, False),
    (8, 8, 0, False),
]


def family_staged_mapping(
    text: str, k_step: int, tiles: int = 0, min_blocks: int = 0, preload: bool = False
) -> dict:
    """A register tile of FAMILY_TILES (number ``tiles``) with every input of the nine
    products staged in shared memory per k-step (padding 1), loop not unrolled."""
    problem = einkern.make_problem(einkern.load(text), {})
    config, _ = default_config(statement_task(problem, 0))
    config = replace(config, staging=StagingConfig("all", k_step, False, 1, "natural"))
    mapping = json.loads(config_to_mapping(statement_task(problem, 0), config).to_json(None))
    threads, regs, _ = FAMILY_TILES[tiles][1:]
    mapping.update(
        parallel=family_mapping(threads, regs, 1)["parallel"],
        unroll=1,
        strategy="gett",
        min_blocks=min_blocks,
        preload_output=preload,
    )
    return mapping


def family_mapping(threads: dict, regs: dict, unroll: int) -> dict:
    """A register-tiled mapping (JSON form) of the 9-term d1 family on t3[h3..p4]."""
    parallel = [
        {
            "index": i,
            "tile": threads.get(i, 1) * regs.get(i, 1),
            "threads": threads.get(i, 1),
            "cyclic": True,
        }
        for i in ("h3", "h2", "h1", "p6", "p5", "p4")
        if i in threads or i in regs
    ]
    return {
        "strategy": "register",
        "parallel": parallel,
        "grid_order": ["h3", "h2", "h1", "p6", "p5", "p4"],
        "reduction_order": ["h7"],
        "k_step": [],
        "staged": [],
        "prefetch": False,
        "unroll": unroll,
        "vector_width": 2,
        "boundary": "exact",
    }


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--only", nargs="*", default=None)
    parser.add_argument("--out", default=None)
    parser.add_argument(
        "--sizes",
        type=int,
        nargs="*",
        default=None,
        help="SGEMM sizes (default: 4096 8192 4095 1024 1000 3072 3000)",
    )
    args = parser.parse_args()
    env = Env(repeats=10 if args.quick else 30)
    print(f"device {env.device}, copy bandwidth {env.bandwidth / 1e12:.3f} TB/s", flush=True)
    rows = []
    started = time.time()
    sizes = [1024] if args.quick else [4096, 8192, 4095, 1024, 1000, 3072, 3000]
    sizes = args.sizes or sizes
    sections = {
        "d1": lambda: d1_rows(env, 8 if args.quick else 16),
        "nekbone": lambda: nekbone_rows(env, 12, 1000 if args.quick else 32768),
        "family": lambda: family_rows(env, "d1", 8 if args.quick else 16),
        "family_d2": lambda: family_rows(env, "d2", 8 if args.quick else 16),
        "gemm": lambda: gemm_rows(env, sizes, sweep=True),
    }
    for name, section in sections.items():
        if args.only is not None and name not in args.only:
            continue
        try:
            rows += section()
        except Exception as exc:  # noqa: BLE001
            rows.append({"case": name, "variant": "all", "failed": repr(exc)[:300]})
        print(f"{name} done ({time.time() - started:.0f} s)", flush=True)
    if args.out:
        Path(args.out).write_text(
            json.dumps({"device": env.device, "bandwidth": env.bandwidth, "rows": rows}, indent=1)
        )
    print("| case | variant | ms | TFLOP/s | of floor | vs best peer | error |")
    print("|---|---|---|---|---|---|---|")
    for row in rows:
        if "failed" in row:
            print(f"| {row['case']} | {row['variant']} | failed: {row['failed']} | | | | |")
            continue
        floor = f"{row['floor']:.2f}" if "floor" in row else ""
        print(
            f"| {row['case']} | {row['variant']} | {row['ms']:.4f} | "
            f"{row.get('tflops', 0):.2f} | {floor} | {row.get('vs_peer', 1):.2f} | "
            f"{row.get('error', 0):.1e} |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
