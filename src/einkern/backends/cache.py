"""The on-disk cache of compiled kernels, private to its user.

The CPU backend loads shared libraries and the CUDA backend CUBINs from this
cache, so whoever can write into it can make einkern run their code.  Every
backend therefore goes through this module:

* **Private directories.**  The cache root (``$EINKERN_CACHE_DIR``, else the
  user cache directory) and its per-backend subdirectories are created with
  mode 0700.  A directory owned by another user, or writable by the group or by
  others, is refused with :class:`CacheSecurityError` (which says how to fix
  it), whether einkern created it or not.
* **Atomic entries.**  An entry is written to a temporary file (mode 0600) in
  its directory, flushed and renamed into place, so a reader never sees half a
  file and concurrent writers of one entry cannot mix their bytes.
* **Sealed entries.**  Beside every entry ``NAME`` lies ``NAME.seal``: the
  entry's key and the SHA-256 of its content.  :func:`read_entry` and
  :func:`verified_path` return an entry only when its seal names the expected
  key and its content matches the digest; anything else (a missing seal, a
  tampered or truncated entry, an entry written for another key, two
  concurrent writers whose seal and entry crossed) is a cache miss, and the
  caller rebuilds the entry.  An entry or seal that another user owns or can
  write is refused like a directory.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
import tempfile
from pathlib import Path

from ..errors import BackendError

SEAL_SUFFIX = ".seal"
_UNSAFE_BITS = stat.S_IWGRP | stat.S_IWOTH


class CacheSecurityError(BackendError):
    """A cache directory or entry that another user owns or can write."""


def cache_root() -> Path:
    """``$EINKERN_CACHE_DIR``, else the user cache directory (not created here)."""
    configured = os.environ.get("EINKERN_CACHE_DIR")
    if configured:
        return Path(configured)
    import platformdirs

    return Path(platformdirs.user_cache_dir("einkern"))


def directory(kind: str) -> Path:
    """The cache directory of one backend (``cpu``, ``cuda``), not created here."""
    return cache_root() / kind


def _hint(path: Path, status: os.stat_result, uid: int) -> str:
    """The fix: narrow the mode of one's own private directory or entry; else (a
    shared directory such as /tmp, another user's) use another directory."""
    elsewhere = (
        "set EINKERN_CACHE_DIR to a directory only you can write (einkern creates "
        "a missing one with mode 0700)"
    )
    if (
        status.st_uid == uid
        and not status.st_mode & stat.S_ISVTX
        and not stat.S_ISLNK(status.st_mode)
    ):
        return f"if it is yours alone, `chmod go-w {path}`; or {elsewhere}"
    return elsewhere


def check_private(path: Path, what: str = "cache directory") -> None:
    """Refuse ``path`` (a directory or entry) when another user owns it or the group or
    others can write it; a symbolic link or other non-regular entry is refused too.
    Raises :class:`CacheSecurityError`; FileNotFoundError when it does not exist."""
    status = os.lstat(path)
    getuid = getattr(os, "getuid", None)
    if getuid is None:  # no POSIX owners (Windows): nothing to check
        return
    uid = getuid()
    if stat.S_ISLNK(status.st_mode):
        raise CacheSecurityError(
            f"the einkern {what} {path} is a symbolic link", hint=_hint(path, status, uid)
        )
    if status.st_uid != uid:
        raise CacheSecurityError(
            f"the einkern {what} {path} belongs to another user (uid {status.st_uid}); "
            "einkern will not load code from it",
            hint=_hint(path, status, uid),
        )
    if status.st_mode & _UNSAFE_BITS:
        raise CacheSecurityError(
            f"the einkern {what} {path} can be written by other users (mode "
            f"{stat.S_IMODE(status.st_mode):03o}); einkern will not load code from it",
            hint=_hint(path, status, uid),
        )


def private_directory(path: Path) -> Path:
    """Create ``path`` (and the missing directories above it) with mode 0700, then
    check it and its parent are private (see :func:`check_private`).  Raises
    :class:`CacheSecurityError`, or :class:`BackendError` when it cannot be created."""
    root = cache_root()
    if path.parent == root and root.exists():
        check_private(root)  # refuse before creating anything inside it
    missing = []
    here = path
    while not here.exists() and here != here.parent:
        missing.append(here)
        here = here.parent
    try:
        for folder in reversed(missing):
            try:
                folder.mkdir(mode=0o700)
            except FileExistsError:
                continue  # another process made it meanwhile: checked below
            os.chmod(folder, 0o700)  # the umask may have narrowed it, never widened
    except OSError as error:
        raise BackendError(
            f"cannot create the kernel cache {path}: {error}",
            hint="set EINKERN_CACHE_DIR to a writable directory",
        ) from error
    check_private(path)
    if path.parent != path and path.parent == cache_root():
        check_private(path.parent)
    return path


def checked_directory(path: Path) -> bool:
    """Whether ``path`` exists; when it does, it is checked private (and its parent when
    that is the cache root)."""
    if not path.exists():
        return False
    check_private(path)
    if path.parent != path and path.parent == cache_root():
        check_private(path.parent)
    return True


def digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def write_atomic(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` through a temporary file (mode 0600) and a rename."""
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(handle, "wb") as file:
            file.write(data)
            file.flush()
            os.fsync(file.fileno())
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def seal_path(path: Path) -> Path:
    return path.with_name(path.name + SEAL_SUFFIX)


def write_entry(path: Path, data: bytes, key: str) -> Path:
    """Store ``data`` as the entry ``path`` of ``key`` with its seal; the directory
    is created private first.  Returns ``path``."""
    private_directory(path.parent)
    write_atomic(path, data)
    seal = {"key": key, "sha256": digest(data), "size": len(data)}
    write_atomic(seal_path(path), json.dumps(seal, sort_keys=True).encode())
    return path


def read_entry(path: Path, key: str) -> bytes | None:
    """The content of entry ``path`` when its seal names ``key`` and matches its
    content; None otherwise (a miss).  Raises :class:`CacheSecurityError` when the
    directory, the entry or its seal is not private."""
    if not checked_directory(path.parent):
        return None
    seal_file = seal_path(path)
    try:
        check_private(seal_file, "cache entry")
        check_private(path, "cache entry")
        seal = json.loads(seal_file.read_bytes())
        data = path.read_bytes()
    except FileNotFoundError:
        return None
    except (OSError, ValueError):
        return None
    if not isinstance(seal, dict) or seal.get("key") != key:
        return None
    if seal.get("size") != len(data) or seal.get("sha256") != digest(data):
        return None
    return data


def verified_path(path: Path, key: str) -> Path | None:
    """``path`` when it is a sealed, verified entry of ``key`` (for loaders that need a
    file, such as ``dlopen``), else None; see :func:`read_entry`."""
    return path if read_entry(path, key) is not None else None
