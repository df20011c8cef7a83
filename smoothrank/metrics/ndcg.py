"""Exact DCG and NDCG at a cutoff, with every convention an explicit parameter.

For one query with items ranked by descending score (rank r = 1, 2, ...)::

    DCG@k  = sum_{r=1}^{min(k, n)} gain(label at rank r) * discount(r)
    NDCG@k = DCG@k / IDCG@k,   IDCG@k = DCG@k of the items sorted by descending gain

(Jarvelin & Kekalainen, "Cumulated gain-based evaluation of IR techniques", TOIS 2002; Burges et
al., "Learning to rank using gradient descent", ICML 2005). Gains and discounts come from
:mod:`smoothrank.gains`. The conventions on which libraries silently differ are parameters:

``empty``  a query whose IDCG@k is 0 (no relevant document): ``"one"`` (LightGBM, XGBoost,
           allRank), ``"zero"`` (trec_eval, the LETOR scripts) or ``"skip"`` (NaN, left out of
           the mean and the sum).
``ties``   equal scores: ``"input"`` keeps the input order (LightGBM's stable sort, the LETOR
           scripts' file order), ``"pessimistic"`` puts the least relevant first,
           ``"optimistic"`` the most relevant first.
``short``  a query with fewer than k documents: ``"list"`` scores the documents there (LightGBM,
           trec_eval), ``"zero"`` gives 0 (LETOR 4.0 Eval-Score-4.0.pl).

``empty`` is applied before ``short``: a query with no relevant document gets the ``empty`` value at
every k.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from smoothrank import gains as _gains
from smoothrank.metrics import _ranking as R

EMPTY = ("one", "zero", "skip")
SHORT = ("list", "zero")


def _dcg_and_ideal(p: R.Prepared, *, k: int | None, gain: Any, discount: Any, ties: str,
                   ratio: bool = False) -> tuple[Tensor, Tensor, Tensor]:
    """Per-query DCG@k, ideal DCG@k and number of real items.

    ``ratio``: only DCG / IDCG will be used, so each query's gains may be scaled by a power of two
    (:func:`smoothrank.gains.scale_rows_to_unit`: the ratio is the same bits, and the
    sums of large finite gains do not overflow).
    """
    n_real = p.mask.sum(dim=-1)
    g = R.real_gains(p.labels, p.mask, gain)
    negative = (g < 0) & (p.labels < 0)
    if bool(negative.any()):
        label = p.labels[negative].min().item()
        raise R.SmoothrankError(f"gain: label {label:g} has a negative gain; a negative label is read only "
                                "when the gain maps it to a gain >= 0, e.g. gain={-1: 0, 0: 0, 1: 1}")
    if ratio:
        g = R.scale_rows_to_unit(g)
    ranks = R.positions(p.scores)
    disc = _gains.discount(ranks, discount, list_size=n_real.to(p.scores.dtype).unsqueeze(-1))
    disc = torch.as_tensor(disc, dtype=p.scores.dtype, device=p.scores.device)
    if disc.shape != ranks.shape:
        raise R.SmoothrankError("discount: a callable discount must be elementwise (same shape in and out)")
    # Only ranks 1..min(k, n) count; this also keeps every padded position out.
    limit = n_real if k is None else n_real.clamp(max=k)
    used = ranks <= limit.unsqueeze(-1).to(ranks.dtype)
    disc = torch.where(used, disc, torch.zeros((), dtype=disc.dtype, device=disc.device))
    order = R.sort_order(p.scores, p.mask, ties=ties, labels=g)
    dcg = (torch.gather(g, -1, order) * disc).sum(dim=-1)
    ideal_order = R.sort_order(g, p.mask, ties="input")
    ideal = (torch.gather(g, -1, ideal_order) * disc).sum(dim=-1)
    return dcg, ideal, n_real


def _check(k: Any, gain: Any, discount: Any, ties: Any, short: Any, reduction: Any) -> int | None:
    k = R.check_k(k)
    R.check_gain_discount(gain, discount)
    R.check_choice(ties, R.TIES, "ties")
    R.check_choice(short, SHORT, "short")
    R.check_choice(reduction, R.REDUCTIONS, "reduction")
    return k


def dcg(scores: Any, labels: Any, *, mask: Any = None, k: int | None = None, gain: Any = "exp2",
        discount: Any = "log2", ties: str = "input", short: str = "list", reduction: str = "mean",
        dtype: torch.dtype | None = None) -> Tensor:
    """Discounted cumulative gain at cutoff ``k``.

    ``DCG@k = sum_{r <= min(k, n)} gain(y_(r)) * discount(r)`` with ``y_(r)`` the label at rank r.

    Parameters
    ----------
    scores, labels : Tensor or ndarray, shape (batch, list_size) or (list_size,)
        Predicted scores (higher = ranked first) and relevance labels (>= 0).
    mask : bool Tensor, optional
        True for real items; padding may be anywhere in a row.
    k : int, optional
        Cutoff (>= 1); ``None`` uses the whole list.
    gain, discount : see :mod:`smoothrank.gains`.
    ties : {"input", "pessimistic", "optimistic"}
    short : {"list", "zero"}
        ``"zero"``: a query with fewer than ``k`` real items scores 0.
    reduction : {"mean", "sum", "none"}
    dtype : torch.dtype, optional
        Computation dtype (default: follow the inputs, float16 and bfloat16 widened to float32;
        pass ``torch.float64`` for exact values).

    Returns
    -------
    Tensor
        Per-query values of shape (batch,) for ``reduction="none"``, else a scalar. A 1-D input
        gives a scalar.

    Examples
    --------
    >>> import torch
    >>> from smoothrank.metrics import dcg
    >>> scores = torch.tensor([[0.3, 0.2, 0.1]])
    >>> round(dcg(scores, torch.tensor([[0, 1, 2]]), k=2, dtype=torch.float64).item(), 4)
    0.6309
    """
    k = _check(k, gain, discount, ties, short, reduction)
    # Negative labels (LETOR's -1 "junk") are read when a gain mapping or callable is given for them.
    p = R.prepare(scores, labels, mask, dtype=dtype, negative_labels=not isinstance(gain, str))
    value, _, n_real = _dcg_and_ideal(p, k=k, gain=gain, discount=discount, ties=ties)
    if short == "zero" and k is not None:
        value = torch.where(n_real < k, torch.zeros_like(value), value)
    return R.reduce(value, reduction, one_query=p.one_query)


def ndcg(scores: Any, labels: Any, *, mask: Any = None, k: int | None = None, gain: Any = "exp2",
         discount: Any = "log2", empty: str = "one", ties: str = "input", short: str = "list",
         reduction: str = "mean", dtype: torch.dtype | None = None) -> Tensor:
    """Normalised discounted cumulative gain at cutoff ``k``.

    ``NDCG@k = DCG@k / IDCG@k`` where IDCG@k is the DCG@k of the ideal order (descending gain),
    computed over the same ranks 1..min(k, n) (Jarvelin & Kekalainen 2002).

    Parameters are those of :func:`dcg`, plus

    empty : {"one", "zero", "skip"}
        Value of a query whose ideal DCG is 0 (no relevant document): 1, 0, or NaN and left out
        of ``"mean"``/``"sum"`` (the mean over no query at all is NaN).

    Examples
    --------
    >>> import torch
    >>> ndcg([0.3, 0.2, 0.1], [0, 1, 2], gain="linear", dtype=torch.float64)
    tensor(0.6199, dtype=torch.float64)
    >>> ndcg([[0.3, 0.2, 0.1]], [[0, 1, 2]], k=1)
    tensor(0., dtype=torch.float64)
    """
    k = _check(k, gain, discount, ties, short, reduction)
    R.check_choice(empty, EMPTY, "empty")
    # Negative labels (LETOR's -1 "junk") are read when a gain mapping or callable is given for them.
    p = R.prepare(scores, labels, mask, dtype=dtype, negative_labels=not isinstance(gain, str))
    value_dcg, ideal, n_real = _dcg_and_ideal(p, k=k, gain=gain, discount=discount, ties=ties, ratio=True)
    is_empty = ideal <= 0
    safe = torch.where(is_empty, torch.ones_like(ideal), ideal)
    value = value_dcg / safe
    if short == "zero" and k is not None:
        value = torch.where(n_real < k, torch.zeros_like(value), value)
    fill = {"one": 1.0, "zero": 0.0, "skip": float("nan")}[empty]
    value = torch.where(is_empty, torch.full_like(value, fill), value)
    return R.reduce(value, reduction, one_query=p.one_query)
