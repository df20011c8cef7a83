"""Per-query matrices a block at a time: the (batch, n, n) pair terms of RankNet, LambdaRank and
ApproxNDCG, and SoftRank's contests and (batch, n, ranks) normal rank distributions.

Autograd would keep every (batch, n, n) intermediate for the backward pass: 3.3 GiB for LambdaRank
at 2 x 10000. These functions instead form their matrices one block of whole queries (or of one
long query's rows) at a time, about ``CHUNK_ELEMENTS`` entries each, in the forward pass and again
in the backward pass, so what is kept is O(batch n). Up to ``KEEP_ELEMENTS`` entries in all, the
one matrix the backward pass needs may be kept instead of formed again: the common short lists stay
as fast as with autograd's dense matrices.
"""

from __future__ import annotations

CHUNK_ELEMENTS = 1 << 20  # entries per block: a few MiB of temporaries at a time
KEEP_ELEMENTS = 1 << 23  # 32 MiB of float32


def blocks(b: int, n: int, width: int | None = None) -> list[tuple[slice, slice]]:
    """(queries, rows) slices covering a (b, n, width) matrix (width n by default): whole queries a
    few at a time, or the rows of one long query a block at a time, about CHUNK_ELEMENTS entries
    each."""
    row = max(1, n if width is None else width)
    if n * row <= CHUNK_ELEMENTS:
        step = max(1, CHUNK_ELEMENTS // max(1, n * row))
        return [(slice(lo, lo + step), slice(None)) for lo in range(0, b, step)]
    rows = max(1, CHUNK_ELEMENTS // row)
    return [(slice(q, q + 1), slice(lo, lo + rows)) for q in range(b) for lo in range(0, n, rows)]


def keeps(b: int, n: int) -> bool:
    """Whether the blocks of a (b, n, n) matrix are whole queries, few enough to keep for backward
    (the caller writes each block ``[q]`` into one (b, n, n) tensor). Not an empty batch: it has no
    block to keep."""
    return n * n <= CHUNK_ELEMENTS and 0 < b * n * n <= KEEP_ELEMENTS
