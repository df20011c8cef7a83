"""Pair matrices a block at a time, for the losses built on (batch, n, n) pair terms (RankNet,
LambdaRank, ApproxNDCG).

Autograd would keep every (batch, n, n) intermediate for the backward pass: 3.3 GiB for LambdaRank
at 2 x 10000. These losses instead form their pair matrices one block of whole queries (or of one
long query's rows) at a time, about ``CHUNK_ELEMENTS`` pair entries each, in the forward pass and
again in the backward pass, so what is kept is O(batch n). Up to ``KEEP_ELEMENTS`` pair entries in
all, the one matrix the backward pass needs is kept instead of formed again: the common short lists
stay as fast as with autograd's dense matrices.
"""

from __future__ import annotations

CHUNK_ELEMENTS = 1 << 20  # pair entries per block: a few MiB of temporaries at a time
KEEP_ELEMENTS = 1 << 23  # 32 MiB of float32


def blocks(b: int, n: int) -> list[tuple[slice, slice]]:
    """(queries, rows) slices covering a (b, n, n) pair matrix: whole queries a few at a time, or
    the rows of one long query a block at a time, at most about CHUNK_ELEMENTS entries each."""
    if n * n <= CHUNK_ELEMENTS:
        step = CHUNK_ELEMENTS // (n * n)
        return [(slice(lo, lo + step), slice(None)) for lo in range(0, b, step)]
    rows = max(1, CHUNK_ELEMENTS // n)
    return [(slice(q, q + 1), slice(lo, lo + rows)) for q in range(b) for lo in range(0, n, rows)]


def keeps(b: int, n: int) -> bool:
    """Whether the blocks of a (b, n, n) matrix are whole queries, few enough to keep for backward
    (then ``torch.cat`` of the blocks is the matrix)."""
    return n * n <= CHUNK_ELEMENTS and b * n * n <= KEEP_ELEMENTS
