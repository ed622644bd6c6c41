"""Generated CUDA kernels executed by the CPU emulator and compared with NumPy.

Random mappings from the space, random extents (primes and 1 included); fault
injection shows that a missing barrier or a wrong boundary policy fails.
"""

from __future__ import annotations

import random
import zlib

import pytest

import einkern
from einkern.backends.emulator import count_barriers, drop_barrier
from einkern.backends.verify import verify
from einkern.gpu.config import CudaConfig, StagingConfig
from einkern.gpu.decision import decide
from einkern.gpu.lower import build_kernel, lower, new_builder
from einkern.gpu.mapping import Mapping, MappingError, ParallelTile, Staging
from einkern.gpu.space import config_to_mapping, parameters, violation
from einkern.ir.task import statement_task, tasks_of
from einkern.semantics import TOLERANCE


def seed_of(*parts) -> int:
    """A seed that is the same in every process (``hash`` of a string is not)."""
    return zlib.crc32(repr(parts).encode())


PROGRAMS = {
    "gemm": ("examples/gemm.ein", ("m", "n", "k")),
    "gemm_alpha_beta": ("examples/gemm_alpha_beta.ein", ("m", "n", "k")),
    "sd_t_d1_1": ("examples/sd_t_d1_1.ein", ("T",)),
    "local_grad3": ("examples/local_grad3.ein", ("p", "nelt")),
    "riemann": ("examples/riemann.ein", ("n",)),
    "treduda_sum": ("examples/treduda_sum.ein", ("n",)),
    "norms": ("examples/norms.ein", ("nb", "d")),
}
SIZES = {
    "m": (1, 7, 33, 64),
    "n": (1, 13, 32, 40),
    "k": (1, 5, 17, 32),
    "T": (1, 2, 3, 4),
    "p": (1, 3, 5),
    "nelt": (1, 2, 3),
    "nb": (1, 9, 31),
    "d": (1, 5, 16),
}


def tolerance(problem) -> float:
    dtypes = {t.dtype for t in problem.program.tensors}
    return TOLERANCE["float32" if "float32" in dtypes else "float64"]


def random_problem(name: str, rng: random.Random):
    path, extents = PROGRAMS[name]
    sizes = {e: rng.choice(SIZES[e]) for e in extents}
    if name == "riemann":
        sizes["n"] = rng.choice((1, 2, 3, 5))
    if name == "treduda_sum":
        sizes["n"] = rng.choice((1, 7, 19, 32))
    return einkern.make_problem(einkern.load(path), sizes)


def random_mappings(problem, rng: random.Random, attempts: int = 3000) -> dict[int, Mapping]:
    mappings = {}
    for position in range(len(problem.program.statements)):
        params = parameters(statement_task(problem, position))
        mappings[position] = decide(statement_task(problem, position))
        for _ in range(attempts):
            config = CudaConfig.from_values(
                {name: rng.choice(values) for name, values in params.items()}
            )
            if violation(statement_task(problem, position), config) is None:
                mappings[position] = config_to_mapping(statement_task(problem, position), config)
                break
    return mappings


@pytest.mark.parametrize("name", sorted(PROGRAMS))
@pytest.mark.parametrize("seed", range(4))
def test_random_mappings_match_the_reference(name, seed):
    rng = random.Random(seed_of(name, seed))
    problem = random_problem(name, rng)
    mappings = random_mappings(problem, rng)
    result = verify(problem, mappings, seed=seed)
    described = {p: m.to_json() for p, m in mappings.items()}
    assert result.bad_accesses == 0, (dict(problem.sizes), described, result.errors[:3])
    assert result.max_relative_error <= tolerance(problem), (dict(problem.sizes), described)


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_default_mappings_match_the_reference(name):
    path, _ = PROGRAMS[name]
    problem = einkern.make_problem(
        einkern.load(path),
        {
            "gemm": {"m": 70, "n": 66, "k": 40},
            "gemm_alpha_beta": {"m": 33, "n": 17, "k": 9},
            "sd_t_d1_1": {"T": 5},
            "local_grad3": {"p": 6, "nelt": 4},
            "riemann": {"n": 6},
            "treduda_sum": {"n": 21},
            "norms": {"nb": 50, "d": 12},
        }[name],
    )
    mappings = {t.position: decide(t) for t in tasks_of(problem)}
    result = verify(problem, mappings, seed=3)
    assert result.ok(tolerance(problem)), result


def staged_gemm(sizes, boundary="guard", prefetch=True):
    problem = einkern.make_problem(einkern.load("examples/gemm.ein"), sizes)
    mapping = Mapping(
        "shared",
        (ParallelTile("j", 16, 8, True), ParallelTile("i", 8, 4, False)),
        k_step=(("l", 4),),
        staged=(Staging("A[i,l]", (), 1), Staging("B[l,j]", ("l", "j"), 0)),
        prefetch=prefetch,
        vector_width=4,
        boundary=boundary,
    )
    return problem, mapping


@pytest.mark.parametrize("prefetch", [False, True])
def test_every_barrier_is_needed(prefetch):
    problem, mapping = staged_gemm({"m": 16, "n": 32, "k": 16}, "exact", prefetch)
    kernel = lower(statement_task(problem, 0), mapping)
    assert verify(problem, {0: mapping}, kernels=[kernel]).ok(1e-5)
    assert count_barriers(kernel) == 2
    for n in range(count_barriers(kernel)):
        broken = verify(problem, {0: mapping}, kernels=[drop_barrier(kernel, n)])
        assert not broken.ok(1e-5), f"dropping barrier {n} went unnoticed"


def test_wrong_boundary_policy_is_caught():
    problem, mapping = staged_gemm({"m": 13, "n": 29, "k": 11}, "guard")
    assert verify(problem, {0: mapping}).ok(1e-5)
    redirect = Mapping(**{**mapping.__dict__, "boundary": "redirect"})
    assert verify(problem, {0: redirect}).ok(1e-5)
    # "exact" on ragged extents: lowered without the checks that forbid it.
    exact = Mapping(**{**mapping.__dict__, "boundary": "exact"})
    kernel = build_kernel(new_builder(statement_task(problem, 0), exact, "unchecked"))
    broken = verify(problem, {0: exact}, kernels=[kernel])
    assert broken.bad_accesses > 0 and not broken.ok(1e-5)


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_padding_policy_matches_the_reference(name):
    from dataclasses import replace

    rng = random.Random(seed_of("pad", name))
    problem = random_problem(name, rng)
    mappings = {p: replace(m, boundary="pad") for p, m in random_mappings(problem, rng).items()}
    result = verify(problem, mappings, seed=4)
    assert result.bad_accesses == 0, result.errors[:3]
    assert result.max_relative_error <= tolerance(problem)


def test_padded_gemm_runs_an_exact_kernel_between_copies():
    from einkern.gpu.plan import plan_task

    problem, mapping = staged_gemm({"m": 13, "n": 29, "k": 11}, "pad")
    plan = plan_task(statement_task(problem, 0), mapping, "g")
    names = [launch.kernel.name for launch in plan.launches]
    assert names == ["g_pad_A", "g_pad_B", "g", "g_crop_C"]
    sizes = {buffer: elements for buffer, _, elements in plan.temporaries}
    assert sizes == {"g:pad:A": 16 * 12, "g:pad:B": 12 * 32, "g:pad:C": 16 * 32}
    assert verify(problem, {0: mapping}).ok(1e-5)


@pytest.mark.parametrize("boundary", ["guard", "redirect", "pad"])
def test_chunked_assignment_matches_the_reference(boundary):
    """x cyclic in runs of one vector (thread t owns t·4 … t·4+3, then 4·threads + t·4 …)."""
    problem = einkern.make_problem(einkern.load("examples/gemm.ein"), {"m": 37, "n": 45, "k": 19})
    config = CudaConfig(
        "j",
        "i",
        (4, 4),
        (8, 2, 1),
        "chunked",
        StagingConfig("all", 8, True, 0, "compute"),
        -1,
        boundary,
    )
    assert violation(statement_task(problem, 0), config) is None
    mapping = config_to_mapping(statement_task(problem, 0), config)
    x = mapping.tile_of("j")
    assert x.cyclic and x.chunk == 4
    assert [x.local(1, e) for e in range(8)] == [4, 5, 6, 7, 20, 21, 22, 23]
    assert verify(problem, {0: mapping}, seed=5).ok(1e-5)


def test_chunk_must_divide_the_register_tile():
    from dataclasses import replace

    problem, mapping = staged_gemm({"m": 16, "n": 32, "k": 16}, "exact")
    bad = replace(mapping, parallel=(replace(mapping.parallel[0], chunk=3), *mapping.parallel[1:]))
    with pytest.raises(MappingError, match="runs of 3"):
        lower(statement_task(problem, 0), bad)


def test_padded_rows_start_on_cache_lines_when_cheap():
    from dataclasses import replace

    from einkern.gpu.padding import padded_task

    problem, mapping = staged_gemm({"m": 13, "n": 29, "k": 1000}, "pad")
    # k: contiguous in A (row-major A[m,k]); k-step 4 alone would keep 1000, but
    # 1024 (whole 128-byte lines) adds under 1/32.  n: 29 -> 32 by the tile.
    task = statement_task(problem, 0)
    assert dict(padded_task(task, mapping).problem.sizes) == {"m": 16, "n": 32, "k": 1024}
    assert verify(problem, {0: mapping}, seed=6).ok(1e-5)
    far = replace(mapping, k_step=(("l", 4),))
    problem = einkern.make_problem(einkern.load("examples/gemm.ein"), {"m": 13, "n": 29, "k": 36})
    grown = padded_task(statement_task(problem, 0), far).problem
    assert dict(grown.sizes)["k"] == 36  # 64 would add 78 %


def test_padding_that_inflates_a_tensor_is_refused():
    from einkern.gpu.padding import padding_problems

    problem = einkern.make_problem(einkern.load("examples/sd_t_d1_1.ein"), {"T": 15})
    mapping = Mapping(
        "register", (ParallelTile("h3", 16, 16), ParallelTile("h1", 15, 5)), boundary="pad"
    )
    problems = padding_problems(statement_task(problem, 0), mapping)
    assert any("padding grows" in p for p in problems), problems


def test_broadcast_operand_rule_for_a_short_single_product():
    """sd_t_d1_1: t2 lacks h3 and h2, so the rules' proposal stages it whole and puts
    h2 on the second thread index; the kernel matches the reference.  (At T = 8 the
    cost model prefers a GETT point: gpu.decision.choose.)"""
    from einkern.gpu.decision import explain

    problem = einkern.make_problem(einkern.load("examples/sd_t_d1_1.ein"), {"T": 8})
    task = statement_task(problem, 0)
    mapping = config_to_mapping(task, explain(task).config)
    assert [t.index for t in mapping.parallel if t.threads > 1] == ["h3", "h2"]
    assert [s.access for s in mapping.staged] == ["t2[h7,p4,p5,h1]"]
    assert not mapping.preload_output  # one product: the output is read last
    assert verify(problem, {0: mapping}, seed=8).ok(1e-12)
