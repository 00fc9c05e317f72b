"""Process-group setup for ``torchrun --nproc_per_node N induce train ...`` (DistributedDataParallel).

torchrun sets ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``MASTER_ADDR`` and ``MASTER_PORT``; when
they are present (and ``WORLD_SIZE > 1``) :func:`init_distributed` joins the group with ``gloo`` on
CPU or ``nccl`` on CUDA (one GPU per process: ``cuda:LOCAL_RANK``). Without them everything runs in
one process and the helpers here are no-ops.
"""
from __future__ import annotations

import gc
import os
from dataclasses import dataclass
from typing import Sequence

import torch
import torch.distributed as dist

from induce.errors import InduceError


@dataclass
class DistContext:
    """Who this process is. ``rank 0`` is the only one that writes files."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    device: torch.device = torch.device("cpu")

    @property
    def distributed(self) -> bool:
        return self.world_size > 1

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def resolve_device(device: str, local_rank: int = 0) -> torch.device:
    """``auto`` -> ``cuda:LOCAL_RANK`` when CUDA is available, else ``cpu``; explicit names are checked."""
    if device == "auto":
        return torch.device(f"cuda:{local_rank}") if torch.cuda.is_available() else torch.device("cpu")
    try:
        resolved = torch.device(device)
    except RuntimeError:
        raise InduceError(f"--device {device!r}: not a device (use auto, cpu, cuda or cuda:N)") from None
    if resolved.type == "cuda":
        if not torch.cuda.is_available():
            raise InduceError(f"--device {device}: CUDA is not available on this machine")
        if resolved.index is None:
            resolved = torch.device(f"cuda:{local_rank}")
    return resolved


def env_is_main() -> bool:
    """Whether this process is rank 0 (or alone), from torchrun's environment, before any setup."""
    return int(os.environ.get("RANK", "0")) == 0


def init_distributed(device: str = "auto") -> DistContext:
    """Join the torchrun process group if the environment says so; return this process's context."""
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    if world_size <= 1:
        return DistContext(device=resolve_device(device))
    rank = int(os.environ["RANK"])
    local_rank = int(os.environ.get("LOCAL_RANK", rank))
    resolved = resolve_device(device, local_rank)
    if resolved.type == "cuda":
        torch.cuda.set_device(resolved)
    if not dist.is_initialized():
        dist.init_process_group(backend="nccl" if resolved.type == "cuda" else "gloo")
    return DistContext(rank=rank, world_size=world_size, local_rank=local_rank, device=resolved)


def unwrap(module: torch.nn.Module) -> torch.nn.Module:
    """``module`` without its DistributedDataParallel wrapper. Its reducer holds the process group and gloo's
    work objects (with tensors); torn down during the interpreter's exit, they can abort the process (a report
    against PyTorch, pytorch/pytorch#179291, traces such aborts to gloo work destroyed at finalisation). The
    caller drops its reference to the wrapper, then :func:`shutdown` collects it before destroying the group.
    The teardown abort seen after finished torchrun runs (below) has not been reproduced on demand, so this is
    a remedy, not a confirmed cure."""
    from torch.nn.parallel import DistributedDataParallel

    return module.module if isinstance(module, DistributedDataParallel) else module


def shutdown(ctx: DistContext, meet_first: bool = False) -> None:
    """Destroy the process group. ``meet_first``: every process ended the run by the same decision, so they
    meet at a barrier first, so that no process tears its gloo connections down while its peer is still
    finishing (rank 0 writes the last checkpoint): on a loaded machine that teardown race can abort a
    non-main process at exit ("terminate called without an active exception", SIGABRT). The barrier is the
    usual remedy for such a race, not a proven cure (the abort was rare and never reproduced in isolation).
    A process whose peer has already failed gets an error from the barrier, not a hang: that error is not
    the one to report."""
    if ctx.distributed and dist.is_initialized():
        if meet_first:
            try:
                dist.barrier()
            except Exception:  # the peer is gone: the run's own outcome is what matters
                pass
        gc.collect()  # a wrapper already dropped (:func:`unwrap`), still in a reference cycle, goes now
        dist.destroy_process_group()


def _comm_device(ctx: DistContext) -> torch.device:
    # nccl only moves CUDA tensors; gloo only CPU ones.
    return ctx.device if ctx.device.type == "cuda" else torch.device("cpu")


def broadcast_floats(ctx: DistContext, values: Sequence[float]) -> list[float]:
    """Rank 0's ``values`` on every rank (one small collective)."""
    if not ctx.distributed:
        return list(values)
    tensor = torch.tensor(list(values), dtype=torch.float64, device=_comm_device(ctx))
    dist.broadcast(tensor, src=0)
    return tensor.tolist()


def all_reduce_sum(ctx: DistContext, tensor: torch.Tensor) -> torch.Tensor:
    """Sum of ``tensor`` over the ranks (a copy; the input is not modified)."""
    if not ctx.distributed:
        return tensor.clone()
    out = tensor.detach().to(_comm_device(ctx), torch.float64).clone()
    dist.all_reduce(out)
    return out.to(tensor.device)


def gather_rows(ctx: DistContext, tensor: torch.Tensor) -> torch.Tensor:
    """Concatenate every rank's ``tensor [b, ...]`` along dim 0 (rank order): ``[W * b, ...]``."""
    if not ctx.distributed:
        return tensor
    local = tensor.detach().to(_comm_device(ctx)).contiguous()
    parts = [torch.empty_like(local) for _ in range(ctx.world_size)]
    dist.all_gather(parts, local)
    return torch.cat(parts, 0).to(tensor.device)


def gather_bytes(ctx: DistContext, tensor: torch.Tensor) -> list[torch.Tensor]:
    """Every rank's ``uint8`` tensor (same size everywhere, e.g. an RNG state), in rank order."""
    if not ctx.distributed:
        return [tensor]
    local = tensor.to(torch.int32).to(_comm_device(ctx))
    parts = [torch.empty_like(local) for _ in range(ctx.world_size)]
    dist.all_gather(parts, local)
    return [part.to("cpu", torch.uint8) for part in parts]


def barrier(ctx: DistContext) -> None:
    if ctx.distributed:
        dist.barrier()
