"""CUDA C → CUBIN with NVRTC (through ``cuda.core``'s ``Program``), with an on-disk
cache and per-kernel resources.

Always a CUBIN for a real architecture (``sm_XY``), never PTX: the driver may
be older than NVRTC and could not JIT its PTX.  Compiled modules are cached
under ``$EINKERN_CACHE_DIR/cuda`` (default: the user cache directory), keyed by
the SHA-256 of source, NVRTC version, architecture and options; each entry is a
``.cubin`` and a ``.json`` beside it (resources and log), both written
atomically.  ``cuda.core`` is imported only when a compile is needed; the
version and architecture queries use ``cuda.bindings.nvrtc`` (cuda.core has
none).  Needs NVRTC, never a GPU.
"""

from __future__ import annotations

import hashlib
import io
import json
import re
from dataclasses import asdict, dataclass
from pathlib import Path

from ...errors import BackendError, CompilationError
from ...gpu.mma_warpgroup_text import needs_arch_specific
from .. import cache

DEFAULT_ARCH = "sm_90"
# --no-cache: NVRTC >= 12.9 may answer from the driver's compute cache, and then
# prints no ptxas report; einkern keeps its own cache of CUBINs and reports.
OPTIONS = ("-default-device", "--std=c++17", "--ptxas-options=-v", "-lineinfo", "--no-cache")
CACHE_FORMAT = 1


@dataclass(frozen=True)
class KernelResources:
    """What ptxas reported for one kernel."""

    name: str
    registers: int
    shared_memory: int  # static shared memory, bytes
    stack_frame: int  # bytes
    spill_stores: int  # bytes
    spill_loads: int  # bytes
    barriers: int = 0

    def __str__(self) -> str:
        return (
            f"{self.name}: {self.registers} registers, {self.shared_memory} B smem, "
            f"{self.stack_frame} B stack, {self.spill_stores}/{self.spill_loads} B spill st/ld"
        )


@dataclass(frozen=True)
class CompiledModule:
    """A CUBIN and what the compiler said about it."""

    cubin: bytes
    arch: str
    resources: tuple[KernelResources, ...]
    log: str
    key: str
    cached: bool  # True when read from the on-disk cache


def _nvrtc():
    try:
        from cuda.bindings import nvrtc
    except ImportError as error:  # pragma: no cover - depends on the installation
        raise BackendError(
            "NVRTC is not available: cuda-bindings is not installed",
            hint="pip install 'einkern[cuda]' (cuda-bindings and nvidia-cuda-nvrtc)",
        ) from error
    return nvrtc


def _check(result: tuple, call: str):
    """The values of an NVRTC call's result tuple; BackendError when it failed."""
    nvrtc = _nvrtc()
    status, *values = result
    if status != nvrtc.nvrtcResult.NVRTC_SUCCESS:
        _, text = nvrtc.nvrtcGetErrorString(status)
        raise BackendError(f"{call} failed: {text.decode(errors='replace')}")
    return values[0] if len(values) == 1 else tuple(values)


def nvrtc_version() -> tuple[int, int]:
    """NVRTC's (major, minor) version."""
    return tuple(_check(_nvrtc().nvrtcVersion(), "nvrtcVersion"))


def supported_archs() -> tuple[int, ...]:
    """Compute capabilities NVRTC can compile for, as integers (90 for sm_90)."""
    return tuple(_check(_nvrtc().nvrtcGetSupportedArchs(), "nvrtcGetSupportedArchs"))


def arch_for(major: int, minor: int) -> str:
    """``sm_XY`` for a device of compute capability ``major.minor``; BackendError
    when this NVRTC cannot produce a CUBIN for it."""
    wanted = major * 10 + minor
    if wanted not in supported_archs():
        raise BackendError(
            f"NVRTC {'.'.join(map(str, nvrtc_version()))} cannot compile for sm_{wanted}",
            hint="install an nvidia-cuda-nvrtc wheel that supports this GPU",
        )
    return f"sm_{wanted}"


def specific_arch(arch: str, source: str) -> str:
    """``sm_90a`` for ``sm_90`` when ``source`` issues instructions only the
    architecture-specific target has (Hopper's ``wgmma``), else ``arch``;
    BackendError when such a source is compiled for another architecture."""
    if not needs_arch_specific(source) or arch == "sm_90a":
        return arch
    if arch == "sm_90":
        return "sm_90a"
    raise BackendError(f"this kernel uses Hopper's wgmma: it runs on sm_90 only, not {arch}")


def cache_directory() -> Path:
    """Where CUBINs are cached: ``$EINKERN_CACHE_DIR/cuda`` or the user cache dir."""
    return cache.directory("cuda")


def cache_key(source: str, arch: str, options: tuple[str, ...], version: tuple[int, int]) -> str:
    blob = json.dumps(
        {
            "format": CACHE_FORMAT,
            "source": source,
            "nvrtc": list(version),
            "arch": arch,
            "options": list(options),
        },
        sort_keys=True,
    )
    return hashlib.sha256(blob.encode()).hexdigest()


_ENTRY = re.compile(r"Compiling entry function '([^']+)' for '")
_PROPERTIES = re.compile(r"Function properties for (\S+)")
_STACK = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_USED = re.compile(r"Used (\d+) registers")
_BARRIERS = re.compile(r"used (\d+) barriers")
_SMEM = re.compile(r"(\d+) bytes smem")


def parse_resources(log: str) -> tuple[KernelResources, ...]:
    """Per-kernel resources from a ``--ptxas-options=-v`` log, in log order."""
    entries: dict[str, dict[str, int]] = {}
    stacks: dict[str, tuple[int, int, int]] = {}
    entry = target = None
    for line in log.splitlines():
        if match := _ENTRY.search(line):
            entry = match.group(1)
            entries[entry] = {}
        elif match := _PROPERTIES.search(line):
            target = match.group(1)
        elif (match := _STACK.search(line)) and target is not None:
            frame, stores, loads = (int(g) for g in match.groups())
            stacks[target] = (frame, stores, loads)
        elif (match := _USED.search(line)) and entry is not None:
            found = entries[entry]
            found["registers"] = int(match.group(1))
            if barriers := _BARRIERS.search(line):
                found["barriers"] = int(barriers.group(1))
            if smem := _SMEM.search(line):
                found["shared_memory"] = int(smem.group(1))
    resources = []
    for name, found in entries.items():
        stack, stores, loads = stacks.get(name, (0, 0, 0))
        resources.append(
            KernelResources(
                name=name,
                registers=found.get("registers", 0),
                shared_memory=found.get("shared_memory", 0),
                stack_frame=stack,
                spill_stores=stores,
                spill_loads=loads,
                barriers=found.get("barriers", 0),
            )
        )
    return tuple(resources)


def _load_cached(directory: Path, key: str, arch: str) -> CompiledModule | None:
    """The cached module of ``key`` when both files are verified against it (see
    :mod:`einkern.backends.cache`); None on a miss."""
    try:
        meta_bytes = cache.read_entry(directory / f"{key}.json", key)
        cubin = cache.read_entry(directory / f"{key}.cubin", key)
        if meta_bytes is None or not cubin:
            return None
        meta = json.loads(meta_bytes)
        if meta.get("format") != CACHE_FORMAT:
            return None
        resources = tuple(KernelResources(**r) for r in meta["resources"])
        return CompiledModule(cubin, arch, resources, meta.get("log", ""), key, cached=True)
    except (ValueError, KeyError, TypeError):
        return None


def _store(directory: Path, module: CompiledModule) -> None:
    meta = {
        "format": CACHE_FORMAT,
        "arch": module.arch,
        "resources": [asdict(r) for r in module.resources],
        "log": module.log,
    }
    try:
        cache.write_entry(directory / f"{module.key}.cubin", module.cubin, module.key)
        cache.write_entry(
            directory / f"{module.key}.json", json.dumps(meta, indent=1).encode(), module.key
        )
    except cache.CacheSecurityError:
        raise
    except (OSError, BackendError):
        pass  # the cache is an optimisation: an unwritable directory only costs time


def compile_cubin(
    source: str,
    arch: str = DEFAULT_ARCH,
    options: tuple[str, ...] = (),
    *,
    name: str = "einkern.cu",
    use_cache: bool = True,
) -> CompiledModule:
    """Compile CUDA C to a CUBIN for ``arch`` (``sm_XY``), or read it from the cache.

    ``options`` must be empty (kept for the cache key's form).  Raises
    :class:`CompilationError` with NVRTC's log when the source does not
    compile, :class:`BackendError` when NVRTC itself is unusable."""
    if options:
        raise BackendError(f"extra NVRTC options are not supported: {options}")
    if not re.fullmatch(r"sm_\d+[a-z]?", arch):
        raise BackendError(f"not a real GPU architecture: {arch!r}", hint="use e.g. sm_90")
    arch = specific_arch(arch, source)
    all_options = (f"--gpu-architecture={arch}", *OPTIONS, *options)
    version = nvrtc_version()
    key = cache_key(source, arch, all_options, version)
    directory = cache_directory()
    if use_cache and (hit := _load_cached(directory, key, arch)) is not None:
        return hit
    try:
        cubin, log = _compile(source, name, arch, no_cache=True)
    except _InvalidOption:  # an NVRTC older than 12.9 knows no --no-cache
        cubin, log = _compile(source, name, arch, no_cache=False)
    module = CompiledModule(cubin, arch, parse_resources(log), log, key, cached=False)
    if use_cache:
        _store(directory, module)
    return module


class _InvalidOption(Exception):
    pass


def _compile(source: str, name: str, arch: str, *, no_cache: bool) -> tuple[bytes, str]:
    """NVRTC through ``cuda.core``'s :class:`~cuda.core.Program` with the options that
    :data:`OPTIONS` spells (and the cache key names).  Returns the CUBIN and the
    compiler's log."""
    from . import driver

    core = driver.core()
    Program, ProgramOptions = core.Program, core.ProgramOptions
    try:  # the error type cuda.core raises (not public API; any error reads the same)
        from cuda.core._utils.cuda_utils import NVRTCError
    except ImportError:  # pragma: no cover
        NVRTCError = RuntimeError  # type: ignore[misc, assignment]
    options = ProgramOptions(
        name=name,
        arch=arch,
        std="c++17",
        ptxas_options="-v",
        lineinfo=True,
        device_as_default_execution_space=True,
        no_cache=True if no_cache else None,
    )
    program = Program(source, "c++", options)
    log = io.StringIO()
    try:
        compiled = program.compile("cubin", logs=log)
    except NVRTCError as error:
        text = str(error)
        if "NVRTC_ERROR_INVALID_OPTION" in text and no_cache:
            raise _InvalidOption from None
        if "NVRTC_ERROR_COMPILATION" in text:
            raise CompilationError(
                f"NVRTC could not compile the generated CUDA code for {arch}:\n{text}",
                hint="this is a bug in einkern: please report it with the program",
            ) from None
        raise BackendError(f"NVRTC failed: {text}") from None
    finally:
        program.close()
    return bytes(compiled.code), log.getvalue().replace("\0", "").strip()
