"""Padded query-list batches: fixed-size training slates and length-bucketed evaluation lists.

Layout (the project's tensor convention): ``features`` (batch, list_size, n_features),
``labels`` and ``mask`` (batch, list_size). Padding is marked only by ``mask == False``; padded
positions hold zero features and a zero label, which no consumer may read as a real label.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from smoothrank._checks import check_int_count
from smoothrank.data.dataset import Dataset
from smoothrank.errors import SmoothrankError

SAMPLINGS = ("random", "softrank")
PADDINGS = ("list_size", "longest")


@dataclass
class Batch:
    """A batch of query lists.

    Attributes
    ----------
    features : Tensor  float32 (B, L, F)
    labels : Tensor    float32 (B, L)
    mask : Tensor      bool (B, L), True = real document
    query_index : Tensor  int64 (B,), the dataset query of each list
    rows : Tensor      int64 (B, L), the dataset row of each position, -1 for padding
    """

    features: Tensor
    labels: Tensor
    mask: Tensor
    query_index: Tensor
    rows: Tensor

    def to(self, device: torch.device | str) -> Batch:
        """The batch on ``device``."""
        return Batch(self.features.to(device), self.labels.to(device), self.mask.to(device),
                     self.query_index.to(device), self.rows.to(device))

    def scatter_scores(self, scores: Tensor, out: np.ndarray) -> None:
        """Write ``scores`` (B, L) of the real positions into ``out[rows]`` (a per-row array)."""
        if tuple(scores.shape) != tuple(self.mask.shape):
            raise SmoothrankError(f"scores: expected shape {tuple(self.mask.shape)}, "
                                  f"got {tuple(scores.shape)}")
        mask = self.mask.cpu()
        out[self.rows.cpu()[mask].numpy()] = scores.detach().cpu()[mask].double().numpy()


def as_generator(seed_or_generator: int | np.random.Generator | torch.Generator) -> np.random.Generator:
    """A NumPy generator from a seed, a NumPy generator (used as is) or a torch generator."""
    if isinstance(seed_or_generator, np.random.Generator):
        return seed_or_generator
    if isinstance(seed_or_generator, torch.Generator):
        seed = int(torch.randint(0, 2**62, (1,), generator=seed_or_generator).item())
        return np.random.default_rng(seed)
    if isinstance(seed_or_generator, int | np.integer) and not isinstance(seed_or_generator, bool):
        return np.random.default_rng(int(seed_or_generator))
    raise SmoothrankError("seed_or_generator: expected an int seed, a numpy Generator or a torch Generator, "
                          f"got {type(seed_or_generator).__name__}")


def softrank_sample(labels: np.ndarray, rng: np.random.Generator, *, max_extra: int = 30) -> np.ndarray:
    """Row positions kept by the SoftRank paper's training subsampling (Taylor et al. 2008, 4.1).

    All judged documents are kept; unjudged ones, assumed irrelevant, are added at random until
    as many as the judged set, or ``max_extra``, have been drawn, whichever comes first. In
    fully judged LETOR data the "judged" set is the relevant documents (label > 0) and the
    unjudged pool is the label-0 documents. Returned in list order.
    """
    relevant = np.flatnonzero(labels > 0)
    pool = np.flatnonzero(labels <= 0)
    n_extra = min(relevant.shape[0], max_extra, pool.shape[0])
    extra = rng.choice(pool, size=n_extra, replace=False) if n_extra else pool[:0]
    return np.sort(np.concatenate([relevant, extra]))


def _fill(dataset: Dataset, queries: Sequence[int], positions: Sequence[np.ndarray], width: int) -> Batch:
    b = len(queries)
    feats = np.zeros((b, width, dataset.n_features), dtype=np.float32)
    labels = np.zeros((b, width), dtype=np.float32)
    mask = np.zeros((b, width), dtype=bool)
    rows = np.full((b, width), -1, dtype=np.int64)
    for i, (q, local) in enumerate(zip(queries, positions, strict=True)):
        r = dataset.offsets[q] + local
        n = r.shape[0]
        labels[i, :n] = dataset.labels[r]
        mask[i, :n] = True
        rows[i, :n] = r
    # One gather of the batch's rows (a transformed dataset transforms them here, all at once).
    feats[mask] = dataset.features[rows[mask]]
    return Batch(torch.from_numpy(feats), torch.from_numpy(labels), torch.from_numpy(mask),
                 torch.as_tensor(np.asarray(queries, dtype=np.int64)), torch.from_numpy(rows))


def training_batches(
    dataset: Dataset,
    *,
    list_size: int,
    batch_size: int,
    shuffle: bool = True,
    seed_or_generator: int | np.random.Generator | torch.Generator,
    sampling: str = "random",
    softrank_max_extra: int = 30,
    drop_last: bool = False,
    pad: str = "list_size",
    shard: tuple[int, int] | None = None,
) -> Iterator[Batch]:
    """One epoch of training slates of at most ``list_size`` positions.

    A list longer than ``list_size`` is subsampled uniformly without replacement (the NeuralNDCG
    protocol, ``list_size=240``); a shorter one is padded (``mask == False``): to ``list_size``
    with ``pad="list_size"`` (every batch has the same shape), or only to the longest list of
    its batch with ``pad="longest"`` (the same lists and draws, less padding). With
    ``shuffle=True`` the query order and the order of documents inside each slate are random,
    so no model can learn the file order; otherwise both keep the dataset order.

    ``sampling="softrank"`` first applies :func:`softrank_sample` (all relevant documents plus
    random irrelevant ones up to that count or ``softrank_max_extra``); queries without a
    relevant document then have no document left and are skipped. The sample is then held to
    ``list_size`` like any list: with more relevant documents than ``list_size``, some are left out.

    All randomness comes from ``seed_or_generator`` (an int seed, a NumPy or torch generator).

    ``shard=(rank, world_size)`` yields only process ``rank``'s share of every batch: the batch's
    lists split into ``world_size`` contiguous parts (:func:`share_bounds`), padded to the whole
    batch's width. Every process draws the whole epoch's random numbers, so the shares of the
    processes make up the batches of one process (``batch_size`` is the global batch), whatever
    their number; a share may be empty (a batch of 0 lists) when a batch holds fewer lists than
    processes.
    """
    list_size = check_int_count(list_size, "list_size")
    batch_size = check_int_count(batch_size, "batch_size")
    if sampling not in SAMPLINGS:
        raise SmoothrankError(f"sampling: expected one of {SAMPLINGS}, got {sampling!r}")
    if pad not in PADDINGS:
        raise SmoothrankError(f"pad: expected one of {PADDINGS}, got {pad!r}")
    if (isinstance(softrank_max_extra, bool) or not isinstance(softrank_max_extra, int | np.integer)
            or softrank_max_extra < 0):
        raise SmoothrankError(f"softrank_max_extra: expected an integer >= 0, got {softrank_max_extra!r}")
    if shard is not None:
        _check_shard(shard)
    rng = as_generator(seed_or_generator)
    order = rng.permutation(dataset.n_queries) if shuffle else np.arange(dataset.n_queries)
    queries: list[int] = []
    positions: list[np.ndarray] = []
    for q in order.tolist():
        n = int(dataset.offsets[q + 1] - dataset.offsets[q])
        if sampling == "softrank":
            local = softrank_sample(dataset.labels[dataset.offsets[q]:dataset.offsets[q + 1]], rng,
                                    max_extra=softrank_max_extra)
            if local.shape[0] == 0:
                continue
        else:
            local = np.arange(n)
        if local.shape[0] > list_size:
            local = rng.choice(local, size=list_size, replace=False)
            if not shuffle:
                local = np.sort(local)
        elif shuffle:
            local = rng.permutation(local)
        queries.append(q)
        positions.append(local)
        if len(queries) == batch_size:
            yield _share(dataset, queries, positions, _width(positions, list_size, pad), shard)
            queries, positions = [], []
    if queries and not drop_last:
        yield _share(dataset, queries, positions, _width(positions, list_size, pad), shard)


def share_bounds(n: int, world_size: int, rank: int) -> tuple[int, int]:
    """``(start, stop)`` of process ``rank``'s contiguous share of ``n`` items split among
    ``world_size`` processes, as ``np.array_split`` splits: the first ``n % world_size`` shares hold
    one item more."""
    base, extra = divmod(n, world_size)
    start = rank * base + min(rank, extra)
    return start, start + base + (rank < extra)


def _check_shard(shard: tuple[int, int]) -> None:
    ok = (isinstance(shard, tuple) and len(shard) == 2
          and all(isinstance(v, int | np.integer) and not isinstance(v, bool) for v in shard))
    if not ok or not 0 <= shard[0] < shard[1]:
        raise SmoothrankError(f"shard: expected (rank, world_size) with 0 <= rank < world_size, "
                              f"got {shard!r}")


def _share(dataset: Dataset, queries: list[int], positions: list[np.ndarray], width: int,
           shard: tuple[int, int] | None) -> Batch:
    if shard is not None:
        start, stop = share_bounds(len(queries), shard[1], shard[0])
        queries, positions = queries[start:stop], positions[start:stop]
    return _fill(dataset, queries, positions, width)


def _width(positions: Sequence[np.ndarray], list_size: int, pad: str) -> int:
    if pad == "list_size":
        return list_size
    return max(1, max(p.shape[0] for p in positions))


def length_buckets(sizes: np.ndarray, *, batch_size: int | None = None,
                   max_items: int = 1 << 16) -> Iterator[list[int]]:
    """Query indices grouped by list length, so that one long query does not pad a whole batch.

    Queries are sorted by length (stable) and grouped greedily: a group holds at most
    ``batch_size`` queries (no limit: None) and at most ``max_items`` padded positions (a single
    list longer than ``max_items`` forms its own group); its width is its last (longest) list.
    """
    max_items = check_int_count(max_items, "max_items")
    limit = check_int_count(batch_size, "batch_size") if batch_size is not None else len(sizes)
    group: list[int] = []
    for q in np.argsort(sizes, kind="stable").tolist():
        width = int(sizes[q])  # sorted ascending: the newcomer is the widest
        if group and (len(group) == limit or (len(group) + 1) * width > max_items):
            yield group
            group = []
        group.append(q)
    if group:
        yield group


def evaluation_batches(dataset: Dataset, *, batch_size: int = 64,
                       max_items: int = 1 << 16) -> Iterator[Batch]:
    """Full lists, bucketed by length (:func:`length_buckets`) so that one long query does not pad
    a whole batch.

    A batch holds at most ``batch_size`` queries and at most ``max_items`` padded positions (a
    single list longer than ``max_items`` forms its own batch). Each batch is as wide as its
    longest list. Every query appears exactly once; ``Batch.query_index`` says which.
    """
    batch_size = check_int_count(batch_size, "batch_size")
    sizes = dataset.list_sizes
    for group in length_buckets(sizes, batch_size=batch_size, max_items=max_items):
        yield _fill(dataset, group, [np.arange(sizes[g]) for g in group], int(sizes[group[-1]]))
