"""The kernel builder and the lowering's passes over it; planning below the runtime."""

from __future__ import annotations

import ast
from pathlib import Path

import einkern
from einkern import gpu
from einkern.gpu import kir
from einkern.gpu.builder import KernelBuilder
from einkern.gpu.decision import decide
from einkern.gpu.device import H100, DeviceLimits
from einkern.gpu.lower import build_kernel, epilogue, lower, new_builder, prologue
from einkern.ir.task import statement_task, tasks_of

GEMM = """
dims m = 64, n = 48, k = 40
tensor A[m, k], B[k, n], C[m, n]
C[i,j] = A[i,l] * B[l,j]
"""


def _gemm_task():
    problem = einkern.make_problem(einkern.load(GEMM), {})
    return statement_task(problem, 0)


def test_build_kernel_runs_the_passes_lower_runs():
    task = _gemm_task()
    mapping = decide(task)
    assert build_kernel(new_builder(task, mapping, "k")) == lower(task, mapping, "k")


def test_passes_declare_what_they_need_on_the_builder():
    task = _gemm_task()
    mapping = decide(task)
    builder = new_builder(task, mapping, "k")
    assert isinstance(builder, KernelBuilder) and builder.thread_vars == []
    body = prologue(builder)
    declared = [v.name for v in builder.thread_vars]
    threaded = [f"t_{t.index}" for t in mapping.parallel if t.threads > 1]
    assert declared[: len(threaded)] == threaded and "acc0" in declared
    assert len([s for s in body if isinstance(s, kir.Store)]) == len(builder.slots)
    stores = epilogue(builder)
    assert len(stores) == mapping.register_tile == len(builder.slots)
    tiles = (-(-64 // mapping.tile_of("i").tile), -(-48 // mapping.tile_of("j").tile))
    assert builder.blocks() == tiles[0] * tiles[1]  # a guarded tile rounds up


def test_decision_follows_the_limits_it_is_given():
    """Planning takes the device's limits as data: fewer SMs, fewer blocks needed."""
    task = _gemm_task()
    small = DeviceLimits(**{**H100.__dict__, "sm_count": 2})
    assert decide(task, small).register_tile > decide(task, H100).register_tile


def test_tasks_of_a_program_lower_one_by_one():
    problem = einkern.make_problem(einkern.load("examples/norms.ein"), {"nb": 8, "d": 4})
    kernels = [lower(task, decide(task)) for task in tasks_of(problem)]
    assert [k.name for k in kernels] == ["einkern_s0", "einkern_s1"]


def _imports(path: Path) -> set[str]:
    """Modules of einkern that ``path`` imports (anywhere in it), as dotted names."""
    package = "einkern.gpu"
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                if node.module:
                    found.add(".".join([*base, node.module]))
                else:  # `from .. import semantics`: the names are modules
                    found.update(".".join([*base, alias.name]) for alias in node.names)
            elif node.module:
                found.add(node.module)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return {name for name in found if name.startswith("einkern")}


PLANNING = (
    "builder",
    "decision",
    "device",
    "lower",
    "mapping",
    "model",
    "normalize",
    "padding",
    "plan",
    "space",
    "staging",
)


def test_planning_imports_nothing_above_it_and_no_cycle():
    root = Path(gpu.__file__).parent
    graph = {}
    for name in PLANNING:
        imported = _imports(root / f"{name}.py")
        above = [
            m for m in imported if m.split(".")[1] in ("backends", "tuning", "api", "bench", "cli")
        ]
        assert not above, (name, above)
        graph[name] = {m.split(".")[2] for m in imported if m.startswith("einkern.gpu.")}
    seen: dict[str, int] = {}  # 1: on the path, 2: done

    def visit(name: str, path: tuple[str, ...]) -> None:
        assert seen.get(name) != 1, f"import cycle: {' -> '.join(path + (name,))}"
        if seen.get(name) == 2:
            return
        seen[name] = 1
        for other in graph.get(name, ()):
            visit(other, path + (name,))
        seen[name] = 2

    for name in PLANNING:
        visit(name, ())


def test_the_runtime_reads_the_limits_and_falls_back_to_the_table():
    from types import SimpleNamespace

    from einkern.backends.cuda.limits import device_limits, limits_of

    props = SimpleNamespace(
        name="GPU",
        arch="sm_80",
        multiprocessors=108,
        max_threads_per_block=1024,
        max_threads_per_multiprocessor=2048,
        registers_per_multiprocessor=65536,
        shared_memory_per_block=48 * 1024,
        shared_memory_per_block_optin=163 * 1024,
        shared_memory_per_multiprocessor=164 * 1024,
        l2_cache_bytes=40 * 2**20,
    )
    limits = limits_of(props)
    assert (limits.arch, limits.sm_count, limits.shared_per_block_optin) == (
        "sm_80",
        108,
        163 * 1024,
    )
    assert isinstance(device_limits(), DeviceLimits)  # GPU 0's, or H100's without one
