"""Listwise baselines: ListNet, ListMLE and ApproxNDCG."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from smoothrank import _blocks, gains
from smoothrank._checks import check_generator, within_dtype
from smoothrank._devices import wide_dtype
from smoothrank.losses import _common as C
from smoothrank.sorting import real_first_slots


def _masked_log_softmax(x: Tensor, mask: Tensor) -> Tensor:
    return torch.log_softmax(x.masked_fill(~mask, float("-inf")), dim=-1)


def list_net(scores: Tensor, labels: Tensor, *, mask: Tensor | None = None, reduction: str = "mean"
             ) -> Tensor:
    r"""ListNet, top-one probability version (Cao et al., ICML 2007).

    .. math::
        \ell = -\sum_i \mathrm{softmax}(y)_i \, \log \mathrm{softmax}(s)_i

    over the real items. The log-probabilities come from ``log_softmax`` (never
    ``log(softmax + eps)``, which loses the gradient once a probability underflows). The diagonal of
    its Hessian, in closed form: :func:`list_net_hessian_diagonal`.

    Examples
    --------
    >>> import torch
    >>> from smoothrank.losses import list_net
    >>> round(list_net(torch.tensor([[2.0, 1.0, 0.0]]), torch.tensor([[0.0, 1.0, 2.0]])).item(), 4)
    1.9828
    """
    C.check_reduction(reduction)
    scores, labels, mask = C.check_inputs(scores, labels, mask)
    valid = C.has_relevant(labels, mask)
    # Fully padded rows would be softmax over nothing: give them a harmless all-real row instead.
    row_ok = mask.any(-1, keepdim=True)
    m = mask | ~row_ok
    per_query = _list_net_per_query(scores, labels, m)
    wide = wide_dtype(scores.dtype, scores.device)
    if wide != scores.dtype and not bool(torch.isfinite(per_query).all()):
        # A score gap beyond the dtype's range (6e38 in float32) gives an inf log-probability
        # although the query's loss may be representable: again in the wide dtype.
        per_query = _list_net_per_query(scores.to(wide), labels.to(wide), m).to(scores.dtype)
    C.refuse_beyond_range(per_query, valid, scores, "list_net")
    return C.reduce(per_query, valid, reduction)


def list_net_hessian_diagonal(scores: Tensor, labels: Tensor, *, mask: Tensor | None = None,
                              reduction: str = "mean") -> Tensor:
    r"""The diagonal of the Hessian of :func:`list_net` (same arguments), in closed form.

    .. math::
        \frac{\partial^2 \ell}{\partial s_i^2} = q_i (1 - q_i), \qquad q = \mathrm{softmax}(s)

    (the target probabilities sum to 1), the Hessian of LightGBM's ``rank_xendcg``. O(n) a query,
    where autograd needs one backward pass per list position; :mod:`smoothrank.boosting` uses it for
    ``hessian="diagonal"``. Shape and dtype of ``scores``, no graph; zero on padded items and on the
    queries the loss does not count; ``reduction`` scales it as it scales the loss (``"none"`` and
    ``"sum"`` give the same matrix, each row its own query's diagonal).
    """
    shape, dtype = scores.shape if isinstance(scores, Tensor) else None, getattr(scores, "dtype", None)
    C.check_reduction(reduction)
    scores, labels, mask = C.check_inputs(scores, labels, mask)
    valid = C.has_relevant(labels, mask)
    with torch.no_grad():
        log_q = _masked_log_softmax(scores.detach(), mask | ~mask.any(-1, keepdim=True))
        # 1 - q as -expm1(log q): exact where q is close to 1 (one item far above the rest).
        diag = torch.where(mask, log_q.exp() * -torch.expm1(log_q), 0.0)
        return C.reduce_rows(diag, valid, reduction).reshape(shape).to(dtype)


def _list_net_per_query(scores: Tensor, labels: Tensor, m: Tensor) -> Tensor:
    """(batch,) ListNet's cross-entropy over the positions ``m``, each row with at least one."""
    target = torch.softmax(labels.masked_fill(~m, float("-inf")), dim=-1)
    log_p = _masked_log_softmax(scores, m)
    log_p = torch.where(m, log_p, torch.zeros_like(log_p))
    # An item whose target probability underflowed to 0 adds nothing, even where its own score is so
    # far below the others that log_p is -inf (where 0 * -inf would be NaN).
    return -torch.where(target > 0, target * log_p, torch.zeros_like(log_p)).sum(-1)


def list_mle(scores: Tensor, labels: Tensor, *, mask: Tensor | None = None, reduction: str = "mean",
             generator: torch.Generator | int | None = None) -> Tensor:
    r"""ListMLE: minus the Plackett-Luce log-likelihood of a label-sorted permutation (Xia et al. 2008).

    .. math::
        \ell = \sum_{r=1}^{m} \Big(\log \sum_{q=r}^{m} e^{s_{\pi(q)}} - s_{\pi(r)}\Big)

    with pi the real items sorted by descending label, ties broken uniformly at random by
    ``generator`` (a ``torch.Generator``; an int seeds a fresh one, so every call with that int
    breaks ties the same way). The tie-break depends on the real items' order in the row and on the
    generator, not on where the padding sits.

    Examples
    --------
    >>> import torch
    >>> from smoothrank.losses import list_mle
    >>> scores, labels = torch.tensor([[2.0, 1.0, 0.0]]), torch.tensor([[0.0, 1.0, 2.0]])
    >>> round(list_mle(scores, labels, generator=0).item(), 4)
    3.7209
    """
    C.check_reduction(reduction)
    gen = check_generator(generator)
    scores, labels, mask = C.check_inputs(scores, labels, mask)
    valid = C.has_relevant(labels, mask)
    b, n = scores.shape
    # Random tie-break: shuffle the slots of the real-first layout (real item number k of a row in
    # slot k), map them to positions, then a stable sort by label keeps the shuffled order within a
    # label; padded items go last. The shuffle of the real items does not depend on where the
    # padding sits, and with the padding at the end slots are positions.
    shuffle = torch.argsort(torch.rand(b, n, generator=gen, device=gen.device if gen else "cpu"), dim=-1)
    slots = real_first_slots(mask)
    position = torch.empty_like(slots).scatter_(-1, slots, torch.arange(n, device=slots.device).expand(b, n))
    shuffle = torch.gather(position, -1, shuffle.to(scores.device))
    key = torch.gather(labels.masked_fill(~mask, float("-inf")), -1, shuffle)
    order = torch.gather(shuffle, -1, torch.sort(key, dim=-1, descending=True, stable=True).indices)
    # In the wide dtype and relative to the row's top score: in float32, torch's logcumsumexp backward
    # and tail sums rounded at the scores' magnitude are off by 2.5% at scores of 1e4 and give a
    # misranked item no gradient at 1e8 (1e30 in float64).
    s = torch.gather(scores, -1, order).to(wide_dtype(scores.dtype, scores.device))
    real = torch.gather(mask, -1, order)
    top = torch.where(real, s.detach(), torch.full_like(s, float("-inf"))).amax(-1, keepdim=True)
    s = s - torch.where(torch.isfinite(top), top, torch.zeros_like(top))
    # Finite filler far below every real score: exp() of it vanishes next to any real term, and
    # no -inf reaches logcumsumexp's backward.
    low = torch.where(real, s.detach(), torch.full_like(s, float("inf"))).amin(-1, keepdim=True)
    low = torch.where(torch.isfinite(low), low, torch.zeros_like(low)) - 200.0
    s = torch.where(real, s, low.expand_as(s))
    tail_lse = torch.logcumsumexp(s.flip(-1), dim=-1).flip(-1)
    per_item = torch.where(real, tail_lse - s, torch.zeros_like(s))
    per_query = per_item.sum(-1).to(scores.dtype)
    C.refuse_beyond_range(per_query, valid, scores, "list_mle")
    return C.reduce(per_query, valid, reduction)


def _above(scores: Tensor, mask: Tensor, alpha: float, q: slice, r: slice) -> Tensor:
    """``[i, j] = sigmoid(alpha (s_j - s_i))`` for queries q, rows i in r, real j (0 for padding)."""
    s = scores[q]
    above = torch.sigmoid((s.unsqueeze(-2) - s[:, r].unsqueeze(-1)).mul_(alpha))
    return above.masked_fill_(~mask[q].unsqueeze(-2), 0.0)


def _approx_rank_gradient(above: Tensor, grad: Tensor, alpha: float) -> tuple[Tensor, Tensor]:
    """From ``d pi_i / d s_j = alpha a_ij (1 - a_ij) = -d pi_i / d s_i`` (j != i; the j = i terms
    cancel): the column sums (to s_j) and row sums (to s_i) of ``grad_i d pi_i / d s_j``."""
    pulls = above * (1 - above) * (alpha * grad.unsqueeze(-1))
    return pulls.sum(-2), pulls.sum(-1)


class _ApproxRanks(torch.autograd.Function):
    """``pi_i = 0.5 + sum_j sigmoid(alpha (s_j - s_i))`` over the real j (the j = i term is 0.5),
    with the (batch, n, n) sigmoids formed a block at a time (``smoothrank._blocks``)."""

    @staticmethod
    def forward(ctx, scores, mask, alpha):
        b, n = scores.shape
        ranks = torch.full_like(scores, 0.5)
        kept = scores.new_empty(b, n, n) if _blocks.keeps(b, n) else None  # written block by block
        for q, r in _blocks.blocks(b, n):
            above = _above(scores, mask, alpha, q, r)
            ranks[q, r] += above.sum(-1)
            if kept is not None:
                kept[q] = above
        ctx.save_for_backward(scores, mask, kept)
        ctx.alpha = alpha
        return ranks

    @staticmethod
    def backward(ctx, grad):
        scores, mask, kept = ctx.saved_tensors
        if torch.is_grad_enabled():
            # create_graph=True (a booster's Hessian): out-of-place operations on the whole
            # matrices, which autograd differentiates once more.
            s = scores.unsqueeze(-2) - scores.unsqueeze(-1)
            above = torch.where(mask.unsqueeze(-2), torch.sigmoid(ctx.alpha * s), 0.0)
            to_j, to_i = _approx_rank_gradient(above, grad, ctx.alpha)
            return to_j - to_i, None, None
        pieces = _blocks.blocks(*scores.shape)
        if len(pieces) == 1:
            # The whole matrix in one block: out of place, and no view of grad (grad[:, :] is an
            # alias, which the vmap of a booster's diagonal Hessian, is_grads_batched, cannot batch).
            above = _above(scores, mask, ctx.alpha, *pieces[0]) if kept is None else kept
            to_j, to_i = _approx_rank_gradient(above, grad, ctx.alpha)
            return to_j - to_i, None, None
        out = torch.zeros_like(scores)
        for q, r in pieces:
            above = _above(scores, mask, ctx.alpha, q, r) if kept is None else kept[q]
            to_j, to_i = _approx_rank_gradient(above, grad[q, r], ctx.alpha)
            out[q] += to_j
            out[q, r] -= to_i
        return out, None, None


def approx_ndcg(scores: Tensor, labels: Tensor, *, mask: Tensor | None = None, reduction: str = "mean",
                alpha: float = 1.0, gain: Any = "exp2", discount: Any = "log2") -> Tensor:
    r"""Minus ApproxNDCG (Qin, Liu & Li, "A general approximation framework for direct optimization
    of information retrieval measures", 2010).

    .. math::
        \hat\pi_i = 1 + \sum_{j \ne i} \mathrm{sigmoid}\big(\alpha (s_j - s_i)\big), \qquad
        \ell = -\frac{1}{\mathrm{IDCG}} \sum_i g(y_i)\, d(\hat\pi_i)

    over the real items (no cutoff: ApproxNDCG would need a second approximation for it).
    ``discount="linear"`` uses ``|S| - pi-hat``.

    Examples
    --------
    >>> import torch
    >>> from smoothrank.losses import approx_ndcg
    >>> round(approx_ndcg(torch.tensor([[2.0, 1.0, 0.0]]), torch.tensor([[0.0, 1.0, 2.0]])).item(), 4)
    -0.6197
    """
    alpha = C.check_positive(alpha, "alpha")

    def smoothed_dcg(t: C.NdcgTerms) -> Tensor:
        scores, mask = t.scores, t.mask
        approx_rank = _ApproxRanks.apply(scores, mask, within_dtype(alpha, scores.dtype, divides=False))
        m = mask.sum(-1, keepdim=True).to(scores.dtype)
        d = torch.as_tensor(gains.discount(approx_rank, discount, list_size=m), dtype=scores.dtype,
                            device=scores.device)
        return torch.where(mask, t.gains * d, torch.zeros_like(t.gains)).sum(-1)

    return C.ndcg_loss(scores, labels, mask, reduction=reduction, gain=gain, discount=discount, k=None,
                       smoothed_dcg=smoothed_dcg)
