"""The kernel cache no one else can plant code in (issue 15): private directories,
refusal of directories and entries others own or can write, atomic sealed entries
verified against their key before loading."""

from __future__ import annotations

import os
import stat
import threading

import numpy as np
import pytest

import einkern
from einkern.backends import cache
from einkern.backends.cache import CacheSecurityError
from einkern.backends.cpu import CpuBackend
from einkern.backends.cpu.compiler import cache_key, library_path, toolchain
from einkern.backends.cuda.nvrtc import compile_cubin

PROGRAM = """
program scale
dims n = 6
tensor A[n], B[n]
B[i] = 2 * A[i]
"""
OTHER = PROGRAM.replace("2 * A[i]", "3 * A[i]")


@pytest.fixture
def root(tmp_path, monkeypatch):
    """An empty cache root of this test (not created)."""
    where = tmp_path / "kernels"
    monkeypatch.setenv("EINKERN_CACHE_DIR", str(where))
    return where


def problem(text: str = PROGRAM):
    return einkern.make_problem(einkern.load(text), {})


def run(text: str = PROGRAM) -> np.ndarray:
    single = problem(text)
    arrays = {"A": np.arange(6.0), "B": np.zeros(6)}
    CpuBackend().build(single).run(arrays, {})
    return arrays["B"]


def mode(path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def test_directories_are_created_private_and_entries_sealed(root):
    assert list(run()) == [0.0, 2.0, 4.0, 6.0, 8.0, 10.0]
    assert mode(root) == 0o700 and mode(root / "cpu") == 0o700
    libraries = list((root / "cpu").glob("*.so"))
    assert len(libraries) == 1 and mode(libraries[0]) == 0o600
    assert cache.seal_path(libraries[0]).exists()
    assert not [p for p in (root / "cpu").iterdir() if p.name.endswith(".tmp")]


def test_world_writable_directory_is_refused(root):
    root.mkdir()
    os.chmod(root, 0o777)
    with pytest.raises(CacheSecurityError) as raised:
        run()
    assert "can be written by other users (mode 777)" in str(raised.value)
    assert f"chmod go-w {root}" in str(raised.value)  # the fix
    os.chmod(root, 0o1777)  # a shared directory such as /tmp: go elsewhere
    with pytest.raises(CacheSecurityError) as raised:
        run()
    assert "set EINKERN_CACHE_DIR to a directory only you can write" in str(raised.value)
    assert "chmod" not in str(raised.value)
    assert not (root / "cpu").exists()  # nothing created inside it
    os.chmod(root, 0o700)
    (root / "cpu").mkdir(mode=0o700)
    os.chmod(root / "cpu", 0o775)  # group-writable subdirectory
    with pytest.raises(CacheSecurityError, match="cpu can be written by other users"):
        run()


def test_directory_of_another_user_is_refused(root, monkeypatch):
    run()  # fills the cache as this user
    monkeypatch.setattr(os, "getuid", lambda: os.stat(root).st_uid + 1)
    with pytest.raises(CacheSecurityError, match="belongs to another user"):
        CpuBackend().build(problem())


def test_entry_others_can_write_is_refused(root):
    run()
    [library] = (root / "cpu").glob("*.so")
    os.chmod(library, 0o666)
    with pytest.raises(CacheSecurityError, match="cache entry .* can be written by other"):
        CpuBackend().build(problem())
    os.chmod(library, 0o600)
    os.chmod(cache.seal_path(library), 0o622)
    with pytest.raises(CacheSecurityError, match=r"\.seal can be written by other"):
        CpuBackend().build(problem())


def test_entry_owned_by_another_user_is_refused(tmp_path, monkeypatch):
    entry = tmp_path / "entry.bin"
    cache.write_entry(entry, b"payload", "k")
    real = os.lstat

    def foreign(path, *args, **kwargs):
        status = real(path, *args, **kwargs)
        if os.fspath(path) == os.fspath(entry):
            fields = list(status)
            fields[stat.ST_UID] = status.st_uid + 1
            return os.stat_result(fields)
        return status

    monkeypatch.setattr(os, "lstat", foreign)
    with pytest.raises(CacheSecurityError, match="entry.bin belongs to another user"):
        cache.read_entry(entry, "k")


def test_symbolic_link_entry_is_refused(tmp_path):
    target = tmp_path / "elsewhere.bin"
    target.write_bytes(b"x")
    directory = cache.private_directory(tmp_path / "c")
    cache.write_entry(directory / "real.bin", b"x", "k")
    (directory / "link.bin").symlink_to(target)
    os.link(cache.seal_path(directory / "real.bin"), cache.seal_path(directory / "link.bin"))
    with pytest.raises(CacheSecurityError, match="is a symbolic link"):
        cache.read_entry(directory / "link.bin", "k")


def _replace(path, data: bytes) -> None:
    """Put ``data`` at ``path`` as a new file (0600): writing into a library this
    process has loaded would corrupt its mapping (a crash at exit), which is not
    what the test is about."""
    fresh = path.with_name(path.name + ".new")
    fresh.write_bytes(data)
    os.chmod(fresh, 0o600)
    os.replace(fresh, path)


def test_tampered_or_foreign_entries_are_never_loaded(root):
    run(OTHER)  # the library of another kernel, a valid one
    chain = toolchain(root / "cpu")
    source, other_source = (CpuBackend().emit(problem(t)) for t in (PROGRAM, OTHER))
    planted = library_path(source, chain, root / "cpu")
    other = library_path(other_source, chain, root / "cpu")
    _replace(planted, other.read_bytes())  # planted under this kernel's name...
    os.link(cache.seal_path(other), cache.seal_path(planted))  # ...with a valid seal of it
    assert cache.read_entry(planted, cache_key(source, chain)) is None  # sealed for another key
    assert list(run()) == [0.0, 2.0, 4.0, 6.0, 8.0, 10.0]  # rebuilt, not the planted "3 *"
    key = cache_key(source, chain)
    assert cache.read_entry(planted, key) is not None
    data = bytearray(planted.read_bytes())
    data[len(data) // 2] ^= 0xFF  # tampered content under a correct seal
    _replace(planted, bytes(data))
    assert cache.read_entry(planted, key) is None
    assert list(run()) == [0.0, 2.0, 4.0, 6.0, 8.0, 10.0]


def test_concurrent_writers_never_expose_mixed_entries(tmp_path):
    directory = cache.private_directory(tmp_path / "c")
    entry = directory / "k.bin"
    payloads = [bytes([n]) * (64 * 1024 + n) for n in range(8)]
    seen: list[bytes | None] = []
    stop = threading.Event()

    def write(payload: bytes) -> None:
        for _ in range(40):
            cache.write_entry(entry, payload, "k")

    def read() -> None:
        while not stop.is_set():
            seen.append(cache.read_entry(entry, "k"))

    reader = threading.Thread(target=read)
    reader.start()
    writers = [threading.Thread(target=write, args=(p,)) for p in payloads]
    for thread in writers:
        thread.start()
    for thread in writers:
        thread.join()
    stop.set()
    reader.join()
    assert seen and all(found is None or found in payloads for found in seen)  # never mixed
    assert sorted(p.name for p in directory.iterdir()) == ["k.bin", "k.bin.seal"]
    cache.write_entry(entry, payloads[3], "k")
    assert cache.read_entry(entry, "k") == payloads[3]


def test_cuda_cache_entries_are_sealed_and_verified(root):
    text = 'extern "C" __global__ void k(double *x) { x[threadIdx.x] *= 2; }'
    first = compile_cubin(text, "sm_90")
    assert compile_cubin(text, "sm_90").cached
    assert mode(root / "cuda") == 0o700
    cubin = root / "cuda" / f"{first.key}.cubin"
    assert mode(cubin) == 0o600
    cubin.write_bytes(b"\x7fELF planted")
    again = compile_cubin(text, "sm_90")
    assert not again.cached and again.cubin == first.cubin  # rebuilt, never loaded
    os.chmod(root / "cuda", 0o777)
    with pytest.raises(CacheSecurityError):
        compile_cubin(text, "sm_90")
