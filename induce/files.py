"""Small file helpers shared by the data pipeline, the checkpoints and the commands.

* :func:`sha256_file` — hash of a file (an unreadable file is an :class:`InputError`);
* :func:`new_file_mode`, :func:`honour_umask` — the mode a plain ``open(path, "w")`` would give
  (temporary files from :mod:`tempfile` are 0600, which atomic writes must not keep);
* :func:`check_output_file` — refuse an output path that is a folder, under a file, or not writable,
  before any long work is done; :func:`check_output_folder` the same for an output folder;
* :func:`os_error_message` — a one-line user message for an ``OSError`` (path and reason).
"""
from __future__ import annotations

import errno
import hashlib
import os
from pathlib import Path
from typing import Optional, Union

from induce.errors import InputError

PathLike = Union[str, Path]


def sha256_file(path: Path) -> str:
    """Hex sha256 of a file, read in 1 MiB blocks; an unreadable file is an :class:`InputError`."""
    digest = hashlib.sha256()
    try:
        with open(path, "rb") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                digest.update(block)
    except OSError as err:
        raise InputError(f"cannot read: {os_error_reason(err)}", path) from None
    return digest.hexdigest()


def current_umask() -> int:
    """The process umask: from ``/proc/self/status`` on Linux, else by setting it and putting it
    back (there is no getter; the brief change is why /proc is read first, threads may be writing)."""
    try:
        with open("/proc/self/status", encoding="ascii", errors="replace") as handle:
            for line in handle:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def new_file_mode(directory: bool = False) -> int:
    """Permission bits a new file (0666) or folder (0777) gets from ``open``/``mkdir`` under the umask."""
    return (0o777 if directory else 0o666) & ~current_umask()


def honour_umask(path: PathLike, directory: bool = False) -> None:
    """Give ``path`` the mode a normal ``open``/``mkdir`` would have (``mkstemp``/``mkdtemp`` make 0600/0700)."""
    os.chmod(path, new_file_mode(directory))


def os_error_reason(err: OSError) -> str:
    reasons = {
        errno.EACCES: "permission denied",
        errno.EPERM: "permission denied",
        errno.EROFS: "read-only file system",
        errno.ENOENT: "no such file or folder",
        errno.EISDIR: "is a folder, not a file",
        errno.ENOTDIR: "a parent in this path is a file, not a folder",
        errno.EEXIST: "already exists",
        errno.ENOSPC: "no space left on the device",
        errno.EDQUOT: "disk quota exceeded",
        errno.ENAMETOOLONG: "file name too long",
    }
    return reasons.get(err.errno, err.strerror or str(err))


def os_error_message(err: OSError) -> str:
    """``PATH: reason`` for an ``OSError`` raised by a file operation (no traceback needed)."""
    where = err.filename if err.filename is not None else None
    if err.filename2 is not None:
        where = f"{err.filename} -> {err.filename2}"
    return f"{where}: {os_error_reason(err)}" if where is not None else os_error_reason(err)


def check_output_file(path: Optional[PathLike], option: str) -> None:
    """Refuse an output file path that cannot be written, before the work that produces it.

    ``option`` names the flag in the message (e.g. ``--out``). Checks: not an existing folder,
    no existing file among its parents, the nearest existing parent folder is writable, and an
    existing file is writable. Raises :class:`InputError`.
    """
    if path is None or str(path) == "-":
        return
    target = Path(path)
    if target.is_dir():
        raise InputError(f"{option}: this is a folder; give a file name (e.g. {target / 'out.txt'})", target)
    parent = target.parent
    while not parent.exists():
        if parent == parent.parent:
            break
        parent = parent.parent
    if parent.exists() and not parent.is_dir():
        raise InputError(f"{option}: {parent} is a file, not a folder", target)
    if target.exists() and not os.access(target, os.W_OK):
        raise InputError(f"{option}: permission denied (the file is read-only)", target)
    if not target.exists() and parent.exists() and not os.access(parent, os.W_OK | os.X_OK):
        raise InputError(f"{option}: cannot create files in {parent} (permission denied)", target)


def check_output_folder(folder: PathLike, option: str, what: str = "the output folder") -> None:
    """Refuse an output folder that is a file, lies under a file, or cannot be created or written in,
    before any work is done (``option`` names the flag in the message). Raises :class:`InputError`."""
    folder = Path(folder)
    existing = folder
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if existing.exists() and not existing.is_dir():
        where = "is a file" if existing == folder else f"lies under {existing}, which is a file"
        raise InputError(f"{what} {folder} {where}, not a folder (choose another {option})")
    if existing.is_dir() and not os.access(existing, os.W_OK | os.X_OK):
        verb = "write in" if existing == folder else "create folders in"
        where = Path.cwd() if existing == Path(".") else existing  # (not a bare ".")
        raise InputError(f"cannot {verb} {where}: permission denied (choose another {option})")


def process_alive(pid: int) -> bool:
    """Whether process ``pid`` exists on this host (the owner recorded in a lock or build-owner file)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by someone else
        return True
    except (OverflowError, ValueError):  # not a possible pid
        return False
    return True
