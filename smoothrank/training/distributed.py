"""Training in several processes (``torchrun``): the process group and the collectives the trainer uses.

``torchrun --nproc_per_node=N -m smoothrank train CONFIG`` starts N processes with ``RANK``,
``WORLD_SIZE``, ``LOCAL_RANK``, ``MASTER_ADDR`` and ``MASTER_PORT`` in their environment.
:func:`process_group` reads them and joins the processes into one group (gloo on the CPU, NCCL on
CUDA, one device per local rank) with a timeout, so that a collective that one process never
reaches fails instead of waiting forever. The trainer then finds the group with :func:`current`.

What each process does (see docs/distributed.md): every process draws the whole epoch's query
order and list samples from the same seed and trains on its contiguous share of every global
batch (``training.batch_size`` queries); the gradient is the exact mean over the global batch's
informative queries; the validation and test metrics are computed per query, each process scoring
a share of the queries, and gathered, so that their means are over all queries; process 0 alone
writes the run folder.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist

from smoothrank.errors import ConfigError, SmoothrankError

__all__ = ["ENVIRONMENT", "Group", "agree", "all_gather_objects", "broadcast_object", "current",
           "environment", "process_group"]

#: The variables torchrun sets for each process (MASTER_PORT too).
ENVIRONMENT = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR")


@dataclass(frozen=True)
class Group:
    """This process's place in the process group.

    Attributes
    ----------
    rank : int
        0 .. world_size - 1; process 0 writes the run folder.
    world_size : int
        The number of processes, at least 2.
    local_rank : int
        The process's number on its node: its CUDA device.
    """

    rank: int
    world_size: int
    local_rank: int

    @property
    def is_main(self) -> bool:
        """Whether this is process 0."""
        return self.rank == 0

    @property
    def shard(self) -> tuple[int, int]:
        """``(rank, world_size)``, as :func:`smoothrank.data.training_batches` takes it."""
        return self.rank, self.world_size


def _env_int(environ: Mapping[str, str], name: str, low: int) -> int:
    text = environ.get(name)
    if text is None:
        raise ConfigError(f"{name} is not set, but WORLD_SIZE is: start the processes with torchrun "
                          "(python -m torch.distributed.run), which sets " + ", ".join(ENVIRONMENT))
    try:
        value = int(text)
    except ValueError:
        raise ConfigError(f"{name}: expected an integer in the environment, got {text!r}") from None
    if value < low:
        raise ConfigError(f"{name}: expected an integer >= {low}, got {value}")
    return value


def environment(environ: Mapping[str, str] | None = None) -> Group | None:
    """The process group torchrun describes in the environment, or None for a single process.

    None when ``WORLD_SIZE`` is unset or 1; otherwise ``RANK``, ``LOCAL_RANK`` and ``MASTER_ADDR``
    must be set too (a :class:`ConfigError` naming the missing one).
    """
    environ = os.environ if environ is None else environ
    if environ.get("WORLD_SIZE") in (None, ""):
        return None
    world = _env_int(environ, "WORLD_SIZE", 1)
    if world == 1:
        return None
    rank = _env_int(environ, "RANK", 0)
    local_rank = _env_int(environ, "LOCAL_RANK", 0)
    if rank >= world:
        raise ConfigError(f"RANK: {rank} for WORLD_SIZE {world}; expected 0 .. {world - 1}")
    if not environ.get("MASTER_ADDR"):
        raise ConfigError("MASTER_ADDR is not set, but WORLD_SIZE is: start the processes with torchrun")
    return Group(rank=rank, world_size=world, local_rank=local_rank)


def current() -> Group | None:
    """The initialised default process group as a :class:`Group`, or None (none, or one process)."""
    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return None
    rank = dist.get_rank()
    return Group(rank=rank, world_size=dist.get_world_size(),
                 local_rank=int(os.environ.get("LOCAL_RANK", rank)))


@contextlib.contextmanager
def process_group(device: str, *, timeout_s: float) -> Iterator[Group | None]:
    """Join the processes torchrun started into one group for the block (nothing for one process).

    Parameters
    ----------
    device : str
        ``training.device``: a CUDA device gives NCCL, with the process's ``cuda:LOCAL_RANK`` made
        current; anything else gloo.
    timeout_s : float
        How long a collective waits for the other processes before it fails (and with it the
        process), so that a process that died or hung does not hold the others forever.
    """
    group = environment()
    if group is None or (dist.is_available() and dist.is_initialized()):
        yield group if group is None else current()
        return
    if not dist.is_available():
        raise ConfigError("WORLD_SIZE > 1, but this PyTorch build has no torch.distributed")
    cuda = torch.device(device).type == "cuda"
    if cuda:
        if group.local_rank >= torch.cuda.device_count():
            raise ConfigError(f"training.device: cuda for LOCAL_RANK {group.local_rank}, but this node has "
                              f"{torch.cuda.device_count()} CUDA device(s); start at most that "
                              "many processes per node")
        torch.cuda.set_device(group.local_rank)
    backend = "nccl" if cuda else "gloo"
    if backend == "gloo" and not dist.is_gloo_available():
        raise ConfigError("torch.distributed has no gloo backend for training on the CPU")
    kwargs: dict[str, Any] = {"device_id": torch.device("cuda", group.local_rank)} if cuda else {}
    dist.init_process_group(backend, timeout=timedelta(seconds=timeout_s), **kwargs)
    try:
        yield group
    finally:
        dist.destroy_process_group()


def broadcast_object(value: Any, group: Group | None) -> Any:
    """Process 0's ``value`` on every process (pickled; tensors are sent from the CPU)."""
    if group is None:
        return value
    box = [value if group.is_main else None]
    dist.broadcast_object_list(box, src=0)
    return box[0]


def all_gather_objects(value: Any, group: Group | None) -> list[Any]:
    """Every process's ``value``, in rank order."""
    if group is None:
        return [value]
    out: list[Any] = [None] * group.world_size
    dist.all_gather_object(out, value)
    return out


def agree(error: BaseException | None, group: Group | None) -> None:
    """Raise on every process the first error any process met (in rank order), else nothing.

    Each process passes what it caught (None when it did not fail), so that a check that fails on
    one process (a run folder process 0 refused, a data file another could not read) stops all of
    them with the message, instead of leaving the others waiting in the next collective.
    """
    if group is None:
        if error is not None:
            raise error
        return
    described = None if error is None else (type(error).__name__, str(error))
    for rank, seen in enumerate(all_gather_objects(described, group)):
        if seen is None:
            continue
        if error is not None and rank == group.rank:
            raise error
        name, message = seen
        raise SmoothrankError(f"process {rank} of {group.world_size} stopped ({name}): {message}")
