"""Every registry refuses a name already taken, with a typed error."""

from __future__ import annotations

import pytest

import einkern.backends as backends
import einkern.bench.registry as bench_registry
import einkern.lang.loader as loader
import einkern.tuning.strategies as strategies
from einkern.errors import EinkernError, RegistrationError


def test_registration_error_is_an_einkern_error():
    assert issubclass(RegistrationError, EinkernError)


def test_backends_refuse_a_taken_name(monkeypatch):
    backends.backend_names()  # the built-ins are in
    monkeypatch.setattr(backends, "_REGISTRY", dict(backends._REGISTRY))
    with pytest.raises(RegistrationError, match="'cpu' is already registered"):
        backends.register_backend("cpu", lambda: backends.get_backend("cpu"))
    with pytest.raises(RegistrationError):
        backends.register_backend("auto", lambda: backends.get_backend("cpu"))
    backends.register_backend("cpu2", lambda: backends.get_backend("cpu"))
    assert "cpu2" in backends.backend_names()
    with pytest.raises(RegistrationError, match="cpu2"):
        backends.register_backend("cpu2", lambda: backends.get_backend("cpu"))


def test_search_strategies_refuse_a_taken_name(monkeypatch):
    monkeypatch.setattr(strategies, "_STRATEGIES", dict(strategies._STRATEGIES))
    with pytest.raises(RegistrationError, match="'random' is already registered"):
        strategies.register_strategy("random", strategies.RandomSearch)
    strategies.register_strategy("random2", strategies.RandomSearch)
    assert strategies.get_strategy("random2").name == "random"


def test_bench_suites_and_peers_refuse_a_taken_name(monkeypatch):
    bench_registry.suite_names()
    bench_registry.peer_names()
    monkeypatch.setattr(bench_registry, "_SUITES", dict(bench_registry._SUITES))
    monkeypatch.setattr(bench_registry, "_PEERS", dict(bench_registry._PEERS))
    gemm = bench_registry._SUITES["gemm"]
    with pytest.raises(RegistrationError, match="suite named 'gemm'"):
        bench_registry.register_suite("gemm", gemm)
    bench_registry.register_suite("gemm2", gemm)
    assert bench_registry.resolve_suites(["gemm2"])[0].name == "gemm"
    numpy_peer = bench_registry._PEERS["numpy.einsum"]
    with pytest.raises(RegistrationError, match="peer named 'numpy.einsum'"):
        bench_registry.register_peer("numpy.einsum", numpy_peer)


def test_front_ends_refuse_a_taken_name_or_extension(monkeypatch):
    monkeypatch.setattr(loader, "_FRONT_ENDS", dict(loader._FRONT_ENDS))
    monkeypatch.setattr(loader, "EXTENSIONS", dict(loader.EXTENSIONS))
    ein = loader._FRONT_ENDS["ein"]
    with pytest.raises(RegistrationError, match="front end named 'ein'"):
        loader.register_front_end(ein)
    with pytest.raises(RegistrationError, match="'.TF' already belongs to the 'tensor'"):
        loader.register_front_end(loader.FrontEnd("tf2", ein.parse, (".TF",)))
    loader.register_front_end(loader.FrontEnd("ein2", ein.parse, (".ein2",)))
    assert "ein2" in loader.front_end_names() and loader.EXTENSIONS[".ein2"] == "ein2"
