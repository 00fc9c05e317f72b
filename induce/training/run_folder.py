"""The run folder's own files: status, metrics, the lock, and the claim that refuses to overwrite.

* ``status.json`` — ``{"state": "running" | "interrupted" | "failed" | "diverged" | "finished",
  "stop_reason", ...}`` ("running" with no live lock: the process was killed; continue with
  ``--resume``; "diverged": the loss became NaN or infinite, ``error`` says where);
* ``metrics.jsonl`` — one JSON line per epoch.

Both are strict JSON (:func:`strict_json`: a NaN or infinite number is written ``null``), so that any
JSON reader takes them;
* ``train.lock`` — ``{"pid", "host", "started_at"}`` of the process training into the folder.
  Created with ``O_EXCL`` (two runs cannot both create it); a lock left by a process that no longer
  exists on this host (``kill -9``, power cut) is taken over with a note (:class:`FolderLock`, which other
  folders' locks reuse: ``induce reproduce``'s ``OUT/reproduce.lock``).

A new training (not ``--resume``) refuses a folder that already holds a run (whatever its state) or,
for the CLI, any non-empty folder that is not a run, unless forced; forcing removes the old run's
files first so that the folder never mixes two runs.
"""
from __future__ import annotations

import json
import os
import shlex
import shutil
import socket
from pathlib import Path
from typing import Optional

from induce.errors import InduceError
from induce.files import now, process_alive, strict_json, write_output  # noqa: F401 (now: the trainer and its state import it from here)

STATUS_FILE = "status.json"
METRICS_FILE = "metrics.jsonl"
CONFIG_FILE = "config.yaml"
LOCK_FILE = "train.lock"
BEST = "best"
LAST = "last"
#: train.tensorboard's folder of event files (induce.training.tensorboard; ``force`` removes it too).
TENSORBOARD_DIR = "tensorboard"
#: The files a training writes (what ``force`` removes; any of them marks a folder as a run).
RUN_FILES = (CONFIG_FILE, METRICS_FILE, STATUS_FILE, f"{BEST}.json", f"{BEST}.safetensors",
             f"{LAST}.json", f"{LAST}.safetensors")


class RunFolderError(InduceError):
    """The run folder is in use, already holds a run, or is not a run folder."""


def read_status(run_dir: Path) -> dict:
    """``status.json`` of a run folder (``{}`` when missing or unreadable)."""
    try:
        return json.loads((Path(run_dir) / STATUS_FILE).read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return {}


def write_status(run_dir: Path, state: str, **fields) -> None:
    """Update ``status.json`` (kept fields merged with the new ones), atomically."""
    status = read_status(run_dir)
    status.update(state=state, updated_at=now(), **fields)
    write_output(Path(run_dir) / STATUS_FILE, strict_json(status, indent=1))


def write_metrics(run_dir: Path, history: list[dict]) -> None:
    """Rewrite ``metrics.jsonl`` from the whole history, atomically."""
    write_output(Path(run_dir) / METRICS_FILE, "".join(strict_json(line) + "\n" for line in history))


def is_run_folder(path: Path) -> bool:
    return any((Path(path) / name).exists() for name in RUN_FILES)


def resume_command(run_dir: Path, world_size: int = 1) -> str:
    """The exact command that continues the run (the path quoted for a POSIX shell)."""
    command = f"induce train --resume {shlex.quote(str(run_dir))}"
    return command + (f" (under torchrun, {world_size} processes, as before)" if world_size > 1 else "")


def claim_for_new_run(run_dir: Path, force: bool, allow_foreign: bool = False) -> None:
    """Refuse to start a new run in ``run_dir`` when it holds one (or, unless ``allow_foreign``,
    when it is a non-empty folder that is not a run); with ``force`` the old run's files go first."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        return
    if is_run_folder(run_dir):
        state = read_status(run_dir).get("state", "unknown")
        if not force:
            if state == "diverged":
                how = "it diverged (its loss became NaN or infinite), so continuing it would diverge again"
            elif not (run_dir / f"{LAST}.json").is_file():
                how = "it has no checkpoint to continue from"
            elif state == "finished":
                how = f"train it for more epochs with `{resume_command(run_dir)} --max-epochs N`"
            else:
                how = f"continue it with `{resume_command(run_dir)}`"
            raise RunFolderError(
                f"{run_dir} already holds a run (state: {state}); {how}, choose another --out, "
                f"or replace it with --force"
            )
        for name in RUN_FILES:
            (run_dir / name).unlink(missing_ok=True)
        shutil.rmtree(run_dir / TENSORBOARD_DIR, ignore_errors=True)  # the old run's event files
        return
    others = [p.name for p in run_dir.iterdir() if p.name != LOCK_FILE]
    if others and not allow_foreign and not force:
        shown = ", ".join(sorted(others)[:3]) + (", ..." if len(others) > 3 else "")
        raise RunFolderError(
            f"{run_dir} is not empty and is not a run folder ({shown}); choose another --out, or use it "
            f"anyway with --force (its files are kept)"
        )



class FolderLock:
    """A lock file ``{"pid", "host", "started_at"}`` held while a process writes into a folder (use as a context
    manager): created with ``O_EXCL`` (two processes cannot both create it); one whose process no longer exists
    on this host is taken over, and ``note(message)`` is told. Subclasses name the file and the holder and say
    what to do when the folder is in use (:class:`RunLock`: a training's ``train.lock``), or give ``file_name``
    and ``holder`` here."""

    #: The lock file's name in the folder.
    file_name = "lock"
    #: The kind of process that holds it, as the messages name it ("another training").
    holder = "process"
    #: The kind of folder, as the messages name it.
    folder_kind = "folder"
    #: The error raised when the folder is in use.
    error: type = InduceError

    def __init__(self, folder: Path, note=None, file_name: Optional[str] = None, holder: Optional[str] = None):
        self.file_name = file_name or self.file_name
        self.holder = holder or self.holder
        self.path = Path(folder) / self.file_name
        self.note = note or (lambda message: None)
        self.held = False

    def _create(self) -> bool:
        try:
            fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError:
            return False
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            json.dump({"pid": os.getpid(), "host": socket.gethostname(), "started_at": now()}, handle)
        return True

    def acquire(self) -> None:
        folder = self.path.parent
        if folder.exists() and not folder.is_dir():
            raise self.error(f"{folder}: a file, not a {self.folder_kind}")
        folder.mkdir(parents=True, exist_ok=True)
        if self._create():
            self.held = True
            return
        pid = self._refuse_if_owned()
        # A dead owner (or an unreadable lock): take it over.
        self.note(f"{self.path.parent}: taking over the lock of a {self.holder} that is gone"
                  + (f" (PID {pid})" if pid is not None else ""))
        self.path.unlink(missing_ok=True)
        if not self._create():
            raise self.error(f"{self.path.parent} is in use: another {self.holder} took its lock just now")
        self.held = True

    def check_free(self) -> None:
        """Raise :attr:`error` when a live process holds the lock (nothing is written)."""
        if self.path.exists():
            self._refuse_if_owned()

    def in_use(self, pid: int, started: str) -> str:
        """The error's text for a live holder on this host."""
        return (f"{self.path.parent} is in use: another {self.holder} (PID {pid} on host {socket.gethostname()}, "
                f"started {started}) writes into it; wait for it to end or stop it, then run the same command again")

    def in_use_elsewhere(self, pid: int, host: str) -> str:
        """The error's text for a holder on another host (whether it lives cannot be told from here)."""
        return (f"{self.path.parent} is in use: another {self.holder} on host {host} (PID {pid}) writes into it; if "
                f"it is gone, delete {self.path} and try again")

    def _refuse_if_owned(self) -> Optional[int]:
        """Raise when the lock's owner is alive (or on another host); else its PID (None if unreadable)."""
        try:
            owner = json.loads(self.path.read_text(encoding="utf-8"))
            pid, host = int(owner["pid"]), str(owner.get("host", ""))
        except (OSError, ValueError, KeyError, TypeError):
            owner, pid, host = {}, None, ""
        same_host = host == socket.gethostname()
        if pid is not None and same_host and (pid == os.getpid() or process_alive(pid)):
            raise self.error(self.in_use(pid, owner.get("started_at", "?")))
        if pid is not None and not same_host:
            raise self.error(self.in_use_elsewhere(pid, host))
        return pid

    def release(self) -> None:
        if self.held:
            self.held = False
            try:
                if json.loads(self.path.read_text(encoding="utf-8")).get("pid") == os.getpid():
                    self.path.unlink()
            except (OSError, ValueError):
                pass

    def __enter__(self):
        self.acquire()
        return self

    def __exit__(self, *exc) -> None:
        self.release()


class RunLock(FolderLock):
    """``train.lock`` held while a training writes into a run folder (use as a context manager).

    ``note(message)`` is told when a stale lock (dead process on this host) is taken over.
    """

    file_name = LOCK_FILE
    holder = "training"
    folder_kind = "run folder"
    error = RunFolderError

    def in_use(self, pid: int, started: str) -> str:
        return (f"{self.path.parent} is in use: another training (PID {pid}, started {started}) writes into it; "
                f"wait for it to end or stop it, then continue with `{resume_command(self.path.parent)}`")

    def in_use_elsewhere(self, pid: int, host: str) -> str:
        return (f"{self.path.parent} is in use by a training on host {host} (PID {pid}); if that run is gone, "
                f"delete {self.path} and try again")
