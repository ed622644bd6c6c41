"""The system C compiler and the on-disk cache of compiled kernels.

Cache layout (``$EINKERN_CACHE_DIR/cpu``, else ``user_cache_dir("einkern")/cpu``)::

    <key>.c              generated source (kept for reading and for bug reports)
    <key>.so             shared library built from it
    toolchain-<id>.json  flags that work with one compiler on one CPU

``key`` is the SHA-256 of the source, the compiler's path and ``--version``
output, the flags and the CPU identifier.  The directory and its files go
through :mod:`einkern.backends.cache`: the directory is private to the user
(0700; one another user owns or can write is refused), every file is written
under a temporary name (0600) and renamed into place, and the library and the
toolchain record are sealed (``<name>.seal``: key and SHA-256) and verified
before they are loaded or believed, so a library nobody compiled for this key
is never loaded.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import platform
import shlex
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from ...errors import BackendError, CompilationError
from .. import cache

#: Bump when the cache layout or the meaning of a cached file changes.
CACHE_FORMAT = 1
BASE_FLAGS = ("-O3", "-fPIC", "-shared", "-std=c11")
OPTIONAL_FLAGS = ("-march=native", "-fopenmp")
LIBRARIES = ("-lm",)
COMPILE_TIMEOUT_S = 600

_PROBE_SOURCE = """\
#include <stdint.h>
double einkern_probe(const double *x)
{
    double total = 0;
    #pragma omp parallel for reduction(+:total)
    for (int64_t i = 0; i < 64; ++i)
        total += x[i];
    return total;
}
"""


@dataclass(frozen=True)
class Toolchain:
    """A C compiler with the flags that work for it on this CPU."""

    command: tuple[str, ...]  # resolved executable first, then any arguments from $CC
    version: str
    flags: tuple[str, ...]
    cpu: str

    @property
    def openmp(self) -> bool:
        return "-fopenmp" in self.flags


def cache_directory() -> Path:
    """Where compiled CPU kernels live (not created here)."""
    return cache.directory("cpu")


def find_compiler() -> tuple[str, ...] | None:
    """``$CC`` (split like a shell would), else ``cc``, ``gcc`` or ``clang``; None if absent."""
    configured = os.environ.get("CC", "").strip()
    candidates = [shlex.split(configured)] if configured else [["cc"], ["gcc"], ["clang"]]
    for words in candidates:
        path = shutil.which(words[0])
        if path is not None:
            return (path, *words[1:])
    return None


def require_compiler() -> tuple[str, ...]:
    command = find_compiler()
    if command is None:
        configured = os.environ.get("CC")
        what = (
            f"the compiler in $CC ({configured!r}) was not found"
            if configured
            else ("no C compiler found (looked for cc, gcc, clang)")
        )
        raise BackendError(
            f"CPU backend unavailable: {what}",
            hint="install gcc or clang (e.g. `apt install gcc`), or set CC to a C compiler",
        )
    return command


@functools.cache
def cpu_identifier() -> str:
    """Machine, CPU model and a digest of its feature flags (``-march=native`` depends on them)."""
    model = platform.processor()
    features = ""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as info:
            for line in info:
                key, _, value = line.partition(":")
                key = key.strip()
                if key in ("model name", "Model", "CPU part") and model in ("", platform.machine()):
                    model = value.strip()
                elif key in ("flags", "Features") and not features:
                    features = value.strip()
    except OSError:
        pass
    digest = hashlib.sha256(features.encode()).hexdigest()[:16]
    return f"{platform.machine()} {model} features:{digest}"


@functools.cache
def compiler_version(command: tuple[str, ...]) -> str:
    try:
        done = subprocess.run(
            [*command, "--version"], capture_output=True, text=True, timeout=60, check=False
        )
    except (OSError, subprocess.SubprocessError):
        return ""
    return (done.stdout + done.stderr).strip()


def toolchain(directory: Path) -> Toolchain:
    """The compiler to use, with working flags (probed once per compiler and CPU)."""
    command = require_compiler()
    return _toolchain(command, compiler_version(command), cpu_identifier(), directory)


@functools.cache
def _toolchain(command: tuple[str, ...], version: str, cpu: str, directory: Path) -> Toolchain:
    identity = _digest({"command": command, "version": version, "cpu": cpu})
    record = directory / f"toolchain-{identity[:32]}.json"
    try:
        data = cache.read_entry(record, identity)  # flags reach the compiler: sealed
        flags = tuple(json.loads(data)["flags"]) if data is not None else None
    except (ValueError, KeyError, TypeError):
        flags = None
    if flags is None or not all(isinstance(flag, str) for flag in flags):
        flags = _probe_flags(command)
        try:
            cache.write_entry(
                record, json.dumps({"command": command, "flags": flags}).encode(), identity
            )
        except cache.CacheSecurityError:
            raise
        except (OSError, BackendError):
            pass  # an unwritable cache only costs a probe per process; compiling will say why
    return Toolchain(command, version, flags, cpu)


def _probe_flags(command: tuple[str, ...]) -> tuple[str, ...]:
    """All optional flags if they work, else each one that works on its own."""
    with tempfile.TemporaryDirectory(prefix="einkern-probe-") as scratch:
        source = Path(scratch) / "probe.c"
        source.write_text(_PROBE_SOURCE)

        def failure(flags: tuple[str, ...]) -> subprocess.CompletedProcess | None:
            done = _run_compiler(command, flags, source, Path(scratch) / "probe.so")
            return None if done.returncode == 0 else done

        full = (*BASE_FLAGS, *OPTIONAL_FLAGS)
        if failure(full) is None:
            return full
        chosen = tuple(flag for flag in OPTIONAL_FLAGS if failure((*BASE_FLAGS, flag)) is None)
        failed = failure((*BASE_FLAGS, *chosen))
        if failed is not None:
            raise BackendError(
                f"the C compiler {command[0]} cannot build a shared library:\n"
                f"{failed.stderr.strip()}",
                hint="check the compiler installation, or set CC to another C compiler",
            )
        return (*BASE_FLAGS, *chosen)


def _run_compiler(
    command: tuple[str, ...], flags: tuple[str, ...], source: Path, output: Path
) -> subprocess.CompletedProcess:
    arguments = [*command, *flags, "-o", str(output), str(source), *LIBRARIES]
    try:
        return subprocess.run(
            arguments, capture_output=True, text=True, timeout=COMPILE_TIMEOUT_S, check=False
        )
    except (OSError, subprocess.SubprocessError) as error:
        return subprocess.CompletedProcess(arguments, 1, "", str(error))


def cache_key(source: str, chain: Toolchain) -> str:
    """Hex digest naming the cached library built from ``source`` with ``chain``."""
    return _digest(
        {
            "format": CACHE_FORMAT,
            "source": source,
            "compiler": chain.command,
            "version": chain.version,
            "flags": chain.flags,
            "cpu": chain.cpu,
        }
    )


def library_path(source: str, chain: Toolchain, directory: Path) -> Path:
    """Where the library for ``source`` is (or will be) cached."""
    return directory / f"{cache_key(source, chain)}.so"


def cached_library(source: str, chain: Toolchain, directory: Path) -> Path | None:
    """The cached library for ``source`` when present and verified against its key
    (see :mod:`einkern.backends.cache`), else None.  Raises
    :class:`~einkern.backends.cache.CacheSecurityError` for a cache other users can
    write."""
    return cache.verified_path(library_path(source, chain, directory), cache_key(source, chain))


def compile_library(source: str, chain: Toolchain, directory: Path) -> Path:
    """Compile ``source`` into its cache slot (replacing whatever is there); return its path.

    Raises :class:`CompilationError` with the compiler's messages on failure."""
    library = library_path(source, chain, directory)
    saved = library.with_suffix(".c")
    cache.private_directory(directory)
    try:
        cache.write_atomic(saved, source.encode())
        descriptor, temporary = tempfile.mkstemp(
            dir=directory, prefix=f".{library.stem}.", suffix=".so.tmp"
        )
    except OSError as error:
        raise BackendError(
            f"cannot write to the kernel cache {directory}: {error}",
            hint="set EINKERN_CACHE_DIR to a writable directory",
        ) from error
    os.close(descriptor)
    try:
        done = _run_compiler(chain.command, chain.flags, saved, Path(temporary))
        if done.returncode != 0:
            raise CompilationError(
                f"the C compiler failed on generated code (exit status {done.returncode}):\n"
                f"{done.stderr.strip()}\nsource saved at {saved}",
                hint="this is a bug in einkern; please report it with the saved source",
            )
        try:
            cache.write_entry(library, Path(temporary).read_bytes(), cache_key(source, chain))
        except OSError as error:
            raise BackendError(
                f"cannot write to the kernel cache {directory}: {error}",
                hint="set EINKERN_CACHE_DIR to a writable directory",
            ) from error
    finally:
        if os.path.exists(temporary):
            os.unlink(temporary)
    return library


def _digest(value: object) -> str:
    text = json.dumps(value, sort_keys=True, ensure_ascii=True)
    return hashlib.sha256(text.encode()).hexdigest()
