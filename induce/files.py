"""Small file helpers shared by the data pipeline, the checkpoints and the commands.

* :func:`sha256_file` — hash of a file (an unreadable file is an :class:`InputError`);
* :func:`new_file_mode`, :func:`honour_umask` — the mode a plain ``open(path, "w")`` would give
  (temporary files from :mod:`tempfile` are 0600, which atomic writes must not keep);
* :func:`check_output_file` — refuse an output path that is a folder, under a file, or not writable,
  before any long work is done; :func:`check_output_folder` the same for an output folder;
* :func:`check_not_input` — refuse an output (file or folder) that is one of the command's inputs, or a
  folder holding one, whatever path or link names it, before anything is read;
* :func:`os_error_message` — a one-line user message for an ``OSError`` (path and reason);
* :func:`strict_json` — JSON text without ``NaN`` / ``Infinity`` (which are not JSON), for the files
  other programs read;
* :func:`now` — the time stamp the status, step and results files record;
* :func:`process_alive` — whether a process (the holder of a run folder's lock) still runs.
"""
from __future__ import annotations

import errno
import hashlib
import json
import math
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


def finite_or_none(value):
    """``value`` with every NaN or infinite float (in dicts, lists and tuples too) replaced by None."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {key: finite_or_none(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite_or_none(item) for item in value]
    return value


def strict_json(value, **kwargs) -> str:
    """``json.dumps`` (with ``kwargs``) that never writes ``NaN`` / ``Infinity``: they become ``null``."""
    return json.dumps(finite_or_none(value), allow_nan=False, **kwargs)


def same_file(a: PathLike, b: PathLike) -> bool:
    """Whether ``a`` and ``b`` are the same existing file or folder (same device and inode: symbolic and
    hard links, ``..`` and relative paths included); False when either does not exist."""
    try:
        return os.path.samefile(a, b)
    except (OSError, ValueError):
        return False


def _inside(path: PathLike, folder: PathLike) -> bool:
    """Whether the existing ``path`` lies somewhere under the existing ``folder`` (links resolved)."""
    try:
        real, top = os.path.realpath(path), os.path.realpath(folder)
    except (OSError, ValueError):
        return False
    return real != top and os.path.commonpath([real, top]) == top


def check_not_input(output: Optional[PathLike], inputs: dict, option: str, holding: bool = False,
                    within: bool = False) -> None:
    """Refuse to write ``output`` where that would replace or remove one of the command's ``inputs``.

    ``inputs`` maps a description (``"the input text"``, ``"--gold"``) to a path or a list of paths;
    None entries and ``-`` (stdin/stdout) are ignored. Always refused: ``output`` is the same file or
    folder as an input (:func:`same_file`: under any path, symbolic or hard link). ``holding=True``
    (``output`` is a folder the command replaces as a whole): also when an input lies anywhere below
    it. ``within=True`` (the inputs are folders that get replaced as a whole, e.g. a prepared corpus,
    which a rebuild swaps for a new folder): also when ``output`` lies below one of them. Called
    before any input is read, so nothing is lost. Raises :class:`InputError` naming both paths.
    """
    if output is None or str(output) == "-":
        return
    for what, paths in inputs.items():
        for path in paths if isinstance(paths, (list, tuple)) else [paths]:
            if path is None or str(path) == "-":
                continue
            if same_file(output, path):
                kind = "folder" if Path(path).is_dir() else "file"
                raise InputError(f"{option}: this is the same {kind} as {what} {path}; writing there would "
                                 "replace the input: choose another output", output)
            if holding and Path(output).is_dir() and _inside(path, output):
                raise InputError(f"{option}: this folder holds {what} {path}, which writing it would replace: "
                                 "choose another output", output)
            if within and Path(path).is_dir() and _inside(output, path):
                raise InputError(f"{option}: this lies inside {what} {path}, which is replaced as a whole when it "
                                 "is rebuilt: choose an output outside it", output)


def now() -> str:
    """The current time in UTC, to the second, as the ISO 8601 text the status and step files record
    (``2024-01-01T12:00:00+00:00``)."""
    from datetime import datetime, timezone

    return datetime.now(timezone.utc).isoformat(timespec="seconds")


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
