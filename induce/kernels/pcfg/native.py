"""The dense PCFG's inside pass on the CPU as compiled loops: the fused path of the torch tier, for the
max-product (Viterbi) pass and for the sum-product pass that training runs (chart and outside pass).

PyTorch has no fused "add, then maximum" reduction: its max mode (:func:`~induce.kernels.pcfg.dense_torch.
_max_forward`, the eager twin) writes every sum to memory before reducing it, ~7 G elements a second
on one thread, where the sum mode's matrix products run several times faster. ``native.cpp``
keeps the sums in registers. The sum mode's eager twin (:func:`~induce.kernels.pcfg.dense_torch._sum_forward`
and ``_sum_backward``) runs some forty small operations per span width each way; the compiled loops run a
sentence's whole chart, and its outside pass, in one call (sentences in parallel, no barrier per width), over
each sentence's own length rather than the padded one.

Sources are built at first use with the machine's C++ compiler (``$CXX``, else ``c++``; ``-O3 -march=native``,
OpenMP when the compiler has it), into ``$INDUCE_CACHE_DIR`` (default ``$XDG_CACHE_HOME/induce``, else
``~/.cache/induce``), keyed by the source, the compiler and the CPU, and loaded through :mod:`ctypes`
(:func:`build`: any source of this folder; :func:`library`: ``native.cpp``). Where no compiler works the torch
tier keeps its eager loops (:func:`unavailable_reason` says why); ``INDUCE_NATIVE_KERNELS=0`` or
:func:`use_native` turns the path off. Max mode: values equal the eager twin's bit for bit. Sum mode: the same
arithmetic in scaled probability space, clamped as the eager twin is (a sum below the smallest normal float
is clamped before its log), summed in another order: values and gradients equal the eager twin's to float
rounding (the tests compare them).

A build records the library's size and sha256 beside it (``inside_native-KEY.json``), and a cached library
is loaded only when it matches that record: loading a truncated library kills the process with SIGBUS,
and a foreign one under the cached name lacks the entry points. One that does not match (or has no
record) is built again; where that fails too, the eager loops run and :func:`unavailable_reason` says why.

Which inputs take the path: float32 CPU tensors; for the max mode only without a graph (the Viterbi parse's,
:func:`usable`), for the sum mode with or without one (:func:`usable_for_sum`: its autograd function calls
the compiled chart and outside pass). Anything else stays eager.
"""
from __future__ import annotations

import contextlib
import ctypes
import functools
import hashlib
import json
import os
import platform
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Callable, Dict, Iterator, NamedTuple, Optional, Tuple

import torch

SOURCE = Path(__file__).with_name("native.cpp")
#: Flag sets tried in order: the first that compiles is used.
FLAG_SETS = (
    ["-O3", "-march=native", "-fopenmp"],
    ["-O3", "-march=native"],
    ["-O3"],
)
_override: Optional[bool] = None
#: Why each source's last build failed (``None``: it did not, or it was not tried), by source file name.
_failures: Dict[str, Optional[str]] = {}


def cache_dir() -> Path:
    if os.environ.get("INDUCE_CACHE_DIR"):
        return Path(os.environ["INDUCE_CACHE_DIR"])
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "induce"


def _machine_key() -> str:
    """What ``-march=native`` depends on: the architecture and the CPU's feature flags."""
    flags = ""
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith(("flags", "Features")):
                flags = line
                break
    return f"{platform.machine()} {platform.processor()} {flags}"


def record_path(target: Path) -> Path:
    """The build record of the library ``target``: ``{"size": bytes, "sha256": hex digest}`` (JSON)."""
    return target.with_suffix(".json")


def _fingerprint(path: Path) -> dict:
    data = Path(path).read_bytes()
    return {"size": len(data), "sha256": hashlib.sha256(data).hexdigest()}


def _mismatch(target: Path) -> Optional[str]:
    """Why the library at ``target`` is not the one its build recorded (None when it is)."""
    record = record_path(target)
    try:
        wanted = json.loads(record.read_text(encoding="utf-8"))
        size, digest = int(wanted["size"]), str(wanted["sha256"])
    except FileNotFoundError:
        return "it has no build record"
    except (OSError, ValueError, KeyError, TypeError) as err:
        return f"its build record {record.name} cannot be read ({type(err).__name__}: {err})"
    try:
        found = _fingerprint(target)
    except OSError as err:
        return f"it cannot be read ({err})"
    if found["size"] != size:
        return f"it has {found['size']:,} bytes where its build wrote {size:,}"
    if found["sha256"] != digest:
        return "its sha256 differs from the one its build recorded"
    return None


def _compile(compiler: str, flags: list, target: Path, source: Path = SOURCE) -> Optional[str]:
    """Builds the library at ``target`` and its build record (each written whole: a temporary file renamed);
    the error, or None."""
    temporary = []
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        for suffix in (".so", ".json"):
            fd, name = tempfile.mkstemp(suffix=suffix, dir=target.parent)
            os.close(fd)
            temporary.append(name)
    except OSError as err:
        return f"cannot write the build cache {target.parent} ({err}; set INDUCE_CACHE_DIR)"
    tmp, tmp_record = temporary
    cmd = [compiler, *flags, "-std=c++17", "-shared", "-fPIC", str(source), "-o", tmp]
    try:
        run = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
        if run.returncode != 0:
            return f"{' '.join(cmd[:-2])} failed: {run.stderr.strip()[-400:]}"
        Path(tmp_record).write_text(json.dumps(_fingerprint(Path(tmp))), encoding="utf-8")
        # mkstemp's files are the owner's alone; a library others may share is not
        os.chmod(tmp, 0o755)
        os.chmod(tmp_record, 0o644)
        os.replace(tmp, target)
        os.replace(tmp_record, record_path(target))
        return None
    except (OSError, subprocess.SubprocessError) as err:
        return f"{compiler}: {err}"
    finally:
        for name in temporary:
            with contextlib.suppress(OSError):
                os.unlink(name)


def _ready(compiler: str, flags: list, target: Path, source: Path = SOURCE) -> Optional[str]:
    """Makes sure ``target`` holds the library its build recorded, building it where it is missing or does not
    match; the error, or None."""
    if not target.exists():
        return _compile(compiler, flags, target, source)
    problem = _mismatch(target)
    if problem is None:
        return None
    error = _compile(compiler, flags, target, source)
    return None if error is None else f"{target}: not loaded, {problem}; building it again failed: {error}"


def build(source_name: str, declare: Callable[[ctypes.CDLL], ctypes.CDLL],
          name: Optional[str] = None) -> Optional[ctypes.CDLL]:
    """The library of the C++ source ``source_name`` (a file of this folder, or an absolute path), built into the
    cache where it is missing or does not match its build record, loaded, and given its entry points'
    signatures by ``declare`` (which raises ``AttributeError`` for a library that lacks one); None where that
    fails, and :func:`failure` says why. Cached as ``NAME-KEY.so`` (``name``: the source's stem unless given),
    with the flags of the first of :data:`FLAG_SETS` that compiles. Not cached in memory: a caller keeps the
    library (:func:`library` does, with :func:`functools.cache`)::

        @functools.cache
        def my_library():
            return native.build("my_kernels.cpp", declare_my_entry_points)
    """
    source = SOURCE.with_name(source_name) if not os.path.isabs(source_name) else Path(source_name)
    stem = name or source.stem
    _failures[source_name] = None
    compiler = shutil.which(os.environ.get("CXX", "c++"))
    if compiler is None:
        _failures[source_name] = f"no C++ compiler found ({os.environ.get('CXX', 'c++')!r}; set $CXX)"
        return None
    try:
        version = subprocess.run([compiler, "--version"], capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.SubprocessError) as err:
        _failures[source_name] = f"{compiler}: {err}"
        return None
    errors = []
    for flags in FLAG_SETS:
        key = hashlib.sha256("\n".join([source.read_text(), compiler, version, " ".join(flags),
                                        _machine_key()]).encode()).hexdigest()[:16]
        target = cache_dir() / "native" / f"{stem}-{key}.so"
        error = _ready(compiler, flags, target, source)
        if error is None:
            try:
                return declare(ctypes.CDLL(str(target)))
            except OSError as err:
                error = f"{target}: {err}"
            except AttributeError as err:  # matches its record, yet lacks an entry point: not this source's build
                error = f"{target}: not a build of {source.name} ({err})"
        errors.append(error)
    _failures[source_name] = errors[0]
    return None


def failure(source_name: str) -> Optional[str]:
    """Why the last :func:`build` of ``source_name`` failed (None when it did not, or was not tried)."""
    return _failures.get(source_name)


@functools.cache
def library() -> Optional[ctypes.CDLL]:
    """The compiled ``native.cpp`` (built on the first call of a process whose cache lacks it), or None."""
    return build(SOURCE.name, _declare, "inside_native")


def _declare(lib: ctypes.CDLL) -> ctypes.CDLL:
    p, i, i64 = ctypes.c_void_p, ctypes.c_int, ctypes.c_int64
    lib.induce_vector_width.restype = i
    lib.induce_vector_math.argtypes = [p, p, i64, i]
    lib.induce_word_table.argtypes = [p, p, p, i, i, i, i, i, i64, i64, i64, i]
    lib.induce_max_chart.argtypes = [p, p, p, p, p, p, i, i, i, i]
    lib.induce_max_backward.argtypes = [p, p, p, p, p, p, p, p, p, p, i, i, i, i]
    lib.induce_sum_chart.argtypes = [p, p, p, p, p, p, p, i64, p, p, p, p, p, i, i, i, i, i]
    lib.induce_sum_backward.argtypes = [p, p, p, p, p, p, i64, p, p, p, p, p, p, p, p, p, p, p, i, i, i, i, i]
    lib.induce_row_logsumexp.argtypes = [p, p, i64, i64, i]
    lib.induce_softmax_backward.argtypes = [p, p, p, p, i64, i64, i]
    lib.induce_merge_forward.argtypes = [p, p, p, i, i, i, i, i]
    lib.induce_merge_backward.argtypes = [p, p, p, p, p, p, i, i, i, i, i]
    return lib


def unavailable_reason() -> Optional[str]:
    """Why the compiled path cannot run here (None when it can, or when it was not tried yet)."""
    library()
    return failure(SOURCE.name)


@contextlib.contextmanager
def use_native(enabled: bool) -> Iterator[None]:
    """Within the block, the torch tier takes (``True``) or never takes (``False``) the compiled path."""
    global _override
    before, _override = _override, enabled
    try:
        yield
    finally:
        _override = before


def switched_on() -> bool:
    """Whether the compiled path may run (:func:`use_native`, else ``INDUCE_NATIVE_KERNELS`` not ``0``)."""
    return _override if _override is not None else os.environ.get("INDUCE_NATIVE_KERNELS", "1") != "0"


def usable(*tensors: torch.Tensor) -> bool:
    """Whether these inputs take the compiled max-mode path: switched on, float32 on the CPU, no graph, built."""
    if torch.is_grad_enabled() and any(t.requires_grad for t in tensors):
        return False
    return usable_for_sum(*tensors)


def usable_for_sum(*tensors: torch.Tensor) -> bool:
    """Whether these inputs take the compiled sum-mode path: switched on, float32 on the CPU, built (a graph
    or not: the sum mode's autograd function calls the compiled chart and outside pass)."""
    if not switched_on() or any(t.dtype != torch.float32 or t.device.type != "cpu" for t in tensors):
        return False
    return library() is not None


def word_table(terms: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
    """``max_p terms[b, t, p] + rows[b, a, p, c]``: ``[B, T, A, C]`` from ``terms [B, T, P]`` and ``rows
    [B, A, P, C]`` (any strides but a unit one along ``C``)."""
    terms = terms.contiguous()
    if rows.stride(3) != 1:
        rows = rows.contiguous()
    B, T, P = terms.shape
    A, C = rows.shape[1], rows.shape[3]
    out = terms.new_empty(B, T, A, C)
    library().induce_word_table(terms.data_ptr(), rows.data_ptr(), out.data_ptr(), B, T, A, P, C,
                                rows.stride(0), rows.stride(1), rows.stride(2), torch.get_num_threads())
    return out


def max_chart(y: torch.Tensor, z: torch.Tensor, w2: torch.Tensor, r_nn: torch.Tensor,
              spans: torch.Tensor) -> torch.Tensor:
    """The max mode's chart ``[B, T(start), T(width - 1), NT]`` from the word tables ``y, z [B, T, A,
    child]``, ``w2 [B, T - 1, A]``, the NN rules ``[B, A, NT, NT]`` and ``spans [B, T, T]``: what the
    eager :func:`~induce.kernels.pcfg.dense_torch._max_forward` returns."""
    B, T, NT, _ = y.shape
    y_t, z_t = y.transpose(-1, -2).contiguous(), z.transpose(-1, -2).contiguous()  # [B, T, child, A]
    w2, rules, spans = w2.contiguous(), r_nn.contiguous(), spans.contiguous()
    chart = y.new_zeros(B, T, T, NT)
    library().induce_max_chart(y_t.data_ptr(), z_t.data_ptr(), w2.data_ptr(), rules.data_ptr(),
                               spans.data_ptr(), chart.data_ptr(), B, T, NT, torch.get_num_threads())
    return chart


def max_backward(grad_chart: torch.Tensor, chart_sw: torch.Tensor, y: torch.Tensor, z: torch.Tensor,
                 r_nn: torch.Tensor, spans: torch.Tensor):
    """What :func:`~induce.kernels.pcfg.dense_torch.max_backward` returns, ``(d_y, d_z, d_w2, d_r, d_spans)``,
    from the chart of :func:`max_chart` and its gradient ``grad_chart [B, T, T, NT]``."""
    B, T, NT, _ = y.shape
    y, z = y.contiguous(), z.contiguous()  # [b, t, a, c], the layout a cell's argmax reads rows of
    rules, chart = r_nn.contiguous(), chart_sw.contiguous()  # bound: the library reads them
    grad = grad_chart.contiguous().clone()  # consumed: the children's shares are added into it
    d_y, d_z, d_w2 = y.new_zeros(B, T, NT, NT), y.new_zeros(B, T, NT, NT), y.new_zeros(B, T - 1, NT)
    d_r, d_spans = y.new_zeros(B, NT, NT * NT), y.new_zeros(B, T, T)
    library().induce_max_backward(y.data_ptr(), z.data_ptr(), rules.data_ptr(), chart.data_ptr(), grad.data_ptr(),
                                  d_y.data_ptr(), d_z.data_ptr(), d_w2.data_ptr(), d_r.data_ptr(), d_spans.data_ptr(),
                                  B, T, NT, torch.get_num_threads())
    return d_y, d_z, d_w2, d_r.view(B, NT, NT, NT), d_spans


# ----------------------------------------------------------------------------------------------- sum mode
class SumState(NamedTuple):
    """What :func:`sum_backward` reads of :func:`sum_chart`'s pass, as the library reads it: rows of ``N``
    floats padded with zeros to ``Np`` (a whole number of the library's vectors). The word tables ``ey, ez
    [B, T, N, Np]`` (``[b, t, parent, child]``) with their shifts ``y_max, z_max [B, T, Np]``, the NN rules
    ``e_nn [G, N, N * Np]`` (``exp(rules - c_nn)``, ``[g, parent, left * Np + right]``) and ``c_nn [G, Np]``
    (``G = 1``: one grammar expanded over the batch), ``spans [B, T, T]``, ``lengths [B]`` (int64), the chart
    ``beta, e [B, T, T, Np]`` (``e = exp(beta - m)``) and ``m [B, T, T]``."""

    ey: torch.Tensor
    y_max: torch.Tensor
    ez: torch.Tensor
    z_max: torch.Tensor
    e_nn: torch.Tensor
    c_nn: torch.Tensor
    spans: torch.Tensor
    lengths: torch.Tensor
    beta: torch.Tensor
    e: torch.Tensor
    m: torch.Tensor


def _padded(x: torch.Tensor, width: int) -> torch.Tensor:
    """``x [..., n]`` as a new contiguous tensor ``[..., width]``, zeros past ``n``."""
    out = x.new_zeros(*x.shape[:-1], width)
    out[..., : x.shape[-1]] = x
    return out


def sum_chart(ey: torch.Tensor, y_max: torch.Tensor, ez: torch.Tensor, z_max: torch.Tensor, w2: torch.Tensor,
              r_nn: torch.Tensor, spans: torch.Tensor, lengths: torch.Tensor) -> Tuple[torch.Tensor, SumState]:
    """The sum mode's chart ``[B, T(start), T(width - 1), NT]`` of :func:`~induce.kernels.pcfg.dense_torch.
    _sum_forward` (its inputs: the scaled word tables ``ey, ez [B, T, NT, NT]`` with their shifts ``y_max,
    z_max [B, T, NT]``, ``w2 [B, T - 1, NT]``, the NN rules ``r_nn [B, NT, NT, NT]`` (log; one grammar expanded
    over the batch is read once), ``spans [B, T, T]``) over each sentence's length ``lengths [B]``: cells past
    it stay 0 (never read). Returns the chart and the state :func:`sum_backward` takes."""
    B, T, N, _ = ey.shape
    width = library().induce_vector_width()
    Np = -(-N // width) * width
    shared = B > 1 and r_nn.stride(0) == 0
    grammar = r_nn[:1] if shared else r_nn  # [G, N, N, N]
    c_nn = grammar.amax((-1, -2))  # [G, N]
    e_nn = _padded((grammar - c_nn[..., None, None]).exp(), Np).view(grammar.shape[0], N, N * Np)
    ey_p, ez_p = _padded(ey, Np), _padded(ez, Np)
    ey_t, ez_t = _padded(ey.transpose(-1, -2), Np), _padded(ez.transpose(-1, -2), Np)
    y_max, z_max, c_nn = _padded(y_max, Np), _padded(z_max, Np), _padded(c_nn, Np)
    w2, spans = w2.contiguous(), spans.contiguous()
    lengths = lengths.to(device="cpu", dtype=torch.int64).contiguous()
    beta, e, m = ey.new_zeros(B, T, T, Np), ey.new_zeros(B, T, T, Np), ey.new_zeros(B, T, T)
    library().induce_sum_chart(ey_t.data_ptr(), y_max.data_ptr(), ez_t.data_ptr(), z_max.data_ptr(), w2.data_ptr(),
                               e_nn.data_ptr(), c_nn.data_ptr(), 0 if shared else 1, spans.data_ptr(),
                               lengths.data_ptr(), beta.data_ptr(), e.data_ptr(), m.data_ptr(), B, T, N, Np,
                               torch.get_num_threads())
    return beta[..., :N], SumState(ey_p, y_max, ez_p, z_max, e_nn, c_nn, spans, lengths, beta, e, m)


def sum_backward(state: SumState, grad_chart: torch.Tensor):
    """The outside pass over :func:`sum_chart`'s chart for its gradient ``grad_chart [B, T, T, NT]``: the
    gradients of ``(ey, ez, w2, r_nn, spans)``, as :func:`~induce.kernels.pcfg.dense_torch._sum_backward`
    returns them (``r_nn``'s per sentence, ``[B, NT, NT, NT]``, also for one grammar expanded over the batch)."""
    s = state
    B, T, N, Np = s.ey.shape
    grad = _padded(grad_chart.to(torch.float32), Np)  # consumed: the children's shares are added into it
    d_ey, d_ez = torch.zeros_like(s.ey), torch.zeros_like(s.ez)
    d_w2, d_spans = s.ey.new_zeros(B, T - 1, N), s.ey.new_zeros(B, T, T)
    d_enn = s.ey.new_zeros(B, N, N * Np)
    library().induce_sum_backward(s.ey.data_ptr(), s.y_max.data_ptr(), s.ez.data_ptr(), s.z_max.data_ptr(),
                                  s.e_nn.data_ptr(), s.c_nn.data_ptr(), 0 if s.e_nn.shape[0] == 1 else 1,
                                  s.spans.data_ptr(), s.lengths.data_ptr(), s.beta.data_ptr(), s.e.data_ptr(),
                                  s.m.data_ptr(), grad.data_ptr(), d_ey.data_ptr(), d_ez.data_ptr(), d_w2.data_ptr(),
                                  d_enn.data_ptr(), d_spans.data_ptr(), B, T, N, Np, torch.get_num_threads())
    d_r_nn = (d_enn.view(B, N, N, Np) * s.e_nn.view(-1, N, N, Np))[..., :N]
    return d_ey[..., :N], d_ez[..., :N], d_w2, d_r_nn.view(B, N, N, N), d_spans


# ---------------------------------------------------------------------------------- emissions' normaliser
def row_logsumexp(x: torch.Tensor) -> torch.Tensor:
    """``torch.logsumexp(x, -1)`` of a contiguous float32 ``x [R, n]``: ``[R]``, each row read once."""
    R, n = x.shape
    out = x.new_empty(R)
    library().induce_row_logsumexp(x.data_ptr(), out.data_ptr(), R, n, torch.get_num_threads())
    return out


def softmax_backward(x: torch.Tensor, lse: torch.Tensor, s: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    """``out = -exp(x - lse[:, None]) * s[:, None]`` for contiguous float32 ``x, out [R, n]`` (``out`` may be ``x``)
    and ``lse, s [R]``: the gradient of ``x - logsumexp(x)`` for row gradients that sum to ``s``, without the
    entries' own shares. Returns ``out``."""
    R, n = x.shape
    lse, s = lse.contiguous(), s.to(torch.float32).contiguous()
    library().induce_softmax_backward(x.data_ptr(), lse.data_ptr(), s.data_ptr(), out.data_ptr(), R, n,
                                      torch.get_num_threads())
    return out


# ------------------------------------------------------------------------ the rank-space split sums
def merge_forward(left_chart: torch.Tensor, right_chart: torch.Tensor, width: int) -> torch.Tensor:
    """The compiled twin of :func:`induce.kernels.pcfg.lowrank_torch.merge_forward`: contiguous float32 charts
    ``[B, N, N, r]`` -> ``z [B, N - width + 1, r]``, one pass over each span's pairs of children (no
    ``[B, n, width - 1, r]`` temporary)."""
    B, N, _, r = left_chart.shape
    z = left_chart.new_empty(B, N - width + 1, r)
    library().induce_merge_forward(left_chart.data_ptr(), right_chart.data_ptr(), z.data_ptr(), B, N, r, width,
                                   torch.get_num_threads())
    return z


def merge_backward(left_chart: torch.Tensor, right_chart: torch.Tensor, z: torch.Tensor, grad_z: torch.Tensor,
                   grad_left: torch.Tensor, grad_right: torch.Tensor, width: int) -> None:
    """The compiled twin of :func:`induce.kernels.pcfg.lowrank_torch.merge_backward`: adds each pair's share
    ``grad_z * exp(pair - z)`` into the contiguous float32 gradient charts ``[B, N, N, r]`` in place."""
    B, N, _, r = left_chart.shape
    z, grad_z = z.contiguous(), grad_z.contiguous()
    library().induce_merge_backward(left_chart.data_ptr(), right_chart.data_ptr(), z.data_ptr(), grad_z.data_ptr(),
                                    grad_left.data_ptr(), grad_right.data_ptr(), B, N, r, width,
                                    torch.get_num_threads())
