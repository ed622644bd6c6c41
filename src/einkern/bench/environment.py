"""What a benchmark ran on: devices, drivers, library versions, date, command line."""

from __future__ import annotations

import datetime
import os
import platform
import shlex
import shutil
import subprocess
import sys
from collections.abc import Callable
from importlib import metadata
from typing import Any

from .._version import __version__


def cpu_model() -> str:
    """The processor's model name (from /proc/cpuinfo where there is one)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as cpuinfo:
            for line in cpuinfo:
                if line.lower().startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _version(distribution: str) -> str | None:
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return None


def _first_line(command: list[str]) -> str | None:
    if shutil.which(command[0]) is None:
        return None
    try:
        result = subprocess.run(command, capture_output=True, text=True, timeout=10, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    lines = result.stdout.strip().splitlines()
    return lines[0].strip() if result.returncode == 0 and lines else None


def _try(function: Callable[[], Any]) -> Any:
    try:
        return function()
    except Exception:  # noqa: BLE001 - an absent tool is recorded as null
        return None


def _nvrtc_version() -> str | None:
    from cuda.bindings import nvrtc

    _, major, minor = nvrtc.nvrtcVersion()
    return f"{major}.{minor}"


def _torch_cuda() -> dict[str, Any]:
    import torch

    info: dict[str, Any] = {"torch": torch.__version__, "torch_cuda": torch.version.cuda}
    if torch.cuda.is_available():
        properties = torch.cuda.get_device_properties(0)
        info.update(
            device=properties.name,
            compute_capability=f"{properties.major}.{properties.minor}",
            multiprocessors=properties.multi_processor_count,
            memory_gib=round(properties.total_memory / 2**30, 1),
            l2_bytes=getattr(properties, "L2_cache_size", None),
        )
    return info


def collect(backend: str, argv: list[str] | None = None) -> dict[str, Any]:
    """The environment of this run, as a JSON-ready dict (absent items are null)."""
    argv = sys.argv if argv is None else argv
    env: dict[str, Any] = {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "command": shlex.join(argv),
        "backend": backend,
        "einkern": __version__,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpu": cpu_model(),
        "cpu_count": os.cpu_count(),
        "numpy": _version("numpy"),
        "opt_einsum": _version("opt_einsum"),
        "cupy": _version("cupy") or _version("cupy-cuda13x") or _version("cupy-cuda12x"),
        "cuda_bindings": _version("cuda-bindings"),
        "nvrtc": _try(_nvrtc_version),
        "c_compiler": _first_line([os.environ.get("CC", "cc"), "--version"]),
        "driver": _first_line(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"]
        ),
    }
    env["torch"] = _version("torch")
    if backend == "cuda":
        env.update(_try(_torch_cuda) or {})
    return env
