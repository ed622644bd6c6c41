"""Typed CUDA configurations, the decision's rule table, and the device limits
that the mapping check reads."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import einkern
from einkern.gpu.accumulation import with_accumulation
from einkern.gpu.config import CudaConfig, StagingConfig
from einkern.gpu.decision import decide, default_config, explain
from einkern.gpu.device import H100
from einkern.gpu.lower import check_mapping
from einkern.gpu.mapping import Mapping
from einkern.gpu.space import config_to_mapping
from einkern.ir.task import statement_task


def test_check_mapping_takes_its_limits_from_the_device():
    """Threads per block, resident blocks and threads per SM, and the register tile
    cap come from the DeviceLimits object, not from constants."""
    problem = einkern.make_problem(einkern.load("examples/gemm.ein"), {"m": 64, "n": 64, "k": 64})
    task = statement_task(problem, 0)
    mapping = decide(task)
    assert check_mapping(task, mapping, limits=H100) == []
    small = replace(H100, max_threads_per_block=mapping.threads // 2)
    assert any(
        f"limit {mapping.threads // 2}" in p for p in check_mapping(task, mapping, limits=small)
    )
    few_blocks = replace(H100, max_blocks_per_sm=1)
    found = check_mapping(task, replace(mapping, min_blocks=2), limits=few_blocks)
    assert any("0 to 1 blocks per SM" in p for p in found)
    narrow = replace(H100, max_threads_per_sm=mapping.threads)
    found = check_mapping(task, replace(mapping, min_blocks=2), limits=narrow)
    assert any(f"exceed {mapping.threads} threads per SM" in p for p in found)
    capped = replace(H100, max_register_tile=mapping.register_tile - 1)
    found = check_mapping(task, mapping, limits=capped)
    assert any(f"(max {mapping.register_tile - 1})" in p for p in found)


# ---- the decision's defaults are today's --------------------------------------

DECISIONS = Path(__file__).parent / "data" / "default_decisions.json"


def _bench_programs() -> dict[str, tuple[str, dict[str, int]]]:
    from einkern.bench.suites import builtin_suites

    found = {}
    for suite in builtin_suites():
        for quick in (True, False):
            for case in suite().cases(quick):
                found[case.key] = (case.program, dict(case.extents))
    return found


def _recorded_cases():
    data = json.loads(DECISIONS.read_text())
    return [pytest.param(case, id=case["case"]) for case in data["cases"]]


@pytest.fixture(scope="module")
def bench_programs():
    return _bench_programs()


@pytest.mark.parametrize("case", _recorded_cases())
def test_default_configurations_are_those_recorded_before_the_rule_table(case, bench_programs):
    """Every example (declared sizes and every extent 3, 12, 33, 100) and every bench
    case: the rule table chooses the configuration the one-function decision of
    d1db560 chose (tests/data/default_decisions.json, recorded by running it)."""
    if "example" in case:
        program = einkern.load(Path("examples") / case["example"])
        sizes = case["sizes"]
    else:
        text, sizes = bench_programs[case["bench"]]
        program = einkern.load(text)
    problem = einkern.make_problem(program, sizes)
    assert len(case["decisions"]) == len(problem.program.statements)
    for position, expected in enumerate(case["decisions"]):
        # the rule table's proposal (the cost model may still prefer a GETT point:
        # gpu.decision.choose, tests/test_gett.py)
        decision = explain(statement_task(problem, position), H100)
        config, reasons = decision.config, decision.reasons
        assert config.to_json() == expected["config"], (case["case"], position)
        assert CudaConfig.from_json(expected["config"]) == config
        assert reasons and all(": " in reason for reason in reasons)


# ---- configurations stored before the typed records still load -----------------

OLD_RECORDS = Path(__file__).parent / "data" / "cuda_records_d1db560.json"


def _old_cases():
    data = json.loads(OLD_RECORDS.read_text())
    return [pytest.param(case, id=case["program"]) for case in data["cases"]]


@pytest.mark.parametrize("case", _old_cases())
def test_records_of_today_load_as_typed_configurations_with_the_same_key(case):
    """A CUDA tuning record written by d1db560 (its config a dict with the staging
    list): the typed record reads it, gives the same canonical text (the database
    key of the variant), the configuration the rules still propose (the default
    of SGEMM n = 256 is a model's point since the twenty-eighth session), and the
    mapping d1db560 built from it."""
    from einkern.tuning.record import TuningRecord
    from einkern.tuning.search import canonical

    record = TuningRecord.from_json(case["record"])
    config = CudaConfig.from_json(record.config)
    assert config.staging == StagingConfig(*record.config["staging"])
    assert canonical(config) == record.config_key == case["config_key"]
    assert config.to_json() == record.config
    problem = einkern.make_problem(einkern.load(case["program"]), case["sizes"])
    task = statement_task(problem, 0)
    assert explain(task).config == config
    old = Mapping.from_json(json.dumps(case["mapping"]))  # + the accurate-sums rule's choice
    assert config_to_mapping(task, config) == with_accumulation(task, old)


@pytest.mark.parametrize("case", _old_cases()[:2])
def test_a_database_of_today_gives_back_typed_configurations(case, tmp_path):
    from einkern.tuning.canonical import identify
    from einkern.tuning.cuda_target import CudaTarget
    from einkern.tuning.db import TuningDB
    from einkern.tuning.policy import lookup
    from einkern.tuning.record import TuningRecord

    record = TuningRecord.from_json(case["record"])

    class RecordedDevice(CudaTarget):  # the device the record was measured on
        def device_key(self) -> dict[str, str]:
            return dict(record.identity.device)

    problem = einkern.make_problem(einkern.load(case["program"]), case["sizes"])
    task = statement_task(problem, 0)
    with TuningDB(tmp_path / "old.sqlite") as db:
        db.add(record)
        (stored,) = db.records(identify(RecordedDevice(), task).key)
        # The record is found under today's task key, and its configuration is typed ...
        config = RecordedDevice.config_type.from_json(stored.config)
        # ... but `tune="cached"` does not use it: no same-run comparison with the
        # default stands behind it (docs/tuning.md, "verdicts").
        assert lookup(RecordedDevice(), task, db) is None
    assert isinstance(config, CudaConfig)
    assert config == CudaConfig.from_json(case["record"]["config"])


def test_a_mapping_file_of_today_still_emits_the_same_kernel(tmp_path, capsys):
    """`einkern emit --mapping` with a configuration file in today's form (staging as
    a list) prints the kernel of the Mapping it stands for; a malformed one is a
    typed error with exit code 2."""
    from einkern.cli import main

    case = json.loads(OLD_RECORDS.read_text())["cases"][0]
    extents = [f"{name}={value}" for name, value in case["sizes"].items()]
    configuration = tmp_path / "config.json"
    configuration.write_text(json.dumps(case["record"]["config"]))
    mapping = tmp_path / "mapping.json"
    task = statement_task(einkern.make_problem(einkern.load(case["program"]), case["sizes"]), 0)
    stands_for = with_accumulation(task, Mapping.from_json(json.dumps(case["mapping"])))
    mapping.write_text(stands_for.to_json())  # with the accurate-sums rule's accumulation
    outputs = []
    for path in (configuration, mapping):
        argv = ["emit", case["program"], "--backend", "cuda", "--mapping", str(path)]
        for extent in extents:
            argv += ["-e", extent]
        assert main(argv) == 0
        outputs.append(capsys.readouterr().out)
    assert outputs[0] == outputs[1] and "__global__" in outputs[0]
    broken = dict(case["record"]["config"], staging=["all", 8, True, 0])
    configuration.write_text(json.dumps(broken))
    argv = ["emit", case["program"], "--backend", "cuda", "--mapping", str(configuration)]
    assert main(argv + [arg for e in extents for arg in ("-e", e)]) == 2
    assert "not a mapping configuration" in capsys.readouterr().err


def test_configuration_records_check_their_fields():
    config = CudaConfig(
        "j",
        "i",
        (16, 16),
        (8, 8, 1),
        "chunked",
        StagingConfig("all", 8, True, 0, "compute"),
        -1,
        "exact",
    )
    assert CudaConfig.from_json(config.to_json()) == config
    assert CudaConfig.from_values(config.values()) == config
    assert "spread" not in config.to_json() and "preload" not in config.values()
    assert replace(config, preload=True).to_json()["preload"] is True
    for bad in (
        {"staging": ["all", 8, True, 0, "sideways"]},
        {"block": [16]},
        {"assign": "diagonal"},
        {"unroll": 2},
        {"boundary": "wrap"},
        {"staging": ["all", 0, True, 0, "compute"]},
        {"colour": 1},
    ):
        with pytest.raises((TypeError, ValueError)):
            CudaConfig.from_json({**config.to_json(), **bad})


# ---- --explain -----------------------------------------------------------------


def test_emit_explain_prints_each_rule_and_its_reason(capsys):
    from einkern.cli import main
    from einkern.gpu.decision import RULES

    assert main(["emit", "examples/gemm.ein", "--backend", "cuda", "--explain"]) == 0
    out = capsys.readouterr().out
    task = statement_task(einkern.make_problem(einkern.load("examples/gemm.ein"), {}), 0)
    decision = explain(task)
    names = [name for name, _ in decision.steps]
    assert names[:2] == ["coalesced-x", "coalescing-weights"]
    assert "gemm-register-tile" in names and set(names) <= {rule.name for rule in RULES}
    for name, reason in decision.steps:
        assert f"why: {name}: {reason}" in out


def test_tune_explain_prints_the_rules_of_the_default(tmp_path, capsys):
    """`einkern tune --explain` (simulated from a database, so without a GPU) prints
    the default configuration and the (rule, reason) pairs that made it."""
    from einkern.cli import main
    from einkern.tuning.db import TuningDB
    from einkern.tuning.record import TuningRecord

    case = json.loads(OLD_RECORDS.read_text())["cases"][0]
    with TuningDB(tmp_path / "t.sqlite") as db:
        db.add(TuningRecord.from_json(case["record"]))
    extents = [arg for name, value in case["sizes"].items() for arg in ("-e", f"{name}={value}")]
    assert (
        main(
            [
                "tune",
                case["program"],
                *extents,
                "--backend",
                "cuda",
                "--simulate",
                str(tmp_path / "t.sqlite"),
                "--explain",
                "--budget",
                "2",
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert "S0 default configuration: " in out
    problem = einkern.make_problem(einkern.load(case["program"]), case["sizes"])
    for name, _ in explain(statement_task(problem, 0)).steps:
        assert f"  {name}: " in out


def test_a_malformed_configuration_given_to_compile_is_a_typed_error():
    from einkern.backends.cuda.generate import resolve_mappings
    from einkern.gpu.mapping import MappingError

    problem = einkern.make_problem(einkern.load("examples/gemm.ein"), {})
    bad = {"x": "j", "y": "i", "block": [16, 16], "staging": ["all", 8, True]}
    with pytest.raises(MappingError, match="mapping of statement 0"):
        resolve_mappings(problem, {0: bad})
    good = resolve_mappings(problem, {0: default_config(statement_task(problem, 0))[0]})
    assert good[0] == decide(statement_task(problem, 0))


def test_groups_exclude_each_other_and_a_final_change_ends_the_decision():
    from einkern.gpu.decision import Rule, start_config
    from einkern.gpu.rules import Change

    task = statement_task(einkern.make_problem(einkern.load("examples/gemm.ein"), {}), 0)
    table = (
        Rule("first", lambda facts, config: Change({"x": "j"}, "one")),
        Rule("a", lambda facts, config: None, "g"),
        Rule("b", lambda facts, config: Change({"y": "i"}, "two"), "g"),
        Rule("c", lambda facts, config: Change({"y": "l"}, "three"), "g"),
        Rule("end", lambda facts, config: Change({}, "four", final=True)),
        Rule("never", lambda facts, config: Change({"x": "i"}, "five")),
    )
    decision = explain(task, H100, table)
    assert decision.steps == (("first", "one"), ("b", "two"), ("end", "four"))
    assert decision.config == replace(start_config(task), x="j", y="i")
    assert decision.reasons[1] == "b: two"


def test_a_statement_no_mapping_fits_is_a_typed_error():
    """257⁶ outputs need more blocks than a grid holds, even one output per thread:
    a located BackendError saying so (the one-function decision raised AssertionError)."""
    from einkern.errors import BackendError

    problem = einkern.make_problem(einkern.load("examples/ccsdt_s1.ein"), {"T": 257})
    with pytest.raises(BackendError, match="grid limit") as raised:
        default_config(statement_task(problem, 0))
    assert raised.value.span is not None


@pytest.mark.parametrize(
    "path, sizes",
    [
        ("examples/gemm.ein", {"m": 96, "n": 80, "k": 40}),
        ("examples/sd_t_d1_1.ein", {"T": 6}),
        ("examples/local_grad3.ein", {"p": 5, "nelt": 7}),
    ],
)
def test_the_tuner_searches_cuda_configurations_as_records(path, sizes):
    """Sampling and neighbours of the CUDA space give CudaConfig records whose JSON
    form round-trips and whose canonical text is their JSON form's; a neighbour
    differs from its configuration in one named parameter."""
    import random

    from einkern.tuning.cuda_target import CudaTarget
    from einkern.tuning.search import canonical, space_for

    problem = einkern.make_problem(einkern.load(path), sizes)
    task = statement_task(problem, 0)
    space = space_for(CudaTarget(), task)
    assert space.config_type is CudaConfig
    rng = random.Random(3)
    for _ in range(5):
        config = space.sample(rng)
        assert isinstance(config, CudaConfig) and config in space
        again = CudaConfig.from_json(json.loads(json.dumps(config.to_json())))
        assert again == config and canonical(again) == canonical(config)
        assert canonical(config) == json.dumps(
            config.to_json(), sort_keys=True, separators=(",", ":")
        )
        for neighbour in space.neighbours(config)[:10]:
            assert isinstance(neighbour, CudaConfig) and neighbour in space
            moved = [
                name for name, value in config.values().items() if neighbour.values()[name] != value
            ]
            assert len(moved) == 1


def test_every_rule_has_its_section_in_docs_rules_md():
    """docs/rules.md holds one section per rule of the table, in the table's order."""
    from einkern.gpu.decision import RULES

    text = (Path(__file__).parent.parent / "docs" / "rules.md").read_text()
    sections = [line[3:].strip() for line in text.splitlines() if line.startswith("## ")]
    assert sections == [rule.name for rule in RULES]


STAGINGS = st.builds(
    StagingConfig,
    st.sampled_from(["none", "A", "B", "all"]),
    st.integers(1, 64),
    st.booleans(),
    st.integers(0, 2),
    st.sampled_from(["natural", "compute"]),
)
CONFIGS = st.builds(
    CudaConfig,
    st.sampled_from(["i", "j", "h3"]),
    st.sampled_from(["", "k", "p4"]),
    st.tuples(st.integers(0, 256), st.integers(0, 64)),
    st.tuples(st.integers(1, 8), st.integers(1, 8), st.integers(1, 16)),
    st.sampled_from(["cyclic", "mixed", "adjacent", "chunked"]),
    STAGINGS,
    st.sampled_from([1, -1]),
    st.sampled_from(["exact", "guard", "redirect", "pad"]),
    st.none() | st.integers(0, 4),
    st.none() | st.booleans(),
)


@given(CONFIGS)
@settings(max_examples=200, deadline=None)
def test_json_and_named_values_round_trip(config):
    text = json.dumps(config.to_json())
    assert CudaConfig.from_json(json.loads(text)) == config
    assert CudaConfig.from_values(config.values()) == config
    assert ("spread" in config.to_json()) == (config.spread is not None)
