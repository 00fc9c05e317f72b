"""A one-node SLURM cluster on this machine, for the tests of ``induce reproduce --executor slurm`` and for
trying the executor without a cluster: Debian's ``slurm-wlm`` (slurmctld, slurmd) and ``munge``, run as root.

:class:`SlurmCluster` writes a ``slurm.conf`` (this host the one node, its CPUs ``nproc``'s, its memory
``slurmd -C``'s; ``ProctrackType=proctrack/linuxproc``, ``TaskPlugin=task/none``, ``SelectType=select/cons_tres``;
ports chosen free, so that it does not meet a SLURM already on the machine), a ``cgroup.conf``, a munge key of its
own, and starts ``munged`` (as the munge user, its socket named by the conf's ``AuthInfo``), ``slurmctld`` and
``slurmd`` in the foreground as its children (each told to stop should this process die), until ``sinfo`` shows
the node idle. Every file (state, spool, logs) is in its folder; nothing under ``/etc`` is read or changed, and the
clients (``sbatch``, ``squeue``, submitit) reach the cluster through ``SLURM_CONF=FOLDER/slurm.conf``
(:meth:`SlurmCluster.env`). :meth:`SlurmCluster.stop` cancels the jobs left, waits for them and stops the three
daemons.

``sudo python3 -m induce.devtools.slurm_cluster FOLDER`` starts one and keeps it until Ctrl-C
(docs/slurm.md).
"""
from __future__ import annotations

import os
import pwd
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Optional

#: The programs the cluster needs (Debian: ``apt-get install slurm-wlm munge``).
PROGRAMS = ("munged", "slurmctld", "slurmd", "sbatch", "squeue", "sinfo", "scancel", "srun")
#: The partition of the one node.
PARTITION = "debug"


def unavailable() -> Optional[str]:
    """Why a cluster cannot start here (one line), or None when it can: root is needed (slurmd starts jobs as
    their users), and the programs of :data:`PROGRAMS` and the munge user."""
    if not hasattr(os, "geteuid") or os.geteuid() != 0:
        return "a one-node SLURM needs root (slurmd runs the jobs as their users)"
    missing = [name for name in PROGRAMS if shutil.which(name) is None]
    if missing:
        return f"not installed: {', '.join(missing)} (apt-get install slurm-wlm munge)"
    try:
        pwd.getpwnam("munge")
    except KeyError:
        return "no munge user (apt-get install munge)"
    return None


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _node_memory_mb() -> int:
    """``RealMemory`` as ``slurmd -C`` measures it (MB), else MemTotal of /proc/meminfo."""
    try:
        text = subprocess.run(["slurmd", "-C"], capture_output=True, text=True, timeout=30).stdout
        for word in text.split():
            if word.startswith("RealMemory="):
                return int(word.split("=", 1)[1])
    except (OSError, subprocess.SubprocessError, ValueError):
        pass
    with open("/proc/meminfo", encoding="ascii") as handle:
        return int(handle.readline().split()[1]) // 1024


def _prctl():
    """libc's ``prctl`` (looked up here: a child between fork and exec must not import), or None."""
    try:
        import ctypes

        return ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None


_PRCTL = _prctl()


def _stop_with_parent() -> None:
    """In a daemon's child process before exec: SIGTERM when the process that started it dies (Linux)."""
    if _PRCTL is not None:
        _PRCTL(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


class SlurmCluster:
    """One node (this host), one partition (:data:`PARTITION`), everything in ``folder`` (see the module
    docstring). ``cpus``: the node's CPUs (default: ``nproc``, the CPUs this process may use)."""

    def __init__(self, folder: Path, cpus: Optional[int] = None):
        self.folder = Path(folder).absolute()
        self.cpus = cpus or len(os.sched_getaffinity(0))
        self.node = socket.gethostname().split(".")[0]
        self.conf = self.folder / "slurm.conf"
        self.processes: dict[str, subprocess.Popen] = {}
        self.munge_dir: Optional[Path] = None

    def env(self) -> dict[str, str]:
        """What a client of this cluster needs in its environment."""
        return {"SLURM_CONF": str(self.conf)}

    def logs(self) -> list[Path]:
        """The daemons' logs (what to read when it does not start, or a job does not run)."""
        return [self.folder / name for name in ("munged.log", "slurmctld.log", "slurmd.log")]

    # ---------------------------------------------------------------------------------------------- files

    def _write_munge_key(self) -> Path:
        """A key of its own, in a folder of the munge user's (under the system's temporary folder: the munge
        user must reach it, which a root-only test folder does not allow)."""
        user = pwd.getpwnam("munge")
        self.munge_dir = Path(tempfile.mkdtemp(prefix="induce-munge-"))
        os.chown(self.munge_dir, user.pw_uid, user.pw_gid)
        os.chmod(self.munge_dir, 0o711)  # its socket is here: munged wants it reachable by every user
        key = self.munge_dir / "munge.key"
        key.write_bytes(os.urandom(1024))
        os.chmod(key, 0o400)
        os.chown(key, user.pw_uid, user.pw_gid)
        return key

    def _write_conf(self) -> None:
        for sub in ("state", "spool"):
            (self.folder / sub).mkdir(parents=True, exist_ok=True)
        f = self.folder
        lines = [
            "# written by induce.devtools.slurm_cluster: a one-node cluster for tests",
            "ClusterName=induce", f"SlurmctldHost={self.node}(127.0.0.1)",
            "SlurmUser=root", "SlurmdUser=root", f"SlurmctldPort={_free_port()}", f"SlurmdPort={_free_port()}",
            # cred_expire: how long a requeued job waits before it may start again (SLURM's default: 120 s)
            "AuthType=auth/munge", "CredType=cred/munge",
            f"AuthInfo=socket={self.munge_dir / 'munge.socket'},cred_expire=10",
            f"StateSaveLocation={f / 'state'}", f"SlurmdSpoolDir={f / 'spool'}",
            f"SlurmctldPidFile={f / 'slurmctld.pid'}", f"SlurmdPidFile={f / 'slurmd.pid'}",
            f"SlurmctldLogFile={f / 'slurmctld.log'}", f"SlurmdLogFile={f / 'slurmd.log'}",
            "SlurmctldDebug=info", "SlurmdDebug=info",
            "ProctrackType=proctrack/linuxproc", "TaskPlugin=task/none",
            "SelectType=select/cons_tres", "SelectTypeParameters=CR_Core",
            # the scheduler looks at the queue every 5 s (a requeued job starts again soon after it may)
            "SchedulerType=sched/backfill", "SchedulerParameters=sched_interval=5,bf_interval=5",
            "MpiDefault=none", "ReturnToService=2",
            "JobAcctGatherType=jobacct_gather/none", "AccountingStorageType=accounting_storage/none",
            "JobCompType=jobcomp/none",
            # a cancelled job's tasks get SIGTERM, then SIGKILL this many seconds later (time for a checkpoint)
            "KillWait=20", "MinJobAge=600", "SlurmdTimeout=60", "InactiveLimit=0", "Waittime=0",
            "SlurmdParameters=config_overrides",
            f"NodeName={self.node} NodeAddr=127.0.0.1 CPUs={self.cpus} RealMemory={_node_memory_mb()} State=UNKNOWN",
            f"PartitionName={PARTITION} Nodes={self.node} Default=YES MaxTime=INFINITE State=UP",
        ]
        self.conf.write_text("\n".join(lines) + "\n", encoding="ascii")
        (f / "cgroup.conf").write_text("# no cgroups: proctrack/linuxproc, task/none\nCgroupPlugin=autodetect\n",
                                       encoding="ascii")

    # ------------------------------------------------------------------------------------------- daemons

    def _spawn(self, name: str, args: list[str], user: Optional[str] = None) -> None:
        log = open(self.folder / f"{name}.stdout", "ab")
        try:
            self.processes[name] = subprocess.Popen(
                args, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env={**os.environ, **self.env()},
                user=user, group=user, extra_groups=[] if user else None, preexec_fn=_stop_with_parent)
        finally:
            log.close()

    def start(self, timeout: float = 60.0) -> None:
        """Write the files, start the daemons, wait until the node is idle (an error with the logs' last lines
        when it is not within ``timeout`` seconds)."""
        self.folder.mkdir(parents=True, exist_ok=True)
        key = self._write_munge_key()
        self._write_conf()
        munge = self.munge_dir
        self._spawn("munged", ["munged", "--foreground", f"--key-file={key}", f"--socket={munge / 'munge.socket'}",
                               f"--pid-file={munge / 'munged.pid'}", f"--seed-file={munge / 'munged.seed'}",
                               f"--log-file={munge / 'munged.log'}"], user="munge")
        self._wait(lambda: (munge / "munge.socket").exists(), 10, "munged did not open its socket")
        self._spawn("slurmctld", ["slurmctld", "-D", "-f", str(self.conf)])
        self._spawn("slurmd", ["slurmd", "-D", "-f", str(self.conf), "-N", self.node])
        self._wait(self._idle, timeout, f"the node {self.node} is not idle")

    def _idle(self) -> bool:
        result = subprocess.run(["sinfo", "--noheader", "--format=%t"], capture_output=True, text=True,
                                env={**os.environ, **self.env()}, timeout=30)
        return result.returncode == 0 and result.stdout.strip() == "idle"

    def _wait(self, ready, timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while not ready():
            dead = [name for name, process in self.processes.items() if process.poll() is not None]
            if dead or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"{what} ({', '.join(dead) + ' exited; ' if dead else ''}logs: "
                                   f"{self.folder}): {self.log_tail()}")
            time.sleep(0.3)

    def log_tail(self, lines: int = 5) -> str:
        """The last lines of each daemon's log and output, for an error message."""
        out = []
        paths = [*self.logs(), *sorted(self.folder.glob("*.stdout"))]
        if self.munge_dir is not None:
            paths.append(self.munge_dir / "munged.log")
        for path in paths:
            if path.is_file():
                tail = path.read_text(errors="replace").strip().splitlines()[-lines:]
                out.append(f"{path.name}: " + " | ".join(tail))
        return "; ".join(out)

    def stop(self, timeout: float = 60.0) -> None:
        """Cancel every job of the cluster, wait for them to end, stop slurmd, slurmctld and munged (SIGTERM,
        SIGKILL after ``timeout`` seconds), remove the munge key's folder (the munge log is copied beside the
        others first)."""
        env = {**os.environ, **self.env()}
        if self.processes.get("slurmctld") is not None and self.processes["slurmctld"].poll() is None:
            subprocess.run(["scancel", "--full", f"--partition={PARTITION}"], env=env, capture_output=True,
                           timeout=30)
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline:
                listed = subprocess.run(["squeue", "--noheader", "--format=%i"], env=env, capture_output=True,
                                        text=True, timeout=30)
                if listed.returncode != 0 or not listed.stdout.strip():
                    break
                time.sleep(0.5)
        for name in ("slurmd", "slurmctld", "munged"):
            process = self.processes.pop(name, None)
            if process is None or process.poll() is not None:
                continue
            process.terminate()
            try:
                process.wait(timeout)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        if self.munge_dir is not None:
            if (self.munge_dir / "munged.log").is_file():
                shutil.copy(self.munge_dir / "munged.log", self.folder / "munged.log")
            shutil.rmtree(self.munge_dir, ignore_errors=True)
            self.munge_dir = None

    def __enter__(self) -> SlurmCluster:
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


def main(argv: Optional[list[str]] = None) -> None:
    """``python3 -m induce.devtools.slurm_cluster FOLDER``: start a cluster in FOLDER, keep it until Ctrl-C."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1 or args[0].startswith("-"):
        sys.exit("usage: python3 -m induce.devtools.slurm_cluster FOLDER  (a one-node SLURM until Ctrl-C; as root)")
    reason = unavailable()
    if reason is not None:
        sys.exit(f"cannot start a SLURM here: {reason}")
    cluster = SlurmCluster(Path(args[0]))
    cluster.start()
    print(f"a one-node SLURM ({cluster.node}, {cluster.cpus} CPUs, partition {PARTITION}) runs; in another shell:\n"
          f"    export SLURM_CONF={cluster.conf}\nCtrl-C stops it (and cancels its jobs).", flush=True)
    try:
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
        while all(process.poll() is None for process in cluster.processes.values()):
            time.sleep(1)
        print(f"a daemon stopped: {cluster.log_tail()}", file=sys.stderr)
    except KeyboardInterrupt:
        pass
    finally:
        cluster.stop()


if __name__ == "__main__":
    main()
