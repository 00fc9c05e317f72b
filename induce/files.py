"""Small file helpers shared by the data pipeline, the checkpoints and the commands.

* :func:`sha256_file` — hash of a file (an unreadable file is an :class:`InputError`);
* :func:`new_file_mode`, :func:`honour_umask` — the mode a plain ``open(path, "w")`` would give
  (temporary files from :mod:`tempfile` are 0600, which atomic writes must not keep);
* :func:`write_output`, :func:`open_output` — the one writer of every output file a command writes
  (trees, CSV and JSON files, reports, figures, a run's config); :func:`output_target` says what
  stands at an output path and how it is written (below);
* :func:`check_output_file` — refuse an output path that is a folder, under a file, not writable, or
  something no output can be written onto, before any long work is done; :func:`check_output_folder`
  the same for an output folder;
* :func:`check_not_input` — refuse an output (file or folder) that is one of the command's inputs, or a
  folder holding one, whatever path or link names it (``nosuch/../INPUT`` included), before anything is read;
* :func:`file_key`, :func:`distinct_paths`, :func:`refuse_repeated` — which input paths name one file (the
  same device and inode: ``a/../a/x``, symbolic and hard links), so that a file given twice is counted once
  or refused, never scored as two;
* :class:`OutputSet` (:func:`output_set`) — several output files written as one result (a leaderboard's
  Markdown, JSON and figure): all of them or none;
* :func:`os_error_message` — a one-line user message for an ``OSError`` (path and reason);
* :func:`strict_json` — JSON text without ``NaN`` / ``Infinity`` (which are not JSON), for the files
  other programs read;
* :func:`now` — the time stamp the status, step and results files record;
* :func:`process_alive` — whether a process (the holder of a run folder's lock) still runs.

**How an output path is written** (:func:`output_target`). The path is resolved first as the system
would once its missing folders exist: every symbolic link followed, ``..`` taken after the link before
it (``os.path.realpath``), so ``nosuch/../x.txt`` is ``x.txt``. Then, by what stands there:

* nothing (a new file) or a regular file: written atomically, a temporary file in the same folder
  renamed over it, so a reader never sees half a file and a failure leaves the old one. A new file
  gets the mode ``open()`` would give under the umask (:func:`new_file_mode`); a replaced file keeps
  its own permission bits;
* a symbolic link: its target is written as above (atomically when a regular file); the link stays a link;
* a FIFO or a character device (``/dev/null``, a terminal): written through, opened for writing as it
  is: never created, truncated, renamed or replaced;
* a process's open file (``/dev/stdout``, ``/dev/fd/N``: links into ``/proc``): written through,
  appended to, as writing to that descriptor would;
* a regular file with several hard links: written through (truncated, then written in place), so that
  every name of it sees the new content, as the shell's ``>`` does; an atomic rename would give this
  name a new file and leave the others with the old content, in silence. (An input among those names
  is refused before: :func:`check_not_input` sees hard links.) Not atomic;
* a folder, a block device (a disk: an output written onto it would destroy a file system) or a
  socket: refused with an :class:`InputError` naming the path.
"""
from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import math
import os
import stat
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Iterator, Optional, Union

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


# ------------------------------------------------------------------------------------------- the writer

#: More links than this on the way to a file: a loop (Linux's own limit is 40).
MAX_LINKS = 40

#: What is refused at an output path, by file type: nothing is written onto these.
_REFUSED = {
    stat.S_IFDIR: "this is a folder; give a file name",
    stat.S_IFBLK: "this is a block device (a disk or a partition): no output is written onto one; give a file name",
    stat.S_IFSOCK: "this is a socket, not a file: nothing can be written onto it; give a file name",
}


@dataclass(frozen=True)
class OutputTarget:
    """What an output path names (:func:`output_target`).

    ``path``: the file written (every symbolic link followed, ``..`` resolved; for a process's open file
    the path into /proc that names it). ``kind``: ``new``, ``file``, ``hard-linked file``, ``fifo``,
    ``character device`` or ``process file`` (``/dev/stdout`` and the like); the first two are written
    atomically, the others through (the module's docstring says why).
    """

    path: Path
    kind: str

    @property
    def atomic(self) -> bool:
        return self.kind in ("new", "file")


def _follow_links(path: PathLike) -> tuple[str, bool]:
    """The file the system would open at ``path`` once its missing folders exist (every symbolic link
    followed, each ``..`` taken after the link before it), and whether the way leads into /proc (then the
    path is returned as far as /proc, whose links the kernel follows by what they are, not by their text)."""
    current = os.fspath(path)
    for _ in range(MAX_LINKS):
        head, name = os.path.split(current)
        folder = os.path.realpath(head or os.curdir)  # realpath: missing folders are left by a later ".."
        if folder == "/proc" or folder.startswith("/proc/"):
            return current, True  # /dev/stdout, /dev/fd/N
        candidate = os.path.join(folder, name)
        if name in ("", os.curdir, os.pardir) or not os.path.islink(candidate):
            return os.path.realpath(candidate) if name in (os.curdir, os.pardir) else candidate, False
        current = os.path.join(folder, os.readlink(candidate))
    raise InputError("too many levels of symbolic links (a loop of links?)", path)


def output_target(path: PathLike) -> OutputTarget:
    """Where writing the output ``path`` goes and how (the module's docstring); an :class:`InputError` for
    a folder, a block device, a socket or a loop of links there. Writes nothing."""
    resolved, process = _follow_links(path)
    try:
        info = os.stat(resolved)
    except (FileNotFoundError, NotADirectoryError):  # (under a file: making the folder will say so)
        return OutputTarget(Path(resolved), "new")
    kind = stat.S_IFMT(info.st_mode)
    if kind in _REFUSED or kind not in (stat.S_IFREG, stat.S_IFIFO, stat.S_IFCHR):
        where = "" if os.path.abspath(resolved) == os.path.abspath(path) else f" ({resolved})"
        raise InputError(_REFUSED.get(kind, "this is not a regular file; give a file name") + where, path)
    if process:
        return OutputTarget(Path(resolved), "process file")
    if kind == stat.S_IFIFO:
        return OutputTarget(Path(resolved), "fifo")
    if kind == stat.S_IFCHR:
        return OutputTarget(Path(resolved), "character device")
    return OutputTarget(Path(resolved), "file" if info.st_nlink <= 1 else "hard-linked file")


def _text_or_binary(fd: int, binary: bool) -> IO:
    return os.fdopen(fd, "wb") if binary else os.fdopen(fd, "w", encoding="utf-8", newline="\n")


@contextlib.contextmanager
def open_output(path: PathLike, binary: bool = False) -> Iterator[IO]:
    """A handle to write the output file ``path`` through (text: UTF-8 with ``\\n`` newlines), written as
    :func:`output_target` decides: the new content replaces the file atomically when the block ends
    without an error, or goes straight into a FIFO, a device, a process's open file or a hard-linked
    file. Missing parent folders are made. Errors: :class:`InputError` (what stands there), ``OSError``."""
    target = output_target(path)
    if target.atomic:
        with _atomic(target.path, binary) as handle:
            yield handle
        return
    flags = os.O_WRONLY | getattr(os, "O_NOCTTY", 0)  # never O_CREAT: it is there, and stays what it is
    if target.kind == "hard-linked file":
        flags |= os.O_TRUNC
    elif target.kind == "process file":
        flags |= os.O_APPEND
    with _text_or_binary(os.open(target.path, flags), binary) as handle:
        yield handle


@contextlib.contextmanager
def _atomic(target: Path, binary: bool) -> Iterator[IO]:
    """A temporary file beside ``target``, renamed over it at the end (removed on an error). Its mode: the
    replaced file's permission bits, or for a new file what ``open()`` gives under the umask."""
    target.parent.mkdir(parents=True, exist_ok=True)
    try:
        mode = stat.S_IMODE(os.stat(target).st_mode)
    except FileNotFoundError:
        mode = new_file_mode()
    fd, tmp_name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        if hasattr(os, "fchmod"):  # POSIX; elsewhere there are no such mode bits to set
            os.fchmod(fd, mode)
        with _text_or_binary(fd, binary) as handle:
            yield handle
        os.replace(tmp_name, target)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp_name)
        raise


class OutputSet:
    """Several output files written as one result: all of them, or none (the old ones left as they were).

    Each file is first written to a temporary file beside its target (:meth:`path`, :meth:`open`,
    :meth:`write`); :meth:`commit`, once every one has been written, renames them into place; on any error
    (a full disk while the figure is drawn, a rename refused) the files already renamed are put back, the
    temporary files removed and so are the folders the set made: the old set is left whole and no new or
    temporary file behind. Each target is resolved as :func:`output_target` resolves it (links followed; a
    folder, block device or socket refused at once). A target written through (a FIFO, a device, a process's
    open file, a hard-linked file: the module's docstring) is not replaced by a rename: its content is kept in
    the system's temporary folder and written through at the commit, before the renames, so a failure there
    still leaves every renamed file old (the written-through one may hold part of its new content, as any
    write through does). Use it through :func:`output_set`.
    """

    def __init__(self):
        self._staged: dict = {}  # resolved target -> (OutputTarget, temporary path)
        self._made: list = []  # folders this set created, the outermost first

    def path(self, target: PathLike) -> Path:
        """The temporary file to write ``target``'s content into, with any writer (its name ends in the
        target's suffix, so a figure's format is read from it). Every path asked for is part of the set: one
        left unwritten replaces its target with an empty file."""
        resolved = output_target(target)
        if resolved.path in self._staged:
            return self._staged[resolved.path][1]
        folder, mode = None, 0o600  # written through: the temporary file is only read back at the commit
        try:
            if resolved.atomic:
                folder = resolved.path.parent
                self._make_folder(folder)
                try:
                    mode = stat.S_IMODE(os.stat(resolved.path).st_mode)  # a replaced file keeps its bits
                except FileNotFoundError:
                    mode = new_file_mode()
            fd, name = tempfile.mkstemp(prefix=f".{resolved.path.stem}.", suffix=f".tmp{resolved.path.suffix}",
                                        dir=folder)
        except OSError as err:  # name the output, not a temporary file
            raise OSError(err.errno, err.strerror, str(resolved.path)) from err
        self._staged[resolved.path] = (resolved, Path(name))
        try:
            if hasattr(os, "fchmod"):  # POSIX; elsewhere there are no such mode bits to set
                os.fchmod(fd, mode)
        finally:
            os.close(fd)
        return Path(name)

    @contextlib.contextmanager
    def open(self, target: PathLike, binary: bool = False) -> Iterator[IO]:
        """A handle writing ``target``'s content (text: UTF-8, ``\\n`` newlines) into its temporary file."""
        with _text_or_binary(os.open(self.path(target), os.O_WRONLY | os.O_TRUNC), binary) as handle:
            yield handle

    def write(self, target: PathLike, content: Union[str, bytes]) -> Path:
        """Write ``content`` (``str``: UTF-8, ``\\n`` newlines; ``bytes`` as they are) as ``target``'s; returns
        ``target``."""
        with self.open(target, binary=isinstance(content, bytes)) as handle:
            handle.write(content)
        return Path(target)

    def _make_folder(self, folder: Path) -> None:
        missing = []
        while not folder.exists() and folder != folder.parent:
            missing.append(folder)
            folder = folder.parent
        for made in reversed(missing):
            try:
                made.mkdir()
            except FileExistsError:  # made meanwhile by someone else: not this set's to remove
                continue
            self._made.append(made)

    def commit(self) -> None:
        """Put every file in place: those written through first, then the renames (class docstring); on an
        error, :meth:`discard` after the files renamed so far are put back."""
        renamed: list = []  # (target, whether a file was there, that file kept as a hard link or None)
        try:
            for resolved, staged in self._staged.values():
                if not resolved.atomic:
                    with open(staged, "rb") as source, open_output(resolved.path, binary=True) as handle:
                        for block in iter(lambda: source.read(1 << 20), b""):
                            handle.write(block)
            for resolved, staged in self._staged.values():
                if resolved.atomic:
                    existed = os.path.lexists(resolved.path)
                    old = _keep_old(resolved.path) if existed else None
                    try:
                        os.replace(staged, resolved.path)
                    except OSError as err:  # name the output, not its temporary file
                        _remove(old)
                        raise OSError(err.errno, err.strerror, str(resolved.path)) from err
                    except BaseException:
                        _remove(old)
                        raise
                    renamed.append((resolved.path, existed, old))
        except BaseException:
            for target, existed, old in reversed(renamed):
                with contextlib.suppress(OSError):
                    if old is not None:
                        os.replace(old, target)
                    elif not existed:
                        os.unlink(target)
            self.discard()
            raise
        for _, _, old in renamed:
            _remove(old)
        self._made.clear()  # (kept: they hold the set now)
        self.discard()  # the temporary files of the targets written through

    def discard(self) -> None:
        """Remove every temporary file, and the folders the set made (those left empty)."""
        for _, staged in self._staged.values():
            _remove(staged)
        for folder in reversed(self._made):
            with contextlib.suppress(OSError):
                folder.rmdir()
        self._staged.clear()
        self._made.clear()


def _remove(path: Optional[Path]) -> None:
    if path is not None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)


def _keep_old(path: Path) -> Optional[Path]:
    """A hard link to the file at ``path`` under a new hidden name beside it (to put it back if a later
    rename of its set fails); None when the file system makes no hard links."""
    for _ in range(100):
        old = path.with_name(f".{path.stem}.{os.urandom(4).hex()}.old")
        try:
            os.link(path, old)
            return old
        except FileExistsError:
            continue
        except OSError:
            return None
    return None


@contextlib.contextmanager
def output_set() -> Iterator[OutputSet]:
    """An :class:`OutputSet`, committed when the block ends without an error, discarded when it raises::

        with output_set() as outputs:
            outputs.write(out / "board.md", text)
            save_figure(fig, outputs.path(out / "board.png"))
    """
    outputs = OutputSet()
    try:
        yield outputs
    except BaseException:
        outputs.discard()
        raise
    outputs.commit()


def write_output(path: PathLike, content: Union[str, bytes]) -> Path:
    """Write ``content`` (``str``: UTF-8, ``\\n`` newlines; ``bytes`` as they are) to the output file ``path``
    with :func:`open_output`; returns ``path``."""
    with open_output(path, binary=isinstance(content, bytes)) as handle:
        handle.write(content)
    return Path(path)


def check_output_file(path: Optional[PathLike], option: str) -> None:
    """Refuse an output file path that cannot be written, before the work that produces it.

    ``option`` names the flag in the message (e.g. ``--out``). Checks, on the file the path names
    (:func:`output_target`: links followed, ``..`` resolved): not a folder, a block device or a
    socket, no existing file among its parents, the nearest existing parent folder is writable, and
    an existing file is writable. Raises :class:`InputError`.
    """
    if path is None or str(path) == "-":
        return
    if Path(path).is_dir():
        raise InputError(f"{option}: this is a folder; give a file name (e.g. {Path(path) / 'out.txt'})", path)
    try:
        target = output_target(path).path
    except InputError as err:
        raise InputError(f"{option}: {err.reason}", path) from None
    except OSError as err:
        raise InputError(f"{option}: {os_error_reason(err)}", path) from None
    parent = target.parent
    while not parent.exists():
        if parent == parent.parent:
            break
        parent = parent.parent
    if parent.exists() and not parent.is_dir():
        raise InputError(f"{option}: {parent} is a file, not a folder", path)
    if target.exists() and not os.access(target, os.W_OK):
        raise InputError(f"{option}: permission denied (the file is read-only)", path)
    if not target.exists() and parent.exists() and not os.access(parent, os.W_OK | os.X_OK):
        raise InputError(f"{option}: cannot create files in {parent} (permission denied)", path)


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
    hard links, ``..`` and relative paths included, and ``a`` as the output writer resolves it, so that
    ``nosuch/../x.txt`` is ``x.txt`` while ``nosuch`` does not exist); False when either does not exist."""
    for first in (a, os.path.realpath(a)):
        try:
            if os.path.samefile(first, b):
                return True
        except (OSError, ValueError):
            continue
    return False


def file_key(path: PathLike) -> Optional[tuple[int, int]]:
    """``(st_dev, st_ino)`` of the file or folder at ``path`` (symbolic links followed): the same under every
    path naming it (``a/../a/x``, relative or absolute, symbolic or hard links); None when nothing is there."""
    try:
        info = os.stat(path)
    except (OSError, ValueError):
        return None
    return info.st_dev, info.st_ino


def distinct_paths(paths, key=file_key) -> tuple[list, list]:
    """``(kept, repeats)``: ``paths`` in their order with each file or folder once, under the first path
    given for it, and a ``(repeat, first)`` pair for each later path naming one already kept (``key``: the
    identity of a path, :func:`file_key` by default). A path naming nothing is kept (its reader says so)."""
    kept, repeats, first_of = [], [], {}
    for path in paths:
        identity = key(path)
        if identity is not None and identity in first_of:
            repeats.append((path, first_of[identity]))
            continue
        if identity is not None:
            first_of[identity] = path
        kept.append(path)
    return kept, repeats


def repeat_note(repeat: PathLike, first: PathLike, done: str = "counted once") -> str:
    """The one line said when an input given twice is taken once (``done`` says how)."""
    kind = "folder" if Path(first).is_dir() else "file"
    return f"{repeat} is the same {kind} as {first}: {done}"


def refuse_repeated(paths, what: str, why: str, key=file_key) -> None:
    """An :class:`InputError` when two of ``paths`` name one file or folder (:func:`distinct_paths`), for a
    command whose inputs each count in their own right (a weight each, a row of a matrix): ``what`` starts
    the message (``"induce ensemble"``, ``"--compare"``), ``why`` ends it."""
    _, repeats = distinct_paths(paths, key)
    if repeats:
        repeat, first = repeats[0]
        kind = "folder" if Path(first).is_dir() else "file"
        raise InputError(f"{what}: this is the same {kind} as {first}, given before: {why}", repeat)


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
